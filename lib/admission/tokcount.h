/* tokcount: counts the prompt tokens of an OpenAI-compatible request body in one pass.
 *
 * admitd books each admitted request's prompt as "prefill tokens in flight" for the routers,
 * on the proxy's hot path, for bodies up to 32 MiB. A full JSON parse would allocate a tree
 * and cost more than forwarding the body, so this is one forward scan over the bytes with a
 * fixed-size context stack: no allocation, no recursion, never a read past len, no need for a
 * NUL terminator, and the body is only read. It survives any bytes.
 *
 * What counts as prompt:
 *  - chat: each object in the top-level "messages" array costs 4 tokens (role and template),
 *    plus its "content" when a string, or the "text" strings of the objects in a "content"
 *    array (non-text parts have no "text" key, so key order within a part does not matter);
 *  - completions: top-level "prompt" as a string, an array of strings, an array of token ids,
 *    or an array of arrays of token ids;
 *  - vLLM and SGLang: top-level "prompt_token_ids" (ids) and "input_ids" (ids, or arrays of ids).
 * Nothing else counts, and keys count only at their own depth.
 *
 * Limits: text is estimated from its decoded byte length, not tokenized. A token id is a number
 * without fraction or exponent. Keys are compared after decoding escapes ("pro\u006dpt" is
 * "prompt"). Duplicate keys count each time they occur. "complete" checks the JSON syntax,
 * raw control bytes in strings included, but not UTF-8 validity, which changes no count and
 * which the engine checks. Scanning stops at the first syntax error; containers nested deeper
 * than TOKCOUNT_MAX_DEPTH are skipped (nothing that counts lives that deep). The counts of any
 * prefix of a body never exceed those of the whole body. */
#ifndef ADMIT_TOKCOUNT_H
#define ADMIT_TOKCOUNT_H

#include <stddef.h>
#include <stdint.h>

/* What tokcount_body found. */
struct tokcount {
    uint64_t tokens;     /* prompt tokens: exact ids counted plus text estimates */
    uint64_t id_tokens;  /* of which token ids (exact) */
    uint64_t text_bytes; /* bytes of prompt text counted (escape sequences count as one byte
                            each, \uXXXX as its UTF-8 length) */
    int exact;           /* 1 when the whole prompt was token ids (no text), 0 otherwise */
    int complete;        /* 1 when the body was scanned as well-formed JSON to its end; 0 if it
                            was malformed, truncated, or nested deeper than TOKCOUNT_MAX_DEPTH
                            (then counts cover what was understood) */
};

/* Deepest container nesting that is scanned; deeper containers are skipped. */
#define TOKCOUNT_MAX_DEPTH 64

/** counts the prompt tokens of an OpenAI request body in one pass; text is estimated at
    chars_per_token bytes per token (ceil; <= 0, NaN or infinite means 4.0) */
void tokcount_body(const char *body, size_t len, double chars_per_token, struct tokcount *out);

/* What a sink is told besides text and ids (tokcount_sink.mark). */
enum {
    TOKCOUNT_ROLE,        /* a message's "role" string (decoded; empty when over 16 bytes) */
    TOKCOUNT_MESSAGE_END, /* a message object closed */
    TOKCOUNT_ITEM_END     /* an element of a batch ("prompt" or "input_ids" array) ended */
};

/* Whoever wants the prompt itself, not only its size (kvkeys, the prefix keys): the walk tells
 * it, in body order, what it counts. The callbacks must not fail; they see a cut body's
 * beginning as well as a whole one's. */
struct tokcount_sink {
    /* decoded prompt text: each escape as its UTF-8 (a surrogate pair as one character) */
    void (*text)(void *ctx, const char *bytes, size_t n);
    /* a token id: its value (saturated at UINT64_MAX; a negative one is UINT64_MAX) */
    void (*id)(void *ctx, uint64_t id);
    /* one of TOKCOUNT_ROLE (s, n: the role), _MESSAGE_END, _ITEM_END (s NULL, n 0) */
    void (*mark)(void *ctx, int what, const char *s, size_t n);
    void *ctx;
};

/** tokcount_body that also tells sink (NULL: none) the prompt's text and ids as it counts */
void tokcount_walk(const char *body, size_t len, double chars_per_token,
                   const struct tokcount_sink *sink, struct tokcount *out);

#endif
