/* classes_impl: the state of the policy classes' YAML reader, shared by classes_yaml.c (the
 * walk over the document: its collections, keys and what each mapping needs) and
 * classes_values.c (each key's value, and the messages that name a bad one). Not for anything
 * else: the rest of the router speaks classes.h. */
#ifndef ADMIT_ROUTER_CLASSES_IMPL_H
#define ADMIT_ROUTER_CLASSES_IMPL_H

#include "classes.h"

#include <stddef.h>
#include <yaml.h>

/* The deepest the schema nests: root mapping, rules, a rule, its buckets, a bucket. */
#define RC_DEPTH 5
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

/* The key names of a policy class and the kinds of rule, by their index above. */
extern const char *const rc_class_keys[];
extern const char *const rc_rule_kinds[RRULE_TOKENS + 1];

#define RC_N(a) (sizeof(a) / sizeof((a)[0]))

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

/* How a value may be null (YAML's null: empty, ~ or null). */
enum rc_nulls {
    RC_REQUIRED, /* never: the key has no default */
    RC_DEFAULT,  /* null leaves the default, as in the flat settings */
    RC_NONE      /* null, None and none mean unset, as the flat thresholds */
};

/* ---- classes_values.c: values -------------------------------------------------------------- */

/** writes "name:line:column: message"; returns -1 so that callers can `return rc_fail(...)` */
__attribute__((format(printf, 4, 5))) int rc_fail(struct rc_parse *p, int line, int column,
                                                  const char *fmt, ...);
/** what a node is, for messages: "a mapping", "a sequence" or "a scalar" */
const char *rc_kind(const yaml_event_t *ev);
/** a libyaml mark as a 1-based position */
struct rc_at rc_mark(yaml_mark_t m);
/** checks that a value is a scalar without NUL bytes: 1 if it is null (or None, with RC_NONE),
 *  0 if not, -1 with the message "key: must be WHAT, found ..." otherwise */
int rc_scalar(struct rc_parse *p, const yaml_event_t *ev, const char *key, const char *what,
              enum rc_nulls nulls);
/** the value of a root key of f (a setting that is not ours is let through): 0 or -1 */
int rc_root_value(struct rc_parse *p, const struct rc_frame *f, const yaml_event_t *ev);
/** the value of a key of the policy class being read: 0 or -1 */
int rc_class_value(struct rc_parse *p, const struct rc_frame *f, const yaml_event_t *ev);
/** the value of a key of the rule being read: 0 or -1 */
int rc_rule_value(struct rc_parse *p, const struct rc_frame *f, const yaml_event_t *ev);
/** the value of a key of the bucket being read: 0 or -1 */
int rc_bucket_value(struct rc_parse *p, const struct rc_frame *f, const yaml_event_t *ev);

/* ---- classes_yaml.c: the walk -------------------------------------------------------------- */

/** a value that must be a sequence of the schema: pushed (0), or null (1), or an error (-1) */
int rc_sequence(struct rc_parse *p, const yaml_event_t *ev, const char *key, const char *what,
                enum rc_ctx ctx, enum rc_nulls nulls);

#endif
