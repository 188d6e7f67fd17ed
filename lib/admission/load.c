/* load: encoding and validation of the load message (see include/admit/load.h).
 *
 * Encoding is hand-written (a fixed field order, `null` for unknown values) because it runs
 * on every load change of a busy worker; decoding is in load_decode.c (a single pass over the
 * bytes, strict about types, because a router must never act on a value it misread).
 *
 * The longest valid message: a worker id of 127 control bytes (each escaped as \u00XX: 762
 * bytes), every integer at 2^53-1 (16 digits), "draining", a model list of
 * ADMIT_LOAD_MODELS_JSON_MAX (512) bytes and the role "prefill" make 1834 bytes, topic
 * included (1262 before kv_block_size, 1295 before models, whose key takes 10 bytes more,
 * 1817 before role), within ADMIT_LOAD_MSG_MAX; test_load.c's test_longest_message checks that
 * number. A field added later must keep it within the limit. */
#include "admit/load.h"
#include "util/jscan.h"
#include "admission/load_impl.h"

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
    m->models.n = ADMIT_LOAD_UNKNOWN; /* and the rest 0: admit_load_models_unknown() */
}

int admit_load_worker_id_ok(const char *id)
{
    size_t n = 0;

    for (; id[n] != '\0'; n++)
        if ((unsigned char) id[n] < 0x21 || (unsigned char) id[n] > 0x7e || id[n] == '"' ||
            id[n] == '\\')
            return 0;
    return n >= 1 && n <= ADMIT_LOAD_WORKER_ID_MAX;
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

/* 1 when s[0..len) is UTF-8 (no overlong forms, no surrogates, at most U+10FFFF), as a JSON
 * reader requires of every string it reads: a name that is not would make the message
 * unreadable. */
static int utf8_ok(const unsigned char *s, size_t len)
{
    size_t i = 0, n;

    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if ((n = jscan_utf8_char(s + i, len - i)) == 0)
            return 0;
        i += n;
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

const char *admit_load_role_name(enum admit_load_role r)
{
    switch (r) {
    case ADMIT_LOAD_ROLE_PREFILL:
        return "prefill";
    case ADMIT_LOAD_ROLE_DECODE:
        return "decode";
    case ADMIT_LOAD_ROLE_BOTH:
    default:
        return "both";
    }
}

int admit_load_role_parse(const char *name, size_t len, enum admit_load_role *out)
{
    static const enum admit_load_role all[] = {ADMIT_LOAD_ROLE_BOTH, ADMIT_LOAD_ROLE_PREFILL,
                                               ADMIT_LOAD_ROLE_DECODE};

    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        const char *n = admit_load_role_name(all[i]);

        if (strlen(n) == len && memcmp(n, name, len) == 0) {
            *out = all[i];
            return 0;
        }
    }
    return -1;
}

/* The nullable numeric fields, in wire order, with their offsets. */
struct numfield {
    const char *name;
    size_t off;
};

#define NUMFIELD(f, min, optional) {#f, offsetof(struct admit_load, f)},
static const struct numfield numfields[] = {LOAD_NUMFIELDS(NUMFIELD)};
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
    /* Only a disaggregated worker says its role: an aggregated one's messages stay what they
     * were before the field, and a reader takes a message without it as "both". */
    if (m->role == ADMIT_LOAD_ROLE_PREFILL || m->role == ADMIT_LOAD_ROLE_DECODE)
        put(buf, cap, &n, ",\"role\":\"%s\"", admit_load_role_name(m->role));
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
