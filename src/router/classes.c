/* classes: the policy classes of the router's config file (see classes.h).
 *
 * cfgfile checks the file first, skipping the three keys of this module: what reaches the walk
 * below is then well-formed YAML, one document, a root mapping (or nothing) of unique scalar
 * keys, flat settings with single values, no anchors, aliases or custom tags, no nesting
 * deeper than CFGFILE_MAX_DEPTH. The walk reads the same text again with libyaml's event API
 * (cfgfile_walk, so the positions are cfgfile's) and keeps a stack of frames, one per open
 * collection of the schema (root > rules > rule > buckets > bucket at the deepest): a node
 * that does not fit the frame on top is refused at its own event, so the stack never grows
 * past RC_DEPTH and nothing recurses. Every check that one node can settle is made at that
 * node; what needs a whole mapping (required keys, keys a kind of rule does not take) at the
 * mapping's end; what needs the whole file (the class a name refers to, which may be defined
 * further down) once the walk is over, from the references kept on the way.
 *
 * Invariants: cfgfile_walk deletes every event once it is handled and releases the parser; on
 * any error the references and whatever *out holds are released on the one exit path and *out
 * is left empty; the message is written once, by rc_fail (or cfgfile), at the first error. */
#include "classes.h"
#include "config/cfgfile.h"
#include "util/xmalloc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* libyaml's resolved prefix of the `!!` tags. */
#define RC_TAG "tag:yaml.org,2002:"
/* The deepest the schema nests: root mapping, rules, a rule, its buckets, a bucket. */
#define RC_DEPTH 5
/* What a rule's model must be. */
#define RC_MODEL_WHAT "a model name (1 to 255 bytes, no control characters)"
/* Most keys one mapping of the schema has (a class's). */
#define RC_KEYS_MAX 8

/* A 0-based libyaml mark as the 1-based line, column arguments of rc_fail. The text is at most
 * CFGFILE_MAX_BYTES, so both fit an int. */
#define RC_AT(m) (int) (m).line + 1, (int) (m).column + 1

/* What an open collection is. */
enum rc_ctx { RC_ROOT, RC_CLASSES, RC_CLASS, RC_RULES, RC_RULE, RC_BUCKETS, RC_BUCKET };

/* The keys of each mapping: their index is their bit in rc_frame.seen. */
enum { K_CLASSES, K_DEFAULT, K_RULES };
enum { K_NAME, K_QUANTUM, K_POLICY, K_PREFILL, K_PREFILL_FRAC, K_DECODE, K_LIMIT, K_TIMEOUT };
enum { K_BY, K_MODEL, K_CLASS, K_BUCKETS };
enum { K_MIN_TOKENS, K_BUCKET_CLASS };

static const char *const root_keys[] = {ROUTER_CLASSES_KEY, ROUTER_DEFAULT_CLASS_KEY,
                                        ROUTER_CLASS_RULES_KEY};
static const char *const class_keys[] = {"name",
                                         "quantum",
                                         "queue_policy",
                                         "prefill_busy_threshold",
                                         "prefill_busy_threshold_frac",
                                         "decode_busy_threshold",
                                         "request_queue_limit_per_worker",
                                         "queue_timeout_ms"};
static const char *const rule_keys[] = {"by", "model", "class", "buckets"};
static const char *const bucket_keys[] = {"min_tokens", "class"};
static const char *const rule_kinds[] = {"header", "model", "prompt_tokens"};
static const char *const policies[] = {"fcfs", "wspt"};

#define RC_N(a) (sizeof(a) / sizeof((a)[0]))

/* The keys of a mapping context, and what its items are called in messages. */
struct rc_schema {
    const char *const *keys;
    size_t nkeys;
    const char *what; /* "a policy class" */
};

static const struct rc_schema schemas[] = {
    [RC_ROOT] = {root_keys, RC_N(root_keys), "the file"},
    [RC_CLASS] = {class_keys, RC_N(class_keys), "a policy class"},
    [RC_RULE] = {rule_keys, RC_N(rule_keys), "a rule"},
    [RC_BUCKET] = {bucket_keys, RC_N(bucket_keys), "a bucket"},
};

struct rc_at {
    int line, column;
};

struct rc_frame {
    enum rc_ctx ctx;
    int want_value;                 /* a mapping: the next node is the value of key */
    int key;                        /* that key, an index into its schema; -1: not ours */
    unsigned seen;                  /* the keys given, a bit each */
    struct rc_at at;                /* where the collection starts */
    struct rc_at keys[RC_KEYS_MAX]; /* where each given key is */
};

/* A class name used where the classes may not all be known yet: resolved after the walk. */
struct rc_ref {
    int rule;        /* -1: default_policy_class */
    int bucket;      /* -1: the rule's own class */
    const char *key; /* the key that names it, for the message */
    char name[ROUTER_CLASS_NAME_MAX + 1];
    struct rc_at at;
};

struct rc_parse {
    const char *name;
    char *err;
    size_t errlen;
    struct router_classes *out;
    struct rc_frame f[RC_DEPTH];
    size_t depth;
    struct rc_at name_at[ROUTER_CLASSES_MAX]; /* where each class's name is */
    struct rc_ref *refs;                      /* in file order */
    size_t nrefs, caprefs;
    unsigned given;           /* root keys with a value other than null, a bit each */
    struct rc_at given_at[3]; /* where those keys are */
};

/* Writes "name:line:column: message"; returns -1 so that callers can `return rc_fail(...)`. */
__attribute__((format(printf, 4, 5))) static int rc_fail(struct rc_parse *p, int line, int column,
                                                         const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    cfgfile_verror(p->err, p->errlen, p->name, line, column, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *rc_kind(const yaml_event_t *ev)
{
    if (ev->type == YAML_MAPPING_START_EVENT)
        return "a mapping";
    return ev->type == YAML_SEQUENCE_START_EVENT ? "a sequence" : "a scalar";
}

static struct rc_at rc_mark(yaml_mark_t m)
{
    return (struct rc_at){RC_AT(m)};
}

/* The scalar's text, quotable in a message. */
static const char *rc_show(char *out, const yaml_event_t *ev)
{
    return cfgfile_show(out, (const char *) ev->data.scalar.value, ev->data.scalar.length);
}

/* Whether the scalar can be a number in YAML: plain, and untagged or tagged !!int or !!float.
 * "4096" quoted is a string, as YAML and Dynamo's reader have it. */
static int rc_numeric(const yaml_event_t *ev)
{
    const char *tag = (const char *) ev->data.scalar.tag;

    return ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           (tag == NULL || strcmp(tag, RC_TAG "int") == 0 || strcmp(tag, RC_TAG "float") == 0);
}

/* How a value may be null (YAML's null: empty, ~ or null). */
enum rc_nulls {
    RC_REQUIRED, /* never: the key has no default */
    RC_DEFAULT,  /* null leaves the default, as in the flat settings */
    RC_NONE      /* null, None and none mean unset, as the flat thresholds */
};

/* Checks that a value is a scalar without NUL bytes: 1 if it is null (or None, with RC_NONE),
 * 0 if not, -1 with the message "key: must be WHAT, found ..." otherwise. */
static int rc_scalar(struct rc_parse *p, const yaml_event_t *ev, const char *key, const char *what,
                     enum rc_nulls nulls)
{
    const char *s;
    int plain, null;

    if (ev->type != YAML_SCALAR_EVENT)
        return rc_fail(p, RC_AT(ev->start_mark), "%s: must be %s, found %s", key, what,
                       rc_kind(ev));
    s = (const char *) ev->data.scalar.value;
    plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (memchr(s, '\0', ev->data.scalar.length))
        return rc_fail(p, RC_AT(ev->start_mark), "%s: the value contains a NUL character", key);
    null = cfgfile_is_null(s, (const char *) ev->data.scalar.tag, plain);
    if (null < 0)
        return rc_fail(p, RC_AT(ev->start_mark), "a !!null value must be empty, '~' or 'null'");
    if (!null && nulls == RC_NONE && plain && ev->data.scalar.tag == NULL)
        null = strcmp(s, "None") == 0 || strcmp(s, "none") == 0;
    if (null && nulls == RC_REQUIRED)
        return rc_fail(p, RC_AT(ev->start_mark), "%s: must be %s, not null", key, what);
    return null;
}

/* "key: 'text' must be WHAT", or "... is a string: must be WHAT" for a quoted number. */
static int rc_bad(struct rc_parse *p, const yaml_event_t *ev, const char *key, const char *what,
                  int number)
{
    char shown[CFGFILE_SHOW_BUF];

    if (number && !rc_numeric(ev))
        return rc_fail(p, RC_AT(ev->start_mark),
                       "%s: '%s' is a string (quoted or tagged): must be %s", key,
                       rc_show(shown, ev), what);
    return rc_fail(p, RC_AT(ev->start_mark), "%s: '%s' must be %s", key, rc_show(shown, ev), what);
}

/* An integer in [lo, hi] into *v: digits only (no sign, no 0x, no 1e3, no 1_000). 1 for a null
 * as rc_scalar allows it (*v unchanged), 0 when set, -1 on error. */
static int rc_integer(struct rc_parse *p, const yaml_event_t *ev, const char *key, int64_t lo,
                      int64_t hi, enum rc_nulls nulls, int64_t *v)
{
    char what[96];
    const char *s;
    int64_t x = 0;
    int r;

    snprintf(what, sizeof what, "an integer from %lld to %lld%s", (long long) lo, (long long) hi,
             nulls == RC_NONE ? ", or None" : "");
    r = rc_scalar(p, ev, key, what, nulls);
    if (r != 0)
        return r;
    s = (const char *) ev->data.scalar.value;
    if (!rc_numeric(ev) || *s == '\0')
        return rc_bad(p, ev, key, what, 1);
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || x > (INT64_MAX - 9) / 10)
            return rc_bad(p, ev, key, what, 1);
        x = x * 10 + (*s - '0');
    }
    if (x < lo || x > hi)
        return rc_bad(p, ev, key, what, 1);
    *v = x;
    return 0;
}

/* A finite number in [0, hi] (hi may be INFINITY) into *v; as rc_integer otherwise. Decimal only:
 * strtod would also take hex, inf and nan, which are no way to write a threshold. */
static int rc_real(struct rc_parse *p, const yaml_event_t *ev, const char *key, double hi,
                   enum rc_nulls nulls, double *v)
{
    const char *what = isinf(hi) ? "a number >= 0, or None" : "a number from 0 to 1, or None";
    const char *s;
    char *end;
    double x;
    int r = rc_scalar(p, ev, key, what, nulls);

    if (r != 0)
        return r;
    s = (const char *) ev->data.scalar.value;
    /* A sign first is refused too: a negative one is out of range, and "+" is not needed. */
    if (!rc_numeric(ev) || strchr("+-", *s) || s[strspn(s, "0123456789.eE+-")] != '\0')
        return rc_bad(p, ev, key, what, 1);
    x = strtod(s, &end);
    if (*end != '\0' || !isfinite(x) || x < 0 || x > hi)
        return rc_bad(p, ev, key, what, 1);
    *v = x;
    return 0;
}

/* The index of the word the value is, one of n; as rc_integer otherwise. */
static int rc_word(struct rc_parse *p, const yaml_event_t *ev, const char *key,
                   const char *const *words, size_t n, const char *what, enum rc_nulls nulls,
                   int *idx)
{
    int r = rc_scalar(p, ev, key, what, nulls);

    if (r != 0)
        return r;
    for (size_t i = 0; i < n; i++)
        if (strcmp((const char *) ev->data.scalar.value, words[i]) == 0) {
            *idx = (int) i;
            return 0;
        }
    return rc_bad(p, ev, key, what, 0);
}

/* A class name into out: 1 to ROUTER_CLASS_NAME_MAX of [A-Za-z0-9_.-]; as rc_integer. */
static int rc_name(struct rc_parse *p, const yaml_event_t *ev, const char *key, enum rc_nulls nulls,
                   char *out)
{
    static const char what[] = "a class name: 1 to 63 of A-Z, a-z, 0-9, '_', '.' and '-'";
    static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-";
    const char *s;
    size_t len;
    int r = rc_scalar(p, ev, key, what, nulls);

    if (r != 0)
        return r;
    s = (const char *) ev->data.scalar.value;
    len = ev->data.scalar.length;
    if (len == 0 || len > ROUTER_CLASS_NAME_MAX || strspn(s, ok) != len)
        return rc_bad(p, ev, key, what, 0);
    memcpy(out, s, len + 1);
    return 0;
}

/* Keeps a class name for the end of the walk. */
static void rc_ref(struct rc_parse *p, int rule, int bucket, const char *key, const char *name,
                   const yaml_event_t *ev)
{
    struct rc_ref *r;

    /* Doubling: a file may name classes some 4000 times (64 rules of 64 buckets). */
    if (p->nrefs == p->caprefs) {
        p->caprefs = p->caprefs ? 2 * p->caprefs : 16;
        p->refs = xrealloc(p->refs, p->caprefs * sizeof *p->refs);
    }
    r = &p->refs[p->nrefs++];
    r->rule = rule;
    r->bucket = bucket;
    r->key = key;
    strcpy(r->name, name);
    r->at = rc_mark(ev->start_mark);
}

static int rc_push(struct rc_parse *p, enum rc_ctx ctx, const yaml_event_t *ev)
{
    struct rc_frame *f;

    if (p->depth == RC_DEPTH) /* the schema cannot get here: a frame's children are known */
        return rc_fail(p, RC_AT(ev->start_mark), "unexpected %s", rc_kind(ev));
    f = &p->f[p->depth++];
    memset(f, 0, sizeof *f);
    f->ctx = ctx;
    f->key = -1;
    f->at = rc_mark(ev->start_mark);
    return 0;
}

/* A value that must be a sequence of the schema: pushed, or null (returns 1), or an error. */
static int rc_sequence(struct rc_parse *p, const yaml_event_t *ev, const char *key,
                       const char *what, enum rc_ctx ctx, enum rc_nulls nulls)
{
    int r;

    if (ev->type == YAML_SEQUENCE_START_EVENT)
        return rc_push(p, ctx, ev);
    r = ev->type == YAML_SCALAR_EVENT ? rc_scalar(p, ev, key, what, nulls) : 0;
    if (r != 0)
        return r; /* null, or an error */
    return rc_fail(p, RC_AT(ev->start_mark), "%s: must be %s, found %s", key, what, rc_kind(ev));
}

/* An item of a sequence of the schema: it must be a mapping, and there may be only max. */
static int rc_item(struct rc_parse *p, const yaml_event_t *ev, const char *key, size_t n,
                   size_t max, enum rc_ctx ctx)
{
    if (ev->type != YAML_MAPPING_START_EVENT)
        return rc_fail(p, RC_AT(ev->start_mark), "%s: an item must be %s (a mapping), found %s",
                       key, schemas[ctx].what, rc_kind(ev));
    if (n == max)
        return rc_fail(p, RC_AT(ev->start_mark), "%s: more than %zu items", key, max);
    return rc_push(p, ctx, ev);
}

static int rc_class_start(struct rc_parse *p, const yaml_event_t *ev)
{
    struct router_classes *o = p->out;
    struct rclass *c;

    if (rc_item(p, ev, ROUTER_CLASSES_KEY, o->n, ROUTER_CLASSES_MAX, RC_CLASS) != 0)
        return -1;
    o->c = xrealloc(o->c, (o->n + 1) * sizeof *o->c);
    c = &o->c[o->n++];
    memset(c, 0, sizeof *c);
    busy_thresholds_unset(&c->t);
    c->policy = RCLASS_FCFS;
    return 0;
}

static int rc_rule_start(struct rc_parse *p, const yaml_event_t *ev)
{
    struct router_classes *o = p->out;
    struct rrule *r;

    if (rc_item(p, ev, ROUTER_CLASS_RULES_KEY, o->nrules, ROUTER_RULES_MAX, RC_RULE) != 0)
        return -1;
    o->rules = xrealloc(o->rules, (o->nrules + 1) * sizeof *o->rules);
    r = &o->rules[o->nrules++];
    memset(r, 0, sizeof *r);
    r->cls = -1;
    return 0;
}

static int rc_bucket_start(struct rc_parse *p, const yaml_event_t *ev)
{
    struct rrule *r = &p->out->rules[p->out->nrules - 1];

    if (rc_item(p, ev, "buckets", r->nbuckets, ROUTER_BUCKETS_MAX, RC_BUCKET) != 0)
        return -1;
    r->buckets = xrealloc(r->buckets, (r->nbuckets + 1) * sizeof *r->buckets);
    r->buckets[r->nbuckets++] = (struct rbucket){-1, -1};
    return 0;
}

/* A key of a mapping of the schema: known (the root's other keys are settings, not ours),
 * and given once (cfgfile has checked the root's). */
static int rc_key(struct rc_parse *p, struct rc_frame *f, const yaml_event_t *ev)
{
    const struct rc_schema *sc = &schemas[f->ctx];
    char shown[CFGFILE_SHOW_BUF], list[256];
    const char *s;
    size_t len, o = 0;

    if (ev->type != YAML_SCALAR_EVENT)
        return rc_fail(p, RC_AT(ev->start_mark), "expected a key of %s, found %s", sc->what,
                       rc_kind(ev));
    s = (const char *) ev->data.scalar.value;
    len = ev->data.scalar.length;
    f->want_value = 1;
    for (size_t i = 0; i < sc->nkeys; i++) {
        if (strlen(sc->keys[i]) != len || memcmp(sc->keys[i], s, len) != 0)
            continue;
        if (f->seen & (1u << i))
            return rc_fail(p, RC_AT(ev->start_mark), "duplicate key '%s' (first at %d:%d)",
                           sc->keys[i], f->keys[i].line, f->keys[i].column);
        f->seen |= 1u << i;
        f->keys[i] = rc_mark(ev->start_mark);
        f->key = (int) i;
        return 0;
    }
    f->key = -1;
    if (f->ctx == RC_ROOT)
        return 0;
    for (size_t i = 0; i < sc->nkeys; i++)
        o += (size_t) snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", sc->keys[i]);
    return rc_fail(p, RC_AT(ev->start_mark), "unknown key '%s' in %s (%s)",
                   cfgfile_show(shown, s, len), sc->what, list);
}

static int rc_root_value(struct rc_parse *p, const struct rc_frame *f, const yaml_event_t *ev)
{
    char name[ROUTER_CLASS_NAME_MAX + 1];
    int r;

    switch (f->key) {
    case K_CLASSES:
        r = rc_sequence(p, ev, ROUTER_CLASSES_KEY, "a sequence of policy classes", RC_CLASSES,
                        RC_DEFAULT);
        break;
    case K_RULES:
        r = rc_sequence(p, ev, ROUTER_CLASS_RULES_KEY, "a sequence of rules", RC_RULES, RC_DEFAULT);
        break;
    case K_DEFAULT:
        r = rc_name(p, ev, ROUTER_DEFAULT_CLASS_KEY, RC_DEFAULT, name);
        if (r == 0)
            rc_ref(p, -1, -1, ROUTER_DEFAULT_CLASS_KEY, name, ev);
        break;
    default: /* a setting: cfgfile has made sure it is a single value */
        return ev->type == YAML_SCALAR_EVENT
                   ? 0
                   : rc_fail(p, RC_AT(ev->start_mark), "unexpected %s", rc_kind(ev));
    }
    if (r == 0) {
        p->given |= 1u << f->key;
        p->given_at[f->key] = f->keys[f->key];
    }
    return r < 0 ? -1 : 0;
}

static int rc_class_value(struct rc_parse *p, const struct rc_frame *f, const yaml_event_t *ev)
{
    struct router_classes *o = p->out;
    struct rclass *c = &o->c[o->n - 1];
    const char *key = class_keys[f->key];
    char shown[CFGFILE_SHOW_BUF];
    int64_t v = 0;
    int r, idx = 0;

    switch (f->key) {
    case K_NAME:
        if (rc_name(p, ev, key, RC_REQUIRED, c->name) != 0)
            return -1;
        for (size_t i = 0; i + 1 < o->n; i++)
            if (strcmp(o->c[i].name, c->name) == 0)
                return rc_fail(p, RC_AT(ev->start_mark),
                               "name: duplicate policy class '%s' (first at %d:%d)",
                               rc_show(shown, ev), p->name_at[i].line, p->name_at[i].column);
        p->name_at[o->n - 1] = rc_mark(ev->start_mark);
        return 0;
    case K_QUANTUM:
        return rc_integer(p, ev, key, 1, ROUTER_CLASS_QUANTUM_MAX, RC_REQUIRED, &c->quantum);
    case K_POLICY:
        r = rc_word(p, ev, key, policies, RC_N(policies), "fcfs or wspt", RC_DEFAULT, &idx);
        if (r == 0)
            c->policy = idx == 0 ? RCLASS_FCFS : RCLASS_WSPT;
        return r < 0 ? -1 : 0;
    case K_PREFILL:
        r = rc_integer(p, ev, key, 0, ROUTER_CLASS_TOKENS_MAX, RC_NONE,
                       &c->t.active_prefill_tokens_threshold);
        if (r == 1)
            c->t.active_prefill_tokens_threshold = -1;
        return r < 0 ? -1 : 0;
    case K_PREFILL_FRAC:
    case K_DECODE: {
        double *d = f->key == K_DECODE ? &c->t.active_decode_blocks_threshold
                                       : &c->t.active_prefill_tokens_threshold_frac;

        r = rc_real(p, ev, key, f->key == K_DECODE ? 1.0 : INFINITY, RC_NONE, d);
        if (r == 1)
            *d = NAN;
        return r < 0 ? -1 : 0;
    }
    default: /* K_LIMIT, K_TIMEOUT */
        r = rc_integer(p, ev, key, 0,
                       f->key == K_LIMIT ? ROUTER_CLASS_LIMIT_MAX : ROUTER_CLASS_TIMEOUT_MAX,
                       RC_DEFAULT, &v);
        if (r == 0 && f->key == K_LIMIT)
            c->limit_per_worker = (unsigned) v;
        else if (r == 0)
            c->queue_timeout_ms = (unsigned) v;
        return r < 0 ? -1 : 0;
    }
}

static int rc_rule_value(struct rc_parse *p, const struct rc_frame *f, const yaml_event_t *ev)
{
    struct router_classes *o = p->out;
    struct rrule *rule = &o->rules[o->nrules - 1];
    char name[ROUTER_CLASS_NAME_MAX + 1];
    const char *s;
    size_t len;
    int idx = 0;

    switch (f->key) {
    case K_BY:
        if (rc_word(p, ev, "by", rule_kinds, RC_N(rule_kinds), "header, model or prompt_tokens",
                    RC_REQUIRED, &idx) != 0)
            return -1;
        rule->kind = idx == 0 ? RRULE_HEADER : idx == 1 ? RRULE_MODEL : RRULE_TOKENS;
        return 0;
    case K_MODEL:
        if (rc_scalar(p, ev, "model", RC_MODEL_WHAT, RC_REQUIRED) != 0)
            return -1;
        s = (const char *) ev->data.scalar.value;
        len = ev->data.scalar.length;
        for (size_t i = 0; i < len; i++)
            if ((unsigned char) s[i] < 0x20 || s[i] == 0x7f)
                len = 0; /* a control character: no model is named so */
        if (len == 0 || len >= sizeof rule->model)
            return rc_bad(p, ev, "model", RC_MODEL_WHAT, 0);
        memcpy(rule->model, s, len + 1);
        return 0;
    case K_CLASS:
        if (rc_name(p, ev, "class", RC_REQUIRED, name) != 0)
            return -1;
        rc_ref(p, (int) o->nrules - 1, -1, "class", name, ev);
        return 0;
    default: /* K_BUCKETS */
        return rc_sequence(p, ev, "buckets", "a sequence of buckets", RC_BUCKETS, RC_REQUIRED);
    }
}

static int rc_bucket_value(struct rc_parse *p, const struct rc_frame *f, const yaml_event_t *ev)
{
    struct router_classes *o = p->out;
    struct rrule *rule = &o->rules[o->nrules - 1];
    struct rbucket *b = &rule->buckets[rule->nbuckets - 1];
    char name[ROUTER_CLASS_NAME_MAX + 1];

    if (f->key == K_BUCKET_CLASS) {
        if (rc_name(p, ev, "class", RC_REQUIRED, name) != 0)
            return -1;
        rc_ref(p, (int) o->nrules - 1, (int) rule->nbuckets - 1, "class", name, ev);
        return 0;
    }
    if (rc_integer(p, ev, "min_tokens", 0, ROUTER_CLASS_TOKENS_MAX, RC_REQUIRED, &b->min_tokens) !=
        0)
        return -1;
    /* The floors are checked in file order: a bucket's floor against the one before it. */
    if (rule->nbuckets == 1 && b->min_tokens != 0)
        return rc_fail(p, RC_AT(ev->start_mark),
                       "min_tokens: the first bucket must start at 0, not %lld",
                       (long long) b->min_tokens);
    if (rule->nbuckets > 1 && b->min_tokens <= b[-1].min_tokens)
        return rc_fail(p, RC_AT(ev->start_mark),
                       "min_tokens: %lld must be more than the previous bucket's %lld (the "
                       "floors increase strictly)",
                       (long long) b->min_tokens, (long long) b[-1].min_tokens);
    return 0;
}

static int rc_before(const struct rc_at *a, const struct rc_at *b)
{
    return a->line < b->line || (a->line == b->line && a->column < b->column);
}

/* The first (in file order) of the keys in mask that f was given, or -1. */
static int rc_first(const struct rc_frame *f, unsigned mask)
{
    int best = -1;

    for (int i = 0; i < RC_KEYS_MAX; i++)
        if ((f->seen & mask & (1u << i)) && (best < 0 || rc_before(&f->keys[i], &f->keys[best])))
            best = i;
    return best;
}

/* A rule is complete: its kind has the keys it needs and no others. */
static int rc_rule_end(struct rc_parse *p, const struct rc_frame *f)
{
    static const unsigned takes[] = {
        [RRULE_HEADER] = 1u << K_BY,
        [RRULE_MODEL] = 1u << K_BY | 1u << K_MODEL | 1u << K_CLASS,
        [RRULE_TOKENS] = 1u << K_BY | 1u << K_BUCKETS,
    };
    const struct rrule *r = &p->out->rules[p->out->nrules - 1];
    const char *kind = rule_kinds[r->kind];
    int k;

    if (!(f->seen & (1u << K_BY)))
        return rc_fail(p, f->at.line, f->at.column,
                       "a rule needs 'by' (header, model or prompt_tokens)");
    k = rc_first(f, ~takes[r->kind]);
    if (k >= 0)
        return rc_fail(p, f->keys[k].line, f->keys[k].column, "a %s rule takes no '%s'", kind,
                       rule_keys[k]);
    for (k = 0; k < (int) RC_N(rule_keys); k++)
        if ((takes[r->kind] & (1u << k)) && !(f->seen & (1u << k)))
            return rc_fail(p, f->at.line, f->at.column, "a %s rule needs '%s'", kind, rule_keys[k]);
    return 0;
}

/* The end of a collection: what its mapping lacks, or an empty list of buckets. */
static int rc_end(struct rc_parse *p)
{
    const struct rc_frame *f;
    const struct router_classes *o = p->out;

    if (p->depth == 0) /* cfgfile has balanced the document */
        return 0;
    f = &p->f[--p->depth];
    switch (f->ctx) {
    case RC_CLASS:
        if (!(f->seen & (1u << K_NAME)))
            return rc_fail(p, f->at.line, f->at.column, "a policy class needs 'name'");
        if (!(f->seen & (1u << K_QUANTUM)))
            return rc_fail(p, f->at.line, f->at.column, "policy class '%s' needs 'quantum'",
                           o->c[o->n - 1].name);
        return 0;
    case RC_RULE:
        return rc_rule_end(p, f);
    case RC_BUCKETS:
        if (o->rules[o->nrules - 1].nbuckets == 0)
            return rc_fail(p, f->at.line, f->at.column, "buckets: needs at least one bucket");
        return 0;
    case RC_BUCKET:
        if (!(f->seen & (1u << K_MIN_TOKENS)))
            return rc_fail(p, f->at.line, f->at.column, "a bucket needs 'min_tokens'");
        if (!(f->seen & (1u << K_BUCKET_CLASS)))
            return rc_fail(p, f->at.line, f->at.column, "a bucket needs 'class'");
        return 0;
    default:
        return 0;
    }
}

/* A node: an item of a sequence of the schema, a key, or a value. */
static int rc_node(struct rc_parse *p, const yaml_event_t *ev)
{
    struct rc_frame *f;

    if (p->depth == 0) /* the root: cfgfile has made sure it is a mapping or nothing */
        return ev->type == YAML_MAPPING_START_EVENT ? rc_push(p, RC_ROOT, ev) : 0;
    f = &p->f[p->depth - 1];
    switch (f->ctx) {
    case RC_CLASSES:
        return rc_class_start(p, ev);
    case RC_RULES:
        return rc_rule_start(p, ev);
    case RC_BUCKETS:
        return rc_bucket_start(p, ev);
    default:
        break;
    }
    if (!f->want_value)
        return rc_key(p, f, ev);
    f->want_value = 0;
    switch (f->ctx) {
    case RC_ROOT:
        return rc_root_value(p, f, ev);
    case RC_CLASS:
        return rc_class_value(p, f, ev);
    case RC_RULE:
        return rc_rule_value(p, f, ev);
    default:
        return rc_bucket_value(p, f, ev);
    }
}

/* After the walk: class names resolved, the defaults of what the file left out. */
static int rc_finish(struct rc_parse *p)
{
    struct router_classes *o = p->out;
    const unsigned needs = 1u << K_DEFAULT | 1u << K_RULES;

    if (o->n == 0 && (p->given & needs)) {
        /* The first of the two in the file. */
        int k =
            (p->given & needs) == needs
                ? (rc_before(&p->given_at[K_RULES], &p->given_at[K_DEFAULT]) ? K_RULES : K_DEFAULT)
                : (p->given & (1u << K_RULES) ? K_RULES : K_DEFAULT);

        return rc_fail(p, p->given_at[k].line, p->given_at[k].column,
                       "%s needs at least one class in " ROUTER_CLASSES_KEY, root_keys[k]);
    }
    for (size_t i = 0; i < p->nrefs; i++) {
        const struct rc_ref *r = &p->refs[i];
        int c = router_classes_find(o, r->name);

        if (c < 0)
            return rc_fail(p, r->at.line, r->at.column, "%s: unknown policy class '%s'", r->key,
                           r->name);
        if (r->rule < 0)
            o->default_cls = c;
        else if (r->bucket < 0)
            o->rules[r->rule].cls = c;
        else
            o->rules[r->rule].buckets[r->bucket].cls = c;
    }
    if (o->n == 0)
        return 0;
    if (!(p->given & (1u << K_DEFAULT)))
        o->default_cls = 0;
    if (!(p->given & (1u << K_RULES))) {
        o->rules = xcalloc(1, sizeof *o->rules);
        o->rules[0].kind = RRULE_HEADER;
        o->rules[0].cls = -1;
        o->nrules = 1;
    }
    return 0;
}

/* A cfgfile_event_fn. */
static int rc_event(void *arg, const yaml_event_t *ev)
{
    struct rc_parse *p = arg;

    switch (ev->type) {
    case YAML_SCALAR_EVENT:
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        return rc_node(p, ev);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        return rc_end(p);
    case YAML_ALIAS_EVENT: /* cfgfile refuses them first */
        return rc_fail(p, RC_AT(ev->start_mark), "anchors and aliases are not allowed");
    default:
        return 0;
    }
}

int router_classes_parse(const char *name, const char *text, size_t len, struct router_classes *out,
                         char *err, size_t errlen)
{
    struct rc_parse p = {.name = name, .err = err, .errlen = errlen, .out = out};
    int rc;

    memset(out, 0, sizeof *out);
    out->default_cls = -1;
    rc = cfgfile_parse_skip(name, text, len, root_keys, RC_N(root_keys), NULL, NULL, err, errlen);
    if (rc == 0)
        rc = cfgfile_walk(name, text, len, rc_event, &p, err, errlen);
    if (rc == 0)
        rc = rc_finish(&p);
    free(p.refs);
    if (rc != 0)
        router_classes_free(out);
    return rc;
}

int router_classes_load(const char *path, struct router_classes *out, char *err, size_t errlen)
{
    char *text;
    size_t len;
    int rc;

    memset(out, 0, sizeof *out);
    out->default_cls = -1;
    rc = cfgfile_read(path, &text, &len, err, errlen);
    if (rc == 0)
        rc = router_classes_parse(path, text, len, out, err, errlen);
    free(text);
    return rc;
}

void router_classes_free(struct router_classes *c)
{
    for (size_t i = 0; i < c->nrules; i++)
        free(c->rules[i].buckets);
    free(c->rules);
    free(c->c);
    memset(c, 0, sizeof *c);
    c->default_cls = -1;
}

int router_classes_find(const struct router_classes *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->c[i].name, name) == 0)
            return (int) i;
    return -1;
}

/* The value of the first class header present with a value (blanks around it dropped). */
static int rc_header(const char *(*header)(void *arg, const char *name), void *arg, const char **v,
                     size_t *len)
{
    static const char *const names[] = {ROUTER_CLASS_HEADER, ROUTER_CLASS_HEADER_ALIAS};

    for (size_t i = 0; header != NULL && i < RC_N(names); i++) {
        const char *s = header(arg, names[i]);
        size_t n;

        if (s == NULL)
            continue;
        s += strspn(s, " \t");
        for (n = strlen(s); n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'); n--)
            continue;
        if (n > 0) {
            *v = s;
            *len = n;
            return 1;
        }
    }
    return 0;
}

/* The class of the highest floor at or below tokens (>= 0), or -1 when it is below them all. */
static int rc_bucket_of(const struct rrule *r, int64_t tokens)
{
    size_t lo = 0, hi = r->nbuckets; /* the answer is below hi, and lo - 1 is at or below */

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (r->buckets[mid].min_tokens <= tokens)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? -1 : r->buckets[lo - 1].cls;
}

int router_classes_classify(const struct router_classes *c,
                            const char *(*header)(void *arg, const char *name), void *arg,
                            const char *model, int64_t prompt_tokens)
{
    if (c == NULL || c->n == 0)
        return -1;
    for (size_t i = 0; i < c->nrules; i++) {
        const struct rrule *r = &c->rules[i];
        const char *v;
        size_t len;
        int k;

        switch (r->kind) {
        case RRULE_HEADER:
            if (!rc_header(header, arg, &v, &len))
                break;
            /* Named but unknown: the default class, as Dynamo's fallback, not the next rule. */
            for (k = 0; k < (int) c->n; k++)
                if (strlen(c->c[k].name) == len && memcmp(c->c[k].name, v, len) == 0)
                    return k;
            return c->default_cls;
        case RRULE_MODEL:
            if (model != NULL && strcmp(model, r->model) == 0)
                return r->cls;
            break;
        case RRULE_TOKENS:
            k = prompt_tokens >= 0 ? rc_bucket_of(r, prompt_tokens) : -1;
            if (k >= 0)
                return k;
            break;
        }
    }
    return c->default_cls;
}
