/* classes: admit-router's policy classes, from its YAML config file.
 *
 * A policy class is a queue of its own: its busy thresholds, its share of the dispatch (a
 * deficit round robin quantum, in prompt tokens), its order (first come first served, or
 * shortest prompt first), a bound on its length and a wait limit. Rules map a request to a
 * class by a header, its model or its prompt's size, as NVIDIA Dynamo's policy classes do
 * (research/router-queue.md §3); the router gives them the size Dynamo's do, the uncached
 * tokens (class_queue.h). They are three keys of the config file, the only ones that
 * are structures rather than single values, so they have no flag or variable:
 *
 *   policy_classes:                 # a sequence of classes; none = no queue
 *     - name: interactive           # required, unique, 1..63 of [A-Za-z0-9_.-]
 *       quantum: 4096               # required, 1..ROUTER_CLASS_QUANTUM_MAX
 *       queue_policy: fcfs          # fcfs (default) or wspt
 *       prefill_busy_threshold: 2048       # tokens, or None (default)
 *       prefill_busy_threshold_frac: 0.5   # >= 0, of the prefill budget, or None (default)
 *       decode_busy_threshold: 0.8         # 0..1 of kv_total_blocks, or None (default)
 *       request_queue_limit_per_worker: 64 # 0 (default) = unlimited
 *       queue_timeout_ms: 5000             # 0 (default) = none
 *   default_policy_class: batch     # default: the first class
 *   policy_class_rules:             # first match wins; else the default class
 *     - by: header                  # the default list when the key is absent
 *     - {by: model, model: NAME, class: CLASS}
 *     - {by: prompt_tokens, buckets: [{min_tokens: 0, class: A}, {min_tokens: 4096, class: B}]}
 *
 * The module reads them from the file's text with libyaml's event API, after cfgfile has
 * checked the file as a whole (the flat settings are not its business, and are skipped here),
 * as strictly as cfgfile reads the rest: unknown keys, wrong types, bad values, duplicates,
 * unknown class names and limits are each one "file:line:column: message" naming the
 * offending token. Any bytes parse in linear time, with no recursion: the schema's depth is
 * fixed (five collections) and anything deeper is refused at its start. Pure: no I/O but
 * router_classes_load's read. */
#ifndef ADMIT_ROUTER_CLASSES_H
#define ADMIT_ROUTER_CLASSES_H

#include "admission/busy.h"

#include <stddef.h>
#include <stdint.h>

/* The config file's keys. */
#define ROUTER_CLASSES_KEY       "policy_classes"
#define ROUTER_DEFAULT_CLASS_KEY "default_policy_class"
#define ROUTER_CLASS_RULES_KEY   "policy_class_rules"

/* The request headers a header rule reads, Dynamo's first; names are case-insensitive. */
#define ROUTER_CLASS_HEADER       "x-dynamo-meta-policy-class"
#define ROUTER_CLASS_HEADER_ALIAS "x-admit-class"

/* Longest class name, in bytes. */
#define ROUTER_CLASS_NAME_MAX 63
/* Most classes, rules, and buckets of one rule. */
#define ROUTER_CLASSES_MAX 64
#define ROUTER_RULES_MAX   64
#define ROUTER_BUCKETS_MAX 64
/* Largest quantum: a billion prompt tokens a round keeps the deficits far inside int64. */
#define ROUTER_CLASS_QUANTUM_MAX 1000000000
/* Largest per-worker queue limit: times OPT_LIST_MAX workers, it still fits an unsigned. */
#define ROUTER_CLASS_LIMIT_MAX 1000000
/* Longest queue timeout, a day (as admitd's --queue-timeout-ms). */
#define ROUTER_CLASS_TIMEOUT_MAX 86400000
/* Largest token count (prefill threshold, bucket floor), as --active-prefill-tokens-threshold. */
#define ROUTER_CLASS_TOKENS_MAX 1000000000000000000LL

/* How a class orders its queue. */
enum rclass_policy {
    RCLASS_FCFS, /* first come, first served */
    RCLASS_WSPT  /* weighted shortest processing time: the smallest prompt first */
};

struct rclass {
    char name[ROUTER_CLASS_NAME_MAX + 1];
    struct busy_thresholds t;  /* the class's own; each unset (NAN / -1) by default */
    int64_t quantum;           /* DRR credit per round, in prompt tokens; > 0 */
    enum rclass_policy policy; /* RCLASS_FCFS by default */
    unsigned limit_per_worker; /* queued requests per worker; 0 = unlimited (default) */
    unsigned queue_timeout_ms; /* longest wait in the queue; 0 = none (default) */
};

enum rrule_kind {
    RRULE_HEADER, /* the class the request's header names */
    RRULE_MODEL,  /* the class of one model */
    RRULE_TOKENS  /* the class of the prompt's size */
};

/* A bucket of a prompt_tokens rule: prompts of min_tokens or more, up to the next floor. */
struct rbucket {
    int64_t min_tokens;
    int cls; /* an index into the classes (router_classes.c[]) */
};

struct rrule {
    enum rrule_kind kind;
    char model[256];         /* RRULE_MODEL: the model, exactly */
    int cls;                 /* RRULE_MODEL: its class; -1 for the other kinds */
    struct rbucket *buckets; /* RRULE_TOKENS: floors from 0, strictly increasing */
    size_t nbuckets;
};

/* What the file configures. n == 0: no classes (and then no rules). */
struct router_classes {
    struct rclass *c;
    size_t n;
    int default_cls; /* index into c; -1 when n == 0 */
    struct rrule *rules;
    size_t nrules;
};

/** reads the classes from text (len bytes, need not be NUL-terminated), named `name` in
    messages: 0 with *out filled (n may be 0: none configured), or -1 with *out empty and
    err = "name:line:column: message" (or "name: message" for a file too large). The whole
    file is checked as cfgfile_parse checks it, its flat settings skipped */
int router_classes_parse(const char *name, const char *text, size_t len, struct router_classes *out,
                         char *err, size_t errlen);
/** reads the file at path, then router_classes_parse; errors include the path */
int router_classes_load(const char *path, struct router_classes *out, char *err, size_t errlen);
/** frees c and empties it; safe twice, and on a zeroed struct */
void router_classes_free(struct router_classes *c);
/** the index of the class named name (exactly), or -1 */
int router_classes_find(const struct router_classes *c, const char *name);
/** the class a request goes to: the first rule that matches, else the default class; -1 when
    there are no classes. header(arg, name) gives a request header's value (NULL when absent;
    names are lower case and the lookup must ignore case), and may itself be NULL; model is
    the request's model (NULL or "" if none), prompt_tokens its prompt's size (< 0: unknown,
    and then no prompt_tokens rule matches). A header rule matches when either header has a
    value (Dynamo's first), and then a value that names no class gives the default class */
int router_classes_classify(const struct router_classes *c,
                            const char *(*header)(void *arg, const char *name), void *arg,
                            const char *model, int64_t prompt_tokens);

#endif
