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
 *   pools.h        the workers' roles; with router_pd.c, disaggregated prefill and decode
 *   admission/bt_api.h  the thresholds of each model, /busy_threshold */
#include "router.h"
#include "router_impl.h"
#include "admission/bt_api.h"
#include "admission/tokcount.h"
#include "class_queue.h"
#include "http/proxy.h"
#include "kvroute.h"
#include "model_route.h"
#include "pools.h"
#include "report.h"
#include "select.h"
#include "tokenize.h"
#include "util/clock.h"
#include "util/jscan.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "wire/httputil.h"
#include "wire/usage.h"
#include "workers.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* router_hold: see router_impl.h. */
struct upstream *router_hold(struct router *r, struct rreq *q, int k)
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

/* A request that passed the router's checks goes on to its class's queue (or selection); one
 * of a disaggregated model that may go starts its prefill leg. */
static enum px_verdict go_on(struct router *r, struct rreq *q)
{
    enum px_verdict v =
        cq_arrive(r->cq, &q->cq, q->req, q->model, q->tokens, q->pinned, q->keys, q->nkeys);

    return v == PX_FORWARD ? rpd_dispatch(r, q) : v;
}

/* A request leaves its class's queue: the same way on. */
static void cq_go(void *arg, struct pxreq *x)
{
    if (rpd_dispatch(arg, pxreq_state(x)) == PX_FORWARD)
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
        q->tok = tokz_start(r->tz, router_hold(r, q, k), body.data, body.len,
                            r->cfg->tokenize_timeout_ms, kvr_max_ids(r->kv), on_tokenized, q);
    }
    buf_free(&body);
    return q->tok != NULL;
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
    rpd_end(r, q); /* a disaggregated request's prefill leg and decode body */
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
        return rpd_pick(r, q, exclude, status, msg, msglen, busy);
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
        return router_hold(r, q, w);
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
    proxy_set_local(px, local, r);
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
    rpd_render_metrics(r, out);
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
