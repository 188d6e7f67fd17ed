/* class_queue: the policy-class queues, as admit-router's admission (see class_queue.h).
 *
 * With policy classes configured, a request that passed the proxy's checks is classified
 * (the config's rules, then a classifier plugin if one is loaded) and then either goes on at
 * once or waits in its class's queue. It waits while its class has a backlog (a new arrival
 * never jumps it) or while no candidate worker has room under the CLASS's thresholds: the
 * gate is the selection pass itself (sel_gate(), the booked load projected with the request,
 * judged by has_room()'s limits), run under the class's thresholds instead of the router-wide
 * ones. When it goes, selection still judges the router-wide reject thresholds and may
 * answer 529: the two sets never merge.
 *
 * The projection is of the uncached tokens, as selection's is: the gate is given the ranks the
 * prefix index predicts to hold part of the prompt, looked up again at each try (the index
 * changes while a request waits), and such a rank needs room for the uncached part only. A
 * request's size for its class, the prompt_tokens rules and the deficit round robin's cost, is
 * its uncached tokens too, as Dynamo's uncached ISL: the prompt less the most that a worker it
 * may go to is predicted to hold, at arrival (a classifier plugin still sees the whole prompt,
 * as Dynamo's input_tokens). With no index kept (weight 0) there are no keys and no hits: the
 * whole prompt, as before.
 *
 * Across classes the heads go in weighted deficit round robin (admission/classq.h). Dispatch is
 * re-tried whenever room may have appeared: a booking released (first token, end, cancel),
 * a load message, a threshold change, and a short tick while anything waits, which covers a
 * worker coming back when its overload mark runs out. Each dispatch books its request, in
 * the same call, before the next head is tested. A client that hangs up while it waits is
 * noticed by the proxy's hang-up watch, as admitd's queue is, and leaves at once.
 *
 * A reload (SIGHUP) rebuilds the queue from the new classes and moves every waiting request
 * into it, in arrival order (cq_reconfigure): a reload loses no request. */
#include "class_queue.h"
#include "admission/bt_api.h"
#include "classify.h"
#include "kvroute.h"
#include "model_route.h"
#include "pools.h"
#include "select.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "wire/prom.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* While requests wait, dispatch is re-tried at least this often. */
#define CQ_TICK_MS 100

/* Queue wait buckets, in seconds: from "at once" to the longest sensible timeout. */
static const double wait_bounds[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5,
                                     1,     2.5,   5,    10,   30,  60};

/* One policy class's counters, and the answers it gives. */
struct cq_class {
    uint64_t dispatched, rej_full, rej_timeout, rej_busy;
    struct prom_hist wait;
    char full_msg[128], timeout_msg[128];
};

struct class_queue {
    struct proxy *px;
    const struct router_cfg *cfg; /* its classes; replaced by each reload (cq_reconfigure) */
    struct sel *sel;
    struct model_route *models;
    struct kvroute *kv;
    struct pools *pools; /* a disaggregated model's request needs room in both pools */
    const struct bt_registry *bt;
    void (*go)(void *arg, struct pxreq *x); /* a request that goes on (cq_set_go) */
    void *go_arg;
    struct classq *q;              /* NULL: no classes, nothing waits */
    struct cq_class *qc;           /* cfg->classes.n of them */
    struct classify_class *cviews; /* names and thresholds, for classifiers */
    struct classify_view view;
    admit_classifier_fn classifier; /* NULL: the built-in rules alone */
    unsigned cgen;                  /* the classes' generation: one more at each reload */
    int dispatching;                /* inside cq_kick: a nested kick only asks for another turn */
    int kick_again;
    struct event *tick; /* re-tries dispatch now and then while requests wait */
    struct event *kick; /* a dispatch asked for from inside a relay: run from the loop */
};

static struct cq_req *req_of(const struct classq_entry *e)
{
    return (struct cq_req *) (void *) e; /* qe is the first member */
}

static const struct rclass *class_def(const struct class_queue *cq, int cls)
{
    return &cq->cfg->classes.c[cls];
}

/* The ranks the prefix index predicts to hold part of e's prompt at now, into hits (none
 * without keys, or with no index kept); their count. */
static size_t match(struct class_queue *cq, const struct cq_req *e, int64_t now,
                    struct sel_hit *hits)
{
    if (e->nkeys == 0)
        return 0;
    return kvr_match(cq->kv, e->keys, e->nkeys, e->tokens, (uint64_t) now, hits);
}

/* e's uncached tokens: its prompt less the most that a routable worker it may go to (its pin,
 * or one that takes its model) is predicted to hold of it, of hits[0 .. n). */
static int64_t uncached(struct class_queue *cq, const struct cq_req *e, int64_t now,
                        const struct sel_hit *hits, size_t n)
{
    const uint64_t *elig = mroute_eligible(cq->models, e->model, e->pinned);
    int64_t best = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t k = hits[i].worker;

        if (hits[i].cached <= best || k >= (uint32_t) sel_workers(cq->sel))
            continue;
        if (e->pinned >= 0 ? k != (uint32_t) e->pinned : !sel_eligible(elig, k))
            continue;
        if (sel_routable(cq->sel, (int) k, now))
            best = hits[i].cached;
    }
    return e->tokens - best;
}

/* May a request of class cls with this prompt go now, the ranks of hits[0 .. nhits) holding
 * part of it? Only "every candidate is busy under the class's thresholds" holds it: with no
 * worker alive it goes on, and selection answers 503. */
static int gate(struct class_queue *cq, int cls, const struct cq_req *e, int64_t now,
                const struct sel_hit *hits, size_t nhits)
{
    const struct busy_thresholds *t = &class_def(cq, cls)->t;
    const uint64_t *elig;
    struct pools_req pr;

    if (!busy_thresholds_any(t))
        return 1;
    elig = mroute_eligible(cq->models, e->model, e->pinned);
    /* Disaggregated: a prefill and a decode worker both with room, each by its pool's part of
     * the class's thresholds (pools.h), else the model's aggregated workers. */
    if (e->pinned < 0 && pools_split(cq->pools, sel_workers(cq->sel), elig, &pr)) {
        if (pools_gate(cq->sel, &pr, now, e->tokens, t, hits, nhits) != SEL_ALL_BUSY)
            return 1;
        return pr.agg && sel_gate_kv(cq->sel, now, e->tokens, t, -1, pr.pool[ADMIT_LOAD_ROLE_BOTH],
                                     hits, nhits) != SEL_ALL_BUSY;
    }
    return sel_gate_kv(cq->sel, now, e->tokens, t, e->pinned >= 0 ? e->pinned : -1, elig, hits,
                       nhits) != SEL_ALL_BUSY;
}

/* The gate, with the index's prediction as it is now (looked up only for a class that may
 * wait for room). */
static int class_has_room(struct class_queue *cq, int cls, const struct cq_req *e)
{
    struct sel_hit hits[KVR_MAX_HITS];
    int64_t now = clock_mono_ms();
    size_t n = 0;

    if (busy_thresholds_any(&class_def(cq, cls)->t))
        n = match(cq, e, now, hits);
    return gate(cq, cls, e, now, hits, n);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    cq_kick(arg);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    cq_kick(arg);
}

void cq_kick_soon(struct class_queue *cq)
{
    if (cq->q != NULL && !event_pending(cq->kick, EV_TIMEOUT, NULL))
        event_active(cq->kick, EV_TIMEOUT, 0);
}

static void arm_tick(struct class_queue *cq)
{
    struct timeval tv = {0, CQ_TICK_MS * 1000};

    if (!evtimer_pending(cq->tick, NULL))
        evtimer_add(cq->tick, &tv);
}

/* Sets the queue up for classes c (n > 0): the classq, each class's counters and messages,
 * and the classifier's view of the classes. 0, or -1 when classq refuses the definitions. */
static int set_up(struct class_queue *cq, const struct router_classes *c)
{
    struct classq_def *defs = xcalloc(c->n, sizeof *defs);

    cq->qc = xcalloc(c->n, sizeof *cq->qc);
    cq->cviews = xcalloc(c->n, sizeof *cq->cviews);
    for (size_t i = 0; i < c->n; i++) {
        defs[i].quantum = c->c[i].quantum;
        defs[i].policy = c->c[i].policy == RCLASS_WSPT ? CLASSQ_WSPT : CLASSQ_FCFS;
        defs[i].limit_per_worker = c->c[i].limit_per_worker;
        cq->cviews[i].name = c->c[i].name;
        cq->cviews[i].t = c->c[i].t;
        prom_hist_init(&cq->qc[i].wait, wait_bounds, sizeof wait_bounds / sizeof *wait_bounds);
        snprintf(cq->qc[i].full_msg, sizeof cq->qc[i].full_msg,
                 "Server overloaded: router queue for class %s is full", c->c[i].name);
        snprintf(cq->qc[i].timeout_msg, sizeof cq->qc[i].timeout_msg,
                 "Server overloaded: timed out in the router queue for class %s", c->c[i].name);
    }
    cq->q = classq_new(defs, c->n);
    free(defs);
    cq->view.classes = cq->cviews;
    cq->view.nclasses = c->n;
    cq->view.sel = cq->sel;
    return cq->q != NULL ? 0 : -1;
}

/* The default for a request that goes on: to selection. */
static void forward(void *arg, struct pxreq *x)
{
    (void) arg;
    proxy_forward(x);
}

void cq_set_go(struct class_queue *cq, void (*go)(void *arg, struct pxreq *x), void *arg)
{
    cq->go = go;
    cq->go_arg = arg;
}

struct class_queue *cq_new(struct event_base *base, struct proxy *px, const struct router_cfg *cfg,
                           struct sel *sel, struct model_route *models, struct kvroute *kv,
                           struct pools *pools, const struct bt_registry *bt, char *err,
                           size_t errlen)
{
    struct class_queue *cq = xcalloc(1, sizeof *cq);
    char why[256];

    cq->pools = pools;
    cq->go = forward;
    cq->px = px;
    cq->cfg = cfg;
    cq->sel = sel;
    cq->models = models;
    cq->kv = kv;
    cq->bt = bt;
    /* The tick is there without classes too: a reload may bring some. */
    cq->tick = evtimer_new(base, on_tick, cq);
    cq->kick = evtimer_new(base, on_kick, cq);
    if (cq->tick == NULL || cq->kick == NULL)
        fatal("evtimer_new failed");
    if (cfg->classes.n > 0 && set_up(cq, &cfg->classes) != 0)
        fatal("policy classes: invalid class definitions"); /* checked when they were read */
    if (cfg->classifier_plugin[0] != '\0') {
        if (classify_plugin_open(cfg->classifier_plugin, &cq->classifier, why, sizeof why) != 0) {
            snprintf(err, errlen, "classifier plugin: %s", why);
            cq_free(cq);
            return NULL;
        }
        log_info("classifier plugin %s loaded", cfg->classifier_plugin);
    }
    return cq;
}

void cq_free(struct class_queue *cq)
{
    if (cq == NULL)
        return;
    event_free(cq->tick);
    event_free(cq->kick);
    classq_free(cq->q);
    free(cq->qc);
    free(cq->cviews);
    free(cq);
}

/* A waiting request whose class is gone, and no class left to take it: it goes on to
 * selection as a request of a router without classes would (an answer of 529 or 503 if no
 * worker can take it). */
static void go_unclassed(struct class_queue *cq, struct cq_req *e)
{
    e->cls = -1;
    pxreq_set_queue_wait(e->x, clock_seconds_since(&e->t_enq));
    cq->go(cq->go_arg, e->x);
}

void cq_reconfigure(struct class_queue *cq, const struct router_cfg *cfg)
{
    const struct router_classes *was = &cq->cfg->classes, *c = &cfg->classes;
    struct classq *oq = cq->q;
    struct cq_class *oqc = cq->qc;
    struct classify_class *ocv = cq->cviews;
    struct classq_entry **moved = NULL;
    int *map = NULL;
    size_t n = 0, kept = 0;

    if (oq != NULL) {
        moved = xcalloc(classq_total(oq) + 1, sizeof *moved);
        n = classq_drain(oq, moved);
        map = xcalloc(was->n, sizeof *map);
        router_cfg_class_map(was, c, map);
    }
    cq->cfg = cfg;
    cq->q = NULL;
    cq->qc = NULL;
    cq->cviews = NULL;
    memset(&cq->view, 0, sizeof cq->view);
    if (c->n > 0 && set_up(cq, c) != 0)
        fatal("policy classes: invalid class definitions"); /* checked when they were read */
    /* A class that stays (by its name) keeps its counters: Prometheus sees one series. */
    for (size_t i = 0; i < was->n && oqc != NULL; i++) {
        int k = router_classes_find(c, was->c[i].name);

        if (k >= 0) {
            cq->qc[k].dispatched = oqc[i].dispatched;
            cq->qc[k].rej_full = oqc[i].rej_full;
            cq->qc[k].rej_timeout = oqc[i].rej_timeout;
            cq->qc[k].rej_busy = oqc[i].rej_busy;
            cq->qc[k].wait = oqc[i].wait;
        }
    }
    /* Requests in flight that were classified before keep their old index: a generation
     * tells cq_count_busy() that it means nothing now. */
    cq->cgen++;
    for (size_t i = 0; i < n && cq->q != NULL; i++) {
        struct cq_req *e = req_of(moved[i]);
        int k = map[e->cls]; /* a class: cq->q has classes, so a default */

        if (strcmp(c->c[k].name, was->c[e->cls].name) == 0)
            kept++;
        classq_requeue(cq->q, k, moved[i]); /* cannot fail: k is a class, the entry was queued */
        e->cls = k;
        e->cgen = cq->cgen;
    }
    classq_free(oq);
    free(oqc);
    free(ocv);
    if (n > 0)
        log_info("reload: of %zu requests waiting in the policy-class queue, %zu stay in their "
                 "class, %zu %s",
                 n, kept, n - kept,
                 cq->q != NULL ? "move to the default class" : "go on to selection");
    /* No class left: what waited goes on, oldest first. */
    for (size_t i = 0; i < n && cq->q == NULL; i++)
        go_unclassed(cq, req_of(moved[i]));
    free(moved);
    free(map);
    cq_kick(cq); /* other thresholds, other classes: what can go now goes */
}

static const char *req_header(const void *arg, const char *name)
{
    return http_req_header(arg, name);
}

static const char *rule_header(void *arg, const char *name)
{
    return http_req_header(arg, name);
}

/* The request's class: the config's rules (its prompt_tokens rules judge size, its uncached
 * tokens), then the classifier, if any, may change it. */
static int classify(struct class_queue *cq, const struct cq_req *e, const struct http_req *req,
                    int64_t size)
{
    int builtin =
        router_classes_classify(&cq->cfg->classes, rule_header, (void *) req, e->model, size);
    struct classify_request facts = {e->model, e->tokens, req_header, req};
    struct busy_thresholds reject;
    struct admit_classify c;
    int k;

    if (cq->classifier == NULL)
        return builtin;
    bt_registry_get(cq->bt, e->model, &reject);
    classify_init(&c, &cq->view, &facts, builtin, &reject, clock_mono_ms());
    k = classify_run(&c, cq->classifier, NULL);
    return k >= 0 ? k : builtin;
}

enum px_verdict cq_arrive(struct class_queue *cq, struct cq_req *e, const struct http_req *req,
                          const char *model, int64_t tokens, int pinned, const uint64_t *keys,
                          size_t nkeys)
{
    struct sel_hit hits[KVR_MAX_HITS];
    const struct rclass *d;
    int64_t now, size;
    size_t nhits;
    int cls;

    if (cq->q == NULL)
        return PX_FORWARD;
    e->model = model;
    e->tokens = tokens;
    e->pinned = pinned;
    e->keys = keys;
    e->nkeys = nkeys;
    /* One lookup serves the class, the gate and the cost at arrival. */
    now = clock_mono_ms();
    nhits = match(cq, e, now, hits);
    size = uncached(cq, e, now, hits, nhits);
    cls = classify(cq, e, req, size);
    if (cls < 0)
        cls = cq->cfg->classes.default_cls;
    e->cls = cls;
    e->cgen = cq->cgen;
    d = class_def(cq, cls);
    if (classq_depth(cq->q, cls) == 0 && gate(cq, cls, e, now, hits, nhits)) {
        cq->qc[cls].dispatched++;
        prom_hist_observe(&cq->qc[cls].wait, 0.0);
        return PX_FORWARD;
    }
    if (classq_push(cq->q, cls, &e->qe, size, sel_routable_n(cq->sel, now)) != 0) {
        cq->qc[cls].rej_full++;
        proxy_answer_error(e->x, cq->cfg->overload_status, "overloaded_error", cq->qc[cls].full_msg,
                           router_cfg_retry_after(cq->cfg), "class-queue-full", OUT_REJECTED);
        return PX_ANSWERED;
    }
    clock_mono(&e->t_enq);
    if (d->queue_timeout_ms > 0)
        proxy_wait_deadline(e->x, d->queue_timeout_ms);
    arm_tick(cq);
    return PX_WAIT;
}

void cq_expired(struct class_queue *cq, struct cq_req *e)
{
    if (!classq_queued(&e->qe))
        return;
    classq_remove(cq->q, &e->qe);
    cq->qc[e->cls].rej_timeout++;
    proxy_answer_error(e->x, cq->cfg->overload_status, "overloaded_error",
                       cq->qc[e->cls].timeout_msg, router_cfg_retry_after(cq->cfg),
                       "class-queue-timeout", OUT_QUEUE_TIMEOUT);
}

void cq_finish(struct class_queue *cq, struct cq_req *e)
{
    if (cq->q != NULL && classq_queued(&e->qe))
        classq_remove(cq->q, &e->qe); /* a client that left, or the proxy shutting down */
}

void cq_count_busy(struct class_queue *cq, const struct cq_req *e)
{
    if (cq->q != NULL && e->cls >= 0 && e->cgen == cq->cgen)
        cq->qc[e->cls].rej_busy++;
}

static int ready(void *arg, int cls, const struct classq_entry *head)
{
    return class_has_room(arg, cls, req_of(head));
}

/* A head goes: it is out of the queue already; proxy_forward() picks its worker and books
 * it in this call (or answers it), so the next ready() sees the booking. */
static void go(void *arg, struct classq_entry *qe)
{
    struct class_queue *cq = arg;
    struct cq_req *e = req_of(qe);
    double waited = clock_seconds_since(&e->t_enq);

    cq->qc[e->cls].dispatched++;
    prom_hist_observe(&cq->qc[e->cls].wait, waited);
    pxreq_set_queue_wait(e->x, waited);
    cq->go(cq->go_arg, e->x);
}

void cq_kick(struct class_queue *cq)
{
    if (cq->q == NULL || proxy_closing(cq->px))
        return;
    if (cq->dispatching) {
        cq->kick_again = 1; /* a dispatch ended an exchange: the outer loop goes round again */
        return;
    }
    cq->dispatching = 1;
    do {
        cq->kick_again = 0;
        classq_dispatch(cq->q, ready, go, cq);
    } while (cq->kick_again && classq_total(cq->q) > 0);
    cq->dispatching = 0;
    if (classq_total(cq->q) > 0)
        arm_tick(cq);
}

void cq_render_metrics(const struct class_queue *cq, struct buf *out)
{
    static const char *const reasons[] = {"queue_full", "queue_timeout", "all_busy"};
    const struct router_classes *c = &cq->cfg->classes;

    if (cq->q == NULL)
        return;
    prom_family(out, "dynamo_frontend_router_queue_pending_requests", "gauge",
                "Requests waiting in the router's policy-class queue");
    for (size_t i = 0; i < c->n; i++)
        prom_sample1(out, "dynamo_frontend_router_queue_pending_requests", "policy_class",
                     c->c[i].name, (double) classq_depth(cq->q, (int) i));
    prom_family(out, "admit_router_queue_wait_seconds", "histogram",
                "Time from arrival to dispatch, per policy class (0 for those that went at once)");
    for (size_t i = 0; i < c->n; i++) {
        struct buf l;

        buf_init(&l);
        prom_label(&l, "policy_class", c->c[i].name);
        prom_hist_samples(out, "admit_router_queue_wait_seconds", l.data, &cq->qc[i].wait);
        buf_free(&l);
    }
    prom_family(out, "admit_router_queue_dispatched_total", "counter",
                "Requests a policy class sent on to selection");
    for (size_t i = 0; i < c->n; i++)
        prom_sample1(out, "admit_router_queue_dispatched_total", "policy_class", c->c[i].name,
                     (double) cq->qc[i].dispatched);
    prom_family(out, "admit_router_queue_rejections_total", "counter",
                "Requests of a policy class answered with the overload status, by reason");
    for (size_t i = 0; i < c->n; i++)
        for (size_t k = 0; k < 3; k++) {
            uint64_t v = k == 0   ? cq->qc[i].rej_full
                         : k == 1 ? cq->qc[i].rej_timeout
                                  : cq->qc[i].rej_busy;
            struct buf l;

            buf_init(&l);
            prom_label(&l, "policy_class", c->c[i].name);
            prom_label(&l, "reason", reasons[k]);
            prom_sample(out, "admit_router_queue_rejections_total", l.data, (double) v);
            buf_free(&l);
        }
}
