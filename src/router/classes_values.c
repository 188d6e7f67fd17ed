/* classes_values: the values of the policy classes' keys, each checked as strictly as cfgfile
 * checks a setting, and the one message that names a bad one (see classes_impl.h). */
#include "classes_impl.h"
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
/* What a rule's model must be. */
#define RC_MODEL_WHAT "a model name (1 to 255 bytes, no control characters)"

static const char *const policies[] = {"fcfs", "wspt"};

int rc_fail(struct rc_parse *p, int line, int column, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    cfgfile_verror(p->err, p->errlen, p->name, line, column, fmt, ap);
    va_end(ap);
    return -1;
}

const char *rc_kind(const yaml_event_t *ev)
{
    if (ev->type == YAML_MAPPING_START_EVENT)
        return "a mapping";
    return ev->type == YAML_SEQUENCE_START_EVENT ? "a sequence" : "a scalar";
}

struct rc_at rc_mark(yaml_mark_t m)
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

/* Checks that a value is a scalar without NUL bytes: 1 if it is null (or None, with RC_NONE),
 * 0 if not, -1 with the message "key: must be WHAT, found ..." otherwise. */
int rc_scalar(struct rc_parse *p, const yaml_event_t *ev, const char *key, const char *what,
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
int rc_root_value(struct rc_parse *p, const struct rc_frame *f, const yaml_event_t *ev)
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

int rc_class_value(struct rc_parse *p, const struct rc_frame *f, const yaml_event_t *ev)
{
    struct router_classes *o = p->out;
    struct rclass *c = &o->c[o->n - 1];
    const char *key = rc_class_keys[f->key];
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

int rc_rule_value(struct rc_parse *p, const struct rc_frame *f, const yaml_event_t *ev)
{
    struct router_classes *o = p->out;
    struct rrule *rule = &o->rules[o->nrules - 1];
    char name[ROUTER_CLASS_NAME_MAX + 1];
    const char *s;
    size_t len;
    int idx = 0;

    switch (f->key) {
    case K_BY:
        if (rc_word(p, ev, "by", rc_rule_kinds, RC_N(rc_rule_kinds),
                    "header, model or prompt_tokens", RC_REQUIRED, &idx) != 0)
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

int rc_bucket_value(struct rc_parse *p, const struct rc_frame *f, const yaml_event_t *ev)
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
