/* router_pd: admit-router's disaggregated requests (pools.h, pdbody.h; docs/router.md,
 * "Disaggregated prefill and decode").
 *
 * A request of a model with prefill or decode workers needs one of each with room, chosen and
 * booked together at its dispatch (the prefill worker its uncached tokens, the decode worker its
 * prompt's blocks): a prefill that could not be placed for decode would pin its KV on the
 * prefill worker for nothing. The prefill leg is a worker call (wcall.h) of vLLM's NIXL proxy
 * flow; its answer releases the prefill booking and either hands its kv_transfer_params to the
 * decode leg, which the proxy relays as any request (to the decode worker booked, pick() through
 * rpd_pick()), or is the client's answer. Every failure answers the client once, and the end of
 * the exchange (on_finish, rpd_end()) releases whatever is still booked or held. */
#include "router_impl.h"
#include "admission/bt_api.h"
#include "http/proxy.h"
#include "model_route.h"
#include "pools.h"
#include "report.h"
#include "util/clock.h"
#include "util/log.h"
#include "wcall.h"
#include "wire/prom.h"
#include "workers.h"

#include <stdio.h>
#include <string.h>

/* The largest prefill answer read (a one-token completion and its transfer's block ids: a few
 * KiB; vLLM's with logprobs of a long prompt more). */
#define PD_ANSWER_MAX (8u << 20)

static const char *const pd_result_names[PD__COUNT] = {
    "handoff",    "done",      "aggregated",     "prefill_busy",    "decode_busy",
    "no_prefill", "no_decode", "prefill_failed", "prefill_timeout", "prefill_invalid",
    "cancelled"};

/* ---- disaggregated requests: a prefill leg, then the decode leg (pools.h, pdbody.h) ------ */

/* Lets go of the prefill leg: its call (closed: the worker sees the close and stops), its
 * booking and its worker. Idempotent. */
static void pd_release_prefill(struct router *r, struct rreq *q)
{
    wcall_cancel(q->pcall);
    q->pcall = NULL;
    sel_release(r->sel, &q->pbk);
    if (q->pheld >= 0)
        workers_release(r->ws, q->pheld);
    q->pheld = -1;
}

/* The pair could not be had and the model has no aggregated worker: the overload status when
 * a pool is busy, 503 when one has no worker, the pool named in X-Admitd-Reason. */
static enum px_verdict pd_refuse(struct router *r, struct rreq *q, const struct pools_choice *ch)
{
    int prefill = ch->failed == ADMIT_LOAD_ROLE_PREFILL;
    char msg[MODEL_MAX + 96];

    if (ch->res == SEL_ALL_BUSY) {
        r->pd_results[prefill ? PD_R_PREFILL_BUSY : PD_R_DECODE_BUSY]++;
        snprintf(msg, sizeof msg, "All %s workers are busy, please retry later",
                 prefill ? "prefill" : "decode");
        report_rejected(r->rep, REPORT_ALL_BUSY);
        report_model_rejected(r->rep, q->model, q->req->target);
        cq_count_busy(r->cq, &q->cq);
        proxy_answer_error(q->cq.x, r->cfg->overload_status, "overloaded_error", msg,
                           router_cfg_retry_after(r->cfg), prefill ? "prefill-busy" : "decode-busy",
                           OUT_REJECTED);
    } else {
        r->pd_results[prefill ? PD_R_NO_PREFILL : PD_R_NO_DECODE]++;
        snprintf(msg, sizeof msg, "Server unavailable: no %s worker serving %.128s is available",
                 prefill ? "prefill" : "decode", q->model[0] ? q->model : "the model");
        report_rejected(r->rep, REPORT_NO_WORKER);
        proxy_answer_error(q->cq.x, 503, "unavailable_error", msg, router_cfg_retry_after(r->cfg),
                           prefill ? "no-prefill-worker" : "no-decode-worker", OUT_UNAVAILABLE);
    }
    return PX_ANSWERED;
}

/* The prefill leg failed: both bookings go (the decode one when the exchange ends, in this
 * call), and the client gets one answer. */
static void pd_fail(struct router *r, struct rreq *q, enum pd_result res, int status,
                    const char *msg, const char *reason)
{
    r->pd_results[res]++;
    proxy_answer_error(q->cq.x, status, status == 504 ? "timeout_error" : "upstream_error", msg, 0,
                       reason, res == PD_R_PREFILL_TIMEOUT ? OUT_TIMEOUT : OUT_UPSTREAM_ERROR);
}

static int pd_start_prefill(struct router *r, struct rreq *q, int w, unsigned rank, int64_t cached,
                            uint64_t now);

/* A prefill worker's admitd turned the prefill leg away (its own cap, another router's
 * traffic): nothing was done there, so it goes, once, to another prefill worker with room (the
 * one that refused is skipped for OVERLOAD_MARK_MS), as a relayed request migrates after an
 * overload answer. 1 when it went, 0 when no other can take it. */
static int pd_prefill_elsewhere(struct router *r, struct rreq *q, int refused)
{
    struct pools_req pr;
    struct busy_thresholds t;
    struct sel_hit hits[KVR_MAX_HITS];
    uint64_t now = clock_mono_ms();
    size_t nhits = 0;
    int64_t cached;
    int w;
    unsigned rank;

    if (q->pretried ||
        !pools_split(r->pools, sel_workers(r->sel), mroute_eligible(r->models, q->model, -1), &pr))
        return 0;
    q->pretried = 1;
    bt_registry_get(r->bt, q->model, &t);
    if (q->nkeys > 0)
        nhits = kvr_match(r->kv, q->keys, q->nkeys, q->tokens, now, hits);
    if (pools_pick_prefill(r->sel, &pr, (int64_t) now, q->tokens, &t, hits, nhits, refused, &w,
                           &rank, &cached) != SEL_OK)
        return 0;
    pd_start_prefill(r, q, w, rank, cached, now); /* a failure there answers the client */
    return 1;
}

/* The prefill worker answered (or failed): the decode leg goes on with the transfer's
 * parameters, or the answer is the client's, or the request fails once. */
static void on_prefill(void *arg, enum wcall_end end, int status, const char *ans, size_t len)
{
    struct rreq *q = arg;
    struct router *r = q->r;
    struct buf params;
    char msg[160], rid[300];
    const char *id = http_req_header(q->req, "X-Request-Id");
    int refused;

    q->pcall = NULL;
    /* The prefill worker's answer, when it is the client's, names the request as the worker
     * did: the client's X-Request-Id echoed, as an engine's answer has it. */
    rid[0] = '\0';
    if (id != NULL && strlen(id) < sizeof rid - 20)
        snprintf(rid, sizeof rid, "X-Request-Id: %s\r\n", id);
    /* Its usage says what the prefill worker found cached: the index's prediction corrected. */
    if (end == WCALL_OK && status == 200 && q->pcached > 0 && q->pbk.booked) {
        int64_t c = usage_cached_tokens(ans, len);

        if (c >= 0 || c == USAGE_CACHED_UNSAID)
            kvr_correct(r->kv, q->pbk.worker, q->pbk.rank, q->keys, q->nkeys, q->exact, q->pcached,
                        c);
    }
    refused = q->pheld;
    if (end == WCALL_OK && status == r->cfg->overload_status && refused >= 0)
        sel_mark_overloaded(r->sel, refused, (int64_t) clock_mono_ms() + OVERLOAD_MARK_MS);
    pd_release_prefill(r, q);
    cq_kick_soon(r->cq); /* its prefill is over: room for a waiting request, perhaps */
    if (end != WCALL_OK) {
        pd_fail(r, q, end == WCALL_TIMEOUT ? PD_R_PREFILL_TIMEOUT : PD_R_PREFILL_FAILED,
                end == WCALL_TIMEOUT ? 504 : 502,
                end == WCALL_TIMEOUT ? "Gateway timeout: the prefill worker did not answer in time"
                                     : "Bad gateway: the prefill worker's answer broke",
                end == WCALL_TIMEOUT ? "prefill-timeout" : "prefill-failed");
        return;
    }
    if (status == r->cfg->overload_status && pd_prefill_elsewhere(r, q, refused))
        return;
    if (status == r->cfg->overload_status) {
        /* No other prefill worker could take it: busy, as a pool with no room is. */
        r->pd_results[PD_R_PREFILL_BUSY]++;
        report_rejected(r->rep, REPORT_ALL_BUSY);
        report_model_rejected(r->rep, q->model, q->req->target);
        proxy_answer_error(q->cq.x, status, "overloaded_error",
                           "All prefill workers are busy, please retry later",
                           router_cfg_retry_after(r->cfg), "prefill-busy", OUT_REJECTED);
        return;
    }
    if (status != 200) {
        /* A client error is the client's to see (the decode leg would refuse it the same);
         * anything else is the prefill worker's failure. */
        if (status >= 400 && status < 500) {
            r->pd_results[PD_R_PREFILL_FAILED]++;
            proxy_answer_as(q->cq.x, status, "application/json", ans, len, rid, "prefill-error",
                            OUT_UPSTREAM_ERROR);
            return;
        }
        snprintf(msg, sizeof msg, "Bad gateway: the prefill worker answered %d", status);
        pd_fail(r, q, PD_R_PREFILL_FAILED, 502, msg, "prefill-failed");
        return;
    }
    buf_init(&params);
    switch (pd_answer_read(ans, len, &q->facts, &params)) {
    case PD_HANDOFF:
        buf_reset(&q->dbody); /* the prefill leg's body: done with */
        if (pd_decode_body(q->req->body, q->req->body_len, params.data, params.len, &q->dbody) != 0)
            goto invalid;
        r->pd_results[PD_R_HANDOFF]++;
        pxreq_set_body(q->cq.x, q->dbody.data, q->dbody.len);
        buf_free(&params);
        proxy_forward(q->cq.x); /* to the decode worker it holds (pick) */
        return;
    case PD_DONE:
        buf_free(&params);
        r->pd_results[PD_R_DONE]++;
        sel_release(r->sel, &q->bk); /* no decode leg */
        buf_reset(&q->dbody);
        if (!q->facts.stream) {
            proxy_answer_as(q->cq.x, 200, "application/json", ans, len, rid, NULL, OUT_OK);
        } else if (pd_answer_sse(ans, len, &q->facts, &q->dbody) == 0) {
            proxy_answer_as(q->cq.x, 200, "text/event-stream", q->dbody.data, q->dbody.len, rid,
                            NULL, OUT_OK);
        } else {
            goto invalid_done;
        }
        return;
    case PD_INVALID:
        break;
    }
invalid:
    buf_free(&params);
invalid_done:
    pd_fail(r, q, PD_R_PREFILL_INVALID, 502,
            "Bad gateway: the prefill worker's answer has no kv_transfer_params",
            "prefill-invalid");
}

/* The extra field lines of a prefill leg: the client's request id (the two legs share it, as
 * vLLM's proxy sends them) and its credentials (a worker may require them). */
static void pd_headers(const struct http_req *req, char *out, size_t outlen)
{
    static const char *const pass[] = {"X-Request-Id", "Authorization"};
    size_t n = 0;

    out[0] = '\0';
    for (size_t i = 0; i < sizeof pass / sizeof *pass; i++) {
        const char *v = http_req_header(req, pass[i]);
        int k;

        if (v != NULL && (k = snprintf(out + n, outlen - n, "%s: %s\r\n", pass[i], v)) > 0 &&
            (size_t) k < outlen - n)
            n += (size_t) k;
        else
            out[n] = '\0';
    }
}

/* Books the prefill leg on (w, rank), cached tokens of it predicted there, and posts it (its
 * body in q->dbody): 0, or -1 when no connection could even start (then the client is
 * answered, and the exchange's end releases the rest). */
static int pd_start_prefill(struct router *r, struct rreq *q, int w, unsigned rank, int64_t cached,
                            uint64_t now)
{
    struct wcall_req rq = {0};
    char headers[512];

    sel_book_cached(r->sel, &q->pbk, w, rank, q->tokens, cached);
    kvr_routed(r->kv, w, rank, q->keys, q->nkeys, q->exact, now);
    q->pcached = cached;
    q->pheld = w;
    pd_headers(q->req, headers, sizeof headers);
    rq.target = q->req->target;
    rq.headers = headers;
    rq.body = q->dbody.data;
    rq.len = q->dbody.len;
    rq.timeout_ms = r->cfg->upstream_timeout_ms;
    rq.body_max = PD_ANSWER_MAX;
    if ((q->pcall = wcall_start(r->base, workers_hold(r->ws, w), &rq, on_prefill, q)) != NULL)
        return 0;
    pd_release_prefill(r, q);
    pd_fail(r, q, PD_R_PREFILL_FAILED, 503,
            "Server unavailable: the prefill worker could not be reached", "prefill-failed");
    return -1;
}

/* rpd_dispatch: the pair chosen and booked at once, the prefill leg started. */
enum px_verdict rpd_dispatch(struct router *r, struct rreq *q)
{
    struct pools_req pr;
    struct pools_choice ch;
    struct busy_thresholds t;
    struct sel_hit hits[KVR_MAX_HITS];
    uint64_t now;
    size_t nhits = 0;

    if (q->pinned != -1 || q->bypass || !pools_any(r->pools) ||
        !pools_split(r->pools, sel_workers(r->sel), mroute_eligible(r->models, q->model, -1), &pr))
        return PX_FORWARD;
    now = clock_mono_ms();
    bt_registry_get(r->bt, q->model, &t);
    if (q->nkeys > 0)
        nhits = kvr_match(r->kv, q->keys, q->nkeys, q->tokens, now, hits);
    pools_pick(r->sel, &pr, (int64_t) now, q->tokens, &t, hits, nhits, &ch);
    if (ch.res != SEL_OK) {
        if (!pr.agg)
            return pd_refuse(r, q, &ch);
        r->pd_results[PD_R_AGGREGATED]++;
        q->agg = 1;
        return PX_FORWARD;
    }
    /* The prefill leg's body, kept in dbody until the decode leg's replaces it (a second
     * prefill worker gets it again). */
    if (pd_prefill_body(q->req->body, q->req->body_len, &q->dbody, &q->facts) != 0) {
        proxy_answer_error(q->cq.x, 400, "invalid_request_error",
                           "A disaggregated model's request body must be a JSON object", 0,
                           "bad-request", OUT_BAD_REQUEST);
        return PX_ANSWERED;
    }
    /* Both booked at once: the prefill's tokens on its worker (what it does not cache), the
     * decode leg's blocks on the other (its KV comes whole, transferred: no prefill there). */
    sel_book_cached(r->sel, &q->bk, ch.dw, ch.dr, q->tokens, q->tokens);
    q->pd = 1;
    router_hold(r, q, ch.dw);
    proxy_wait_clear(q->cq.x); /* a class's queue timeout is over: it waits on its prefill */
    if (pd_start_prefill(r, q, ch.pw, ch.pr, ch.cached, now) != 0)
        return PX_ANSWERED;
    return PX_WAIT;
}

/* pick() of a disaggregated model's request: the decode worker its dispatch booked, another
 * decode worker when that one refused before any byte (the same transfer parameters), or, for
 * one the aggregated workers take, the choice among them. */
struct upstream *rpd_pick(struct router *r, struct rreq *q, const struct upstream *exclude,
                          int *status, char *msg, size_t msglen, int *busy)
{
    struct pools_req pr;
    struct busy_thresholds t;
    struct sel_hit hits[KVR_MAX_HITS];
    uint64_t now = clock_mono_ms();
    size_t nhits = 0;
    int64_t cached = 0;
    int w, ex = exclude != NULL ? workers_index_of(r->ws, exclude) : -1;
    unsigned rank;
    enum sel_result res;

    if (q->pd && exclude == NULL && q->held >= 0)
        return workers_upstream(r->ws, q->held);
    sel_release(r->sel, &q->bk); /* a migration: the worker it leaves holds nothing of it */
    bt_registry_get(r->bt, q->model, &t);
    if (!pools_split(r->pools, sel_workers(r->sel), mroute_eligible(r->models, q->model, -1),
                     &pr)) {
        /* Its model's prefill and decode workers all left since its dispatch: a decode leg has
         * nowhere to go, a request for the aggregated workers goes to any that serves it. */
        pr.pool[ADMIT_LOAD_ROLE_BOTH] = mroute_eligible(r->models, q->model, -1);
        pr.pool[ADMIT_LOAD_ROLE_DECODE] = NULL;
    }
    if (q->pd && pr.pool[ADMIT_LOAD_ROLE_DECODE] == NULL) {
        res = SEL_NO_WORKER;
    } else if (q->pd) {
        res = pools_pick_decode(r->sel, &pr, (int64_t) now, q->tokens, &t, ex, &w, &rank);
    } else {
        if (q->nkeys > 0)
            nhits = kvr_match(r->kv, q->keys, q->nkeys, q->tokens, now, hits);
        res = sel_pick_kv(r->sel, (int64_t) now, q->tokens, &t, ex, -1,
                          pr.pool[ADMIT_LOAD_ROLE_BOTH], hits, nhits, &w, &rank, &cached);
    }
    if (res == SEL_OK) {
        sel_book_cached(r->sel, &q->bk, w, rank, q->tokens, q->pd ? q->tokens : cached);
        if (!q->pd) {
            kvr_routed(r->kv, w, rank, q->keys, q->nkeys, q->exact, now);
            q->predicted = cached;
            usage_tail_reset(&q->tail);
        }
        return router_hold(r, q, w);
    }
    *busy = res == SEL_ALL_BUSY;
    *status = *busy ? r->cfg->overload_status : 503;
    snprintf(msg, msglen,
             *busy ? "All %s workers are busy, please retry later"
                   : "Server unavailable: no %s worker is available",
             q->pd ? "decode" : "aggregated");
    report_rejected(r->rep, *busy ? REPORT_ALL_BUSY : REPORT_NO_WORKER);
    return NULL;
}

void rpd_end(struct router *r, struct rreq *q)
{
    if (q->pcall != NULL)
        r->pd_results[PD_R_CANCELLED]++; /* the client left, or a drain, during its prefill */
    pd_release_prefill(r, q);
    buf_free(&q->dbody);
}

void rpd_render_metrics(const struct router *r, struct buf *out)
{
    if (pools_any(r->pools))
        prom_labelled(out, "admit_router_disagg_total", "counter",
                      "Requests of disaggregated models, by how their dispatch and prefill leg "
                      "ended",
                      "result", pd_result_names, r->pd_results, PD__COUNT);
}
