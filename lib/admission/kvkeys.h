/* kvkeys: the chained block keys of a request's prompt, for prefix-aware selection.
 *
 * An engine with a prefix cache (vLLM, SGLang) reuses a prompt's leading full blocks of
 * block_tokens tokens when an earlier request left them behind. The router cannot see the
 * engine's cache, so it names blocks itself: key_0 = H(seed, block 0), key_i = H(key_{i-1},
 * block i), so equal keys at position i mean (but for a 2^-64 collision) equal prompts up to
 * the end of block i, and a prompt's keys begin with those of every prompt it extends.
 *
 * What a block is:
 *  - exact: when the body carries token ids ("prompt" as ids, "prompt_token_ids", "input_ids"),
 *    block_tokens ids;
 *  - approximate (llm-d's approach, no tokenizer): otherwise piece_bytes bytes of the prompt's
 *    canonical text, which is "prompt" as a string, or each chat message rendered as its
 *    decoded content text(s) followed by "\x1e" role "\x1f" (the role after the content, so
 *    that the order of the two keys in the message object changes nothing). piece_bytes is
 *    block_tokens x 4 by default, the 4 bytes per token estimate.
 * Only full blocks have keys (the engine caches full blocks only). Of a batch (an array of
 * prompts), the first prompt's keys; of a body with both text and ids, whichever came first.
 * The seed is kvk_seed(model, salt): two models, or two salts, never share keys. The salt is
 * the body's top-level "cache_salt" (kvk_salt): vLLM puts it into the hash of a prompt's first
 * block, so that tenants with different salts never share cached blocks in the engine, and the
 * router's keys must not predict that they do.
 *
 * The body is walked by tokcount's scan (admission/tokcount.h) with a sink: one pass, no
 * allocation, any bytes survived; a malformed or cut body gives the keys of what came before
 * the fault. The hash is ours: the words of a block (8 bytes of text, or one id) taken in
 * pairs, each pair mixed with a secret of its place and multiplied into 128 bits, the halves
 * folded and summed (one multiply per 16 bytes, none waiting for another), the sum chained to
 * the previous key by a multiply-xorshift; it is for spreading, not for adversaries (a client
 * that forges a collision only misroutes its own requests). Keys are the same from run to run of
 * one version, not across versions (nothing keeps them). */
#ifndef ADMIT_KVKEYS_H
#define ADMIT_KVKEYS_H

#include <stddef.h>
#include <stdint.h>

struct tokcount;

/* How keys are made. The router sets one per model: seed from the model name. */
struct kvk_params {
    uint64_t seed;         /* kvk_seed(model, salt) */
    unsigned block_tokens; /* tokens a block holds (the engine's block size); 0 means 16 */
    unsigned piece_bytes;  /* bytes of text a block stands for; 0 means block_tokens x 4 */
};

/** the seed of a model's keys: a hash of its name and a salt (either may be empty) */
uint64_t kvk_seed(const char *model, size_t model_len, const char *salt, size_t salt_len);

/* Room for a decoded salt that kvk_salt's callers keep on the stack. */
#define KVK_SALT_MAX 256

/** body's top-level "cache_salt" string (the last of several), for kvk_seed: its bytes, *n their
    count; NULL (*n 0) when there is none: absent, null, not a string, empty, or the body's top
    level is not an object that can be walked. The bytes are in body when the string has no
    escapes, else decoded into buf (cap bytes); one that does not fit decoded, or that has a bad
    escape, is given as written. One pass over the top level, strings skipped by memchr */
const char *kvk_salt(const char *body, size_t len, char *buf, size_t cap, size_t *n);

/** writes the keys of body's full blocks (at most cap) to keys; their count. *exact (may be
    NULL) is set to 1 when they came from token ids, 0 from text */
size_t kvk_body(const struct kvk_params *p, const char *body, size_t len, uint64_t *keys,
                size_t cap, int *exact);
/** kvk_body that also writes to counts what tokcount_body(body, len, chars_per_token) would:
    one walk of the body for both */
size_t kvk_body_counted(const struct kvk_params *p, const char *body, size_t len, uint64_t *keys,
                        size_t cap, int *exact, double chars_per_token, struct tokcount *counts);

/** the keys of n token ids' full blocks (at most cap); their count */
size_t kvk_ids(const struct kvk_params *p, const uint64_t *ids, size_t n, uint64_t *keys,
               size_t cap);

/** the key of one block of n (> 0) token ids chained from parent (the block before's key, or
    for a prompt's first block its seed): what kvk_ids gives for these ids as uint64 words with
    seed parent and block_tokens n. How admitd keys an engine's stored blocks (kvrelay) */
uint64_t kvk_block32(uint64_t parent, const uint32_t *ids, unsigned n);

/** the keys of a canonical text's full pieces (at most cap); their count */
size_t kvk_text(const struct kvk_params *p, const char *text, size_t len, uint64_t *keys,
                size_t cap);

#endif
