/* router: the hub of admit-router (see router.h). It makes the router's parts and wires
 * them to the proxy's hooks, and owns only what one exchange is: its per-exchange state, read
 * once from the request (model, prompt tokens, pin), its booking and the worker it holds.
 *
 * The parts, each created and freed here and given the handles it needs:
 *   select.h       the selection view: the workers' ranks, their load, booking, the pass
 *   model_route.h  which workers serve which model: the 404, the filter, /busy_threshold
 *   workers.h      the worker table: adding, retiring, holding; load messages; liveness
 *   class_queue.h  the policy-class queue, the router's own admission
 *   report.h       the rejections' counters, the fleet's families and /load
 *   kvroute.h      the prefix index: a request's block keys, the ranks predicted to hold them
 *   tokenize.h     the workers' /tokenize, for the token ids of a text request (--tokenize)
 *   admission/bt_api.h  the thresholds of each model, /busy_threshold */
#include "router.h"
#include "admission/bt_api.h"
#include "admission/tokcount.h"
#include "class_queue.h"
#include "http/proxy.h"
#include "kvroute.h"
#include "model_route.h"
#include "pdbody.h"
#include "pools.h"
#include "report.h"
#include "select.h"
#include "tokenize.h"
#include "util/clock.h"
#include "util/jscan.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "wcall.h"
#include "wire/httputil.h"
#include "wire/prom.h"
#include "wire/usage.h"
#include "workers.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static const char *const pd_result_names[PD__COUNT] = {
    "handoff",    "done",      "aggregated",     "prefill_busy",    "decode_busy",
    "no_prefill", "no_decode", "prefill_failed", "prefill_timeout", "prefill_invalid",
    "cancelled"};

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
    int pheld; /* the prefill worker held for the call; -1 none */
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

/* ---- what a request says ------------------------------------------------------------- */

/* 1 when key is "model" (decoded: escapes may spell it). */
static int is_model_key(const struct jscan_str *key)
{
    char name[6];

    if (!key->esc)
        return key->len == 5 && memcmp(key->raw, "model", 5) == 0;
    return jscan_str_copy(key, name, sizeof name - 1) == 5 && memcmp(name, "model", 5) == 0;
}

/* The top-level "model" of body by jscan, which validates the whole text as strictly as
 * json_loadb() and builds nothing: 1 with out set ("" when the object has no string model)
 * when the body is a valid JSON object with no key twice, else 0 (out untouched): not an
 * object, invalid, a key twice (which jansson allows, the last one winning), past the
 * scanner's limits (JSCAN_TEXT_MAX bytes...). On a 2,048-token prompt the tree jansson builds
 * took more of the router's time than all the rest of a request (issue 25). */
static int model_scan(const char *body, size_t len, char *out, size_t outlen)
{
    struct jscan s;
    struct jscan_str key, val;
    int c;

    if (jscan_init(&s, body, len) != 0 || jscan_peek(&s) != '{')
        return 0;
    s.p++;
    if (jscan_open_object(&s) != 0)
        return 0;
    out[0] = '\0';
    if (jscan_peek(&s) == '}') {
        s.p++;
    } else {
        for (;;) {
            if (jscan_peek(&s) != '"' || jscan_string(&s, &key) != 0 || jscan_key(&s, &key) != 0 ||
                jscan_peek(&s) != ':')
                return 0;
            s.p++;
            if (is_model_key(&key) && jscan_peek(&s) == '"') {
                size_t n;

                if (jscan_string(&s, &val) != 0)
                    return 0;
                n = jscan_str_copy(&val, out, outlen - 1); /* cut as snprintf cuts */
                out[n < outlen - 1 ? n : outlen - 1] = '\0';
            } else if (jscan_skip(&s) != 0) {
                return 0;
            }
            if ((c = jscan_peek(&s)) == '}') {
                s.p++;
                break;
            }
            if (c != ',')
                return 0;
            s.p++;
        }
    }
    jscan_close(&s);
    return jscan_peek(&s) == -1;
}

/* The request's "model", read from its JSON body ("" when there is none, or the body is not
 * JSON). jansson decides what the scan does not: the same answer, at a tree's cost. */
static void model_of(const struct http_req *req, char *out, size_t outlen)
{
    json_t *root, *m;

    out[0] = '\0';
    if (req->body_len == 0 || model_scan(req->body, req->body_len, out, outlen))
        return;
    out[0] = '\0';
    root = json_loadb(req->body, req->body_len, 0, NULL);
    m = json_object_get(root, "model");
    if (json_is_string(m))
        snprintf(out, outlen, "%s", json_string_value(m));
    json_decref(root);
}

/* Reads a request's prompt tokens, model and pin into q, once per exchange. */
static void read_request(struct router *r, struct rreq *q, const struct http_req *req)
{
    const char *pin;
    struct tokcount tc;

    if (q->counted)
        return;
    q->counted = 1;
    model_of(req, q->model, sizeof q->model);
    if (!q->bypass) {
        q->nkeys = (uint32_t) kvr_keys(r->kv, q->model, req->body, req->body_len,
                                       r->cfg->chars_per_token, &tc, q->keys, &q->exact);
        q->tokens = tc.tokens > INT64_MAX ? INT64_MAX : (int64_t) tc.tokens;
    }
    if ((pin = http_req_header(req, ROUTER_PIN_HEADER)) != NULL) {
        int k = workers_pin(r->ws, pin); /* its index stays this worker's until the end */

        q->pinned = k >= 0 ? k : -2;
    }
}

/* Exchange q now holds worker k's upstream (a pick, or a migration's): the worker it
 * held before, if another, is let go. */
static struct upstream *hold(struct router *r, struct rreq *q, int k)
{
    struct upstream *up;

    if (q->held == k)
        return workers_upstream(r->ws, k);
    up = workers_hold(r->ws, k);
    if (q->held >= 0)
        workers_release(r->ws, q->held);
    q->held = k;
    return up;
}

/* ---- admission: count and book every exchange ---------------------------------------- */

static void changed(struct router *r)
{
    if (r->on_change != NULL)
        r->on_change(r->on_change_arg);
}

static void on_begin(void *arg, struct pxreq *x, const struct http_req *req)
{
    struct router *r = arg;
    struct rreq *q = pxreq_state(x);

    cq_begin(&q->cq, x);
    q->r = r;
    q->pinned = -1;
    q->held = -1;
    q->pheld = -1;
    q->bypass = http_method_is_safe(req->method) || http_req_is_tokenizer(req);
    if (q->bypass) {
        if (http_method_is_safe(req->method))
            r->m->requests_bypass++;
        else
            r->m->tokenizer_reqs++; /* a client's own /tokenize: as admitd, not gated */
        r->m->inflight_bypass++;
    } else
        r->m->inflight_nocap++;
}

/* ---- --tokenize: the token ids of a text request, from a worker's tokenizer ---------------- */

/* The worker whose /tokenize a request of q's asks: its pin, else one alive that serves its
 * model, in turns (busy or not: admitd passes /tokenize outside its gate); -1 none. */
static int tokenizer_of(struct router *r, const struct rreq *q)
{
    const uint64_t *elig = mroute_eligible(r->models, q->model, q->pinned);
    int64_t now = (int64_t) clock_mono_ms();
    int n = sel_workers(r->sel);

    if (q->pinned >= 0)
        return sel_alive(r->sel, q->pinned, now) ? q->pinned : -1;
    for (int i = 0; i < n; i++) {
        int k = (r->tok_next + i) % n;

        if (sel_eligible(elig, (size_t) k) && sel_alive(r->sel, k, now)) {
            r->tok_next = (k + 1) % n;
            return k;
        }
    }
    return -1;
}

static enum px_verdict pd_dispatch(struct router *r, struct rreq *q);

/* A request that passed the router's checks goes on to its class's queue (or selection); one
 * of a disaggregated model that may go starts its prefill leg. */
static enum px_verdict go_on(struct router *r, struct rreq *q)
{
    enum px_verdict v =
        cq_arrive(r->cq, &q->cq, q->req, q->model, q->tokens, q->pinned, q->keys, q->nkeys);

    return v == PX_FORWARD ? pd_dispatch(r, q) : v;
}

/* A request leaves its class's queue: the same way on. */
static void cq_go(void *arg, struct pxreq *x)
{
    if (pd_dispatch(arg, pxreq_state(x)) == PX_FORWARD)
        proxy_forward(x);
}

/* The tokenizer answered, or failed (then the text keys stay): the request goes on. */
static void on_tokenized(void *arg, enum tokz_result res, const uint64_t *ids, size_t n,
                         int64_t count)
{
    struct rreq *q = arg;
    struct router *r = q->r;

    q->tok = NULL;
    if (res == TOKZ_OK) {
        q->nkeys = (uint32_t) kvr_keys_ids(r->kv, q->model, q->req->body, q->req->body_len, ids, n,
                                           q->keys);
        q->exact = 1;
        if (count > 0)
            q->tokens = count; /* the engine's own count, for the booking too */
    }
    if (go_on(r, q) == PX_FORWARD)
        proxy_forward(q->cq.x);
}

/* With --tokenize, a request keyed by its text asks a worker's tokenizer for its ids first:
 * 1 when it waits for the answer (on_tokenized() lets it go on), 0 when it goes on now with
 * its text keys (tokenize off, no index, ids of its own, no prompt /tokenize takes, no
 * worker, no connection). */
static int tokenize(struct router *r, struct rreq *q)
{
    struct buf body;
    int k;

    if (!r->cfg->tokenize || !kvr_on(r->kv) || q->exact)
        return 0;
    buf_init(&body);
    if (tokz_body(q->req->body, q->req->body_len, &body) != 0) {
        buf_free(&body);
        return 0;
    }
    if ((k = tokenizer_of(r, q)) < 0) {
        tokz_count(r->tz, TOKZ_NO_WORKER);
    } else {
        /* held as a pick holds it: a retired worker stays until the call is over */
        q->tok = tokz_start(r->tz, hold(r, q, k), body.data, body.len, r->cfg->tokenize_timeout_ms,
                            kvr_max_ids(r->kv), on_tokenized, q);
    }
    buf_free(&body);
    return q->tok != NULL;
}

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

/* The prefill worker answered (or failed): the decode leg goes on with the transfer's
 * parameters, or the answer is the client's, or the request fails once. */
static void on_prefill(void *arg, enum wcall_end end, int status, const char *ans, size_t len)
{
    struct rreq *q = arg;
    struct router *r = q->r;
    struct buf params;
    char msg[160], rid[300];
    const char *id = http_req_header(q->req, "X-Request-Id");

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
    if (end == WCALL_OK && status == r->cfg->overload_status && q->pheld >= 0)
        sel_mark_overloaded(r->sel, q->pheld, (int64_t) clock_mono_ms() + OVERLOAD_MARK_MS);
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

/* A request that may go on: one of a disaggregated model gets its pair of workers, both
 * booked now, and its prefill leg starts (PX_WAIT: the answer's callback goes on), or the
 * model's aggregated workers take it (PX_FORWARD, pick() among them), or it is answered
 * (PX_ANSWERED); any other request goes on to pick() (PX_FORWARD). */
static enum px_verdict pd_dispatch(struct router *r, struct rreq *q)
{
    struct pools_req pr;
    struct pools_choice ch;
    struct busy_thresholds t;
    struct sel_hit hits[KVR_MAX_HITS];
    struct wcall_req rq = {0};
    struct buf body;
    char headers[512];
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
    buf_init(&body);
    if (pd_prefill_body(q->req->body, q->req->body_len, &body, &q->facts) != 0) {
        buf_free(&body);
        proxy_answer_error(q->cq.x, 400, "invalid_request_error",
                           "A disaggregated model's request body must be a JSON object", 0,
                           "bad-request", OUT_BAD_REQUEST);
        return PX_ANSWERED;
    }
    /* Both booked at once: the prefill's tokens on its worker (what it does not cache), the
     * decode leg's blocks on the other (its KV comes whole, transferred: no prefill there). */
    sel_book_cached(r->sel, &q->pbk, ch.pw, ch.pr, q->tokens, ch.cached);
    kvr_routed(r->kv, ch.pw, ch.pr, q->keys, q->nkeys, q->exact, now);
    q->pcached = ch.cached;
    sel_book_cached(r->sel, &q->bk, ch.dw, ch.dr, q->tokens, q->tokens);
    q->pd = 1;
    hold(r, q, ch.dw);
    q->pheld = ch.pw;
    pd_headers(q->req, headers, sizeof headers);
    rq.target = q->req->target;
    rq.headers = headers;
    rq.body = body.data;
    rq.len = body.len;
    rq.timeout_ms = r->cfg->upstream_timeout_ms;
    rq.body_max = 8u << 20;
    q->pcall = wcall_start(r->base, workers_hold(r->ws, ch.pw), &rq, on_prefill, q);
    buf_free(&body);
    proxy_wait_clear(q->cq.x); /* a class's queue timeout is over: it waits on its prefill */
    if (q->pcall == NULL) {
        pd_release_prefill(r, q);
        pd_fail(r, q, PD_R_PREFILL_FAILED, 503,
                "Server unavailable: the prefill worker could not be reached", "prefill-failed");
        return PX_ANSWERED;
    }
    return PX_WAIT;
}

/* ---- admission: the router's hooks, continued --------------------------------------------- */

/* Without policy classes every request goes on to selection; with them, it may wait. */
static enum px_verdict on_arrive(void *arg, struct pxreq *x, const struct http_req *req)
{
    struct router *r = arg;
    struct rreq *q = pxreq_state(x);

    if (q->bypass)
        return PX_FORWARD; /* never judged, never queued */
    q->req = req;
    read_request(r, q, req);
    /* Pinned: the pin decides (an unknown name is selection's 503). */
    if (q->pinned == -1 && mroute_refuse(r->models, x, q->model)) {
        report_rejected(r->rep, REPORT_MODEL_NOT_FOUND);
        return PX_ANSWERED; /* a model no worker serves: 404 */
    }
    if (q->pinned == -2)
        return PX_FORWARD; /* selection answers it: no worker has that name */
    if (tokenize(r, q))
        return PX_WAIT; /* held, its connection watched, until the tokenizer answers */
    return go_on(r, q);
}

static void on_expired(void *arg, struct pxreq *x)
{
    struct router *r = arg;
    struct rreq *q = pxreq_state(x);

    if (q->pcall != NULL)
        return; /* its prefill has a deadline of its own */
    cq_expired(r->cq, &q->cq);
}

/* Booked in pick(); tell us of output to release the prefill and count blocks. */
static int on_forwarding(void *arg, struct pxreq *x, const struct http_req *req)
{
    struct rreq *q = pxreq_state(x);

    (void) arg;
    (void) req;
    return q->bk.booked;
}

/* The first body byte is the first token: prefill is over. Headers alone are not. */
static void on_output(void *arg, struct pxreq *x, int first, unsigned tokens)
{
    struct router *r = arg;
    struct rreq *q = pxreq_state(x);

    sel_output(r->sel, &q->bk, tokens);
    if (first) {
        sel_first_token(r->sel, &q->bk);
        /* Its prefill is over: room for a waiting request, perhaps. Not dispatched here:
         * this is x's relay, which goes on after the hook returns. */
        cq_kick_soon(r->cq);
    }
}

/* The answer's bytes: of one predicted to find some of its prompt cached, the last ones are
 * kept, where its usage says what the engine did find. */
static void on_body(void *arg, struct pxreq *x, const char *data, size_t n)
{
    struct rreq *q = pxreq_state(x);

    (void) arg;
    if (q->predicted > 0)
        usage_tail_add(&q->tail, data, n);
}

/* Completion, error, cancel: whatever the outcome, the booking ends here. */
static void on_finish(void *arg, struct pxreq *x, enum outcome o)
{
    struct router *r = arg;
    struct rreq *q = pxreq_state(x);

    tokz_cancel(q->tok); /* the client left, or a drain, while its tokenizer was asked */
    q->tok = NULL;
    if (q->pcall != NULL)
        r->pd_results[PD_R_CANCELLED]++; /* the client left, or a drain, during its prefill */
    pd_release_prefill(r, q);
    buf_free(&q->dbody);
    /* A whole answer that says what the engine found cached corrects what the index
     * predicted on that rank; one whose usage leaves it out does, as 0, once that worker has
     * shown that it reports it (kvr_correct). */
    if (o == OUT_OK && q->predicted > 0 && q->bk.booked) {
        int64_t c = usage_cached_tokens(q->tail.b, q->tail.len);

        if (c >= 0 || c == USAGE_CACHED_UNSAID)
            kvr_correct(r->kv, q->bk.worker, q->bk.rank, q->keys, q->nkeys, q->exact, q->predicted,
                        c);
    }
    sel_release(r->sel, &q->bk);
    cq_finish(r->cq, &q->cq);
    if (q->held >= 0)
        workers_release(r->ws, q->held);
    if (q->pinned >= 0)
        workers_unpin(r->ws, q->pinned);
    q->held = q->pinned = -1;
    if (q->bypass)
        r->m->inflight_bypass--;
    else
        r->m->inflight_nocap--;
    changed(r);
    cq_kick(r->cq);
}

static int on_retry_after(void *arg)
{
    struct router *r = arg;

    return router_cfg_retry_after(r->cfg);
}

/* ---- route: the choice of a worker --------------------------------------------------- */

/* pick() of a disaggregated model's request: the decode worker its dispatch booked, another
 * decode worker when that one refused before any byte (the same transfer parameters), or, for
 * one the aggregated workers take, the choice among them. */
static struct upstream *pd_pick(struct router *r, struct rreq *q, const struct upstream *exclude,
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
    pools_split(r->pools, sel_workers(r->sel), mroute_eligible(r->models, q->model, -1), &pr);
    if (q->pd) {
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
        return hold(r, q, w);
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

static struct upstream *pick(void *arg, struct pxreq *x, const struct http_req *req,
                             const struct upstream *exclude, int *status, char *msg, size_t msglen,
                             int *busy)
{
    struct router *r = arg;
    struct rreq *q = pxreq_state(x);
    struct busy_thresholds t, *tp = NULL;
    struct sel_hit hits[KVR_MAX_HITS];
    const uint64_t *elig;
    uint64_t now = clock_mono_ms();
    size_t nhits = 0;
    int64_t cached = 0;
    int w;
    unsigned rank;

    read_request(r, q, req);
    if (q->pinned == -2) {
        snprintf(msg, msglen, "Server unavailable: no worker named %.128s",
                 http_req_header(req, ROUTER_PIN_HEADER));
        *status = 503;
        report_rejected(r->rep, REPORT_NO_WORKER);
        return NULL;
    }
    if (q->pd || q->agg)
        return pd_pick(r, q, exclude, status, msg, msglen, busy);
    /* A migration: the worker it leaves holds nothing of it any more. */
    sel_release(r->sel, &q->bk);
    q->predicted = 0;
    usage_tail_reset(&q->tail);
    if (!q->bypass) { /* a GET takes no engine capacity: any live worker will do */
        bt_registry_get(r->bt, q->model, &t);
        tp = &t;
    }
    elig = mroute_eligible(r->models, q->model, q->pinned); /* NULL: any worker */
    if (q->nkeys > 0 && !q->bypass)
        nhits = kvr_match(r->kv, q->keys, q->nkeys, q->tokens, now, hits);
    switch (sel_pick_kv(r->sel, (int64_t) now, q->tokens, tp,
                        exclude != NULL ? workers_index_of(r->ws, exclude) : -1, q->pinned, elig,
                        hits, nhits, &w, &rank, &cached)) {
    case SEL_OK:
        if (!q->bypass) {
            /* Only what the rank has not cached is prefill; it holds the whole prompt next. */
            sel_book_cached(r->sel, &q->bk, w, rank, q->tokens, cached);
            kvr_routed(r->kv, w, rank, q->keys, q->nkeys, q->exact, now);
            q->predicted = cached;
        }
        return hold(r, q, w);
    case SEL_ALL_BUSY:
        *status = r->cfg->overload_status;
        snprintf(msg, msglen, "All workers are busy, please retry later");
        *busy = 1;
        report_rejected(r->rep, REPORT_ALL_BUSY);
        report_model_rejected(r->rep, q->model, req->target);
        cq_count_busy(r->cq, &q->cq);
        return NULL;
    case SEL_NO_WORKER:
        break;
    }
    *status = 503;
    if (elig != NULL)
        snprintf(msg, msglen, "Server unavailable: no worker serving %.128s is available",
                 q->model);
    else
        snprintf(msg, msglen, "Server unavailable: no worker available");
    report_rejected(r->rep, REPORT_NO_WORKER);
    return NULL;
}

static void overloaded(void *arg, struct upstream *up)
{
    struct router *r = arg;
    int k = workers_index_of(r->ws, up);

    if (k < 0)
        return;
    sel_mark_overloaded(r->sel, k, clock_mono_ms() + OVERLOAD_MARK_MS);
    log_info("worker %s answered overloaded: skipped for %d ms", workers_url(r->ws, k),
             OVERLOAD_MARK_MS);
}

/* Nothing of a request reached worker up: a refused connect, or a connection found closed
 * before the first byte (the proxy sends the request to another worker, once). It is lost
 * until it publishes again, as when its publisher's connection ends (workers_unreachable()). */
static void unreachable(void *arg, struct upstream *up, const char *why)
{
    struct router *r = arg;
    int k = workers_index_of(r->ws, up);

    if (k >= 0)
        workers_unreachable(r->ws, k, why);
}

/* The worker a request went to answered it: reachable, which is news after unreachable(). */
static void answered(void *arg, struct pxreq *x)
{
    struct router *r = arg;
    struct rreq *q = pxreq_state(x);

    if (q->held >= 0)
        workers_answered(r->ws, q->held);
}

/* A second worker refused too: its overload answer goes to the client, and counts as a
 * rejection of the request's model. */
static void refused(void *arg, const struct http_req *req)
{
    struct router *r = arg;
    char model[MODEL_MAX];

    model_of(req, model, sizeof model);
    report_model_rejected(r->rep, model, req->target);
}

/* /busy_threshold is answered by the router itself. */
static int local(void *arg, const struct http_req *req, struct http_reply *rep)
{
    struct router *r = arg;

    if (!http_req_path_is(req, "/busy_threshold"))
        return 0;
    /* Dynamo leaves threshold changes open to whoever reaches the frontend; with a token
     * configured, changes need it (reads stay open, as on admitd's metrics listener). */
    if (r->cfg->admin_token[0] != '\0' && req->method != HTTP_GET &&
        !httpu_bearer_ok(http_req_header(req, "Authorization"), r->cfg->admin_token)) {
        httpu_error_field_json(&rep->body, "a valid Authorization: Bearer token is required");
        rep->status = 401;
    } else
        rep->status = bt_api_handle(r->bt, http_method_name(req->method),
                                    http_req_header(req, "Content-Type"), req->body, req->body_len,
                                    &rep->body);
    cq_kick(r->cq); /* thresholds may have changed: the next selection sees them */
    return 1;
}

/* ---- setup ---------------------------------------------------------------------------- */

/* A load message or a retirement may have made room: what waits and can go, goes. */
static void room(void *arg)
{
    struct router *r = arg;

    cq_kick(r->cq);
}

struct router *router_new(struct event_base *base, struct proxy *px, struct metrics *m,
                          const struct router_cfg *cfg)
{
    struct router *r = xcalloc(1, sizeof *r);
    char err[512];
    struct proxy_route route = {.pick = pick,
                                .overloaded = overloaded,
                                .refused = refused,
                                .local = local,
                                .unreachable = unreachable,
                                .answered = answered,
                                .arg = r};
    struct proxy_admission hooks = {
        .begin = on_begin,
        .arrive = on_arrive,
        .expired = on_expired,
        .forwarding = on_forwarding,
        .output = on_output,
        .body = on_body,
        .finish = on_finish,
        .retry_after = on_retry_after,
        .size = sizeof(struct rreq),
        .zeroed = offsetof(struct rreq, tail),
        .arg = r,
    };

    r->px = px;
    r->m = m;
    r->cfg = cfg;
    r->bt = bt_registry_new(&cfg->t);
    r->sel = sel_new(cfg->missed_heartbeats ? cfg->missed_heartbeats : 3,
                     cfg->kv_block_size ? cfg->kv_block_size : 16);
    sel_max_heartbeat(r->sel, cfg->max_heartbeat_ms);
    sel_track_output(r->sel, cfg->track_output_blocks);
    sel_prefill_weight(r->sel, cfg->kv_overlap_weight);
    r->kv = kvr_new(cfg);
    r->models = mroute_new(r->bt, r->sel);
    r->pools = pools_new();
    r->base = base;
    if ((r->cq = cq_new(base, px, cfg, r->sel, r->models, r->kv, r->pools, r->bt, err,
                        sizeof err)) == NULL) {
        log_error("%s", err);
        router_free(r);
        return NULL;
    }
    cq_set_go(r->cq, cq_go, r);
    r->ws = workers_new(base, cfg, r->sel, r->models, r->kv, r->pools, room, r);
    r->rep = report_new(r->ws, r->sel, r->kv, r->models, r->bt);
    r->tz = tokz_new(base);
    proxy_set_admission(px, &hooks);
    proxy_set_route(px, &route);
    return r;
}

void router_reconfigure(struct router *r, const struct router_cfg *c)
{
    r->cfg = c; /* what is read at use: the overload answer, tokens per byte, the token */
    bt_registry_set_defaults(r->bt, &c->t);
    for (size_t i = 0; i < c->models.n; i++)
        bt_registry_add_model(r->bt, c->models.items[i]);
    sel_track_output(r->sel, c->track_output_blocks);
    sel_prefill_weight(r->sel, c->kv_overlap_weight);
    kvr_reconfigure(r->kv, c);
    sel_max_heartbeat(r->sel, c->max_heartbeat_ms);
    workers_reconfigure(r->ws, c);
    cq_reconfigure(r->cq, c); /* and dispatches what may go now */
}

void router_set_change_cb(struct router *r, void (*cb)(void *arg), void *arg)
{
    r->on_change = cb;
    r->on_change_arg = arg;
}

int router_add_worker(struct router *r, const char *proxy_url, const char *pub_url, int role,
                      char *err, size_t errlen)
{
    return workers_add(r->ws, proxy_url, pub_url, role, err, errlen);
}

int router_retire_worker(struct router *r, const char *proxy_url)
{
    return workers_retire(r->ws, proxy_url);
}

unsigned router_workers(struct router *r)
{
    return workers_active(r->ws);
}

void router_add_model(struct router *r, const char *model)
{
    bt_registry_add_model(r->bt, model);
}

unsigned router_routable(struct router *r)
{
    return sel_routable_n(r->sel, clock_mono_ms());
}

void router_render_metrics(struct router *r, struct buf *out)
{
    report_render_metrics(r->rep, out);
    workers_render_metrics(r->ws, out);
    cq_render_metrics(r->cq, out);
    tokz_render_metrics(r->tz, out);
    if (pools_any(r->pools))
        prom_labelled(out, "admit_router_disagg_total", "counter",
                      "Requests of disaggregated models, by how their dispatch and prefill leg "
                      "ended",
                      "result", pd_result_names, r->pd_results, PD__COUNT);
}

void router_render_workers(struct router *r, struct buf *out)
{
    report_render_workers(r->rep, out);
}

void router_free(struct router *r)
{
    if (r == NULL)
        return;
    report_free(r->rep);
    tokz_free(r->tz);
    workers_free(r->ws);
    cq_free(r->cq);
    mroute_free(r->models);
    sel_free(r->sel);
    kvr_free(r->kv);
    pools_free(r->pools);
    bt_registry_free(r->bt);
    free(r);
}
