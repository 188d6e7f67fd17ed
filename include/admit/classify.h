/* admit/classify.h: a custom classifier, embedded in admit-router as a plugin.
 *
 * admit-router puts each request it has to queue in a policy class, by its built-in rules
 * (the class configuration). A site whose rules are its own (move long prompts out of the
 * interactive class when it has no room, read a tenant header) writes a classifier: one C
 * function that admit-router calls once per request, before the request is queued, and that
 * may put the request in another class. It sees the request's facts, the thresholds of every
 * class and the router-wide reject thresholds, and the load this router has booked on its
 * workers, with the router's own room rule to judge it; it changes nothing but the class.
 *
 * A classifier is built as a shared object that exports two symbols (see the end of this
 * file) and is loaded with `admit-router --classifier-plugin PATH.so`. It calls back into
 * the router, which exports exactly the functions declared here; so the plugin links against
 * nothing of admitd's, only this header (and libc). examples/classifier/ has one to copy.
 *
 * Rules a classifier can rely on, and must keep:
 *  - it runs on the router's one event-loop thread, once per request, so it must not block
 *    (no I/O, no locks held for long): every request waits for it;
 *  - the struct admit_classify and every string it hands out are valid only during the call:
 *    a classifier keeps none of them;
 *  - thresholds are the router's own, field for field: an unset one (-1, NAN) disables its
 *    signal, and with all unset nothing is ever busy; a rank's load and capacity use -1 (or
 *    <= 0) for unknown, and unknown never takes room away;
 *  - everything here is pure: no libevent, no nng, no clock, no allocation. */
#ifndef ADMIT_CLASSIFY_H
#define ADMIT_CLASSIFY_H

#include <stddef.h>
#include <stdint.h>

/* The version of this interface a plugin is built for; admit-router refuses a plugin built
 * for another, since the structs below would not mean the same bytes to both. */
#define ADMIT_CLASSIFY_ABI 1

/* Busy thresholds; an unset field disables its signal. The fields are the router's
 * (--active-prefill-tokens-threshold and friends): a rank is busy when its prefill tokens
 * exceed prefill_tokens, or exceed prefill_frac times its step budget (max_num_batched_tokens,
 * 10^7 when unknown), or when its decode blocks exceed decode_frac of its KV blocks. */
struct admit_thresholds {
    int64_t prefill_tokens; /* tokens >= 0; -1 = unset */
    double prefill_frac;    /* >= 0, a multiple of the step budget; NAN = unset */
    double decode_frac;     /* 0..1, a fraction of kv_total_blocks; NAN = unset */
};

/* The load this router has booked on one rank (what it sent and has not seen finish); it
 * counts the router's own traffic, at once, before the worker publishes it. */
struct admit_rank_load {
    int64_t prefill_tokens; /* prompt tokens not yet past their first output token */
    int64_t decode_blocks;  /* KV blocks held by the requests booked */
    int64_t requests;       /* requests booked */
    int observed;           /* 1 once the worker has published a load message for the rank */
};

/* What one rank can take, as its worker publishes it; a value <= 0 is unknown. */
struct admit_rank_capacity {
    int64_t max_num_batched_tokens; /* the engine's per-step token budget */
    int64_t kv_total_blocks;        /* KV blocks of the rank */
    int64_t kv_block_size;          /* tokens per KV block */
};

/* One request being classified, and the router as it stands; opaque, valid during the call. */
struct admit_classify;

/* ---- the request --------------------------------------------------------------------- */

/** the request's "model" ("" when it names none) */
const char *admit_classify_model(const struct admit_classify *c);
/** the request's prompt tokens, as the router counted them for booking */
int64_t admit_classify_prompt_tokens(const struct admit_classify *c);
/** the value of the request's first header called name (case-insensitive), or NULL */
const char *admit_classify_header(const struct admit_classify *c, const char *name);

/* ---- classes --------------------------------------------------------------------------- */

/** the class the request is in now: the built-in rules' choice or what was set since ("" when
 *  the router has no class for it) */
const char *admit_classify_class(const struct admit_classify *c);
/** number of classes the router has */
size_t admit_classify_classes(const struct admit_classify *c);
/** the name of class i (in the configuration's order), or NULL when i is out of range */
const char *admit_classify_class_at(const struct admit_classify *c, size_t i);
/** fills out with the queue thresholds of the request's class now; 0, or -1 (out untouched)
 *  when it has none */
int admit_queue_thresholds(const struct admit_classify *c, struct admit_thresholds *out);
/** fills out with the queue thresholds of the class called name; 0, or -1 (out untouched)
 *  for an unknown class */
int admit_queue_thresholds_for(const struct admit_classify *c, const char *name,
                               struct admit_thresholds *out);
/** fills out with the router-wide reject thresholds for the request's model (those that turn
 *  a request away with the overload status), as they were when classification started; 0 */
int admit_reject_thresholds(const struct admit_classify *c, struct admit_thresholds *out);
/** puts the request in the class called name (exact, case-sensitive); 0, or -1 for an unknown
 *  class (the class is unchanged) */
int admit_classify_set_class(struct admit_classify *c, const char *name);

/* ---- workers and room ------------------------------------------------------------------ */

/** number of workers the router has (alive or not); they are numbered 0 .. n-1 */
size_t admit_classify_workers(const struct admit_classify *c);
/** 1 when worker w is alive (heard from within its missed heartbeats, not draining), else 0 */
int admit_classify_worker_alive(const struct admit_classify *c, size_t w);
/** number of data-parallel ranks of worker w known so far (at least 1; 0 for no such worker):
 *  a worker not heard from yet counts as one idle rank of unknown capacity */
unsigned admit_classify_ranks(const struct admit_classify *c, size_t w);
/** fills load (what this router booked) and cap of rank r of worker w; 0, or -1 (nothing
 *  filled) when there is no such rank; either pointer may be NULL */
int admit_classify_rank(const struct admit_classify *c, size_t w, unsigned r,
                        struct admit_rank_load *load, struct admit_rank_capacity *cap);
/** 1 when a rank with load l and capacity cap has room under t (NULL: no thresholds, room):
 *  the router's one room rule, which its selection and its monitor apply too */
int admit_has_room(const struct admit_rank_load *l, const struct admit_rank_capacity *cap,
                   const struct admit_thresholds *t);
/** 1 when the router's selection would find a place for this request now under t (NULL: no
 *  thresholds): some live worker, not busy by what it publishes under t, has a rank whose
 *  booked load plus this request's prompt tokens and blocks has room (a rank this router has
 *  booked nothing on always has); asking chooses nothing and books nothing */
int admit_classify_room_anywhere(const struct admit_classify *c, const struct admit_thresholds *t);

/* ---- the classifier -------------------------------------------------------------------- */

/** a classifier: called once per request before it is queued, with the class the built-in
 *  rules chose already set. Returns 0 to keep the class set when it returns (changed with
 *  admit_classify_set_class or not), or -1 (any value but 0) to leave the built-in rules'
 *  choice, whatever it set. arg is the one given with it (NULL for a plugin) */
typedef int (*admit_classifier_fn)(struct admit_classify *c, void *arg);

/* The symbols a plugin exports: its classifier, and the ABI it was built for. */
#define ADMIT_CLASSIFIER_SYMBOL     "admit_classifier"
#define ADMIT_CLASSIFIER_ABI_SYMBOL "admit_classifier_abi"

/** a plugin's classifier, of type admit_classifier_fn (arg is NULL); plugins define it */
int admit_classifier(struct admit_classify *c, void *arg);
/** a plugin's ABI: define it as `const int admit_classifier_abi = ADMIT_CLASSIFY_ABI;` */
extern const int admit_classifier_abi;

#endif
