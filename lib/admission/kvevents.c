/* kvevents: a KV-event payload, checked byte by byte, unpacked by msgpack-c, read into structs.
 *
 * Two passes. The first walks the msgpack bytes without building anything: every item must
 * be whole, every container's count must fit in the bytes left (each item takes at least one),
 * and nothing may follow the top item. msgpack-c allocates a container's elements when it
 * reads its header, so this is what keeps a 5-byte payload that claims 2^32 elements from
 * asking for 96 GiB. The second unpacks into the decoder's zone and reads the tree: a field
 * table per event kind gives each field its position (positional encoding) and its name (map
 * encoding), so the two encodings share every rule after the lookup. */
#include "admission/kvevents.h"

#include "util/xmalloc.h"

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct kve_decoder {
    msgpack_zone zone;
};

struct kve_decoder *kve_decoder_new(void)
{
    struct kve_decoder *d = xcalloc(1, sizeof(*d));

    if (!msgpack_zone_init(&d->zone, MSGPACK_ZONE_CHUNK_SIZE))
        fatal("kvevents: out of memory");
    return d;
}

void kve_decoder_free(struct kve_decoder *d)
{
    if (d == NULL)
        return;
    msgpack_zone_destroy(&d->zone);
    free(d);
}

/* ---- the first pass: the bytes are one whole msgpack item ---------------------------------- */

static uint64_t be(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;

    for (unsigned i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* 0 when p[0..len) is exactly one item whose containers' counts fit; else -1 and where. */
static int precheck(const uint8_t *p, size_t len, size_t *at)
{
    size_t i = 0, pending = 1; /* items still to read; each needs a byte, so pending <= left */

    while (pending > 0) {
        size_t left = len - i, head = 1, body = 0, items = 0;
        uint8_t b;

        if (left == 0)
            goto fail;
        b = p[i];
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            /* the byte alone: fixints, nil, booleans */
        } else if (b >= 0x80 && b <= 0x8f) {
            items = 2 * (size_t) (b & 0x0f);
        } else if (b >= 0x90 && b <= 0x9f) {
            items = b & 0x0f;
        } else if (b >= 0xa0 && b <= 0xbf) {
            body = b & 0x1f;
        } else if (b >= 0xc4 && b <= 0xc6) { /* bin 8/16/32 */
            head = 1 + (1u << (b - 0xc4));
        } else if (b >= 0xc7 && b <= 0xc9) { /* ext 8/16/32: the length, then a type byte */
            head = 2 + (1u << (b - 0xc7));
        } else if (b == 0xca || b == 0xcb) {
            body = b == 0xca ? 4 : 8;
        } else if (b >= 0xcc && b <= 0xd3) { /* uint and int 8..64 */
            body = 1u << ((b - 0xcc) & 3);
        } else if (b >= 0xd4 && b <= 0xd8) { /* fixext 1..16 */
            body = 1 + (1u << (b - 0xd4));
        } else if (b >= 0xd9 && b <= 0xdb) { /* str 8/16/32 */
            head = 1 + (1u << (b - 0xd9));
        } else if (b == 0xdc || b == 0xdd || b == 0xde || b == 0xdf) {
            head = b == 0xdc || b == 0xde ? 3 : 5;
        } else {
            goto fail; /* 0xc1: never used */
        }
        if (head > left)
            goto fail;
        if (head > 1) {
            uint64_t n = be(p + i + 1, (unsigned) head - 1 - (b >= 0xc7 && b <= 0xc9));

            if (b >= 0xdc) {
                if (n > left)
                    goto fail;
                items = (size_t) n * (b >= 0xde ? 2 : 1);
            } else {
                body = n > left ? left + 1 : (size_t) n;
            }
        }
        if (body > left - head)
            goto fail;
        i += head + body;
        pending = pending - 1 + items;
        if (pending > len - i)
            goto fail;
    }
    if (i == len)
        return 0;
fail:
    *at = i;
    return -1;
}

/* ---- the second pass: the tree into structs ------------------------------------------------ */

struct ctx {
    struct kve_out *out;
    char *err;
    size_t errlen;
};

__attribute__((format(printf, 2, 3))) static int fail(struct ctx *c, const char *fmt, ...)
{
    va_list ap;

    if (c->errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return KVE_EMALFORMED;
}

static int streq(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);

    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

static int is_int(const msgpack_object *o)
{
    return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER || o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
}

/* A non-negative integer no larger than max (null or absent: dflt, if null_ok). */
static int get_uint(struct ctx *c, const msgpack_object *o, const char *name, uint64_t max,
                    int null_ok, int64_t dflt, int64_t *v)
{
    if (o == NULL || o->type == MSGPACK_OBJECT_NIL) {
        if (!null_ok)
            return fail(c, "%s: missing or null", name);
        *v = dflt;
        return 0;
    }
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
        return fail(c, "%s: not an integer from 0 to %llu", name, (unsigned long long) max);
    *v = (int64_t) o->via.u64;
    return 0;
}

/* A string or null (absent: null); NULL when null. */
static int get_str(struct ctx *c, const msgpack_object *o, const char *name, const char **s,
                   size_t *n)
{
    *s = NULL;
    *n = 0;
    if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (o->type != MSGPACK_OBJECT_STR)
        return fail(c, "%s: not a string", name);
    *s = o->via.str.ptr;
    *n = o->via.str.size;
    return 0;
}

/* A block hash as a 64-bit key: see kvevents.h. */
static int get_hash(struct ctx *c, const msgpack_object *o, const char *name, uint64_t *h)
{
    if (is_int(o)) {
        *h = o->via.u64; /* a negative one's bits, as the union holds them */
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_BIN) {
        uint32_t n = o->via.bin.size, k = n < 8 ? n : 8;

        *h = be((const uint8_t *) o->via.bin.ptr + (n - k), k);
        return 0;
    }
    return fail(c, "%s: not an integer or bytes", name);
}

/* The fields an event may have, in vLLM's positional order for BlockStored. */
enum {
    F_HASHES,
    F_PARENT,
    F_TOKENS,
    F_BLOCK_SIZE,
    F_LORA_ID,
    F_MEDIUM,
    F_LORA_NAME, /* SGLang's BlockStoredWithMetadata puts its metadata map here */
    F_EXTRA_KEYS,
    F_GROUP_IDX,
    F_SPEC_KIND,
    F_SLIDING_WINDOW,
    F_METADATA, /* by name only (SGLang's map form) */
    F_COUNT
};

static const char *const field_names[F_COUNT] = {
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
    "metadata",
};

/* Each kind's fields after the tag, in positional order; -1 ends. */
static const int stored_fields[] = {F_HASHES,    F_PARENT,    F_TOKENS,         F_BLOCK_SIZE,
                                    F_LORA_ID,   F_MEDIUM,    F_LORA_NAME,      F_EXTRA_KEYS,
                                    F_GROUP_IDX, F_SPEC_KIND, F_SLIDING_WINDOW, -1};
static const int removed_fields[] = {F_HASHES, F_MEDIUM, F_GROUP_IDX, -1};
static const int cleared_fields[] = {-1};

static const struct {
    const char *tag;
    enum kve_kind kind;
    const int *fields;
    int by_name_only; /* a field only the map form names */
} kinds[] = {
    {"BlockStored", KVE_STORED, stored_fields, F_METADATA},
    {"BlockRemoved", KVE_REMOVED, removed_fields, -1},
    {"AllBlocksCleared", KVE_CLEARED, cleared_fields, -1},
};

/* The block hashes of f into the output; their count in *n. */
static int read_hashes(struct ctx *c, const msgpack_object *o, uint32_t *n)
{
    struct kve_out *out = c->out;

    if (o == NULL || o->type != MSGPACK_OBJECT_ARRAY)
        return fail(c, "block_hashes: not an array");
    if (o->via.array.size > out->hashes_cap - out->n_hashes)
        return KVE_EFULL;
    for (uint32_t i = 0; i < o->via.array.size; i++)
        if (get_hash(c, &o->via.array.ptr[i], "block_hashes", &out->hashes[out->n_hashes + i]))
            return KVE_EMALFORMED;
    *n = o->via.array.size;
    return 0;
}

/* The token ids of f (each from 0 to UINT32_MAX) into the output. */
static int read_tokens(struct ctx *c, const msgpack_object *o, uint32_t *n)
{
    struct kve_out *out = c->out;

    if (o == NULL || o->type != MSGPACK_OBJECT_ARRAY)
        return fail(c, "token_ids: not an array");
    if (o->via.array.size > out->tokens_cap - out->n_tokens)
        return KVE_EFULL;
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *t = &o->via.array.ptr[i];

        if (t->type != MSGPACK_OBJECT_POSITIVE_INTEGER || t->via.u64 > UINT32_MAX)
            return fail(c, "token_ids: not an integer from 0 to 4294967295");
        out->tokens[out->n_tokens + i] = (uint32_t) t->via.u64;
    }
    *n = o->via.array.size;
    return 0;
}

/* Block i's extra_keys entry is its LoRA name alone: [lora_name], exactly (vLLM puts the LoRA
 * name first, then media identifiers, the cache_salt and prompt-embedding hashes). */
static int lora_only(const msgpack_object *k, const struct kve_event *e)
{
    const msgpack_object *s;

    if (k->type != MSGPACK_OBJECT_ARRAY || k->via.array.size != 1 || e->lora_name == NULL)
        return 0;
    s = &k->via.array.ptr[0];
    return s->type == MSGPACK_OBJECT_STR && s->via.str.size == e->lora_name_len &&
           memcmp(s->via.str.ptr, e->lora_name, e->lora_name_len) == 0;
}

/* extra_keys (an array, one entry per block, null for none) or SGLang's metadata map: does
 * anything beyond the tokens go into the engine's hash of these blocks (has_extra_keys), and
 * from which block on is it more than the LoRA name (n_plain: the block before which every
 * entry is null or [lora_name]; SGLang's metadata covers every block)? */
static int read_extra(struct ctx *c, const msgpack_object *o, struct kve_event *e)
{
    if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (o->type == MSGPACK_OBJECT_MAP) {
        if (o->via.map.size > 0) {
            e->has_extra_keys = 1;
            e->n_plain = 0;
        }
        return 0;
    }
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return fail(c, "extra_keys: not an array");
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *k = &o->via.array.ptr[i];

        if (k->type == MSGPACK_OBJECT_NIL)
            continue;
        e->has_extra_keys = 1;
        if (i < e->n_plain && !lora_only(k, e))
            e->n_plain = i;
    }
    return 0;
}

/* Another tier's blocks (CPU, disk) are not in the GPU's cache, so an event of another medium
 * is counted and skipped, its block_hashes only checked to be an array (to count them), and
 * before any other check, since an offload tier's stores carry no token ids. It takes no room
 * in the output. *skip is 1 when skipped. */
static int other_medium(struct ctx *c, const msgpack_object *const *f, int *skip)
{
    const char *medium;
    size_t n;

    *skip = 0;
    if (get_str(c, f[F_MEDIUM], "medium", &medium, &n))
        return KVE_EMALFORMED;
    if (medium == NULL || (n == 3 && strncasecmp(medium, "GPU", 3) == 0))
        return 0;
    if (f[F_HASHES] == NULL || f[F_HASHES]->type != MSGPACK_OBJECT_ARRAY)
        return fail(c, "block_hashes: not an array");
    c->out->other_medium++;
    c->out->other_medium_blocks += f[F_HASHES]->via.array.size;
    *skip = 1;
    return 0;
}

/* A store's own fields: parent, token ids, block size, LoRA, extras, cache spec. */
static int read_stored(struct ctx *c, struct kve_event *e, const msgpack_object *const *f)
{
    const msgpack_object *name = f[F_LORA_NAME];
    int64_t v = 0;
    int rv;

    if (f[F_PARENT] != NULL && f[F_PARENT]->type != MSGPACK_OBJECT_NIL) {
        if (get_hash(c, f[F_PARENT], "parent_block_hash", &e->parent))
            return KVE_EMALFORMED;
        e->has_parent = 1;
    }
    if ((rv = read_tokens(c, f[F_TOKENS], &e->n_tokens)))
        return rv;
    c->out->n_tokens += e->n_tokens;
    if (get_uint(c, f[F_BLOCK_SIZE], "block_size", UINT32_MAX, 0, 0, &v))
        return KVE_EMALFORMED;
    e->block_size = (uint32_t) v;
    if (get_uint(c, f[F_LORA_ID], "lora_id", INT64_MAX, 1, -1, &e->lora_id))
        return KVE_EMALFORMED;
    e->n_plain = e->n_hashes;
    if (name != NULL && name->type == MSGPACK_OBJECT_MAP) /* SGLang's metadata */
        rv = read_extra(c, name, e);
    else
        rv = get_str(c, name, "lora_name", &e->lora_name, &e->lora_name_len);
    /* lora_name is read first: extra_keys entries are judged against it */
    if (rv || read_extra(c, f[F_EXTRA_KEYS], e) || read_extra(c, f[F_METADATA], e) ||
        get_str(c, f[F_SPEC_KIND], "kv_cache_spec_kind", &e->spec_kind, &e->spec_kind_len) ||
        get_uint(c, f[F_SLIDING_WINDOW], "kv_cache_spec_sliding_window", INT64_MAX, 1, -1, &v))
        return KVE_EMALFORMED;
    if (e->block_size == 0 || (uint64_t) e->n_tokens != (uint64_t) e->n_hashes * e->block_size)
        return fail(c, "token_ids: %u ids for %u blocks of %u", e->n_tokens, e->n_hashes,
                    e->block_size);
    return 0;
}

/* One event's fields (f[i] NULL when absent) into out->events[out->n_events]. */
static int read_fields(struct ctx *c, enum kve_kind kind, const msgpack_object *const *f)
{
    struct kve_out *out = c->out;
    struct kve_event *e;
    int rv, skip = 0;

    if (kind != KVE_CLEARED && (rv = other_medium(c, f, &skip)) != 0)
        return rv;
    if (skip)
        return 0;
    if (out->n_events == out->events_cap)
        return KVE_EFULL;
    e = &out->events[out->n_events];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    e->lora_id = -1;
    e->group_idx = -1;
    e->hash_first = (uint32_t) out->n_hashes;
    e->token_first = (uint32_t) out->n_tokens;
    if (kind != KVE_CLEARED) {
        if ((rv = read_hashes(c, f[F_HASHES], &e->n_hashes)))
            return rv;
        out->n_hashes += e->n_hashes;
        if (get_uint(c, f[F_GROUP_IDX], "group_idx", INT64_MAX, 1, -1, &e->group_idx))
            return KVE_EMALFORMED;
    }
    if (kind == KVE_STORED && (rv = read_stored(c, e, f)) != 0)
        return rv;
    out->n_events++;
    return 0;
}

/* One event, positional or a map; an unknown type is counted and skipped. */
static int read_event(struct ctx *c, const msgpack_object *o)
{
    const msgpack_object *f[F_COUNT] = {0}, *tag = NULL;
    size_t k;

    if (o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size > 0)
        tag = &o->via.array.ptr[0];
    else if (o->type == MSGPACK_OBJECT_MAP)
        for (uint32_t i = 0; i < o->via.map.size; i++)
            if (streq(&o->via.map.ptr[i].key, "type"))
                tag = &o->via.map.ptr[i].val;
    if (tag == NULL || tag->type != MSGPACK_OBJECT_STR)
        return fail(c, "event: neither [tag, ...] nor {\"type\": tag, ...}");
    for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        if (streq(tag, kinds[k].tag))
            break;
    if (k == sizeof(kinds) / sizeof(kinds[0])) {
        c->out->unknown_events++;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        uint32_t i = 1;

        for (const int *id = kinds[k].fields; *id >= 0 && i < o->via.array.size; id++, i++)
            f[*id] = &o->via.array.ptr[i];
        c->out->unknown_fields += o->via.array.size - i;
    } else {
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object *key = &o->via.map.ptr[i].key;
            const int *id = kinds[k].fields;

            if (streq(key, "type"))
                continue;
            while (*id >= 0 && !streq(key, field_names[*id]))
                id++;
            if (*id >= 0)
                f[*id] = &o->via.map.ptr[i].val;
            else if (kinds[k].by_name_only >= 0 && streq(key, field_names[kinds[k].by_name_only]))
                f[kinds[k].by_name_only] = &o->via.map.ptr[i].val;
            else
                c->out->unknown_fields++;
        }
    }
    return read_fields(c, kinds[k].kind, f);
}

/* The batch: [ts, events, rank?] or {"ts", "events", "data_parallel_rank"|"attn_dp_rank"}. */
static int read_batch(struct ctx *c, const msgpack_object *o)
{
    const msgpack_object *ts = NULL, *events = NULL, *rank = NULL;
    int rv;

    if (o->type == MSGPACK_OBJECT_ARRAY) {
        if (o->via.array.size < 2)
            return fail(c, "batch: an array of fewer than 2 items");
        ts = &o->via.array.ptr[0];
        events = &o->via.array.ptr[1];
        if (o->via.array.size > 2)
            rank = &o->via.array.ptr[2];
        if (o->via.array.size > 3)
            c->out->unknown_fields += o->via.array.size - 3;
    } else if (o->type == MSGPACK_OBJECT_MAP) {
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object *key = &o->via.map.ptr[i].key, *val = &o->via.map.ptr[i].val;

            if (streq(key, "ts"))
                ts = val;
            else if (streq(key, "events"))
                events = val;
            else if (streq(key, "data_parallel_rank") || streq(key, "attn_dp_rank"))
                rank = val;
            else
                c->out->unknown_fields++;
        }
    } else {
        return fail(c, "batch: neither an array nor a map");
    }
    if (ts == NULL ||
        !(is_int(ts) || ts->type == MSGPACK_OBJECT_FLOAT32 || ts->type == MSGPACK_OBJECT_FLOAT64))
        return fail(c, "ts: missing or not a number");
    c->out->ts = ts->type == MSGPACK_OBJECT_POSITIVE_INTEGER   ? (double) ts->via.u64
                 : ts->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? (double) ts->via.i64
                                                               : ts->via.f64;
    if (get_uint(c, rank, "data_parallel_rank", INT64_MAX, 1, -1, &c->out->dp_rank))
        return KVE_EMALFORMED;
    if (events == NULL || events->type != MSGPACK_OBJECT_ARRAY)
        return fail(c, "events: missing or not an array");
    for (uint32_t i = 0; i < events->via.array.size; i++)
        if ((rv = read_event(c, &events->via.array.ptr[i])))
            return rv;
    return 0;
}

static void reset(struct kve_out *out)
{
    out->n_events = out->n_hashes = out->n_tokens = 0;
    out->ts = 0;
    out->dp_rank = -1;
    out->unknown_fields = out->unknown_events = 0;
    out->other_medium = out->other_medium_blocks = 0;
}

int kve_decode(struct kve_decoder *d, const void *payload, size_t len, struct kve_out *out,
               char *err, size_t errlen)
{
    struct ctx c = {out, err, errlen};
    msgpack_unpack_return ur;
    msgpack_object root;
    size_t off = 0;
    int rv;

    reset(out);
    if (errlen > 0)
        err[0] = '\0';
    if (len > UINT32_MAX) /* the events' offsets into the arrays are 32-bit */
        return fail(&c, "payload of %zu bytes: too large", len);
    if (precheck(payload, len, &off))
        return fail(&c, "not one whole msgpack item (at byte %zu of %zu)", off, len);
    ur = msgpack_unpack(payload, len, &off, &d->zone, &root);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR) /* what msgpack-c says when its stack is full too */
        rv = fail(&c, "msgpack: containers nested more than 32 deep, or out of memory");
    else if (ur != MSGPACK_UNPACK_SUCCESS)
        rv = fail(&c, "msgpack: not unpacked (%d)", (int) ur);
    else
        rv = read_batch(&c, &root);
    /* Nothing reported points into the tree (ids and hashes are copied, strings point into
     * the payload): the zone goes back to its first chunk until the next payload. */
    msgpack_zone_clear(&d->zone);
    if (rv == KVE_EFULL)
        fail(&c, "batch too large for the arrays given (%zu events, %zu hashes, %zu tokens)",
             out->events_cap, out->hashes_cap, out->tokens_cap);
    if (rv != KVE_OK)
        reset(out);
    return rv;
}
