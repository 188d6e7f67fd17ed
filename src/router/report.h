/* report: what admit-router shows of its fleet and of the requests it answered itself: the
 * Prometheus families of its workers (their states, what came and went, each rank's booked
 * and published load) and of its rejections, and /load's JSON.
 *
 * It owns the rejection counters, which the exchange glue (router.c) feeds; the rest it reads
 * at each scrape from the worker table (workers.h), the selection view (select.h), the model
 * table (model_route.h) and the thresholds (admission/bt_api.h), judging room with the default
 * thresholds (those of the model ""), the same ones a request without a model is judged by.
 * The load intake's families are the worker table's own, the queue's the queue's. */
#ifndef ADMIT_ROUTER_REPORT_H
#define ADMIT_ROUTER_REPORT_H

#include "util/buf.h"

struct bt_registry;
struct kvroute;
struct model_route;
struct report;
struct sel;
struct workers;

/* Why the router answered a request itself (admit_router_rejections_total's reasons). */
enum report_reason {
    REPORT_ALL_BUSY,        /* the overload status: workers alive, none with room */
    REPORT_NO_WORKER,       /* 503: none alive, or the pin names none */
    REPORT_MODEL_NOT_FOUND, /* 404: a model no worker serves */
    REPORT_REASONS
};

/** a report of ws, sel, models and bt (which must outlive it), nothing counted yet */
struct report *report_new(const struct workers *ws, struct sel *sel, const struct kvroute *kv,
                          const struct model_route *models, const struct bt_registry *bt);
/** frees it; NULL is a no-op */
void report_free(struct report *rp);
/** the router answered a request itself, for why */
void report_rejected(struct report *rp, enum report_reason why);
/** a request for model ("" none) to target (its URI) was rejected for want of room, by the
 *  router or by a worker (dynamo_frontend_model_rejection_total, by model and endpoint) */
void report_model_rejected(struct report *rp, const char *model, const char *target);
/** appends the fleet's and the rejections' families */
void report_render_metrics(struct report *rp, struct buf *out);
/** the workers, their ranks' booked and published load, capacity and room, as JSON (/load) */
void report_render_workers(struct report *rp, struct buf *out);

#endif
