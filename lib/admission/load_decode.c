/* load_decode: admit_load_decode, the load message read in a single pass over its bytes.
 *
 * A router reads ten thousand of these a second, so nothing is built and nothing allocated:
 * the object's keys are matched against the fields as they come (in the order admitd writes
 * them, tried first), each value is read straight into the struct, and keys this reader does
 * not know have their values skipped by the JSON scanner (util/jscan.h), which is as strict
 * about them as about the rest, since a message that is not JSON is refused whole.
 *
 * The verdict and the errors are the jansson-based reader's that came before (kept as the
 * fuzzing oracle in fuzz/load_jansson.c): every JSON error wins, as it did when the text was
 * parsed whole before any field was looked at; then a field's error, in the order that reader
 * checked them (v first, so a publisher of another version hears about the version), so a
 * field error does not stop the scan: the first one by that order is kept in err, and the rest
 * of the text still has to be valid JSON. */
#include "admit/load.h"
#include "util/jscan.h"
#include "admission/load_impl.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Every text a message can hold must fit the scanner's fixed room, or one that jansson read
 * could be refused: a nesting level takes two bytes of text at least ("[]"), a key of an open
 * object four ("":0). (jansson's own limit, 2048 levels, is out of a message's reach too.) */
#define TEXT_MAX (ADMIT_LOAD_MSG_MAX - sizeof ADMIT_LOAD_TOPIC) /* after "kv_metrics " */
_Static_assert(TEXT_MAX <= JSCAN_TEXT_MAX, "a load message fits a scan");
_Static_assert(TEXT_MAX / 2 <= JSCAN_DEPTH_MAX, "no load message nests too deeply");
_Static_assert(TEXT_MAX / 4 <= JSCAN_KEYS_MAX, "no load message has too many keys");

enum kind { K_VERSION, K_WORKER, K_STATE, K_INT, K_NULLABLE, K_MODELS, K_ROLE };

/* Room for the widest name (max_num_batched_tokens, 22 bytes) and its NUL. */
#define NAME_ROOM 23

/* A field, as the reader looks for it. next is the index of the field admitd writes after this
 * one, when it is not the next in the table (0 is "the next"): the lookup tries it first. */
struct field {
    char name[NAME_ROOM];
    unsigned char len, kind, optional, next;
    int64_t min;
    size_t off;
};

/* In the order jansson's reader checked them, which is the order their errors outrank one
 * another in (see FIELD() below). */
#define FIXED(name, kind, next, min, off)                                                          \
    {                                                                                              \
        name, sizeof name - 1, kind, 0, next, min, off                                             \
    }
#define NUMFIELD(f, min, optional)                                                                 \
    {#f, sizeof #f - 1, K_NULLABLE, optional, 0, min, offsetof(struct admit_load, f)},
static const struct field fields[] = {
    FIXED("v", K_VERSION, 0, 0, 0),
    FIXED("worker_id", K_WORKER, 3, 0, 0),
    FIXED("state", K_STATE, 6, 0, 0),
    FIXED("dp_rank", K_INT, 0, 0, offsetof(struct admit_load, dp_rank)),
    FIXED("seq", K_INT, 0, 0, offsetof(struct admit_load, seq)),
    FIXED("ts_ms", K_INT, 2, 0, offsetof(struct admit_load, ts_ms)),
    FIXED("heartbeat_ms", K_INT, 0, 1, offsetof(struct admit_load, heartbeat_ms)),
    LOAD_NUMFIELDS(NUMFIELD) /* kv_used_blocks ... request_queue_limit */
    {"models", sizeof "models" - 1, K_MODELS, 1, 0, 0, 0},
    {"role", sizeof "role" - 1, K_ROLE, 1, 0, 0, 0},
};
#define NFIELDS     (sizeof fields / sizeof fields[0])
#define NAME_WIDEST (NAME_ROOM - 1)

/* One decoding: the scan, where the fields go, and the best error so far. */
struct decode {
    struct jscan s;
    struct admit_load *out;
    char *err;
    size_t errlen;
    unsigned best; /* rank of the error in err (below), NONE while there is none */
    uint32_t seen; /* fields met, by index */
    int64_t version;
};

_Static_assert(sizeof fields / sizeof fields[0] <= 32, "seen has a bit per field");

/* The ranks of errors, the least winning: the message's own (its size, its topic, its JSON),
 * then each field's, in the table's order. */
#define WHOLE    0u
#define FIELD(i) ((unsigned) (i) + 1)
#define NONE     FIELD(NFIELDS)

/* Keeps this error in err if it outranks the one kept (formatting only then); -1. */
static int say(struct decode *d, unsigned rank, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int say(struct decode *d, unsigned rank, const char *fmt, ...)
{
    va_list ap;

    if (rank < d->best) {
        d->best = rank;
        va_start(ap, fmt);
        vsnprintf(d->err, d->errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void int_err(struct decode *d, unsigned i)
{
    say(d, FIELD(i), "field '%s' must be an integer from %lld to 2^53-1%s", fields[i].name,
        (long long) fields[i].min, fields[i].kind == K_NULLABLE ? " or null" : "");
}

/* The field a key names (compared decoded), or -1; the one at hint is tried first. */
static int field_of(const struct jscan_str *key, unsigned hint)
{
    char name[NAME_WIDEST + 1];
    const char *k = (const char *) key->raw;
    size_t len = key->len;

    if (key->esc) {
        len = jscan_str_copy(key, name, NAME_WIDEST);
        if (len > NAME_WIDEST)
            return -1;
        k = name;
    }
    if (hint < NFIELDS && fields[hint].len == len && memcmp(fields[hint].name, k, len) == 0)
        return (int) hint;
    for (unsigned i = 0; i < NFIELDS; i++)
        if (fields[i].len == len && memcmp(fields[i].name, k, len) == 0)
            return (int) i;
    return -1;
}

/* 1 when the n bytes at p are name's (n at most NAME_WIDEST), in a few loads: words that
 * overlap rather than a loop, the first and the last of the n bytes (and the middle one when
 * n is over 16), 8 bytes wide for names of 8 and more, 4 for those of 4 to 7. */
static int same_name(const unsigned char *p, const char *name, size_t n)
{
    uint64_t a[3], b[3];
    uint32_t x[2], y[2];

    if (n >= 8) {
        memcpy(&a[0], p, 8), memcpy(&b[0], name, 8);
        memcpy(&a[1], p + n - 8, 8), memcpy(&b[1], name + n - 8, 8);
        memcpy(&a[2], p + (n > 16 ? 8 : 0), 8), memcpy(&b[2], name + (n > 16 ? 8 : 0), 8);
        return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2])) == 0;
    }
    if (n >= 4) {
        memcpy(&x[0], p, 4), memcpy(&y[0], name, 4);
        memcpy(&x[1], p + n - 4, 4), memcpy(&y[1], name + n - 4, 4);
        return ((x[0] ^ y[0]) | (x[1] ^ y[1])) == 0;
    }
    for (size_t k = 0; k < n; k++)
        if (p[k] != (unsigned char) name[k])
            return 0;
    return 1;
}

/* 1 when the key next is the name of field i, spelt plainly (then consumed, into key): the
 * common case, in which the name's bytes need no scanning, being known valid. */
static int literally(struct jscan *s, unsigned i, struct jscan_str *key)
{
    const struct field *f = &fields[i];

    if (i >= NFIELDS || (size_t) (s->end - s->p) < f->len + 2u || s->p[f->len + 1] != '"' ||
        !same_name(s->p + 1, f->name, f->len))
        return 0;
    key->raw = s->p + 1;
    key->len = f->len;
    key->esc = 0;
    s->p += f->len + 2;
    return 1;
}

/* An integer field (v, a required one, or a nullable one). A value of the wrong type is an
 * error of the field's, and then skipped whole. */
static int read_int(struct decode *d, unsigned i)
{
    const struct field *f = &fields[i];
    int64_t *to =
        f->kind == K_VERSION ? &d->version : (int64_t *) (void *) ((char *) d->out + f->off);
    struct jscan_num num;
    int c = jscan_peek(&d->s);

    if (c == 'n' && f->kind == K_NULLABLE) {
        *to = ADMIT_LOAD_UNKNOWN;
        return jscan_null(&d->s) == 1 ? 0 : -1;
    }
    if (c != '-' && (c < '0' || c > '9')) {
        int_err(d, i);
        return jscan_skip(&d->s);
    }
    if (jscan_number(&d->s, &num) != 0)
        return -1;
    if (!num.integer || num.i < f->min || num.i > ADMIT_LOAD_INT_MAX)
        int_err(d, i);
    else if (f->kind == K_VERSION && num.i != ADMIT_LOAD_VERSION)
        say(d, FIELD(i), "unsupported version %lld (this reader knows %d)", (long long) num.i,
            ADMIT_LOAD_VERSION);
    else
        *to = num.i;
    return 0;
}

/* The error of a string field (worker_id, state) that is not a string, or is missing. */
static void string_err(struct decode *d, unsigned i)
{
    if (fields[i].kind == K_WORKER)
        say(d, FIELD(i), "field 'worker_id' must be a string");
    else
        say(d, FIELD(i), "field 'state' must be \"serving\" or \"draining\"");
}

/* A string field: worker_id, or state. */
static int read_string(struct decode *d, unsigned i)
{
    struct jscan_str str;
    char state[9];
    size_t n;

    if (jscan_peek(&d->s) != '"') {
        string_err(d, i);
        return jscan_skip(&d->s);
    }
    if (jscan_string(&d->s, &str) != 0)
        return -1;
    if (fields[i].kind == K_WORKER) {
        n = jscan_str_copy(&str, d->out->worker_id, ADMIT_LOAD_WORKER_ID_MAX);
        if (n == 0 || n > ADMIT_LOAD_WORKER_ID_MAX) {
            d->out->worker_id[0] = '\0';
            say(d, FIELD(i), "field 'worker_id' must be 1 to %d bytes without NUL",
                ADMIT_LOAD_WORKER_ID_MAX);
        }
        return 0;
    }
    n = jscan_str_copy(&str, state, sizeof state - 1);
    if (n == 7 && memcmp(state, "serving", 7) == 0)
        d->out->state = ADMIT_LOAD_SERVING;
    else if (n == 8 && memcmp(state, "draining", 8) == 0)
        d->out->state = ADMIT_LOAD_DRAINING;
    else
        string_err(d, i);
    return 0;
}

/* role: null or absent (both, as admit_load_init() left it), or the name of a role. Anything
 * else is refused rather than taken as both: a router that misread a worker's role would send
 * it the wrong leg of a request. */
static const char role_err[] = "field 'role' must be \"prefill\", \"decode\", \"both\" or null";

static int read_role(struct decode *d, unsigned i)
{
    struct jscan_str str;
    char name[8]; /* the longest name, "prefill", and a NUL */
    size_t n;
    int c = jscan_peek(&d->s);

    if (c == 'n')
        return jscan_null(&d->s) == 1 ? 0 : -1;
    if (c != '"') {
        say(d, FIELD(i), "%s", role_err);
        return jscan_skip(&d->s);
    }
    if (jscan_string(&d->s, &str) != 0)
        return -1;
    n = jscan_str_copy(&str, name, sizeof name - 1);
    if (n > sizeof name - 1 || admit_load_role_parse(name, n, &d->out->role) != 0)
        say(d, FIELD(i), "%s", role_err);
    return 0;
}

/* The names read so far, to find one given twice without comparing each with all: a table of
 * twice as many slots as names, each 0 or the name's index + 1, by a hash of the name. */
#define NAME_SLOTS 128
_Static_assert(NAME_SLOTS >= 2 * ADMIT_LOAD_MODELS_MAX, "the name table stays half empty");

struct names {
    unsigned char slot[NAME_SLOTS];
    uint16_t at[ADMIT_LOAD_MODELS_MAX]; /* where each name starts in the list */
    unsigned char len[ADMIT_LOAD_MODELS_MAX];
};

/* A hash of a name, 8 bytes a step (on a little-endian machine, then, bytes of a word are
 * taken in another order than on a big-endian one: either spreads names alike). */
static uint32_t name_hash(const char *name, size_t len)
{
    uint64_t h = len, w;
    size_t i = 0;

    for (; i + 8 <= len; i += 8) {
        memcpy(&w, name + i, 8);
        h = (h ^ w) * 0x100000001b3u;
        h ^= h >> 29;
    }
    w = 0;
    memcpy(&w, name + i, len - i);
    h = (h ^ w) * 0xff51afd7ed558ccdu; /* then mixed down, so the low bits hold all of it */
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53u;
    return (uint32_t) (h ^ (h >> 33));
}

/* Adds one name to the list as admit_load_models_add() would, checks in the same order: 0,
 * -1 for a name that is not one, 1 for a name already there, -2 past the list's bounds. */
static int add_name(struct admit_load_models *l, struct names *t, const struct jscan_str *str)
{
    char tmp[ADMIT_LOAD_MODEL_NAME_MAX];
    const char *name = (const char *) str->raw; /* decoded already, without escapes */
    size_t len = str->len, esc = 0, json;
    uint32_t h;
    unsigned k;

    if (str->esc) { /* only escapes can make control bytes, quotes and backslashes */
        len = jscan_str_copy(str, tmp, sizeof tmp);
        name = tmp;
        for (size_t i = 0; i < len && i < sizeof tmp; i++) {
            if ((unsigned char) tmp[i] < 0x20)
                return -1;
            esc += tmp[i] == '"' || tmp[i] == '\\';
        }
    }
    if (len == 0 || len > ADMIT_LOAD_MODEL_NAME_MAX)
        return -1;
    h = name_hash(name, len);
    for (k = h % NAME_SLOTS; t->slot[k] != 0; k = (k + 1) % NAME_SLOTS) {
        unsigned j = t->slot[k] - 1u;
        if (t->len[j] == len && memcmp(l->names + t->at[j], name, len) == 0)
            return 1;
    }
    json = l->json + len + esc + 2 + (l->n > 0); /* "name", and a comma after the first */
    if (l->n >= ADMIT_LOAD_MODELS_MAX || json > ADMIT_LOAD_MODELS_JSON_MAX ||
        l->len + len + 1 > sizeof l->names)
        return -2;
    memcpy(l->names + l->len, name, len);
    l->names[l->len + len] = '\0';
    t->slot[k] = (unsigned char) (l->n + 1);
    t->at[l->n] = (uint16_t) l->len;
    t->len[l->n] = (unsigned char) len;
    l->len += (unsigned) len + 1;
    l->json = (unsigned) json;
    l->n++;
    return 0;
}

/* models: null (unknown), or an array of names within the bounds. On the first bad name the
 * list is reported and the array skipped from its start, as any value of the wrong type. */
static int read_models(struct decode *d, unsigned i)
{
    const unsigned char *start = d->s.p;
    struct admit_load_models *l = &d->out->models;
    struct names t;
    struct jscan_str str;
    int c = jscan_peek(&d->s), rc = 0;

    if (c == 'n')
        return jscan_null(&d->s) == 1 ? 0 : -1; /* unknown, as admit_load_init() left it */
    if (c != '[') {
        say(d, FIELD(i), "field 'models' must be an array of strings or null");
        return jscan_skip(&d->s);
    }
    admit_load_models_clear(l);
    memset(t.slot, 0, sizeof t.slot);
    d->s.p++;
    if (jscan_peek(&d->s) == ']') {
        d->s.p++;
        return 0;
    }
    for (;;) {
        if (jscan_peek(&d->s) != '"') {
            rc = -1;
            break;
        }
        if (jscan_string(&d->s, &str) != 0)
            return -1;
        if ((rc = add_name(l, &t, &str)) != 0)
            break;
        c = jscan_peek(&d->s);
        if (c != ',' && c != ']')
            return jscan_fail(&d->s, "',' or ']' expected");
        d->s.p++;
        if (c == ']')
            return 0;
    }
    if (rc == -1)
        say(d, FIELD(i),
            "field 'models' must hold model names of 1 to %d bytes without control "
            "characters",
            ADMIT_LOAD_MODEL_NAME_MAX);
    else if (rc == -2)
        say(d, FIELD(i), "field 'models' is over its bounds (%d names, %d bytes as JSON)",
            ADMIT_LOAD_MODELS_MAX, ADMIT_LOAD_MODELS_JSON_MAX);
    else
        say(d, FIELD(i), "field 'models' lists a name twice");
    d->s.p = start;
    return jscan_skip(&d->s);
}

/* The top-level object, its '{' next. */
static int read_object(struct decode *d)
{
    struct jscan *s = &d->s;
    struct jscan_str key;
    unsigned hint = 0;
    int c, i, rv;

    s->p++;
    if (jscan_open_object(s) != 0)
        return -1;
    c = jscan_peek(s);
    while (c != '}') {
        if (c != '"')
            return jscan_fail(s, "string or '}' expected");
        if (literally(s, hint, &key)) {
            i = (int) hint;
        } else {
            if (jscan_string(s, &key) != 0)
                return -1;
            i = field_of(&key, hint);
        }
        if (i >= 0 && (d->seen & (1u << i)) != 0) {
            s->p = key.raw - 1;
            return jscan_fail(s, "duplicate object key");
        }
        if (i < 0 && jscan_key(s, &key) != 0) /* unknown keys are checked among themselves */
            return -1;
        if (jscan_peek(s) != ':')
            return jscan_fail(s, "':' expected");
        s->p++;
        if (i < 0) {
            rv = jscan_skip(s);
        } else {
            d->seen |= 1u << i;
            hint = fields[i].next != 0 ? fields[i].next : (unsigned) i + 1;
            switch (fields[i].kind) {
            case K_WORKER:
            case K_STATE:
                rv = read_string(d, (unsigned) i);
                break;
            case K_MODELS:
                rv = read_models(d, (unsigned) i);
                break;
            case K_ROLE:
                rv = read_role(d, (unsigned) i);
                break;
            default:
                rv = read_int(d, (unsigned) i);
                break;
            }
        }
        if (rv != 0)
            return -1;
        c = jscan_peek(s);
        if (c == ',') {
            s->p++;
            c = jscan_peek(s);
            if (c == '}')
                return jscan_fail(s, "string expected");
        } else if (c != '}') {
            return jscan_fail(s, "',' or '}' expected");
        }
    }
    s->p++;
    jscan_close(s);
    return 0;
}

int admit_load_decode(const void *data, size_t len, struct admit_load *out, char *err,
                      size_t errlen)
{
    const char *p = data;
    size_t tl = sizeof ADMIT_LOAD_TOPIC - 1;
    struct decode d;
    int c, rv;

    d.out = out;
    d.err = err;
    d.errlen = errlen;
    d.best = NONE;
    d.seen = 0;
    d.version = 0;
    if (len > ADMIT_LOAD_MSG_MAX)
        return say(&d, WHOLE, "message of %zu bytes is over the %d byte limit", len,
                   ADMIT_LOAD_MSG_MAX);
    if (len < tl + 1 || memcmp(p, ADMIT_LOAD_TOPIC, tl) != 0 || p[tl] != ' ')
        return say(&d, WHOLE, "message does not start with the topic '%s '", ADMIT_LOAD_TOPIC);
    jscan_init(&d.s, p + tl + 1, len - tl - 1);
    admit_load_init(out);
    c = jscan_peek(&d.s);
    if (c == '{')
        rv = read_object(&d);
    else if (c == '[')
        rv = jscan_skip(&d.s); /* valid JSON perhaps, but not what a load message is */
    else
        rv = jscan_fail(&d.s, "'[' or '{' expected");
    if (rv == 0 && jscan_peek(&d.s) != -1)
        rv = jscan_fail(&d.s, "end of input expected");
    if (rv != 0) /* over any field's error */
        return say(&d, WHOLE, "invalid JSON at byte %zu: %s", d.s.at, d.s.why);
    if (c == '[')
        return say(&d, WHOLE, "the message is not a JSON object");
    /* The fields not given, by rank again: a missing one is an error of its own rank (for a
     * string field, the error of a value that is not a string, as jansson's reader had it). */
    for (unsigned i = 0; FIELD(i) < d.best; i++) {
        if ((d.seen & (1u << i)) != 0 || fields[i].optional)
            continue;
        if (fields[i].kind == K_WORKER || fields[i].kind == K_STATE)
            string_err(&d, i);
        else
            say(&d, FIELD(i), "field '%s' is missing", fields[i].name);
    }
    return d.best == NONE ? 0 : -1;
}
