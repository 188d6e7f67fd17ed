/* model_route: the models the workers serve, as admit-router's routing uses them.
 *
 * It owns the model table (model_table.h), fed by every load message, and ties it to the
 * router: a request that names a model no worker serves is answered 404 in OpenAI's shape at
 * arrival; otherwise its selection (and the class gate's) runs among the workers that take
 * its model. A request that names no model, or one every worker takes, or is pinned to a
 * worker (X-Admit-Worker: the pin names the worker, and its engine decides), is not filtered
 * at all. A name that first appears in a worker's list becomes a model of /busy_threshold
 * (the threshold registry, admission/bt_api.h), and leaves it when no list holds it any more.
 *
 * Workers are known by their index in the selection view (select.h), which the table covers
 * as the view grows. */
#ifndef ADMIT_ROUTER_MODEL_ROUTE_H
#define ADMIT_ROUTER_MODEL_ROUTE_H

#include "admit/load.h"

#include <stdint.h>

struct bt_registry;
struct model_route;
struct pxreq;
struct sel;

/** a table with no worker, whose names join and leave bt; both must outlive it */
struct model_route *mroute_new(struct bt_registry *bt, const struct sel *sel);
/** frees it; NULL is a no-op */
void mroute_free(struct model_route *m);
/** a load message of worker idx arrived: its model list (a change is logged) */
void mroute_message(struct model_route *m, int idx, const struct admit_load *msg);
/** worker idx is new (at an index a worker left): its models unknown until its first message */
void mroute_unknown(struct model_route *m, int idx);
/** worker idx is retired: it serves nothing now (a model only it had gets 404) */
void mroute_drop(struct model_route *m, int idx);
/** the workers a request for model may go to, for sel_pick_in(); NULL: any (no model, a pin
 *  (pinned >= 0), or every worker takes it) */
const uint64_t *mroute_eligible(struct model_route *m, const char *model, int pinned);
/** answers x 404, OpenAI's model_not_found, when no worker serves model and none takes any
 *  model ("" names none); 1 when it did */
int mroute_refuse(struct model_route *m, struct pxreq *x, const char *model);
/** worker idx's newest list (unknown: n < 0) */
const struct admit_load_models *mroute_list(const struct model_route *m, int idx);

#endif
