/* load: encoding and validation of the load message (see include/admit/load.h).
 *
 * Encoding is hand-written (a fixed field order, `null` for unknown values) because it runs
 * on every load change of a busy worker; decoding uses jansson and is strict about types,
 * because a router must never act on a value it misread. Unknown keys are ignored so that
 * later v1 publishers may add fields; a field added that way (kv_block_size) is optional when
 * decoding, since earlier v1 publishers do not send it.
 *
 * The longest valid message: a worker id of 127 control bytes (each escaped as \u00XX: 762
 * bytes), every integer at 2^53-1 (16 digits), "draining" and a model list of
 * ADMIT_LOAD_MODELS_JSON_MAX (512) bytes make 1817 bytes, topic included (1262 before
 * kv_block_size, 1295 before models, whose key takes 10 bytes more), within
 * ADMIT_LOAD_MSG_MAX; test_load.c's test_longest_message checks that number. A field added
 * later must keep it within the limit. */
#include "admit/load.h"

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

void admit_load_init(struct admit_load *m)
{
    memset(m, 0, sizeof *m);
    m->dp_rank = 0;
    m->seq = 0;
    m->ts_ms = 0;
    m->kv_used_blocks = m->kv_total_blocks = m->kv_block_size = ADMIT_LOAD_UNKNOWN;
    m->active_decode_blocks = m->active_prefill_tokens = ADMIT_LOAD_UNKNOWN;
    m->max_num_batched_tokens = ADMIT_LOAD_UNKNOWN;
    m->engine_requests = m->engine_request_limit = ADMIT_LOAD_UNKNOWN;
    m->queued_requests = m->request_queue_limit = ADMIT_LOAD_UNKNOWN;
    m->state = ADMIT_LOAD_SERVING;
    m->heartbeat_ms = 1000;
    admit_load_models_unknown(&m->models);
}

/* ---- model lists ---------------------------------------------------------------------- */

void admit_load_models_unknown(struct admit_load_models *l)
{
    memset(l, 0, sizeof *l);
    l->n = ADMIT_LOAD_UNKNOWN;
}

void admit_load_models_clear(struct admit_load_models *l)
{
    memset(l, 0, sizeof *l);
    l->json = 2; /* [] */
}

/* 1 when s[0..len) is UTF-8 (no overlong forms, no surrogates, at most U+10FFFF), as jansson
 * requires of every string it reads: a name that is not would make the message unreadable. */
static int utf8_ok(const unsigned char *s, size_t len)
{
    size_t i = 0;

    while (i < len) {
        unsigned c = s[i], need, cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf)
            need = 1, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            need = 2, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            need = 3, cp = c & 0x07;
        else
            return 0;
        if (len - i - 1 < need)
            return 0;
        for (unsigned k = 1; k <= need; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        i += need + 1;
    }
    return 1;
}

int admit_load_models_has(const struct admit_load_models *l, const char *name)
{
    for (const char *p = admit_load_models_next(l, NULL); p != NULL;
         p = admit_load_models_next(l, p))
        if (strcmp(p, name) == 0)
            return 1;
    return 0;
}

int admit_load_models_add(struct admit_load_models *l, const char *name, size_t len)
{
    size_t esc = len, json;
    char tmp[ADMIT_LOAD_MODEL_NAME_MAX + 1];

    if (l->n < 0 || len == 0 || len > ADMIT_LOAD_MODEL_NAME_MAX ||
        !utf8_ok((const unsigned char *) name, len))
        return -1;
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char) name[i] < 0x20)
            return -1;
        esc += name[i] == '"' || name[i] == '\\';
    }
    memcpy(tmp, name, len);
    tmp[len] = '\0';
    if (admit_load_models_has(l, tmp))
        return 0;
    json = l->json + esc + 2 + (l->n > 0); /* "name", and a comma after the first */
    if (l->n >= ADMIT_LOAD_MODELS_MAX || json > ADMIT_LOAD_MODELS_JSON_MAX ||
        l->len + len + 1 > sizeof l->names)
        return -2;
    memcpy(l->names + l->len, tmp, len + 1);
    l->len += (unsigned) len + 1;
    l->json = (unsigned) json;
    l->n++;
    return 0;
}

const char *admit_load_models_next(const struct admit_load_models *l, const char *prev)
{
    const char *p;

    if (l->n <= 0)
        return NULL;
    if (prev == NULL)
        return l->names;
    p = prev + strlen(prev) + 1;
    return p < l->names + l->len ? p : NULL;
}

int admit_load_models_equal(const struct admit_load_models *a, const struct admit_load_models *b)
{
    if (a->n < 0 || b->n < 0)
        return a->n < 0 && b->n < 0;
    return a->n == b->n && a->len == b->len && memcmp(a->names, b->names, a->len) == 0;
}

const char *admit_load_state_name(enum admit_load_state s)
{
    return s == ADMIT_LOAD_DRAINING ? "draining" : "serving";
}

/* The nullable numeric fields, in wire order, with their offsets, the least value they may
 * hold, and whether a reader accepts a message without them (fields added to v1 later). */
struct numfield {
    const char *name;
    size_t off;
    int64_t min;
    int optional;
};

#define NF(f)                                                                                      \
    {                                                                                              \
#f, offsetof(struct admit_load, f), 0, 0                                                   \
    }
static const struct numfield numfields[] = {
    NF(kv_used_blocks),
    NF(kv_total_blocks),
    {"kv_block_size", offsetof(struct admit_load, kv_block_size), 1, 1},
    NF(active_decode_blocks),
    NF(active_prefill_tokens),
    NF(max_num_batched_tokens),
    NF(engine_requests),
    NF(engine_request_limit),
    NF(queued_requests),
    NF(request_queue_limit),
};
#define NNUM (sizeof numfields / sizeof numfields[0])

static int64_t numval(const struct admit_load *m, size_t i)
{
    return *(const int64_t *) (const void *) ((const char *) m + numfields[i].off);
}

/* Appends to buf at *n; returns -1 once the buffer is full (and stays -1). */
static int put(char *buf, size_t cap, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int put(char *buf, size_t cap, size_t *n, const char *fmt, ...)
{
    va_list ap;
    int w;

    if (*n >= cap)
        return -1;
    va_start(ap, fmt);
    w = vsnprintf(buf + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t) w >= cap - *n) {
        *n = cap;
        return -1;
    }
    *n += (size_t) w;
    return 0;
}

static void put_string(char *buf, size_t cap, size_t *n, const char *s)
{
    put(buf, cap, n, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char) *s;
        if (c == '"' || c == '\\')
            put(buf, cap, n, "\\%c", c);
        else if (c < 0x20)
            put(buf, cap, n, "\\u%04x", c);
        else
            put(buf, cap, n, "%c", c);
    }
    put(buf, cap, n, "\"");
}

int admit_load_to_json(const struct admit_load *m, char *buf, size_t cap)
{
    size_t n = 0;

    put(buf, cap, &n, "{\"v\":%d,\"worker_id\":", ADMIT_LOAD_VERSION);
    put_string(buf, cap, &n, m->worker_id);
    put(buf, cap, &n, ",\"dp_rank\":%lld,\"seq\":%lld,\"ts_ms\":%lld,\"state\":\"%s\"",
        (long long) m->dp_rank, (long long) m->seq, (long long) m->ts_ms,
        admit_load_state_name(m->state));
    put(buf, cap, &n, ",\"heartbeat_ms\":%lld", (long long) m->heartbeat_ms);
    for (size_t i = 0; i < NNUM; i++) {
        int64_t v = numval(m, i);
        if (v < 0)
            put(buf, cap, &n, ",\"%s\":null", numfields[i].name);
        else
            put(buf, cap, &n, ",\"%s\":%lld", numfields[i].name, (long long) v);
    }
    /* A list admit_load_models_add() built is within its bounds; one that is not (filled by
     * hand) goes as unknown rather than over the message's size. */
    if (m->models.n < 0 || m->models.json > ADMIT_LOAD_MODELS_JSON_MAX) {
        put(buf, cap, &n, ",\"models\":null");
    } else {
        put(buf, cap, &n, ",\"models\":[");
        for (const char *p = admit_load_models_next(&m->models, NULL); p != NULL;
             p = admit_load_models_next(&m->models, p)) {
            if (p != m->models.names)
                put(buf, cap, &n, ",");
            put_string(buf, cap, &n, p);
        }
        put(buf, cap, &n, "]");
    }
    if (put(buf, cap, &n, "}") != 0)
        return -1;
    return (int) n;
}

int admit_load_encode(const struct admit_load *m, char *buf, size_t cap)
{
    size_t tl = sizeof ADMIT_LOAD_TOPIC; /* topic plus the space that replaces its NUL */
    int n;

    if (cap < tl + 2)
        return -1;
    memcpy(buf, ADMIT_LOAD_TOPIC " ", tl);
    n = admit_load_to_json(m, buf + tl, cap - tl);
    return n < 0 ? -1 : (int) tl + n;
}

/* ---- decoding ------------------------------------------------------------------------- */

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A required integer in [min, ADMIT_LOAD_INT_MAX]; nullable ones may also be null. */
static int get_int(json_t *root, const char *key, int64_t min, int nullable, int64_t *out,
                   char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);

    if (v == NULL)
        return fail(err, errlen, "field '%s' is missing", key);
    if (nullable && json_is_null(v)) {
        *out = ADMIT_LOAD_UNKNOWN;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min ||
        json_integer_value(v) > ADMIT_LOAD_INT_MAX)
        return fail(err, errlen, "field '%s' must be an integer from %lld to 2^53-1%s", key,
                    (long long) min, nullable ? " or null" : "");
    *out = (int64_t) json_integer_value(v);
    return 0;
}

/* The optional model list: absent or null is unknown; else an array of distinct names within
 * the bounds of include/admit/load.h, or the message is invalid. */
static int get_models(json_t *root, struct admit_load_models *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, "models"), *e;
    size_t i;

    admit_load_models_unknown(out);
    if (v == NULL || json_is_null(v))
        return 0; /* from a publisher older than the field, or one that does not know */
    if (!json_is_array(v))
        return fail(err, errlen, "field 'models' must be an array of strings or null");
    admit_load_models_clear(out);
    json_array_foreach(v, i, e)
    {
        const char *s = json_string_value(e);
        size_t len = json_string_length(e);
        int rc = -1;

        if (json_is_string(e) && strlen(s) == len)
            rc = admit_load_models_add(out, s, len);
        if (rc == -1)
            return fail(err, errlen,
                        "field 'models' must hold model names of 1 to %d bytes without control "
                        "characters",
                        ADMIT_LOAD_MODEL_NAME_MAX);
        if (rc == -2)
            return fail(err, errlen,
                        "field 'models' is over its bounds (%d names, %d bytes as JSON)",
                        ADMIT_LOAD_MODELS_MAX, ADMIT_LOAD_MODELS_JSON_MAX);
        if ((size_t) out->n != i + 1)
            return fail(err, errlen, "field 'models' lists a name twice");
    }
    return 0;
}

static int decode_object(json_t *root, struct admit_load *out, char *err, size_t errlen)
{
    json_t *v;
    const char *s;
    int64_t version = 0;

    if (!json_is_object(root))
        return fail(err, errlen, "the message is not a JSON object");
    if (get_int(root, "v", 0, 0, &version, err, errlen) != 0)
        return -1;
    if (version != ADMIT_LOAD_VERSION)
        return fail(err, errlen, "unsupported version %lld (this reader knows %d)",
                    (long long) version, ADMIT_LOAD_VERSION);
    v = json_object_get(root, "worker_id");
    if (!json_is_string(v))
        return fail(err, errlen, "field 'worker_id' must be a string");
    s = json_string_value(v);
    if (json_string_length(v) == 0 || json_string_length(v) > ADMIT_LOAD_WORKER_ID_MAX ||
        strlen(s) != json_string_length(v))
        return fail(err, errlen, "field 'worker_id' must be 1 to %d bytes without NUL",
                    ADMIT_LOAD_WORKER_ID_MAX);
    memcpy(out->worker_id, s, json_string_length(v) + 1);
    v = json_object_get(root, "state");
    if (!json_is_string(v))
        return fail(err, errlen, "field 'state' must be \"serving\" or \"draining\"");
    if (strcmp(json_string_value(v), "serving") == 0)
        out->state = ADMIT_LOAD_SERVING;
    else if (strcmp(json_string_value(v), "draining") == 0)
        out->state = ADMIT_LOAD_DRAINING;
    else
        return fail(err, errlen, "field 'state' must be \"serving\" or \"draining\"");
    if (get_int(root, "dp_rank", 0, 0, &out->dp_rank, err, errlen) != 0 ||
        get_int(root, "seq", 0, 0, &out->seq, err, errlen) != 0 ||
        get_int(root, "ts_ms", 0, 0, &out->ts_ms, err, errlen) != 0 ||
        get_int(root, "heartbeat_ms", 1, 0, &out->heartbeat_ms, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < NNUM; i++) {
        int64_t *f = (int64_t *) (void *) ((char *) out + numfields[i].off);
        if (numfields[i].optional && json_object_get(root, numfields[i].name) == NULL) {
            *f = ADMIT_LOAD_UNKNOWN; /* from a publisher older than the field */
            continue;
        }
        if (get_int(root, numfields[i].name, numfields[i].min, 1, f, err, errlen) != 0)
            return -1;
    }
    return get_models(root, &out->models, err, errlen);
}

int admit_load_decode(const void *data, size_t len, struct admit_load *out, char *err,
                      size_t errlen)
{
    const char *p = data;
    size_t tl = sizeof ADMIT_LOAD_TOPIC - 1;
    json_error_t je;
    json_t *root;
    int rv;

    if (len > ADMIT_LOAD_MSG_MAX)
        return fail(err, errlen, "message of %zu bytes is over the %d byte limit", len,
                    ADMIT_LOAD_MSG_MAX);
    if (len < tl + 1 || memcmp(p, ADMIT_LOAD_TOPIC, tl) != 0 || p[tl] != ' ')
        return fail(err, errlen, "message does not start with the topic '%s '", ADMIT_LOAD_TOPIC);
    root = json_loadb(p + tl + 1, len - tl - 1, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL)
        return fail(err, errlen, "invalid JSON at byte %d: %s", je.position, je.text);
    admit_load_init(out);
    rv = decode_object(root, out, err, errlen);
    json_decref(root);
    return rv;
}
