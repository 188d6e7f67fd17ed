/* router_queue: the policy-class queues, as admit-router's admission.
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
 * Across classes the heads go in weighted deficit round robin (admission/classq.h). Dispatch is
 * re-tried whenever room may have appeared: a booking released (first token, end, cancel),
 * a load message, a threshold change, and a short tick while anything waits, which covers a
 * worker coming back when its overload mark runs out. Each dispatch books its request, in
 * the same call, before the next head is tested. A client that hangs up while it waits is
 * noticed by the proxy's hang-up watch, as admitd's queue is, and leaves at once.
 *
 * A reload (SIGHUP) rebuilds the queue from the new classes and moves every waiting request
 * into it, in arrival order (rq_reconfigure): a reload loses no request. */
#include "router.h"
#include "router_impl.h"
#include "wire/httputil.h"
#include "util/log.h"
#include "util/ratewin.h"
#include "util/xmalloc.h"
#include "util/clock.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* While requests wait, dispatch is re-tried at least this often. */
#define RQ_TICK_MS 100

/* Queue wait buckets, in seconds: from "at once" to the longest sensible timeout. */
static const double rq_wait_bounds[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5,
                                        1,     2.5,   5,    10,   30,  60};

static struct rreq *rreq_of(const struct classq_entry *e)
{
    return (struct rreq *) (void *) e; /* qe is the first member */
}

static const struct rclass *class_def(const struct router *r, int cls)
{
    return &r->cfg->classes.c[cls];
}

/* May a request of class cls with this prompt go now? Only "every candidate is busy under the
 * class's thresholds" holds it: with no worker alive it goes on, and selection answers 503. */
static int class_has_room(struct router *r, int cls, const struct rreq *q)
{
    const struct busy_thresholds *t = &class_def(r, cls)->t;

    if (!busy_thresholds_any(t))
        return 1;
    return sel_gate_in(r->sel, clock_mono_ms(), q->tokens, t, q->pinned >= 0 ? q->pinned : -1,
                       mroute_eligible(r->models, q->model, q->pinned)) != SEL_ALL_BUSY;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    rq_kick(arg);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    rq_kick(arg);
}

void rq_kick_soon(struct router *r)
{
    if (r->q != NULL && !event_pending(r->kick, EV_TIMEOUT, NULL))
        event_active(r->kick, EV_TIMEOUT, 0);
}

static void arm_tick(struct router *r)
{
    struct timeval tv = {0, RQ_TICK_MS * 1000};

    if (r->tick != NULL && !evtimer_pending(r->tick, NULL))
        evtimer_add(r->tick, &tv);
}

/* Sets the queue up for classes c (n > 0): the classq, each class's counters and messages,
 * and the classifier's view of the classes. 0, or -1 when classq refuses the definitions. */
static int set_up(struct router *r, const struct router_classes *c)
{
    struct classq_def *defs = xcalloc(c->n, sizeof *defs);

    r->qc = xcalloc(c->n, sizeof *r->qc);
    r->cviews = xcalloc(c->n, sizeof *r->cviews);
    for (size_t i = 0; i < c->n; i++) {
        defs[i].quantum = c->c[i].quantum;
        defs[i].policy = c->c[i].policy == RCLASS_WSPT ? CLASSQ_WSPT : CLASSQ_FCFS;
        defs[i].limit_per_worker = c->c[i].limit_per_worker;
        r->cviews[i].name = c->c[i].name;
        r->cviews[i].t = c->c[i].t;
        prom_hist_init(&r->qc[i].wait, rq_wait_bounds,
                       sizeof rq_wait_bounds / sizeof *rq_wait_bounds);
        snprintf(r->qc[i].full_msg, sizeof r->qc[i].full_msg,
                 "Server overloaded: router queue for class %s is full", c->c[i].name);
        snprintf(r->qc[i].timeout_msg, sizeof r->qc[i].timeout_msg,
                 "Server overloaded: timed out in the router queue for class %s", c->c[i].name);
    }
    r->q = classq_new(defs, c->n);
    free(defs);
    r->view.classes = r->cviews;
    r->view.nclasses = c->n;
    r->view.sel = r->sel;
    return r->q != NULL ? 0 : -1;
}

int rq_init(struct router *r, char *err, size_t errlen)
{
    /* The tick is there without classes too: a reload may bring some. */
    r->tick = evtimer_new(r->base, on_tick, r);
    r->kick = evtimer_new(r->base, on_kick, r);
    if (r->tick == NULL || r->kick == NULL)
        fatal("evtimer_new failed");
    if (r->cfg->classes.n > 0 && set_up(r, &r->cfg->classes) != 0) {
        snprintf(err, errlen, "policy classes: invalid class definitions");
        return -1;
    }
    return 0;
}

void rq_free(struct router *r)
{
    if (r->tick != NULL)
        event_free(r->tick);
    if (r->kick != NULL)
        event_free(r->kick);
    classq_free(r->q);
    free(r->qc);
    free(r->cviews);
}

/* A waiting request whose class is gone, and no class left to take it: it goes on to
 * selection as a request of a router without classes would (an answer of 529 or 503 if no
 * worker can take it). */
static void go_unclassed(struct rreq *q)
{
    struct pxreq *x = pxreq_of_state(q);

    q->cls = -1;
    pxreq_set_queue_wait(x, clock_seconds_since(&q->t_enq));
    proxy_forward(x);
}

void rq_reconfigure(struct router *r, const struct router_classes *was)
{
    const struct router_classes *c = &r->cfg->classes;
    struct classq *oq = r->q;
    struct rqclass *oqc = r->qc;
    struct classify_class *ocv = r->cviews;
    struct classq_entry **moved = NULL;
    int *map = NULL;
    size_t n = 0, kept = 0;

    if (oq != NULL) {
        moved = xcalloc(classq_total(oq) + 1, sizeof *moved);
        n = classq_drain(oq, moved);
        map = xcalloc(was->n, sizeof *map);
        router_cfg_class_map(was, c, map);
    }
    r->q = NULL;
    r->qc = NULL;
    r->cviews = NULL;
    memset(&r->view, 0, sizeof r->view);
    if (c->n > 0 && set_up(r, c) != 0)
        fatal("policy classes: invalid class definitions"); /* checked when they were read */
    /* A class that stays (by its name) keeps its counters: Prometheus sees one series. */
    for (size_t i = 0; i < was->n && oqc != NULL; i++) {
        int k = router_classes_find(c, was->c[i].name);

        if (k >= 0) {
            r->qc[k].dispatched = oqc[i].dispatched;
            r->qc[k].rej_full = oqc[i].rej_full;
            r->qc[k].rej_timeout = oqc[i].rej_timeout;
            r->qc[k].rej_busy = oqc[i].rej_busy;
            r->qc[k].wait = oqc[i].wait;
        }
    }
    /* Requests in flight that were classified before keep their old index: a generation
     * tells rq_count_busy() that it means nothing now. */
    r->cgen++;
    for (size_t i = 0; i < n && r->q != NULL; i++) {
        struct rreq *q = rreq_of(moved[i]);
        int k = map[q->cls]; /* a class: r->q has classes, so a default */

        if (strcmp(c->c[k].name, was->c[q->cls].name) == 0)
            kept++;
        classq_requeue(r->q, k, moved[i]); /* cannot fail: k is a class, the entry was queued */
        q->cls = k;
        q->cgen = r->cgen;
    }
    classq_free(oq);
    free(oqc);
    free(ocv);
    if (n > 0)
        log_info("reload: of %zu requests waiting in the policy-class queue, %zu stay in their "
                 "class, %zu %s",
                 n, kept, n - kept,
                 r->q != NULL ? "move to the default class" : "go on to selection");
    /* No class left: what waited goes on, oldest first. */
    for (size_t i = 0; i < n && r->q == NULL; i++)
        go_unclassed(rreq_of(moved[i]));
    free(moved);
    free(map);
    rq_kick(r); /* other thresholds, other classes: what can go now goes */
}

static const char *req_header(const void *arg, const char *name)
{
    return http_req_header(arg, name);
}

static const char *rule_header(void *arg, const char *name)
{
    return http_req_header(arg, name);
}

/* The request's class: the config's rules, then the classifier, if any, may change it. */
static int classify(struct router *r, const struct rreq *q, const struct http_req *req)
{
    int builtin =
        router_classes_classify(&r->cfg->classes, rule_header, (void *) req, q->model, q->tokens);
    struct classify_request facts = {q->model, q->tokens, req_header, req};
    struct busy_thresholds reject;
    struct admit_classify c;
    int k;

    if (r->classifier == NULL)
        return builtin;
    bt_registry_get(r->bt, q->model, &reject);
    classify_init(&c, &r->view, &facts, builtin, &reject, clock_mono_ms());
    k = classify_run(&c, r->classifier, NULL);
    return k >= 0 ? k : builtin;
}

enum px_verdict rq_arrive(struct router *r, struct pxreq *x, struct rreq *q,
                          const struct http_req *req)
{
    const struct rclass *d;
    int cls;

    if (r->q == NULL || q->bypass)
        return PX_FORWARD;
    router_read_request(r, q, req);
    if (q->pinned == -2)
        return PX_FORWARD; /* selection answers it: no worker has that name */
    cls = classify(r, q, req);
    if (cls < 0)
        cls = r->cfg->classes.default_cls;
    q->cls = cls;
    q->cgen = r->cgen;
    d = class_def(r, cls);
    if (classq_depth(r->q, cls) == 0 && class_has_room(r, cls, q)) {
        r->qc[cls].dispatched++;
        prom_hist_observe(&r->qc[cls].wait, 0.0);
        return PX_FORWARD;
    }
    if (classq_push(r->q, cls, &q->qe, q->tokens, sel_routable_n(r->sel, clock_mono_ms())) != 0) {
        r->qc[cls].rej_full++;
        proxy_answer_error(x, r->cfg->overload_status, "overloaded_error", r->qc[cls].full_msg,
                           router_cfg_retry_after(r->cfg), "class-queue-full", OUT_REJECTED);
        return PX_ANSWERED;
    }
    clock_mono(&q->t_enq);
    if (d->queue_timeout_ms > 0)
        proxy_wait_deadline(x, d->queue_timeout_ms);
    arm_tick(r);
    return PX_WAIT;
}

void rq_expired(struct router *r, struct pxreq *x, struct rreq *q)
{
    if (!classq_queued(&q->qe))
        return;
    classq_remove(r->q, &q->qe);
    r->qc[q->cls].rej_timeout++;
    proxy_answer_error(x, r->cfg->overload_status, "overloaded_error", r->qc[q->cls].timeout_msg,
                       router_cfg_retry_after(r->cfg), "class-queue-timeout", OUT_QUEUE_TIMEOUT);
}

void rq_finish(struct router *r, struct rreq *q)
{
    if (r->q != NULL && classq_queued(&q->qe))
        classq_remove(r->q, &q->qe); /* a client that left, or the proxy shutting down */
}

void rq_count_busy(struct router *r, const struct rreq *q)
{
    if (r->q != NULL && q->cls >= 0 && q->cgen == r->cgen)
        r->qc[q->cls].rej_busy++;
}

static int ready(void *arg, int cls, const struct classq_entry *head)
{
    return class_has_room(arg, cls, rreq_of(head));
}

/* A head goes: it is out of the queue already; proxy_forward() picks its worker and books
 * it in this call (or answers it), so the next ready() sees the booking. */
static void go(void *arg, struct classq_entry *e)
{
    struct router *r = arg;
    struct rreq *q = rreq_of(e);
    double waited = clock_seconds_since(&q->t_enq);
    struct pxreq *x = pxreq_of_state(q);

    r->qc[q->cls].dispatched++;
    prom_hist_observe(&r->qc[q->cls].wait, waited);
    pxreq_set_queue_wait(x, waited);
    proxy_forward(x);
}

void rq_kick(struct router *r)
{
    if (r->q == NULL || proxy_closing(r->px))
        return;
    if (r->dispatching) {
        r->kick_again = 1; /* a dispatch ended an exchange: the outer loop goes round again */
        return;
    }
    r->dispatching = 1;
    do {
        r->kick_again = 0;
        classq_dispatch(r->q, ready, go, r);
    } while (r->kick_again && classq_total(r->q) > 0);
    r->dispatching = 0;
    if (classq_total(r->q) > 0)
        arm_tick(r);
}

void rq_render_metrics(struct router *r, struct buf *out)
{
    static const char *const reasons[] = {"queue_full", "queue_timeout", "all_busy"};
    const struct router_classes *c = &r->cfg->classes;

    if (r->q == NULL)
        return;
    prom_family(out, "dynamo_frontend_router_queue_pending_requests", "gauge",
                "Requests waiting in the router's policy-class queue");
    for (size_t i = 0; i < c->n; i++) {
        struct buf l;

        buf_init(&l);
        prom_label(&l, "policy_class", c->c[i].name);
        prom_sample(out, "dynamo_frontend_router_queue_pending_requests", l.data,
                    (double) classq_depth(r->q, (int) i));
        buf_free(&l);
    }
    prom_family(out, "admit_router_queue_wait_seconds", "histogram",
                "Time from arrival to dispatch, per policy class (0 for those that went at once)");
    for (size_t i = 0; i < c->n; i++) {
        struct buf l;

        buf_init(&l);
        prom_label(&l, "policy_class", c->c[i].name);
        prom_hist_samples(out, "admit_router_queue_wait_seconds", l.data, &r->qc[i].wait);
        buf_free(&l);
    }
    prom_family(out, "admit_router_queue_dispatched_total", "counter",
                "Requests a policy class sent on to selection");
    for (size_t i = 0; i < c->n; i++) {
        struct buf l;

        buf_init(&l);
        prom_label(&l, "policy_class", c->c[i].name);
        prom_sample(out, "admit_router_queue_dispatched_total", l.data,
                    (double) r->qc[i].dispatched);
        buf_free(&l);
    }
    prom_family(out, "admit_router_queue_rejections_total", "counter",
                "Requests of a policy class answered with the overload status, by reason");
    for (size_t i = 0; i < c->n; i++)
        for (size_t k = 0; k < 3; k++) {
            uint64_t v = k == 0   ? r->qc[i].rej_full
                         : k == 1 ? r->qc[i].rej_timeout
                                  : r->qc[i].rej_busy;
            struct buf l;

            buf_init(&l);
            prom_label(&l, "policy_class", c->c[i].name);
            prom_label(&l, "reason", reasons[k]);
            prom_sample(out, "admit_router_queue_rejections_total", l.data, (double) v);
            buf_free(&l);
        }
}
