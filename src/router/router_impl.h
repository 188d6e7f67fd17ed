/* router_impl: admit-router's hub state, shared by router.c (the proxy's hooks, the parts'
 * wiring) and router_pd.c (the disaggregated flow: a prefill leg, then the decode leg). Not
 * for anything else: the rest of the program speaks router.h. */
#ifndef ADMIT_ROUTER_IMPL_H
#define ADMIT_ROUTER_IMPL_H

#include "class_queue.h"
#include "config.h"
#include "kvroute.h"
#include "pdbody.h"
#include "select.h"
#include "util/buf.h"
#include "wire/usage.h"

#include <stddef.h>
#include <stdint.h>

struct bt_registry;
struct event_base;
struct metrics;
struct model_route;
struct pools;
struct proxy;
struct report;
struct tokz;
struct tokz_call;
struct upstream;
struct wcall;
struct workers;

/* A worker marked overloaded by its own 529 is skipped this long (or until it speaks). */
#define OVERLOAD_MARK_MS 1000

/* Longest model name kept of a request (a longer one is cut: no worker serves it). */
#define MODEL_MAX 128

/* How a disaggregated request's dispatch or prefill leg ended (admit_router_disagg_total). */
enum pd_result {
    PD_R_HANDOFF = 0, /* the prefill answered: the decode leg goes on */
    PD_R_DONE,        /* the prefill's answer finished the request: the client's answer */
    PD_R_AGGREGATED,  /* a pool had no room: the model's aggregated workers took it */
    PD_R_PREFILL_BUSY,
    PD_R_DECODE_BUSY,
    PD_R_NO_PREFILL,
    PD_R_NO_DECODE,
    PD_R_PREFILL_FAILED, /* no connection, a broken answer, or an error status */
    PD_R_PREFILL_TIMEOUT,
    PD_R_PREFILL_INVALID, /* an answer without kv_transfer_params to hand off */
    PD_R_CANCELLED,       /* the client left during the prefill */
    PD__COUNT
};

/* Per exchange, inside the proxy's allocation (zeroed at arrival). */
struct rreq {
    struct cq_req cq; /* what the policy-class queue keeps of it */
    struct router *r;
    const struct http_req *req; /* the request (the proxy's, valid for the exchange) */
    struct tokz_call *tok;      /* its /tokenize call in flight, while the request waits on it */
    int exact;      /* its keys are of token ids (its own, or its tokenizer's): the engines' KV
                     * events can hold them */
    int bypass;     /* GET, HEAD, OPTIONS: not booked, not judged, never queued */
    int counted;    /* tokens, model and pin are read, once per exchange */
    int64_t tokens; /* prompt tokens, by admitd's counter */
    int pinned;     /* the worker a pin header names; -1 none; -2 a name no worker has */
    int held;       /* the worker whose upstream it holds (counted in its inflight); -1 none */
    char model[MODEL_MAX];
    struct sel_booking bk; /* what this exchange holds on its worker */
    /* Prefix-aware selection: the prompt's block keys, read with the rest, and what the
     * index predicted on the rank chosen (cached tokens), for the answer's correction. */
    uint32_t nkeys;
    int64_t predicted;
    /* A disaggregated request (pools.h, pdbody.h): from its dispatch, the decode leg is booked
     * in bk on the worker it holds, and the prefill leg in pbk on pheld while its call runs;
     * dbody is the decode leg's body once the prefill answered. agg: a request of a
     * disaggregated model that the model's aggregated workers take whole. */
    int pd, agg;
    int pretried; /* its prefill leg went to a second prefill worker already */
    int pheld;    /* the prefill worker held for the call; -1 none */
    int64_t pcached;
    struct sel_booking pbk;
    struct wcall *pcall;
    struct pd_facts facts;
    struct buf dbody;
    /* Not zeroed at arrival (hooks.zeroed): 4.4 KiB a request. keys[0 .. nkeys) are written
     * by read_request() before anything reads them, the tail is reset by pick() before
     * on_body() keeps anything in it (predicted is 0 until then). */
    struct usage_tail tail; /* the answer's last bytes, while predicted > 0 */
    uint64_t keys[KVR_MAX_KEYS];
};

struct router {
    struct proxy *px;
    struct metrics *m;
    const struct router_cfg *cfg; /* replaced by each reload (router_reconfigure) */
    struct bt_registry *bt;
    struct sel *sel;
    struct kvroute *kv;
    struct model_route *models;
    struct workers *ws;
    struct class_queue *cq;
    struct report *rep;
    struct tokz *tz;
    struct pools *pools; /* the workers' roles: disaggregated models (pools.h) */
    struct event_base *base;
    uint64_t pd_results[PD__COUNT];
    int tok_next; /* where the search for a worker to tokenize begins: turns go round */
    void (*on_change)(void *arg);
    void *on_change_arg;
};

/** exchange q now holds worker k's upstream (a pick, or a migration's): the worker it held
 *  before, if another, is let go */
struct upstream *router_hold(struct router *r, struct rreq *q, int k);

/* ---- router_pd.c: disaggregated requests ------------------------------------------------- */

/** a request that may go on: one of a disaggregated model gets its pair of workers, both booked,
 *  and its prefill leg starts (PX_WAIT), or the model's aggregated workers take it (PX_FORWARD,
 *  pick() among them through rpd_pick()), or it is answered (PX_ANSWERED); any other request
 *  goes on to pick() (PX_FORWARD) */
enum px_verdict rpd_dispatch(struct router *r, struct rreq *q);
/** pick() of a request rpd_dispatch() marked (q->pd or q->agg), with pick()'s contract */
struct upstream *rpd_pick(struct router *r, struct rreq *q, const struct upstream *exclude,
                          int *status, char *msg, size_t msglen, int *busy);
/** the exchange ends: its prefill leg, if any, is cancelled and released, its decode body freed */
void rpd_end(struct router *r, struct rreq *q);
/** appends admit_router_disagg_total (nothing while no worker has a disaggregated role) */
void rpd_render_metrics(const struct router *r, struct buf *out);

#endif
