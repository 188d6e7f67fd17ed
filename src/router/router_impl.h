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
#include "class_queue.h"
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
    struct cq_req cq; /* what the policy-class queue keeps of it */
    int bypass;       /* GET, HEAD, OPTIONS: not booked, not judged, never queued */
    int counted;      /* tokens, model and pin are read, once per exchange */
    int64_t tokens;   /* prompt tokens, by admitd's counter */
    int pinned;       /* the worker a pin header names; -1 none; -2 a name no worker has */
    int held;         /* the worker whose upstream it holds (counted in its inflight); -1 none */
    char model[128];
    struct sel_booking bk; /* what this exchange holds on its worker */
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
    struct class_queue *cq; /* the policy-class queue, the router's admission */
};

#endif
