/* kvevents: one payload of an engine's KV events (vLLM's or SGLang's), decoded.
 *
 * An engine with --kv-events-config publishes, for each batch of cache changes, a ZMQ
 * message [topic, seq, payload]; this module reads the payload, msgpack bytes, and nothing
 * else (no sockets: the framing and the sequence are the caller's). docs/kv-events.md has the
 * wire format as we read it. In short, both encodings vLLM has shipped are read:
 *  - the batch: an array [ts, events, data_parallel_rank?] or a map {"ts", "events",
 *    "data_parallel_rank" (SGLang: "attn_dp_rank")};
 *  - each event: an array with its tag first (["BlockStored", block_hashes, parent_block_hash,
 *    token_ids, block_size, lora_id, medium, lora_name, extra_keys, group_idx,
 *    kv_cache_spec_kind, kv_cache_spec_sliding_window], ["BlockRemoved", block_hashes, medium,
 *    group_idx], ["AllBlocksCleared"]), trailing fields optional, or a map with the tag under
 *    "type" and the same fields by name.
 * Unknown fields and unknown event types are skipped and counted; an event whose medium is
 * not the GPU's (an offload tier) is skipped and counted, since the GPU's cache is what a
 * request can hit: it takes no room in the output, and of its fields only medium and
 * block_hashes (an array, counted) are checked. An absent or null medium is the GPU's (vLLM
 * before the field existed); the comparison ignores case.
 *
 * Hashes are opaque 64-bit keys: an unsigned integer as it is (vLLM's default int form, often
 * above INT64_MAX), a negative one as its two's complement bits (SGLang's int64 form), bytes
 * (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) as their last 8 bytes read big-endian,
 * which is exactly what the int form of the same digest is, so a consumer keys a block alike
 * whichever form its engine sends (fewer than 8 bytes: all of them, big-endian).
 *
 * All or nothing: a malformed batch (truncated, trailing bytes, a known field of the wrong
 * type, token_ids that are not block_size ids per block) returns an error with a message and
 * reports no events. Output goes into the caller's arrays (events, hashes, token ids), so
 * nothing here outlives the call but lora_name and spec_kind, which point into the payload.
 * Arrays of len entries each (len the payload's bytes) can never be too small: every event,
 * hash and token id takes at least one byte of the payload.
 *
 * Memory: msgpack-c unpacks into the decoder's zone, reused from one payload to the next
 * and cleared back to its first chunk (8 KiB) at the end of each decode. The payload is
 * checked first (every container's count within the bytes left), so during a decode the zone
 * holds one msgpack_object (24 bytes) per item, at most 24 bytes per payload byte (measured:
 * 23.5 for a batch of 1-byte token ids; vLLM's ids, mostly 3 bytes, about a third of it).
 * Strings are not copied. Containers nest at most 32 deep (msgpack-c's stack); deeper is
 * malformed. */
#ifndef ADMIT_KVEVENTS_H
#define ADMIT_KVEVENTS_H

#include <stddef.h>
#include <stdint.h>

/* What kve_decode returns. */
#define KVE_OK         0
#define KVE_EMALFORMED (-1) /* not a batch as either encoding has it */
#define KVE_EFULL      (-2) /* the batch is well formed but the caller's arrays are too small */

enum kve_kind {
    KVE_STORED,  /* BlockStored: blocks now cached, each a child of the one before */
    KVE_REMOVED, /* BlockRemoved: blocks evicted */
    KVE_CLEARED, /* AllBlocksCleared: the whole prefix cache reset */
};

/** one event: its blocks are hashes[hash_first .. hash_first + n_hashes) of the output */
struct kve_event {
    enum kve_kind kind;
    uint32_t hash_first, n_hashes;  /* block_hashes, in order */
    uint32_t token_first, n_tokens; /* token_ids (stored): n_hashes x block_size of them */
    uint64_t parent;                /* parent_block_hash when has_parent (stored) */
    int has_parent;                 /* 0: the chain starts at the root (null or absent) */
    uint32_t block_size;            /* tokens per block (stored) */
    int64_t lora_id;                /* -1: none */
    const char *lora_name;          /* into the payload; NULL: none */
    size_t lora_name_len;
    int64_t group_idx;     /* the KV-cache group (hybrid models); -1: absent */
    const char *spec_kind; /* kv_cache_spec_kind, into the payload; NULL: absent */
    size_t spec_kind_len;
    int has_extra_keys; /* 1: extra_keys (salt, LoRA, media) or SGLang's cache_salt */
    uint32_t n_plain;   /* stored: the leading blocks whose extra_keys entry is null or exactly
                           [lora_name]; the engine's hash of every later block covers more than
                           its tokens and LoRA name (a cache_salt, media); removed: 0 */
};

/** what kve_decode fills: the arrays are the caller's, the counts and the batch's fields its */
struct kve_out {
    struct kve_event *events; /* the caller's: room for events_cap events */
    size_t events_cap;
    uint64_t *hashes; /* the caller's: room for hashes_cap block hashes */
    size_t hashes_cap;
    uint32_t *tokens; /* the caller's: room for tokens_cap token ids */
    size_t tokens_cap;

    size_t n_events, n_hashes, n_tokens; /* used of each array */
    double ts;                           /* the batch's timestamp (seconds) */
    int64_t dp_rank;                     /* data_parallel_rank / attn_dp_rank; -1: absent */
    unsigned unknown_fields;             /* fields skipped: batch's and events' */
    unsigned unknown_events;             /* events of a type we do not know, skipped */
    unsigned other_medium;               /* events of another medium than GPU, skipped */
    unsigned other_medium_blocks;        /* their blocks */
};

struct kve_decoder;

/** a decoder: the msgpack zone its payloads unpack into, reused by each decode */
struct kve_decoder *kve_decoder_new(void);
/** frees d (NULL is fine) */
void kve_decoder_free(struct kve_decoder *d);

/** decodes one payload (len bytes) into out's arrays; KVE_OK, or KVE_EMALFORMED/KVE_EFULL with
    a message in err (errlen bytes) and out's counts all 0 */
int kve_decode(struct kve_decoder *d, const void *payload, size_t len, struct kve_out *out,
               char *err, size_t errlen);

#endif
