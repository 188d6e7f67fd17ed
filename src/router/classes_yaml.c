/* classes_yaml: the policy classes read from the router's config file (see classes.h); each
 * key's value is classes_values.c's.
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
#include "classes_impl.h"
#include "config/cfgfile.h"
#include "util/xmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static const char *const root_keys[] = {ROUTER_CLASSES_KEY, ROUTER_DEFAULT_CLASS_KEY,
                                        ROUTER_CLASS_RULES_KEY};
const char *const rc_class_keys[] = {"name",
                                     "quantum",
                                     "queue_policy",
                                     "prefill_busy_threshold",
                                     "prefill_busy_threshold_frac",
                                     "decode_busy_threshold",
                                     "request_queue_limit_per_worker",
                                     "queue_timeout_ms"};
static const char *const rule_keys[] = {"by", "model", "class", "buckets"};
static const char *const bucket_keys[] = {"min_tokens", "class"};
const char *const rc_rule_kinds[RRULE_TOKENS + 1] = {"header", "model", "prompt_tokens"};

/* The keys of a mapping context, and what its items are called in messages. */
struct rc_schema {
    const char *const *keys;
    size_t nkeys;
    const char *what; /* "a policy class" */
};

static const struct rc_schema schemas[] = {
    [RC_ROOT] = {root_keys, RC_N(root_keys), "the file"},
    [RC_CLASS] = {rc_class_keys, RC_N(rc_class_keys), "a policy class"},
    [RC_RULE] = {rule_keys, RC_N(rule_keys), "a rule"},
    [RC_BUCKET] = {bucket_keys, RC_N(bucket_keys), "a bucket"},
};

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
int rc_sequence(struct rc_parse *p, const yaml_event_t *ev, const char *key, const char *what,
                enum rc_ctx ctx, enum rc_nulls nulls)
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
    const char *kind = rc_rule_kinds[r->kind];
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
