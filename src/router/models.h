/* models: which workers serve which model, from the `models` lists of their load messages.
 *
 * admitd sends its engine's model names in every load message (include/admit/load.h); a
 * worker whose list is unknown (no `models` key: an older admitd; `null`: not read yet, or
 * too long to send; or not heard from yet) accepts any model. For a request naming a model,
 * the workers it may go to are those whose list holds the name plus those whose list is
 * unknown; when that is every worker, no filter is needed at all, and when it is none (no
 * worker, alive or not, lists the name, and every list is known) the model does not exist.
 *
 * Names are interned into small ids, each with a bitset of the workers that may take it
 * (bit k % 64 of word k / 64 for worker k, the selection view's index): selection reads the
 * bitset as is (sel_pick_in()), so a request costs one hash lookup here and nothing is
 * allocated per request. The bitsets change only when a worker's list does, which a message
 * that repeats it costs one comparison to find out.
 *
 * The owner hears of each name that a list begins to hold and of each that no list holds any
 * more (rmodels_set_hooks()): admit-router's /busy_threshold follows the lists with them, so
 * that names a worker stopped listing do not pile up there.
 *
 * Pure: no sockets, no clock, so that it is unit-tested on its own. */
#ifndef ADMIT_ROUTER_MODELS_H
#define ADMIT_ROUTER_MODELS_H

#include "admit/load.h"

#include <stddef.h>
#include <stdint.h>

/* Most distinct names kept at once; when a new one would go over, names no worker lists any
 * more are forgotten first; a worker whose list still does not fit counts as unknown. */
#define RMODELS_NAMES_MAX 4096

/* Where a request for a model may go. */
enum rmodels_verdict {
    RMODELS_ANY,  /* every worker: no filter (no model named, or every worker takes it) */
    RMODELS_SOME, /* the workers of the bitset */
    RMODELS_NONE  /* none: no worker lists it and none accepts any model */
};

struct rmodels;

/** called with a name that worker lists begin or cease to hold (rmodels_set_hooks) */
typedef void (*rmodels_name_fn)(void *arg, const char *name);

/** an empty table (no workers) */
struct rmodels *rmodels_new(void);
/** frees it; NULL is a no-op */
void rmodels_free(struct rmodels *m);
/** served hears of each name that a list now holds and none held before it; unserved, of
 *  each name that no list holds any more (a list changed or unknown, a worker dropped); either
 *  may be NULL. Called from rmodels_set() and rmodels_drop(), after the change */
void rmodels_set_hooks(struct rmodels *m, rmodels_name_fn served, rmodels_name_fn unserved,
                       void *arg);
/** makes workers 0 .. n-1 known to the table: each one added is unknown (accepts any) */
void rmodels_reserve(struct rmodels *m, int n);
/** worker w's newest list (l->n < 0: unknown, accepts any model), told to the hooks; 1 when
 *  the worker's list changed, 0 when it was the same */
int rmodels_set(struct rmodels *m, int w, const struct admit_load_models *l);
/** worker w is gone for good: it neither serves nor accepts anything (rmodels_reserve() or
 *  rmodels_set() brings it back, unknown) */
void rmodels_drop(struct rmodels *m, int w);
/** where a request for model ("" or NULL: none named) may go; *eligible is the bitset of the
 *  workers (valid until the next change of the table): for RMODELS_NONE one with no bit set,
 *  for RMODELS_ANY NULL (every worker) */
enum rmodels_verdict rmodels_eligible(const struct rmodels *m, const char *model,
                                      const uint64_t **eligible);
/** worker w's list as the table holds it (unknown for a worker it does not know) */
const struct admit_load_models *rmodels_list(const struct rmodels *m, int w);
/** names interned now */
size_t rmodels_names(const struct rmodels *m);

#endif
