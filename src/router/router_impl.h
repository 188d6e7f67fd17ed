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
#include "models.h"
#include "pubsub/spsub.h"
#include "select.h"

#include <stdint.h>
#include <time.h>

struct event;
struct pxreq;

/* Distinct (model, endpoint) rejection counters kept. */
#define ROUTER_MAX_REJECT_KEYS 256

/* A worker's place in the fleet. A worker that its sources (a --worker, the workers file, a
 * DNS name) no longer name is retired: selection skips it (sel_retire) and its subscriber is
 * closed, but requests in flight there finish, so it keeps its index, its bookings and its
 * upstream until the last of them ends; then it is free, and its index the next new
 * worker's. A retired worker named again is revived in place, its bookings still counted. */
enum rw_state { RW_ACTIVE, RW_RETIRED, RW_FREE };

struct rworker {
    struct router *r;
    int idx; /* its index in the selection view, and in router.w */
    enum rw_state state;
    int holds;         /* sources that name it; 0 once retired */
    unsigned inflight; /* exchanges holding its upstream: from the pick to the end */
    unsigned pins;     /* exchanges whose pin header names it */
    char proxy_url[NETADDR_HOST_MAX + 16];
    char pub_url[300];
    char worker_id[ADMIT_LOAD_WORKER_ID_MAX + 1]; /* from its newest message ("" = none yet) */
    struct upstream *up;
    struct subscriber *sub;
    int64_t last_ms; /* monotonic time of the newest message; 0 = never heard */
    int bad_messages;
    int unresolved_said; /* logged that its engine's name is not looked up yet */
    int lost;            /* rl_lost() logged it lost; its next message brings it back */
    int id_said;         /* logged that its messages' worker_id is refused (claim()) */
    int http_down;       /* logged that its HTTP side refused (unreachable()); until it answers */
};

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
    struct evdns_base *dns;       /* the workers' host names' resolver, made for the first */
    struct bt_registry *bt;
    struct sel *sel;
    struct rmodels *models; /* which workers serve which model (router_models.c) */
    struct rworker **w;
    size_t n;
    struct reject_key rejects[ROUTER_MAX_REJECT_KEYS];
    size_t nrejects;
    uint64_t rejected_all_busy, rejected_no_worker, rejected_unknown_model;
    uint64_t added, revived, retired, removed; /* workers that came and went */
    uint64_t lost, back;                       /* workers lost (rl_lost), and back */
    struct spsub_stats load_gone; /* what the subscribers of workers retired since counted */
    uint64_t load_invalid;        /* load messages that did not decode */
    uint64_t load_bad_id;         /* ... whose worker_id breaks admitd's rule */
    uint64_t load_id_taken;       /* ... whose worker_id another live worker holds */
    struct event *reap; /* frees retired workers whose last request ended (not in its callback) */
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

/* ---- router_load.c: the workers' load messages ------------------------------------------ */

/** follows w's publisher as --subscriber and --load-batch-ms say; 0, or -1 with err */
int rl_subscribe(struct router *r, struct rworker *w, const char *pub_url, char *err,
                 size_t errlen);
/** closes w's subscriber (never blocking for long), keeping what it counted */
void rl_unsubscribe(struct router *r, struct rworker *w);
/** active worker w is lost (why: its publisher's connection ended, its engine refused a
 *  connection): not routable until its next message; logged once, until it is back */
void rl_lost(struct router *r, struct rworker *w, const char *why);
/** appends the load intake's families (admit_router_load_*) */
void rl_render_metrics(struct router *r, struct buf *out);

/* ---- router_models.c: the models the workers serve -------------------------------------- */

/** sets the models' hooks up: a name a worker serves joins /busy_threshold, one no worker
 *  lists any more leaves it (unless the config names it or a POST set it) */
void rm_init(struct router *r);
/** a load message of worker idx arrived: its model list */
void rm_message(struct router *r, int idx, const struct admit_load *m);
/** the workers q's model may go to, for sel_pick_in(); NULL: any (no model, pinned, or every
 *  worker takes it) */
const uint64_t *rm_eligible(struct router *r, const struct rreq *q);
/** answers 404, OpenAI's model_not_found, when no worker serves q's model and none takes any
 *  model; 1 when it did (reads the request first, as router_read_request()) */
int rm_refuse(struct router *r, struct pxreq *x, struct rreq *q, const struct http_req *req);

#endif
