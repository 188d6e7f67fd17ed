/* router: workers, their newest load, busy judgement and per-request selection. */
#include "router.h"
#include "admit/load.h"
#include "core/bt_api.h"
#include "core/httputil.h"
#include "core/log.h"
#include "core/netaddr.h"
#include "core/prom.h"
#include "http/proxy.h"
#include "pubsub/publish.h"
#include "pubsub/subscribe.h"
#include "http/upstream.h"
#include "core/xmalloc.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A worker marked overloaded by its own 529 is skipped this long (or until it speaks). */
#define OVERLOAD_MARK_MS 1000
/* Distinct (model, endpoint) rejection counters kept. */
#define MAX_REJECT_KEYS 256

struct rworker {
    struct router *r;
    char proxy_url[NETADDR_HOST_MAX + 16];
    char pub_url[300];
    struct upstream *up;
    struct subscriber *sub;
    struct admit_load ranks[PUB_MAX_RANKS];
    int have[PUB_MAX_RANKS];
    struct busy_latch latch[PUB_MAX_RANKS];
    int64_t last_ms; /* monotonic time of the newest message; 0 = never heard */
    int64_t heartbeat_ms;
    int64_t overloaded_until_ms;
    int bad_messages;
};

struct reject_key {
    char model[128];
    char endpoint[32];
    uint64_t count;
};

struct router {
    struct event_base *base;
    struct proxy *px;
    const struct router_cfg *cfg;
    struct bt_registry *bt;
    unsigned missed;
    struct rworker **w;
    size_t n;
    size_t rr; /* round-robin start for ties */
    struct reject_key rejects[MAX_REJECT_KEYS];
    size_t nrejects;
};

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- load messages -------------------------------------------------------------------- */

static void on_message(void *arg, const void *msg, size_t len)
{
    struct rworker *w = arg;
    struct admit_load m;
    char err[256];

    if (admit_load_decode(msg, len, &m, err, sizeof err) != 0) {
        if (w->bad_messages++ < 5)
            log_warn("worker %s sent an invalid load message: %s", w->proxy_url, err);
        return;
    }
    if (m.dp_rank >= PUB_MAX_RANKS)
        return;
    w->ranks[m.dp_rank] = m;
    w->have[m.dp_rank] = 1;
    w->heartbeat_ms = m.heartbeat_ms;
    w->last_ms = now_ms();
    w->overloaded_until_ms = 0; /* its own word replaces our guess */
}

/* Heard from within the missed heartbeats and not draining: a worker that serves. */
static int alive(const struct router *r, const struct rworker *w, int64_t now)
{
    if (w->last_ms == 0 || now - w->last_ms > w->heartbeat_ms * (int64_t) r->missed)
        return 0;
    for (int i = 0; i < PUB_MAX_RANKS; i++)
        if (w->have[i] && w->ranks[i].state == ADMIT_LOAD_DRAINING)
            return 0;
    return 1;
}

/* Alive, and not skipped for having just answered with its overload status. */
static int routable(const struct router *r, const struct rworker *w, int64_t now)
{
    return alive(r, w, now) && now >= w->overloaded_until_ms;
}

/* Does the worker have room under t? Updates its decode latches. */
static int has_room(struct rworker *w, const struct busy_thresholds *t)
{
    struct admit_load ranks[PUB_MAX_RANKS];
    struct busy_latch latch[PUB_MAX_RANKS];
    int idx[PUB_MAX_RANKS];
    size_t n = 0;
    int room;

    for (int i = 0; i < PUB_MAX_RANKS; i++)
        if (w->have[i]) {
            ranks[n] = w->ranks[i];
            latch[n] = w->latch[i];
            idx[n++] = i;
        }
    room = busy_has_room(t, ranks, n, latch);
    for (size_t k = 0; k < n; k++)
        w->latch[idx[k]] = latch[k];
    return room;
}

static int64_t load_of(const struct rworker *w)
{
    for (int i = 0; i < PUB_MAX_RANKS; i++)
        if (w->have[i]) {
            int64_t e = w->ranks[i].engine_requests, q = w->ranks[i].queued_requests;
            return (e > 0 ? e : 0) + (q > 0 ? q : 0);
        }
    return 0;
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
        if (r->nrejects == MAX_REJECT_KEYS)
            i = MAX_REJECT_KEYS - 1; /* the last key absorbs the overflow */
        else {
            snprintf(r->rejects[i].model, sizeof r->rejects[i].model, "%s", model);
            snprintf(r->rejects[i].endpoint, sizeof r->rejects[i].endpoint, "%s", endpoint);
            r->nrejects++;
        }
    }
    r->rejects[i].count++;
}

static struct upstream *pick(void *arg, const struct http_req *req, const struct upstream *exclude,
                             int *status, const char **msg, int *busy)
{
    struct router *r = arg;
    struct busy_thresholds t;
    char model[128];
    int64_t now = now_ms(), best_load = 0;
    struct rworker *best = NULL;
    size_t nalive = 0;

    model_of(req, model, sizeof model);
    bt_registry_get(r->bt, model, &t);
    for (size_t k = 0; k < r->n; k++) {
        struct rworker *w = r->w[(r->rr + k) % r->n];

        if (!alive(r, w, now))
            continue;
        /* One that just refused with its overload answer is alive but full: busy. */
        nalive++;
        if (!routable(r, w, now) || w->up == exclude || !has_room(w, &t))
            continue;
        if (best == NULL || load_of(w) < best_load) {
            best = w;
            best_load = load_of(w);
        }
    }
    r->rr++;
    if (best != NULL)
        return best->up;
    if (nalive == 0) {
        *status = 503;
        *msg = "Server unavailable: no worker available";
        return NULL;
    }
    *status = r->cfg->overload_status;
    *msg = "All workers are busy, please retry later";
    *busy = 1;
    count_reject(r, model, endpoint_of(req->target));
    return NULL;
}

static void overloaded(void *arg, struct upstream *up)
{
    struct router *r = arg;

    for (size_t k = 0; k < r->n; k++)
        if (r->w[k]->up == up) {
            r->w[k]->overloaded_until_ms = now_ms() + OVERLOAD_MARK_MS;
            log_info("worker %s answered overloaded: skipped for %d ms", r->w[k]->proxy_url,
                     OVERLOAD_MARK_MS);
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
    return 1;
}

/* ---- setup and reporting ------------------------------------------------------------ */

struct router *router_new(struct event_base *base, struct proxy *px, const struct router_cfg *cfg)
{
    struct router *r = xcalloc(1, sizeof *r);
    struct proxy_route route = {pick, overloaded, refused, local, r};

    r->base = base;
    r->px = px;
    r->cfg = cfg;
    r->missed = cfg->missed_heartbeats ? cfg->missed_heartbeats : 3;
    r->bt = bt_registry_new(&cfg->t);
    proxy_set_route(px, &route);
    return r;
}

int router_add_worker(struct router *r, const char *proxy_url, const char *pub_url, char *err,
                      size_t errlen)
{
    struct rworker *w = xcalloc(1, sizeof *w);
    struct http_url url;

    if (http_url_parse(proxy_url, &url, err, errlen) != 0) {
        free(w);
        return -1;
    }
    w->r = r;
    snprintf(w->proxy_url, sizeof w->proxy_url, "%s", url.hostport);
    snprintf(w->pub_url, sizeof w->pub_url, "%s", pub_url);
    w->heartbeat_ms = 1000;
    w->sub = sub_new(r->base, pub_url, on_message, w, err, errlen);
    if (w->sub == NULL) {
        free(w);
        return -1;
    }
    w->up =
        upstream_new(r->base, &url, r->cfg->upstream_timeout_ms, r->cfg->upstream_keepalive, 4000);
    r->w = xrealloc(r->w, (r->n + 1) * sizeof *r->w);
    r->w[r->n++] = w;
    return 0;
}

void router_add_model(struct router *r, const char *model)
{
    bt_registry_add_model(r->bt, model);
}

unsigned router_routable(struct router *r)
{
    unsigned n = 0;
    int64_t now = now_ms();

    for (size_t k = 0; k < r->n; k++)
        n += (unsigned) routable(r, r->w[k], now);
    return n;
}

static void worker_gauge(struct buf *out, struct router *r, const char *name, const char *help,
                         int prefill)
{
    prom_family(out, name, "gauge", help);
    for (size_t k = 0; k < r->n; k++)
        for (int i = 0; i < PUB_MAX_RANKS; i++) {
            const struct admit_load *m = &r->w[k]->ranks[i];
            int64_t v = prefill ? m->active_prefill_tokens : m->active_decode_blocks;
            char rank[16];
            struct buf l;

            if (!r->w[k]->have[i] || v < 0)
                continue;
            snprintf(rank, sizeof rank, "%d", i);
            buf_init(&l);
            prom_label(&l, "worker_id", m->worker_id);
            prom_label(&l, "dp_rank", rank);
            prom_label(&l, "worker_type", "decode");
            prom_sample(out, name, l.data, (double) v);
            buf_free(&l);
        }
}

void router_render_metrics(struct router *r, struct buf *out)
{
    struct busy_thresholds t;
    unsigned routable_n = 0, busy_n = 0;
    int64_t now = now_ms();

    prom_family(out, "dynamo_frontend_model_rejection_total", "counter",
                "Total number of requests rejected due to resource exhaustion");
    for (size_t i = 0; i < r->nrejects; i++) {
        struct buf l;

        buf_init(&l);
        prom_label(&l, "model", r->rejects[i].model);
        prom_label(&l, "endpoint", r->rejects[i].endpoint);
        prom_sample(out, "dynamo_frontend_model_rejection_total", l.data,
                    (double) r->rejects[i].count);
        buf_free(&l);
    }
    worker_gauge(out, r, "dynamo_frontend_worker_active_decode_blocks",
                 "Active KV cache decode blocks per worker", 0);
    worker_gauge(out, r, "dynamo_frontend_worker_active_prefill_tokens",
                 "Active prefill tokens queued per worker", 1);
    bt_registry_get(r->bt, "", &t);
    for (size_t k = 0; k < r->n; k++) {
        if (!routable(r, r->w[k], now))
            continue;
        routable_n++;
        busy_n += (unsigned) !has_room(r->w[k], &t);
    }
    prom_family(out, "admit_router_workers", "gauge",
                "Workers by state (busy: routable but over the default thresholds)");
    prom_sample(out, "admit_router_workers{state=\"configured\"}", NULL, (double) r->n);
    prom_sample(out, "admit_router_workers{state=\"routable\"}", NULL, routable_n);
    prom_sample(out, "admit_router_workers{state=\"busy\"}", NULL, busy_n);
}

void router_render_workers(struct router *r, struct buf *out)
{
    int64_t now = now_ms();

    buf_puts(out, "{\"workers\":[");
    for (size_t k = 0; k < r->n; k++) {
        const struct rworker *w = r->w[k];

        buf_printf(out,
                   "%s{\"url\":\"%s\",\"publish\":\"%s\",\"routable\":%s,\"age_ms\":", k ? "," : "",
                   w->proxy_url, w->pub_url, routable(r, w, now) ? "true" : "false");
        if (w->last_ms)
            buf_printf(out, "%lld}", (long long) (now - w->last_ms));
        else
            buf_puts(out, "null}");
    }
    buf_puts(out, "]}\n");
}

void router_free(struct router *r)
{
    if (r == NULL)
        return;
    for (size_t k = 0; k < r->n; k++) {
        sub_free(r->w[k]->sub);
        upstream_free(r->w[k]->up);
        free(r->w[k]);
    }
    free(r->w);
    bt_registry_free(r->bt);
    free(r);
}
