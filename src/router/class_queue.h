/* class_queue: admit-router's own admission, the policy-class queue: each request's class
 * (the config's rules, then a classifier plugin if one is loaded), and a wait in its class's
 * queue while no worker has room for it under the class's thresholds.
 *
 * The queues and their weighted deficit round robin are admission/classq.h's; the classes and
 * their rules are the configuration's (classes.h), the classifier interface classify.h's. The
 * gate is the selection pass itself (select.h's sel_gate_in(), among the workers that take the
 * request's model, model_route.h), run under the class's thresholds, with the ranks the prefix
 * index (kvroute.h) predicts to hold part of the prompt judged on its uncached part only, as
 * selection judges them. The prompt_tokens rules and the deficit round robin's cost count the
 * uncached tokens too (Dynamo's uncached ISL). Without classes nothing waits: every request
 * goes on to selection at once. */
#ifndef ADMIT_ROUTER_CLASS_QUEUE_H
#define ADMIT_ROUTER_CLASS_QUEUE_H

#include "admission/classq.h"
#include "config.h"
#include "http/proxy.h"
#include "util/buf.h"

#include <stdint.h>
#include <time.h>

struct bt_registry;
struct class_queue;
struct event_base;
struct kvroute;
struct model_route;
struct pools;
struct sel;

/* What the queue keeps of one exchange, inside the caller's per-exchange state (zeroed, then
 * cq_begin()). */
struct cq_req {
    struct classq_entry qe; /* the queue's entry while the request waits */
    struct pxreq *x;
    const char *model; /* the request's facts, as cq_arrive() was told them */
    int64_t tokens;
    int pinned;
    const uint64_t *keys; /* its prompt's block keys (the caller's, valid for the exchange) */
    size_t nkeys;
    int cls;       /* its policy class; -1 none (no classes, or never classified) */
    unsigned cgen; /* the classes' generation cls is an index of */
    struct timespec t_enq;
};

/** the queue of cfg's classes (kept; none: nothing waits), judging room in sel among the
 *  workers models says take a request's model, with what the prefix index kv predicts they
 *  hold, a classifier's reject thresholds from bt, for px's exchanges; cfg's classifier plugin
 *  is loaded. NULL with err when the plugin cannot be */
struct class_queue *cq_new(struct event_base *base, struct proxy *px, const struct router_cfg *cfg,
                           struct sel *sel, struct model_route *models, struct kvroute *kv,
                           struct pools *pools, const struct bt_registry *bt, char *err,
                           size_t errlen);
/** a request that leaves the queue goes on through go(arg, x) (the router's dispatch, which
 *  starts a disaggregated request's prefill); by default proxy_forward() */
void cq_set_go(struct class_queue *cq, void (*go)(void *arg, struct pxreq *x), void *arg);
/** a reload: cfg's classes replace those until now (whose config must still be valid). A
 *  request waiting in a class that stays (by its name) keeps its place and its deadline; one in
 *  a class that is gone moves to the new default class, in arrival order with those there;
 *  with no class left, every waiting request goes on to selection. A class that stays keeps
 *  its counters; limits, thresholds, quanta and timeouts are the new ones from now on (a lower
 *  limit turns newcomers away, never one that waits). Then it dispatches what can go */
void cq_reconfigure(struct class_queue *cq, const struct router_cfg *cfg);
/** frees the queue (after the proxy, and so every waiting exchange, is gone) */
void cq_free(struct class_queue *cq);

/** a new exchange x: in no class yet (inline: every exchange begins so) */
static inline void cq_begin(struct cq_req *e, struct pxreq *x)
{
    e->x = x;
    e->cls = -1;
}
/** a request that is not bypassed, with its model ("" none; valid for the exchange), prompt
 *  tokens, pinned worker (-1 none) and its prompt's block keys[0 .. nkeys) (kvr_keys(); valid
 *  for the exchange): forward it, hold it in its class's queue, or answer that the queue is
 *  full */
enum px_verdict cq_arrive(struct class_queue *cq, struct cq_req *e, const struct http_req *req,
                          const char *model, int64_t tokens, int pinned, const uint64_t *keys,
                          size_t nkeys);
/** a held request waited past its class's queue_timeout_ms: answer it */
void cq_expired(struct class_queue *cq, struct cq_req *e);
/** the exchange ends: it leaves the queue if it is still there */
void cq_finish(struct class_queue *cq, struct cq_req *e);
/** a request of a class got the reject answer (every worker busy): counted for its class */
void cq_count_busy(struct class_queue *cq, const struct cq_req *e);
/** dispatches what can go now; every caller that may have made room calls it */
void cq_kick(struct class_queue *cq);
/** the same from the event loop, soon (this loop pass): for callers inside another
 *  exchange's relay, which must not start other exchanges in the middle of its own */
void cq_kick_soon(struct class_queue *cq);

/** appends the queue's families (nothing without classes) */
void cq_render_metrics(const struct class_queue *cq, struct buf *out);

#endif
