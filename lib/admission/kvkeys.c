/* kvkeys: chained block keys from token ids or canonical text, fed by tokcount's walk.
 *
 * One state (struct kvk_run) takes ids or text bytes in order and closes a block every
 * block_tokens ids or piece_bytes bytes; kvk_ids and kvk_text feed it directly and kvk_body
 * through tokcount's sink, so the three agree by construction (the tests hold them to it). */
#include "admission/kvkeys.h"

#include "admission/tokcount.h"
#include "util/jscan.h"

#include <string.h>

/* Odd constants drawn at random (Python's random.Random(2512)), nothing more to them. */
#define KVK_M1 0xbe06988cb892633fULL
#define KVK_M2 0x5dd240491e609a6dULL
#define KVK_M3 0xa125591b7b0de185ULL
#define KVK_M4 0x47a55df7a5153e0fULL

#define KVK_DEFAULT_BLOCK 16

static inline uint64_t kvk_rotl(uint64_t x, unsigned r)
{
    return x << r | x >> (64 - r);
}

/* One 8-byte word into a running hash: the multiply spreads w's low bits up, the rotate
 * brings the high ones down for the next word's multiply. */
static inline uint64_t kvk_absorb(uint64_t h, uint64_t w)
{
    return kvk_rotl(h ^ w * KVK_M1, 27) * KVK_M2;
}

/* Finishes a block: every input bit reaches every output bit (two multiply-xorshift rounds). */
static inline uint64_t kvk_finish(uint64_t h)
{
    h ^= h >> 31;
    h *= KVK_M3;
    h ^= h >> 29;
    h *= KVK_M4;
    return h ^ h >> 32;
}

/* Bytes into a hash, 8 at a time, the tail zero-padded, then the length. */
static uint64_t kvk_bytes(uint64_t h, const char *s, size_t n)
{
    uint64_t w;
    size_t len = n;

    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = kvk_absorb(h, w);
    }
    w = 0;
    memcpy(&w, s, n);
    return kvk_absorb(kvk_absorb(h, w), len);
}

uint64_t kvk_seed(const char *model, size_t model_len, const char *salt, size_t salt_len)
{
    uint64_t h = KVK_M4;

    h = kvk_bytes(h, model ? model : "", model ? model_len : 0);
    /* the lengths are absorbed, so ("ab", "c") and ("a", "bc") differ */
    return kvk_finish(kvk_bytes(h, salt ? salt : "", salt ? salt_len : 0));
}

/* Keys in the making. */
enum { KVK_NONE, KVK_IDS, KVK_TEXT };

struct kvk_run {
    uint64_t *keys;
    size_t cap, n;
    uint64_t h;       /* the last key (the seed before the first) */
    uint64_t lane[2]; /* the open block's words so far, the even ones and the odd ones */
    uint64_t word;    /* text: bytes not yet a whole word */
    unsigned wbytes;  /* ... how many */
    unsigned odd;     /* the lane of the open block's next word */
    unsigned left;    /* ids or bytes the open block still needs */
    unsigned size;    /* ids or bytes a block holds */
    int mode, done;   /* KVK_*; done: cap reached or the first prompt of a batch ended */
    unsigned rolelen; /* the open message's role, for rendering at its end */
    char role[16];
};

/* Starts a block: its words hash apart from the chain, in two lanes (the even words and the
 * odd ones), so that a block's multiplies do not wait for the last block's key or for each
 * other: only the close chains (kvk_close). */
static inline void kvk_open(struct kvk_run *r)
{
    r->lane[0] = KVK_M1;
    r->lane[1] = KVK_M2;
    r->word = 0;
    r->wbytes = 0;
    r->odd = 0;
}

static inline void kvk_word(struct kvk_run *r, uint64_t w)
{
    r->lane[r->odd] = kvk_absorb(r->lane[r->odd], w);
    r->odd ^= 1;
}

static void kvk_run_init(struct kvk_run *r, uint64_t seed, uint64_t *keys, size_t cap)
{
    r->keys = keys;
    r->cap = cap;
    r->n = 0;
    r->h = seed;
    kvk_open(r);
    r->mode = KVK_NONE;
    r->done = cap == 0;
    r->rolelen = 0;
}

/* Fixes the run's kind at its first id or text; returns 0 when the other kind came first. */
static int kvk_mode(struct kvk_run *r, const struct kvk_params *p, int mode)
{
    unsigned block = p->block_tokens ? p->block_tokens : KVK_DEFAULT_BLOCK;

    if (r->mode == KVK_NONE) {
        r->mode = mode;
        r->size = mode == KVK_IDS ? block : p->piece_bytes ? p->piece_bytes : block * 4;
        r->left = r->size;
    }
    return r->mode == mode && !r->done;
}

/* Closes the open block: its key follows from the previous one and its contents (the two
 * lanes folded into one word, then mixed with the previous key by kvk_finish). */
static inline void kvk_close(struct kvk_run *r)
{
    uint64_t key;

    if (r->wbytes)
        kvk_word(r, r->word);
    key = kvk_finish(r->h ^ kvk_absorb(r->lane[0], r->lane[1]) ^ r->size);
    r->keys[r->n++] = key;
    r->h = key;
    kvk_open(r);
    r->left = r->size;
    r->done = r->n == r->cap;
}

static void kvk_run_id(struct kvk_run *r, uint64_t id)
{
    kvk_word(r, id);
    if (--r->left == 0)
        kvk_close(r);
}

static void kvk_run_text(struct kvk_run *r, const char *s, size_t n)
{
    uint64_t w;

    while (n && !r->done) {
        /* whole words straight in, the common case: a word boundary and 8 bytes to go; two at
         * a time, one to each lane, while 16 bytes are left of the text and of the block */
        while (r->wbytes == 0 && n >= 8 && r->left >= 8) {
            if (r->odd == 0 && n >= 16 && r->left >= 16) {
                uint64_t a = r->lane[0], b = r->lane[1], v;
                unsigned left = r->left;

                do {
                    memcpy(&w, s, 8);
                    memcpy(&v, s + 8, 8);
                    a = kvk_absorb(a, w);
                    b = kvk_absorb(b, v);
                    s += 16, n -= 16, left -= 16;
                } while (n >= 16 && left >= 16);
                r->lane[0] = a;
                r->lane[1] = b;
                r->left = left;
            } else {
                memcpy(&w, s, 8);
                kvk_word(r, w);
                s += 8, n -= 8;
                r->left -= 8;
            }
            if (r->left == 0) {
                kvk_close(r);
                if (r->done)
                    return;
            }
        }
        if (n == 0)
            break;
        r->word |= (uint64_t) (unsigned char) *s++ << (8 * r->wbytes);
        n--;
        if (++r->wbytes == 8) {
            kvk_word(r, r->word);
            r->word = 0;
            r->wbytes = 0;
        }
        if (--r->left == 0)
            kvk_close(r);
    }
}

size_t kvk_ids(const struct kvk_params *p, const uint64_t *ids, size_t n, uint64_t *keys,
               size_t cap)
{
    struct kvk_run r;
    size_t i;

    kvk_run_init(&r, p->seed, keys, cap);
    for (i = 0; i < n && kvk_mode(&r, p, KVK_IDS); i++)
        kvk_run_id(&r, ids[i]);
    return r.n;
}

uint64_t kvk_block32(uint64_t parent, const uint32_t *ids, unsigned n)
{
    struct kvk_params p = {.seed = parent, .block_tokens = n};
    struct kvk_run r;
    uint64_t key = 0;

    kvk_run_init(&r, parent, &key, 1);
    for (unsigned i = 0; i < n && kvk_mode(&r, &p, KVK_IDS); i++)
        kvk_run_id(&r, ids[i]);
    return key;
}

size_t kvk_text(const struct kvk_params *p, const char *text, size_t len, uint64_t *keys,
                size_t cap)
{
    struct kvk_run r;

    kvk_run_init(&r, p->seed, keys, cap);
    if (len && kvk_mode(&r, p, KVK_TEXT))
        kvk_run_text(&r, text, len);
    return r.n;
}

/* ---- the body, through tokcount's walk ------------------------------------------------ */

struct kvk_walk {
    struct kvk_run r;
    const struct kvk_params *p;
};

static void kvk_on_text(void *ctx, const char *s, size_t n)
{
    struct kvk_walk *k = ctx;

    if (kvk_mode(&k->r, k->p, KVK_TEXT))
        kvk_run_text(&k->r, s, n);
}

static void kvk_on_id(void *ctx, uint64_t id)
{
    struct kvk_walk *k = ctx;

    if (kvk_mode(&k->r, k->p, KVK_IDS))
        kvk_run_id(&k->r, id);
}

static void kvk_on_mark(void *ctx, int what, const char *s, size_t n)
{
    struct kvk_walk *k = ctx;
    struct kvk_run *r = &k->r;

    if (what == TOKCOUNT_ROLE) {
        r->rolelen = (unsigned) (n <= sizeof r->role ? n : 0);
        memcpy(r->role, s, r->rolelen);
    } else if (what == TOKCOUNT_MESSAGE_END) {
        /* the message's role after its content: "\x1e" role "\x1f" */
        if (kvk_mode(r, k->p, KVK_TEXT)) {
            kvk_run_text(r, "\x1e", 1);
            kvk_run_text(r, r->role, r->rolelen);
            kvk_run_text(r, "\x1f", 1);
        }
        r->rolelen = 0;
    } else if (what == TOKCOUNT_ITEM_END && r->mode != KVK_NONE) {
        r->done = 1; /* a batch: its first prompt only */
    }
}

size_t kvk_body_counted(const struct kvk_params *p, const char *body, size_t len, uint64_t *keys,
                        size_t cap, int *exact, double chars_per_token, struct tokcount *counts)
{
    struct kvk_walk k;
    struct tokcount_sink sink = {kvk_on_text, kvk_on_id, kvk_on_mark, &k};

    kvk_run_init(&k.r, p->seed, keys, cap);
    k.p = p;
    tokcount_walk(body, len, chars_per_token, &sink, counts);
    if (exact)
        *exact = k.r.mode == KVK_IDS;
    return k.r.n;
}

/* ---- the body's cache_salt ------------------------------------------------------------ */

/* Walks the top level of the body only: the keys of the outer object, each value skipped whole.
 * The walk is lenient (containers are counted, not checked, and UTF-8 is not looked at): a body
 * that is no JSON is refused by the engine, whatever salt it was read with. Only what must match
 * the engine exactly is strict: a key or a salt with escapes is decoded by jscan. */

static const char *kvs_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* The closing quote of the string whose contents start at p: the first quote after an even run
 * of backslashes; NULL when there is none. */
static const char *kvs_str_end(const char *p, const char *end)
{
    const char *q, *b;

    while ((q = memchr(p, '"', (size_t) (end - p))) != NULL) {
        for (b = q; b > p && b[-1] == '\\'; b--)
            ;
        if ((q - b) % 2 == 0)
            return q;
        p = q + 1;
    }
    return NULL;
}

/* One past the value that starts at p (p < end, no whitespace), or NULL when it has no end. */
static const char *kvs_skip(const char *p, const char *end)
{
    const char *start = p;
    size_t depth = 0;

    if (*p == '"')
        return (p = kvs_str_end(p + 1, end)) != NULL ? p + 1 : NULL;
    if (*p != '{' && *p != '[') {
        /* a number or a literal: up to the next delimiter */
        while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n' &&
               *p != '\r' && *p != '\t')
            p++;
        return p > start ? p : NULL;
    }
    for (; p < end; p++) {
        if (*p == '"') {
            if ((p = kvs_str_end(p + 1, end)) == NULL)
                return NULL;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if ((*p == '}' || *p == ']') && --depth == 0) {
            return p + 1;
        }
    }
    return NULL;
}

/* Decodes the string from its opening quote q0 to its closing one q1 into buf (cap): its decoded
 * length, over cap when it does not fit, or SIZE_MAX when it is no valid JSON string. */
static size_t kvs_decode(const char *q0, const char *q1, char *buf, size_t cap)
{
    struct jscan js;
    struct jscan_str str;

    if (jscan_init(&js, q0, (size_t) (q1 - q0) + 1) != 0 || jscan_string(&js, &str) != 0)
        return SIZE_MAX;
    return jscan_str_copy(&str, buf, cap);
}

/* 1 when the key whose contents are [k, q) is "cache_salt", written plainly or with escapes
 * (each character at most a 6-byte \u escape). */
static int kvs_is_salt(const char *k, const char *q)
{
    static const char name[] = "cache_salt";
    size_t len = (size_t) (q - k), n = sizeof name - 1;
    char d[sizeof name];

    if (len == n)
        return memcmp(k, name, n) == 0;
    if (len < n || len > 6 * n || memchr(k, '\\', len) == NULL)
        return 0;
    return kvs_decode(k - 1, q, d, n) == n && memcmp(d, name, n) == 0;
}

const char *kvk_salt(const char *body, size_t len, char *buf, size_t cap, size_t *n)
{
    const char *end = body + len, *p = kvs_ws(body, end), *k, *q, *salt = NULL, *salt_end = NULL;
    size_t d;

    *n = 0;
    if (p == end || *p != '{')
        return NULL;
    p = kvs_ws(p + 1, end);
    if (p < end && *p == '}')
        return NULL;
    for (;;) {
        int is_salt;

        if (p == end || *p != '"' || (q = kvs_str_end(p + 1, end)) == NULL)
            return NULL;
        k = p + 1;
        p = kvs_ws(q + 1, end);
        if (p == end || *p != ':')
            return NULL;
        p = kvs_ws(p + 1, end);
        if (p == end)
            return NULL;
        /* the last one wins, as in the engine's parser: a later null clears an earlier string */
        if ((is_salt = kvs_is_salt(k, q)) != 0)
            salt = *p == '"' ? p : NULL;
        if ((p = kvs_skip(p, end)) == NULL)
            return NULL;
        if (is_salt)
            salt_end = p - 1;
        p = kvs_ws(p, end);
        if (p < end && *p == '}')
            break;
        if (p == end || *p != ',')
            return NULL;
        p = kvs_ws(p + 1, end);
    }
    if (salt == NULL || salt_end == salt + 1)
        return NULL;
    if (memchr(salt + 1, '\\', (size_t) (salt_end - salt - 1)) != NULL &&
        (d = kvs_decode(salt, salt_end, buf, cap)) <= cap) {
        *n = d;
        return buf;
    }
    *n = (size_t) (salt_end - salt - 1);
    return salt + 1;
}

size_t kvk_body(const struct kvk_params *p, const char *body, size_t len, uint64_t *keys,
                size_t cap, int *exact)
{
    struct tokcount counts;

    return kvk_body_counted(p, body, len, keys, cap, exact, 4.0, &counts);
}
