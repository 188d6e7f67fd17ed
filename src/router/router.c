/* router: workers and their load messages, the router's admission (counting and booking)
 * and the choice of a worker for each request. Reporting is in router_report.c. */
#include "router.h"
#include "router_impl.h"
#include "wire/httputil.h"
#include "util/log.h"
#include "util/ratewin.h"
#include "admission/tokcount.h"
#include "util/xmalloc.h"
#include "resolver.h"
#include "http/netsock.h"
#include "http/proxy.h"
#include "http/upstream.h"
#include "pubsub/subscribe.h"
#include "util/clock.h"

#include <event2/dns.h>
#include <event2/event.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A worker marked overloaded by its own 529 is skipped this long (or until it speaks). */
#define OVERLOAD_MARK_MS 1000

/* ---- workers that exchanges hold -------------------------------------------------------- */

/* A retired worker that nothing holds any more: its upstream freed, its index free. */
static void bury(struct router *r, struct rworker *w)
{
    upstream_free(w->up);
    w->up = NULL;
    sel_reset(r->sel, w->idx);
    w->state = RW_FREE;
    w->worker_id[0] = '\0';
    w->last_ms = 0;
    w->bad_messages = 0;
    w->unresolved_said = 0;
    w->lost = 0;
    w->id_said = 0;
    w->http_down = 0;
    r->removed++;
    log_info("worker %s removed: its last request ended", w->proxy_url);
}

static int unheld(const struct rworker *w)
{
    return w->inflight == 0 && w->pins == 0;
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    struct router *r = arg;

    (void) fd;
    (void) what;
    for (size_t k = 0; k < r->n; k++)
        if (r->w[k]->state == RW_RETIRED && unheld(r->w[k]))
            bury(r, r->w[k]);
}

/* An exchange lets go of worker k: the last one of a retired worker frees it, from a callback
 * of its own so that no caller up the stack (the proxy, evhttp) still has its upstream. */
static void let_go(struct router *r, int k, int pin)
{
    struct rworker *w = r->w[k];
    static const struct timeval now = {0, 0};

    if (pin)
        w->pins--;
    else
        w->inflight--;
    if (w->state == RW_RETIRED && unheld(w) && !evtimer_pending(r->reap, NULL))
        evtimer_add(r->reap, &now);
}

/* Exchange q now holds worker k's upstream (a pick, or a migration's). */
static void hold(struct router *r, struct rreq *q, int k)
{
    if (q->held == k)
        return;
    r->w[k]->inflight++;
    if (q->held >= 0)
        let_go(r, q->held, 0);
    q->held = k;
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

    q->r = r;
    q->cls = -1;
    q->pinned = -1;
    q->held = -1;
    q->bypass = http_method_is_safe(req->method);
    if (q->bypass) {
        r->m->requests_bypass++;
        r->m->inflight_bypass++;
    } else
        r->m->inflight_nocap++;
}

/* Without policy classes every request goes on to selection; with them, it may wait. */
static enum px_verdict on_arrive(void *arg, struct pxreq *x, const struct http_req *req)
{
    if (rm_refuse(arg, x, pxreq_state(x), req))
        return PX_ANSWERED; /* a model no worker serves: 404 */
    return rq_arrive(arg, x, pxreq_state(x), req);
}

static void on_expired(void *arg, struct pxreq *x)
{
    rq_expired(arg, x, pxreq_state(x));
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
        rq_kick_soon(r);
    }
}

/* Completion, error, cancel: whatever the outcome, the booking ends here. */
static void on_finish(void *arg, struct pxreq *x, enum outcome o)
{
    struct router *r = arg;
    struct rreq *q = pxreq_state(x);

    (void) o;
    sel_release(r->sel, &q->bk);
    rq_finish(r, q);
    if (q->held >= 0)
        let_go(r, q->held, 0);
    if (q->pinned >= 0)
        let_go(r, q->pinned, 1);
    q->held = q->pinned = -1;
    if (q->bypass)
        r->m->inflight_bypass--;
    else
        r->m->inflight_nocap--;
    changed(r);
    rq_kick(r);
}

static int on_retry_after(void *arg)
{
    struct router *r = arg;

    return r->cfg->retry_after_s > 0 ? (int) r->cfg->retry_after_s : RETRY_AFTER_MIN;
}

/* ---- selection ------------------------------------------------------------------------ */

static const char *endpoint_of(const char *uri)
{
    if (strncmp(uri, "/v1/chat/completions", 20) == 0)
        return "chat_completions";
    if (strncmp(uri, "/v1/completions", 15) == 0)
        return "completions";
    if (strncmp(uri, "/v1/embeddings", 14) == 0)
        return "embeddings";
    return "other";
}

/* The request's "model", read from its JSON body ("" when there is none). */
static void model_of(const struct http_req *req, char *out, size_t outlen)
{
    json_t *root, *m;

    out[0] = '\0';
    if (req->body_len == 0)
        return;
    root = json_loadb(req->body, req->body_len, 0, NULL);
    m = json_object_get(root, "model");
    if (json_is_string(m))
        snprintf(out, outlen, "%s", json_string_value(m));
    json_decref(root);
}

static void count_reject(struct router *r, const char *model, const char *endpoint)
{
    size_t i;

    for (i = 0; i < r->nrejects; i++)
        if (strcmp(r->rejects[i].model, model) == 0 &&
            strcmp(r->rejects[i].endpoint, endpoint) == 0)
            break;
    if (i == r->nrejects) {
        if (r->nrejects == ROUTER_MAX_REJECT_KEYS)
            i = ROUTER_MAX_REJECT_KEYS - 1; /* the last key absorbs the overflow */
        else {
            snprintf(r->rejects[i].model, sizeof r->rejects[i].model, "%s", model);
            snprintf(r->rejects[i].endpoint, sizeof r->rejects[i].endpoint, "%s", endpoint);
            r->nrejects++;
        }
    }
    r->rejects[i].count++;
}

/* The worker a pin header names, by worker_id or by the host:port of its URL; -1 if none. */
static int pinned_worker(const struct router *r, const char *name)
{
    for (size_t k = 0; k < r->n; k++)
        if (r->w[k]->state == RW_ACTIVE &&
            (strcmp(r->w[k]->worker_id, name) == 0 || strcmp(r->w[k]->proxy_url, name) == 0))
            return (int) k;
    return -1;
}

static int index_of(const struct router *r, const struct upstream *up)
{
    for (size_t k = 0; k < r->n; k++)
        if (r->w[k]->up == up && r->w[k]->state != RW_FREE)
            return (int) k;
    return -1;
}

void router_read_request(struct router *r, struct rreq *q, const struct http_req *req)
{
    const char *pin;
    struct tokcount tc;

    if (q->counted)
        return;
    q->counted = 1;
    model_of(req, q->model, sizeof q->model);
    if (!q->bypass) {
        tokcount_body(req->body, req->body_len, r->cfg->chars_per_token, &tc);
        q->tokens = tc.tokens > INT64_MAX ? INT64_MAX : (int64_t) tc.tokens;
    }
    if ((pin = http_req_header(req, ROUTER_PIN_HEADER)) != NULL) {
        int k = pinned_worker(r, pin);

        q->pinned = k >= 0 ? k : -2;
        if (k >= 0)
            r->w[k]->pins++; /* its index stays this worker's until the exchange ends */
    }
}

static struct upstream *pick(void *arg, struct pxreq *x, const struct http_req *req,
                             const struct upstream *exclude, int *status, char *msg, size_t msglen,
                             int *busy)
{
    struct router *r = arg;
    struct rreq *q = pxreq_state(x);
    struct busy_thresholds t, *tp = NULL;
    const uint64_t *elig;
    int w;
    unsigned rank;

    router_read_request(r, q, req);
    if (q->pinned == -2) {
        snprintf(msg, msglen, "Server unavailable: no worker named %.128s",
                 http_req_header(req, ROUTER_PIN_HEADER));
        *status = 503;
        r->rejected_no_worker++;
        return NULL;
    }
    /* A migration: the worker it leaves holds nothing of it any more. */
    sel_release(r->sel, &q->bk);
    if (!q->bypass) { /* a GET takes no engine capacity: any live worker will do */
        bt_registry_get(r->bt, q->model, &t);
        tp = &t;
    }
    elig = rm_eligible(r, q); /* the workers that take its model; NULL: any */
    switch (sel_pick_in(r->sel, clock_mono_ms(), q->tokens, tp,
                        exclude != NULL ? index_of(r, exclude) : -1, q->pinned, elig, &w, &rank)) {
    case SEL_OK:
        if (!q->bypass)
            sel_book(r->sel, &q->bk, w, rank, q->tokens);
        hold(r, q, w);
        return r->w[w]->up;
    case SEL_ALL_BUSY:
        *status = r->cfg->overload_status;
        snprintf(msg, msglen, "All workers are busy, please retry later");
        *busy = 1;
        r->rejected_all_busy++;
        rq_count_busy(r, q);
        count_reject(r, q->model, endpoint_of(req->target));
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
    r->rejected_no_worker++;
    return NULL;
}

static void overloaded(void *arg, struct upstream *up)
{
    struct router *r = arg;
    int k = index_of(r, up);

    if (k < 0)
        return;
    sel_mark_overloaded(r->sel, k, clock_mono_ms() + OVERLOAD_MARK_MS);
    log_info("worker %s answered overloaded: skipped for %d ms", r->w[k]->proxy_url,
             OVERLOAD_MARK_MS);
}

/* Nothing of a request reached worker up: a refused connect, or a connection found closed
 * before the first byte (the proxy sends the request to another worker, once). It is lost
 * until it publishes again, as when its publisher's connection ends: one refusal is enough
 * (HAProxy's observe layer4 with on-error mark-down, whose check here is the worker's next
 * load message, a heartbeat away), since a refused connect costs a request nothing but a
 * killed worker would otherwise take its share until its missed heartbeats. */
static void unreachable(void *arg, struct upstream *up, const char *why)
{
    struct router *r = arg;
    int k = index_of(r, up);

    if (k < 0)
        return;
    if (!r->w[k]->http_down) /* once until it answers again (answered()), not per request */
        log_warn("worker unreachable url=http://%s reason=\"%s\"", r->w[k]->proxy_url, why);
    r->w[k]->http_down = 1;
    rl_lost(r, r->w[k],
            "its engine's port refused a connection, or closed it before a request "
            "was sent");
}

/* The worker a request went to answered it: reachable, which is news after unreachable(). */
static void answered(void *arg, struct pxreq *x)
{
    struct router *r = arg;
    struct rreq *q = pxreq_state(x);

    if (q->held >= 0 && r->w[q->held]->http_down) {
        r->w[q->held]->http_down = 0;
        log_info("worker reachable url=http://%s", r->w[q->held]->proxy_url);
    }
}

static void refused(void *arg, const struct http_req *req)
{
    struct router *r = arg;
    char model[128];

    model_of(req, model, sizeof model);
    count_reject(r, model, endpoint_of(req->target));
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
    rq_kick(r); /* thresholds may have changed: the next selection sees them */
    return 1;
}

/* ---- setup ---------------------------------------------------------------------------- */

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
        .finish = on_finish,
        .retry_after = on_retry_after,
        .size = sizeof(struct rreq),
        .arg = r,
    };

    r->base = base;
    r->px = px;
    r->m = m;
    r->cfg = cfg;
    r->bt = bt_registry_new(&cfg->t);
    r->models = rmodels_new();
    rm_init(r);
    r->sel = sel_new(cfg->missed_heartbeats ? cfg->missed_heartbeats : 3,
                     cfg->kv_block_size ? cfg->kv_block_size : 16);
    sel_max_heartbeat(r->sel, cfg->max_heartbeat_ms);
    sel_track_output(r->sel, cfg->track_output_blocks);
    r->reap = evtimer_new(base, on_reap, r);
    if (r->reap == NULL)
        fatal("evtimer_new failed");
    if (rq_init(r, err, sizeof err) != 0)
        fatal("%s", err); /* the configuration was checked when it was read */
    if (cfg->classifier_plugin[0] != '\0') {
        if (classify_plugin_open(cfg->classifier_plugin, &r->classifier, err, sizeof err) != 0) {
            log_error("classifier plugin: %s", err);
            rq_free(r);
            event_free(r->reap);
            sel_free(r->sel);
            rmodels_free(r->models);
            bt_registry_free(r->bt);
            free(r);
            return NULL;
        }
        log_info("classifier plugin %s loaded", cfg->classifier_plugin);
    }
    proxy_set_admission(px, &hooks);
    proxy_set_route(px, &route);
    return r;
}

void router_reconfigure(struct router *r, const struct router_cfg *c)
{
    const struct router_cfg *was = r->cfg;

    r->cfg = c; /* what is read at use: the overload answer, tokens per byte, the token */
    bt_registry_set_defaults(r->bt, &c->t);
    for (size_t i = 0; i < c->models.n; i++)
        bt_registry_add_model(r->bt, c->models.items[i]);
    sel_track_output(r->sel, c->track_output_blocks);
    sel_max_heartbeat(r->sel, c->max_heartbeat_ms);
    rq_reconfigure(r, &was->classes); /* and dispatches what may go now */
}

void router_set_change_cb(struct router *r, void (*cb)(void *arg), void *arg)
{
    r->on_change = cb;
    r->on_change_arg = arg;
}

/* The worker at host:port, active or retired; NULL if none. */
static struct rworker *find_worker(const struct router *r, const char *hostport)
{
    for (size_t k = 0; k < r->n; k++)
        if (r->w[k]->state != RW_FREE && strcmp(r->w[k]->proxy_url, hostport) == 0)
            return r->w[k];
    return NULL;
}

/* A retired worker named again: revived in place, with what it still has booked. */
static int revive(struct router *r, struct rworker *w, const char *pub_url, char *err,
                  size_t errlen)
{
    if (rl_subscribe(r, w, pub_url, err, errlen) != 0)
        return -1;
    snprintf(w->pub_url, sizeof w->pub_url, "%s", pub_url);
    w->state = RW_ACTIVE;
    w->holds = 1;
    w->bad_messages = 0;
    w->lost = 0;
    sel_revive(r->sel, w->idx); /* routable at its next message */
    r->revived++;
    log_info("worker %s is back (publisher %s): %u requests still in flight there", w->proxy_url,
             w->pub_url, w->inflight);
    return 0;
}

int router_add_worker(struct router *r, const char *proxy_url, const char *pub_url, char *err,
                      size_t errlen)
{
    struct rworker *w;
    struct http_url url;
    size_t k;

    if (http_url_parse(proxy_url, &url, err, errlen) != 0)
        return -1;
    if ((w = find_worker(r, url.hostport)) != NULL && w->state == RW_RETIRED)
        return revive(r, w, pub_url, err, errlen);
    if (w != NULL) { /* one more source names it */
        if (strcmp(w->pub_url, pub_url) != 0)
            log_warn("worker %s is followed at %s already: %s ignored", w->proxy_url, w->pub_url,
                     pub_url);
        w->holds++;
        return 0;
    }
    /* A new one: in the index of one that left, or a new index. */
    for (k = 0; k < r->n && r->w[k]->state != RW_FREE; k++)
        ;
    w = k < r->n ? r->w[k] : xcalloc(1, sizeof *w);
    w->r = r;
    snprintf(w->proxy_url, sizeof w->proxy_url, "%s", url.hostport);
    snprintf(w->pub_url, sizeof w->pub_url, "%s", pub_url);
    if (rl_subscribe(r, w, pub_url, err, errlen) != 0) {
        if (k == r->n)
            free(w);
        return -1;
    }
    if (k == r->n) {
        w->idx = sel_add_worker(r->sel);
        r->w = xrealloc(r->w, (r->n + 1) * sizeof *r->w);
        r->w[r->n++] = w;
    } else { /* the index of one that left: its models unknown until its first message */
        struct admit_load_models unknown;

        admit_load_models_unknown(&unknown);
        rmodels_set(r->models, w->idx, &unknown);
    }
    /* A name is looked up on the loop without waiting: a worker added on SIGHUP, or one whose
     * lookup failed, must not stop every other request while a DNS server is slow. */
    if (!net_is_numeric(url.host) && r->dns == NULL) {
        char why[256];

        if ((r->dns = resolver_new(r->base, r->cfg, why, sizeof why)) == NULL)
            log_warn("worker %s: %s; its name is looked up with getaddrinfo, blocking",
                     url.hostport, why);
    }
    w->up = upstream_new(r->base, &url, r->dns, r->cfg->upstream_timeout_ms,
                         r->cfg->upstream_keepalive, 4000);
    w->state = RW_ACTIVE;
    w->holds = 1;
    r->added++;
    return 0;
}

int router_retire_worker(struct router *r, const char *proxy_url)
{
    struct http_url url;
    struct rworker *w;
    char err[256];

    if (http_url_parse(proxy_url, &url, err, sizeof err) != 0 ||
        (w = find_worker(r, url.hostport)) == NULL || w->state != RW_ACTIVE)
        return -1;
    if (--w->holds > 0)
        return 0; /* another source still names it */
    w->state = RW_RETIRED;
    sel_retire(r->sel, w->idx);
    rmodels_drop(r->models, w->idx); /* it serves nothing now: a model only it had gets 404 */
    rl_unsubscribe(r, w);
    r->retired++;
    log_info("worker %s retired: no new request goes there, %u in flight finish", w->proxy_url,
             w->inflight);
    if (unheld(w))
        bury(r, w);
    rq_kick(r); /* a request pinned to it and waiting now gets its answer */
    return 0;
}

unsigned router_workers(struct router *r)
{
    unsigned n = 0;

    for (size_t k = 0; k < r->n; k++)
        n += r->w[k]->state == RW_ACTIVE;
    return n;
}

void router_add_model(struct router *r, const char *model)
{
    bt_registry_add_model(r->bt, model);
}

unsigned router_routable(struct router *r)
{
    unsigned n = 0;
    int64_t now = clock_mono_ms();

    for (size_t k = 0; k < r->n; k++)
        n += (unsigned) sel_routable(r->sel, (int) k, now);
    return n;
}

/* Reachable, so that what a resolver still holds at exit is not reported as lost. */
static struct evdns_base *volatile dns_left_at_exit; /* volatile: never read, kept */

void router_free(struct router *r)
{
    if (r == NULL)
        return;
    event_free(r->reap);
    for (size_t k = 0; k < r->n; k++) {
        sub_free(r->w[k]->sub);
        upstream_free(r->w[k]->up);
        free(r->w[k]);
    }
    free(r->w);
    /* After the pools, each of which left its lookup to end. One still pending is answered
     * from the loop, which runs no more: freeing the resolver would lose what evdns holds
     * for it, so the resolver is left to the exit, as nng's sockets are. */
    if (r->dns != NULL && upstream_lookups_pending() == 0)
        evdns_base_free(r->dns, 0);
    else if (r->dns != NULL)
        dns_left_at_exit = r->dns;
    rq_free(r);
    sel_free(r->sel);
    rmodels_free(r->models);
    bt_registry_free(r->bt);
    free(r);
}
