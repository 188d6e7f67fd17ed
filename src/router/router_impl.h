/* router_impl: the router's private state, shared by router.c (workers, admission and
 * selection) and router_report.c (metrics and /load). Not for anything else. */
#ifndef ADMIT_ROUTER_IMPL_H
#define ADMIT_ROUTER_IMPL_H

#include "admit/classify.h"
#include "admit/load.h"
#include "classify.h"
#include "config.h"
#include "admission/bt_api.h"
#include "util/buf.h"
#include "admission/classq.h"
#include "util/netaddr.h"
#include "wire/prom.h"
#include "http/httpreq.h"
#include "http/proxy.h"
#include "model_route.h"
#include "pubsub/spsub.h"
#include "select.h"
#include "workers.h"

#include <stdint.h>
#include <time.h>

struct event;
struct pxreq;

/* Distinct (model, endpoint) rejection counters kept. */
#define ROUTER_MAX_REJECT_KEYS 256

/* Per exchange, inside the proxy's allocation (zeroed at arrival). */
struct rreq {
    struct classq_entry qe; /* first: the queue's entry while the request waits */
    struct router *r;
    int bypass;     /* GET, HEAD, OPTIONS: not booked, not judged, never queued */
    int counted;    /* tokens, model and pin are read, once per exchange */
    int64_t tokens; /* prompt tokens, by admitd's counter */
    int pinned;     /* the worker a pin header names; -1 none; -2 a name no worker has */
    int held;       /* the worker whose upstream it holds (counted in its inflight); -1 none */
    int cls;        /* its policy class; -1 none (no classes, or never classified) */
    unsigned cgen;  /* the classes' generation cls is an index of (router.cgen) */
    struct timespec t_enq;
    char model[128];
    struct sel_booking bk; /* what this exchange holds on its worker */
};

/* One policy class's queue counters, and what the classifier sees of it. */
struct rqclass {
    uint64_t dispatched, rej_full, rej_timeout, rej_busy;
    struct prom_hist wait;
    char full_msg[128], timeout_msg[128];
};

struct reject_key {
    char model[128];
    char endpoint[32];
    uint64_t count;
};

struct router {
    struct event_base *base;
    struct proxy *px;
    struct metrics *m;
    const struct router_cfg *cfg; /* replaced by each reload (router_reconfigure) */
    struct bt_registry *bt;
    struct sel *sel;
    struct model_route *models; /* which workers serve which model */
    struct workers *ws;         /* the workers, their upstreams and their load messages */
    struct reject_key rejects[ROUTER_MAX_REJECT_KEYS];
    size_t nrejects;
    uint64_t rejected_all_busy, rejected_no_worker, rejected_unknown_model;
    void (*on_change)(void *arg);
    void *on_change_arg;
    /* The policy-class queue (router_queue.c); q NULL: no classes, nothing waits. */
    struct classq *q;
    struct rqclass *qc;            /* cfg->classes.n of them */
    struct classify_class *cviews; /* names and thresholds, for classifiers */
    struct classify_view view;
    admit_classifier_fn classifier; /* NULL: the built-in rules alone */
    unsigned cgen;                  /* the classes' generation: one more at each reload */
    int dispatching;                /* inside rq_kick: a nested kick only asks for another turn */
    int kick_again;
    struct event *tick; /* re-tries dispatch now and then while requests wait */
    struct event *kick; /* a dispatch asked for from inside a relay: run from the loop */
};

/** reads a request's prompt tokens, model and pin into q, once per exchange */
void router_read_request(struct router *r, struct rreq *q, const struct http_req *req);

/* ---- router_queue.c: the policy-class queue -------------------------------------------- */

/** sets the queue up from the config's classes (none: q stays NULL); 0, or -1 with err */
int rq_init(struct router *r, char *err, size_t errlen);
/** a reload: r->cfg's classes replace was (the classes until now, still valid). A request
 *  waiting in a class that stays (by its name) keeps its place and its deadline; one in a
 *  class that is gone moves to the new default class, in arrival order with those there; with
 *  no class left, every waiting request goes on to selection. A class that stays keeps its
 *  counters; limits, thresholds, quanta and timeouts are the new ones from now on (a lower
 *  limit turns newcomers away, never one that waits) */
void rq_reconfigure(struct router *r, const struct router_classes *was);
/** frees the queue (the proxy, and so every waiting exchange, is gone) */
void rq_free(struct router *r);
/** a new request: forward it, hold it in its class's queue, or answer that the queue is full */
enum px_verdict rq_arrive(struct router *r, struct pxreq *x, struct rreq *q,
                          const struct http_req *req);
/** a held request waited past its class's queue_timeout_ms: answer it */
void rq_expired(struct router *r, struct pxreq *x, struct rreq *q);
/** the exchange ends: it leaves the queue if it is still there */
void rq_finish(struct router *r, struct rreq *q);
/** dispatches what can go now; every caller that may have made room calls it */
void rq_kick(struct router *r);
/** the same from the event loop, soon (this loop pass): for callers inside another
 *  exchange's relay, which must not start other exchanges in the middle of its own */
void rq_kick_soon(struct router *r);
/** a request of a class got the reject answer (every worker busy) */
void rq_count_busy(struct router *r, const struct rreq *q);
/** appends the queue's families (nothing without classes) */
void rq_render_metrics(struct router *r, struct buf *out);

#endif
