/* model_table: which workers serve which model, from the `models` lists of their load
 * messages (the engines' /v1/models, as admitd reads them: admission/engine_models.h).
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
 * more (mtab_set_hooks()): admit-router's /busy_threshold follows the lists with them
 * (model_route.h), so that names a worker stopped listing do not pile up there.
 *
 * Pure: no sockets, no clock, so that it is unit-tested on its own. */
#ifndef ADMIT_ROUTER_MODEL_TABLE_H
#define ADMIT_ROUTER_MODEL_TABLE_H

#include "admit/load.h"

#include <stddef.h>
#include <stdint.h>

/* Most distinct names kept at once; when a new one would go over, names no worker lists any
 * more are forgotten first; a worker whose list still does not fit counts as unknown. */
#define MTAB_NAMES_MAX 4096

/* Where a request for a model may go. */
enum mtab_verdict {
    MTAB_ANY,  /* every worker: no filter (no model named, or every worker takes it) */
    MTAB_SOME, /* the workers of the bitset */
    MTAB_NONE  /* none: no worker lists it and none accepts any model */
};

struct model_table;

/** called with a name that worker lists begin or cease to hold (mtab_set_hooks) */
typedef void (*mtab_name_fn)(void *arg, const char *name);

/** an empty table (no workers) */
struct model_table *mtab_new(void);
/** frees it; NULL is a no-op */
void mtab_free(struct model_table *m);
/** served hears of each name that a list now holds and none held before it; unserved, of
 *  each name that no list holds any more (a list changed or unknown, a worker dropped); either
 *  may be NULL. Called from mtab_set() and mtab_drop(), after the change */
void mtab_set_hooks(struct model_table *m, mtab_name_fn served, mtab_name_fn unserved, void *arg);
/** makes workers 0 .. n-1 known to the table: each one added is unknown (accepts any) */
void mtab_reserve(struct model_table *m, int n);
/** worker w's newest list (l->n < 0: unknown, accepts any model), told to the hooks; 1 when
 *  the worker's list changed, 0 when it was the same */
int mtab_set(struct model_table *m, int w, const struct admit_load_models *l);
/** worker w is gone for good: it neither serves nor accepts anything (mtab_reserve() or
 *  mtab_set() brings it back, unknown) */
void mtab_drop(struct model_table *m, int w);
/** where a request for model ("" or NULL: none named) may go; *eligible is the bitset of the
 *  workers (valid until the next change of the table): for MTAB_NONE one with no bit set,
 *  for MTAB_ANY NULL (every worker) */
enum mtab_verdict mtab_eligible(const struct model_table *m, const char *model,
                                const uint64_t **eligible);
/** worker w's list as the table holds it (unknown for a worker it does not know) */
const struct admit_load_models *mtab_list(const struct model_table *m, int w);
/** names interned now */
size_t mtab_names(const struct model_table *m);

#endif
