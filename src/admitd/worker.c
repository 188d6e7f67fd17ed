/* worker: wiring of one admitd, and the engine state its load messages are built from. */
#include "worker.h"
#include "kvsub.h"
#include "daemon/admin.h"
#include "daemon/admission.h"
#include "admission/book.h"
#include "daemon/drain.h"
#include "admission/engine_metrics.h"
#include "admission/engine_models.h"
#include "wire/httputil.h"
#include "admission/loadsrc.h"
#include "util/clock.h"
#include "util/log.h"
#include "daemon/metrics.h"
#include "config/optdiff.h"
#include "mock/mock.h"
#include "http/poller.h"
#include "http/proxy.h"
#include "pubsub/publish.h"
#include "util/xmalloc.h"

#include <event2/event.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct worker {
    struct event_base *base;
    struct cfg *cfg;
    struct drain *drain;
    struct metrics m;
    struct proxy_opts popts;     /* what the proxy reads of cfg (live fields follow reloads) */
    struct admission_opts aopts; /* what admission reads of cfg (likewise) */
    struct proxy *px;
    struct admission *gate;
    struct admin *adm;
    struct poller *ready, *scrape, *models_poll;
    struct publisher *pub;
    struct mock_engine *mock;
    struct kvsub *kv;                /* the engine's KV events; NULL without --engine-kv-events */
    struct engine_snapshot engine;   /* the last scrape that parsed */
    int engine_ok;                   /* ... and the latest scrape was that one */
    int engine_reach;                /* the readiness probe's last poll was answered (1) or
                                        not (0); -1 before the first */
    struct admit_load_models models; /* the engine's model names: the last list read */
    int models_seen;                 /* the latest /v1/models read's engine_models_result, -2
                                        before the first (so that each change logs once) */
    enum admit_load_state state;
    char listen_at[NETADDR_HOST_MAX + 8];
    char metrics_at[NETADDR_HOST_MAX + 8];
    char publish_at[300];
};

/* ---- engine pollers ------------------------------------------------------------------- */

/* Whether the engine gives the readiness probe an HTTP answer at all, whatever its status: an
 * engine that cannot be reached is said at the first poll and then once per change, not per
 * poll, with the reason (an engine that answers from the start needs no line: "is ready"
 * follows). */
static void engine_reach(struct worker *w, int status)
{
    int reach = status != 0;

    if (reach == w->engine_reach)
        return;
    if (!reach)
        log_warn("engine unreachable url=http://%s probe=%s reason=\"%s\"",
                 w->cfg->upstream.hostport, w->cfg->health_path, poller_error(w->ready));
    else if (w->engine_reach == 0)
        log_info("engine reachable url=http://%s probe=%s status=%d", w->cfg->upstream.hostport,
                 w->cfg->health_path, status);
    w->engine_reach = reach;
}

static void on_ready_poll(void *arg, int status, const char *body, size_t len)
{
    struct worker *w = arg;
    int ready = status >= 200 && status < 300;

    (void) body;
    (void) len;
    engine_reach(w, status);
    if (ready != w->m.engine_ready) {
        log_info("engine at %s is %s", w->cfg->upstream.hostport, ready ? "ready" : "not ready");
        if (ready)
            poller_kick(w->models_poll); /* a (re)started engine may serve other models */
    }
    w->m.engine_ready = ready;
}

/* The engine's GET /v1/models: a list that parses replaces the one sent; a failure keeps it
 * (an engine busy or restarting still serves what it served), and is logged once. */
static void on_models(void *arg, int status, const char *body, size_t len)
{
    struct worker *w = arg;
    struct admit_load_models l;
    enum engine_models_result r = ENGINE_MODELS_INVALID;
    char err[192], names[256];
    size_t k = 0;

    if (status == 200)
        r = engine_models_parse(body, len, &l, err, sizeof err);
    else if (status == 0)
        snprintf(err, sizeof err, "no answer");
    else
        snprintf(err, sizeof err, "status %d", status);
    if (r == ENGINE_MODELS_INVALID) {
        w->m.models_scrapes[1]++;
        if (w->models_seen != (int) r)
            log_info("engine models at %s/v1/models: %s; %s", w->cfg->upstream.hostport, err,
                     w->models.n >= 0 ? "the last list known stays" : "models stay unknown");
        w->models_seen = (int) r;
        return;
    }
    w->m.models_scrapes[r == ENGINE_MODELS_OK ? 0 : 2]++;
    if (r == ENGINE_MODELS_TOO_MANY && w->models_seen != (int) r)
        log_warn("engine models at %s/v1/models: %s; load messages say \"models\":null "
                 "(unknown: routers send this worker any model)",
                 w->cfg->upstream.hostport, err);
    if (r == ENGINE_MODELS_OK &&
        (w->models_seen != (int) r || !admit_load_models_equal(&l, &w->models))) {
        names[0] = '\0';
        for (const char *p = admit_load_models_next(&l, NULL); p != NULL && k < sizeof names;
             p = admit_load_models_next(&l, p))
            k += (size_t) snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", p);
        log_info("engine at %s serves %d model%s%s%s", w->cfg->upstream.hostport, l.n,
                 l.n == 1 ? "" : "s", l.n ? ": " : "", names);
    }
    w->models_seen = (int) r;
    /* vLLM lists its served model first, its LoRA adapters after */
    if (r == ENGINE_MODELS_OK)
        kvsub_set_model(w->kv, admit_load_models_next(&l, NULL));
    if (!admit_load_models_equal(&l, &w->models)) {
        w->models = l;
        pub_changed(w->pub);
    }
}

static void on_scrape(void *arg, int status, const char *body, size_t len)
{
    struct worker *w = arg;
    struct engine_snapshot snap;
    int ok = status == 200 && engine_metrics_parse(body, len, &snap) == 0;

    if (ok != w->engine_ok)
        log_info("engine metrics at %s%s: %s", w->cfg->engine_metrics.hostport,
                 w->cfg->engine_metrics_path,
                 ok ? "scraped" : "not available, engine load fields are null");
    w->engine_ok = ok;
    if (ok) {
        unsigned ranks = w->cfg->data_parallel_size ? w->cfg->data_parallel_size : snap.nranks;
        int64_t bs = snap.nranks > 0 ? snap.ranks[0].block_size : ENGINE_UNKNOWN;

        w->engine = snap;
        if (w->cfg->data_parallel_size == 0)
            kvsub_set_ranks(w->kv, snap.nranks); /* ranks the engine reports are read too */
        for (unsigned r = 0; r < snap.nranks; r++)
            kvsub_set_blocks(w->kv, r, snap.ranks[r].num_gpu_blocks);
        w->m.scrapes_ok++;
        book_configure(admission_book(w->gate), ranks ? ranks : 1,
                       bs > 0 && bs <= 1048576 ? (unsigned) bs : w->cfg->block_size);
    } else {
        w->m.scrapes_failed++;
    }
    pub_changed(w->pub);
}

/* ---- load ----------------------------------------------------------------------------- */

static void fill_load(void *arg, struct admit_load *msgs, unsigned *n)
{
    struct worker *w = arg;
    struct gate_stats st;
    struct loadsrc_in in = {
        .gate = admission_gate_stats(w->gate, &st),
        .inflight_nocap = w->m.inflight_nocap,
        .book = admission_book(w->gate),
        .engine = w->engine_ok ? &w->engine : NULL,
        .fallback_max_batched_tokens = w->cfg->max_num_batched_tokens,
        .models = &w->models,
        .state = w->state,
        .role = w->cfg->role,
    };

    loadsrc_fill(&in, msgs, PUB_MAX_RANKS, n);
}

/* A kv_events message of the relay: on the publisher, beside the load messages. */
static void on_kv_message(void *arg, unsigned rank, const unsigned char *msg, size_t len)
{
    struct worker *w = arg;

    (void) rank;
    pub_send_raw(w->pub, msg, len);
}

/* What admitd answers on its client listener itself, outside the gate: GET /admitd/kv_blocks,
 * the relay's dump (docs/load-message.md, "The kv_events topic"). */
static int on_local(void *arg, const struct http_req *r, struct http_reply *rep)
{
    struct worker *w = arg;

    if (!http_req_path_is(r, "/admitd/kv_blocks"))
        return 0;
    if (w->kv == NULL) {
        rep->status = 404;
        httpu_error_json(&rep->body, 404, "not_found_error",
                         "Not found: KV events are not relayed (no --engine-kv-events)");
    } else if (r->method != HTTP_GET) {
        rep->status = 405;
        httpu_error_json(&rep->body, 405, "invalid_request_error",
                         "Method not allowed: /admitd/kv_blocks answers GET only");
    } else {
        rep->content_type = "application/octet-stream";
        kvsub_dump(w->kv, &rep->body);
    }
    return 1;
}

static void on_load_change(void *arg)
{
    struct worker *w = arg;

    pub_changed(w->pub);
    drain_check(w->drain);
}

/* ---- metrics listener hooks ------------------------------------------------------------- */

static void render_metrics(void *arg, struct buf *out)
{
    struct worker *w = arg;
    struct gate_stats st;
    struct metrics_view v = {&w->m, admission_gate_stats(w->gate, &st), admission_book(w->gate),
                             ADMIT_VERSION};
    struct sppub_stats ps;

    w->m.load_messages = pub_sent(w->pub);
    w->m.load_pub_seen = pub_get_stats(w->pub, &ps) == 0;
    if (w->m.load_pub_seen) {
        w->m.load_subscribers = ps.subscribers;
        w->m.load_dropped = ps.dropped;
        w->m.load_bad_peers = ps.bad_peers;
    }
    metrics_render(&v, out);
    kvsub_render(w->kv, out);
}

static void render_load(void *arg, struct buf *out)
{
    struct worker *w = arg;
    struct admit_load msgs[PUB_MAX_RANKS];
    unsigned n = 0;
    int64_t now_ms;
    char json[ADMIT_LOAD_MSG_MAX];

    fill_load(w, msgs, &n);
    now_ms = clock_wall_ms();
    buf_printf(out, "{\"worker_id\":\"%s\",\"publish\":", w->cfg->worker_id);
    if (w->pub != NULL)
        buf_printf(out, "\"%s\"", w->publish_at);
    else
        buf_puts(out, "null");
    buf_puts(out, ",\"ranks\":[");
    for (unsigned i = 0; i < n; i++) {
        snprintf(msgs[i].worker_id, sizeof msgs[i].worker_id, "%s", w->cfg->worker_id);
        msgs[i].dp_rank = i;
        msgs[i].seq = pub_seq(w->pub); /* the last one published: this is no new message */
        msgs[i].ts_ms = now_ms;
        msgs[i].heartbeat_ms = w->cfg->heartbeat_ms;
        if (admit_load_to_json(&msgs[i], json, sizeof json) > 0)
            buf_printf(out, "%s%s", i ? "," : "", json);
    }
    buf_puts(out, "]}\n");
}

static int is_ready(void *arg)
{
    struct worker *w = arg;

    return w->m.engine_ready && w->state == ADMIT_LOAD_SERVING;
}

/* The current limits and occupancy, as GET /admission and every POST answer them. */
static void admission_state(struct worker *w, struct buf *out)
{
    struct gate_stats st;

    if (admission_gate_stats(w->gate, &st) == NULL) {
        buf_printf(out,
                   "{\"engine_request_limit\":null,\"request_queue_limit\":null,"
                   "\"engine_requests\":%u,\"queued_requests\":0}\n",
                   w->m.inflight_nocap);
        return;
    }
    buf_printf(out,
               "{\"engine_request_limit\":%u,\"request_queue_limit\":%u,"
               "\"engine_requests\":%u,\"queued_requests\":%u}\n",
               st.limit, st.queue_limit, st.slots_used, st.queued);
}

static int admission_error(struct buf *out, int status, const char *msg)
{
    buf_reset(out);
    httpu_error_field_json(out, msg);
    return status;
}

/* Reads one optional limit field; 0 = absent. Same rules as at startup. */
static int limit_field(json_t *root, const char *key, long long min, unsigned *out, char *msg,
                       size_t msglen)
{
    json_t *v = json_object_get(root, key);

    *out = 0;
    if (v == NULL)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > 1000000) {
        snprintf(msg, msglen, "%s must be %s", key,
                 min == 1 ? "a positive integer" : "an integer >= 2 (the queue limit Q)");
        return -1;
    }
    *out = (unsigned) json_integer_value(v);
    return 0;
}

static int on_admission(void *arg, const char *body, size_t len, const char *who, struct buf *out)
{
    struct worker *w = arg;
    struct gate_stats before;
    json_error_t je;
    json_t *root;
    const char *key;
    json_t *val;
    unsigned n, q;
    char msg[256];

    if (body == NULL) {
        admission_state(w, out);
        return 200;
    }
    if (admission_gate_stats(w->gate, &before) == NULL)
        return admission_error(out, 409,
                               "admitd runs without --engine-request-limit: there are no limits "
                               "to change; restart it with one");
    root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(root)) {
        snprintf(msg, sizeof msg, "the body must be a JSON object%s%s", root ? "" : ": ",
                 root ? "" : je.text);
        json_decref(root);
        return admission_error(out, 400, msg);
    }
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "engine_request_limit") != 0 && strcmp(key, "request_queue_limit") != 0) {
            snprintf(msg, sizeof msg, "unknown field '%.64s'", key);
            json_decref(root);
            return admission_error(out, 400, msg);
        }
    }
    if (limit_field(root, "engine_request_limit", 1, &n, msg, sizeof msg) != 0 ||
        limit_field(root, "request_queue_limit", 2, &q, msg, sizeof msg) != 0) {
        json_decref(root);
        return admission_error(out, 400, msg);
    }
    json_decref(root);
    if (n == 0 && q == 0)
        return admission_error(out, 400, "give engine_request_limit, request_queue_limit or both");
    admission_set_limits(w->gate, n, q);
    w->m.limit_changes++;
    log_info("limits changed by POST /admission from %s: N %u -> %u, Q %u -> %u", who, before.limit,
             n ? n : before.limit, before.queue_limit, q ? q : before.queue_limit);
    admission_state(w, out);
    return 200;
}

/* ---- reload (SIGHUP) ------------------------------------------------------------------ */

/* Settings that only take effect after a restart: listeners, the engine's address and the
 * publisher are bound once. So is the role: it is the engine's (a vLLM started as a prefill or
 * a decode instance, with its KV transfer set up for it), which a reload cannot change, and a
 * router would send a leg to a worker whose engine does not serve it. */
static const struct opt_field fixed_fields[] = {
    OPT_FIELD(struct cfg, listen),
    OPT_FIELD(struct cfg, metrics_listen),
    OPT_FIELD(struct cfg, upstream),
    OPT_FIELD(struct cfg, upstream_timeout_ms),
    OPT_FIELD(struct cfg, client_timeout_ms),
    OPT_FIELD(struct cfg, client_header_timeout_ms),
    OPT_FIELD(struct cfg, max_client_connections),
    OPT_FIELD(struct cfg, max_header_bytes),
    OPT_FIELD(struct cfg, max_body_bytes),
    OPT_FIELD(struct cfg, upstream_keepalive),
    OPT_FIELD(struct cfg, health_path),
    OPT_FIELD(struct cfg, health_interval_ms),
    OPT_FIELD(struct cfg, mock_engine),
    OPT_FIELD(struct cfg, publish),
    OPT_FIELD_AS("publisher", struct cfg, publisher_nng),
    OPT_FIELD(struct cfg, worker_id),
    OPT_FIELD(struct cfg, role),
    OPT_FIELD(struct cfg, heartbeat_ms),
    OPT_FIELD(struct cfg, engine_metrics),
    OPT_FIELD(struct cfg, engine_metrics_path),
    OPT_FIELD(struct cfg, engine_metrics_interval_ms),
    OPT_FIELD(struct cfg, engine_models_interval_ms),
    OPT_FIELD(struct cfg, data_parallel_size),
    OPT_FIELD(struct cfg, engine_kv_events),
    OPT_FIELD(struct cfg, engine_kv_events_topic),
    OPT_FIELD(struct cfg, engine_kv_events_replay),
    OPT_FIELD(struct cfg, admin_token),
};

int worker_reload(struct worker *w, int argc, char **argv, cfg_env_fn env)
{
    struct cfg *c = w->cfg, *nc = xmalloc(sizeof *nc);
    struct gate_stats st;
    char err[512];
    enum cfg_result r = cfg_parse(nc, argc, argv, env, err, sizeof err);

    if (r != CFG_RUN && r != CFG_CHECK) {
        log_error("reload failed, the running configuration stays: %s", err);
        free(nc);
        return -1;
    }
    /* Fields derived at start (mock engine address, worker id) are not in the file. */
    if (c->mock_engine)
        nc->upstream = c->upstream, nc->engine_metrics = c->engine_metrics;
    if (nc->worker_id[0] == '\0')
        memcpy(nc->worker_id, c->worker_id, sizeof nc->worker_id);
    opt_fields_diff(fixed_fields, sizeof fixed_fields / sizeof fixed_fields[0], c, nc,
                    OPT_DIFF_RESTART);
    if (admission_gate_stats(w->gate, &st) == NULL) {
        if (nc->engine_request_limit > 0)
            log_warn("reload: engine_request_limit set, but admitd started without a cap; "
                     "it takes effect after a restart");
    } else if (nc->engine_request_limit == 0) {
        log_warn("reload: engine_request_limit removed; the cap stays until a restart");
    } else if (nc->engine_request_limit != st.limit || nc->request_queue_limit != st.queue_limit) {
        log_info("reload: N %u -> %u, Q %u -> %u", st.limit, nc->engine_request_limit,
                 st.queue_limit, nc->request_queue_limit);
        admission_set_limits(w->gate, nc->engine_request_limit, nc->request_queue_limit);
        w->m.limit_changes++;
    }
    /* What is read at use time is simply replaced. */
    c->engine_request_limit = nc->engine_request_limit;
    c->request_queue_limit = nc->request_queue_limit;
    c->queue_timeout_ms = nc->queue_timeout_ms;
    c->retry_after_s = nc->retry_after_s;
    c->overload_status = nc->overload_status;
    c->stream_buffer_bytes = nc->stream_buffer_bytes;
    c->drain_timeout_ms = nc->drain_timeout_ms;
    c->chars_per_token = nc->chars_per_token;
    c->block_size = nc->block_size;
    c->max_num_batched_tokens = nc->max_num_batched_tokens;
    c->access_log = nc->access_log;
    c->log_level = nc->log_level;
    c->log_json = nc->log_json;
    log_set_level(c->log_level);
    log_set_json(c->log_json);
    w->popts.stream_buffer_bytes = c->stream_buffer_bytes;
    w->popts.access_log = c->access_log;
    w->aopts.queue_timeout_ms = c->queue_timeout_ms;
    w->aopts.retry_after_s = c->retry_after_s;
    w->aopts.overload_status = c->overload_status;
    w->aopts.chars_per_token = c->chars_per_token;
    admission_reconfigure(w->gate);
    log_info("configuration reloaded%s%s", c->config_path[0] ? " from " : "", c->config_path);
    free(nc);
    pub_changed(w->pub);
    return 0;
}

/* ---- drain ---------------------------------------------------------------------------- */

int worker_drain(struct worker *w)
{
    if (drain_active(w->drain))
        return 1;
    /* Routers hear "draining" before anything else changes. */
    w->state = ADMIT_LOAD_DRAINING;
    pub_now(w->pub);
    return drain_start(w->drain, "Server unavailable: worker draining", w->cfg->drain_timeout_ms);
}

/* ---- setup ---------------------------------------------------------------------------- */

/* Starts the built-in mock engine on a free loopback port and points the upstream (and, if
 * not given, the metrics URL) at it. */
static int start_mock(struct worker *w, struct event_base *base, char *err, size_t errlen)
{
    struct cfg *c = w->cfg;
    struct mock_opts o;
    char bound[NETADDR_HOST_MAX + 8], url[NETADDR_HOST_MAX + 16];

    mock_opts_defaults(&o);
    w->mock = mock_engine_new(base, &o);
    if (mock_engine_bind(w->mock, "127.0.0.1", 0, bound, sizeof bound, err, errlen) != 0)
        return -1;
    snprintf(url, sizeof url, "http://%s", bound);
    if (http_url_parse(url, &c->upstream, err, errlen) != 0)
        return -1;
    if (!c->engine_metrics_set)
        c->engine_metrics = c->upstream;
    log_info("built-in mock engine listening on %s", bound);
    return 0;
}

/* hostname:port of the client listener, unless --worker-id was given. */
static void derive_worker_id(struct worker *w)
{
    char host[100] = "localhost";
    const char *port = strrchr(w->listen_at, ':');

    if (w->cfg->worker_id[0] != '\0')
        return;
    if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
        strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    snprintf(w->cfg->worker_id, sizeof w->cfg->worker_id, "%s%s", host, port ? port : "");
}

struct worker *worker_start(struct event_base *base, struct cfg *cfg, char *err, size_t errlen)
{
    struct worker *w = xcalloc(1, sizeof *w);
    struct admin_hooks hooks = {render_metrics, render_load, is_ready, on_admission, w};
    unsigned scrape_timeout = cfg->engine_metrics_interval_ms * 3;

    w->base = base;
    w->cfg = cfg;
    w->state = ADMIT_LOAD_SERVING;
    admit_load_models_unknown(&w->models);
    w->models_seen = -2; /* none yet (no engine_models_result) */
    w->engine_reach = -1;
    metrics_init(&w->m);
    w->m.role = admit_load_role_name(cfg->role);
    if (cfg->mock_engine && start_mock(w, base, err, errlen) != 0)
        goto fail;
    w->popts = (struct proxy_opts){
        .client_timeout_ms = cfg->client_timeout_ms,
        .max_header_bytes = cfg->max_header_bytes,
        .max_body_bytes = cfg->max_body_bytes,
        .upstream_timeout_ms = cfg->upstream_timeout_ms,
        .upstream_keepalive = cfg->upstream_keepalive,
        .stream_buffer_bytes = cfg->stream_buffer_bytes,
        .access_log = cfg->access_log,
        .client_header_timeout_ms = cfg->client_header_timeout_ms,
        .max_client_connections = cfg->max_client_connections,
    };
    w->aopts = (struct admission_opts){
        .engine_request_limit = cfg->engine_request_limit,
        .request_queue_limit = cfg->request_queue_limit,
        .queue_timeout_ms = cfg->queue_timeout_ms,
        .retry_after_s = cfg->retry_after_s,
        .overload_status = cfg->overload_status,
        .chars_per_token = cfg->chars_per_token,
        .nranks = cfg->data_parallel_size,
        .block_size = cfg->block_size,
    };
    w->px = proxy_new(base, &w->popts, &cfg->upstream, &w->m.px, &w->m.listen[LISTENER_CLIENT]);
    w->gate = admission_new(w->px, &w->m, &w->aopts);
    w->drain = drain_new(base, w->px, &w->m);
    w->adm = admin_new(base, &hooks, cfg->admin_token, &w->m.listen[LISTENER_METRICS]);
    if (proxy_bind(w->px, &cfg->listen, w->listen_at, sizeof w->listen_at, err, errlen) != 0 ||
        admin_bind(w->adm, &cfg->metrics_listen, w->metrics_at, sizeof w->metrics_at, err,
                   errlen) != 0)
        goto fail;
    derive_worker_id(w);
    if (cfg->publish[0] != '\0') {
        w->pub = pub_new(base, cfg->publish, cfg->publisher_nng ? PUB_NNG : PUB_AUTO,
                         cfg->worker_id, cfg->heartbeat_ms, fill_load, w, w->publish_at,
                         sizeof w->publish_at, err, errlen);
        if (w->pub == NULL)
            goto fail;
    }
    if (cfg->engine_kv_events[0] != '\0') {
        w->kv = kvsub_new(base, cfg->engine_kv_events, cfg->engine_kv_events_topic,
                          cfg->engine_kv_events_replay, cfg->data_parallel_size, on_kv_message, w,
                          err, errlen);
        if (w->kv == NULL)
            goto fail;
        /* kv_events are not snapshots: a subscriber that is behind keeps more of them */
        pub_set_queue(w->pub, PUB_KV_QUEUE);
    }
    proxy_set_local(w->px, on_local, w);
    admission_set_change_cb(w->gate, on_load_change, w);
    w->ready = poller_new(base, &cfg->upstream, cfg->health_path, cfg->health_interval_ms,
                          cfg->health_interval_ms < 1000 ? 1000 : cfg->health_interval_ms,
                          on_ready_poll, w);
    w->scrape = poller_new(base, &cfg->engine_metrics, cfg->engine_metrics_path,
                           cfg->engine_metrics_interval_ms,
                           scrape_timeout < 1000 ? 1000 : scrape_timeout, on_scrape, w);
    if (cfg->engine_models_interval_ms > 0) {
        unsigned t = cfg->engine_models_interval_ms;

        w->models_poll = poller_new(base, &cfg->upstream, "/v1/models", t,
                                    t < 1000   ? 1000
                                    : t > 5000 ? 5000
                                               : t,
                                    on_models, w);
    }
    return w;
fail:
    worker_free(w);
    return NULL;
}

void worker_describe(const struct worker *w, char *out, size_t outlen)
{
    const struct cfg *c = w->cfg;
    char limits[96];

    if (c->engine_request_limit > 0)
        snprintf(limits, sizeof limits, "engine-request-limit=%u request-queue-limit=%u",
                 c->engine_request_limit, c->request_queue_limit);
    else
        snprintf(limits, sizeof limits, "engine-request-limit=none (no cap)");
    snprintf(out, outlen,
             "ready listen=%s metrics=%s publish=%s upstream=%s worker-id=%s role=%s %s",
             w->listen_at, w->metrics_at, w->pub ? w->publish_at : "none", c->upstream.hostport,
             c->worker_id, admit_load_role_name(c->role), limits);
}

void worker_free(struct worker *w)
{
    if (w == NULL)
        return;
    poller_free(w->ready);
    poller_free(w->scrape);
    poller_free(w->models_poll);
    if (w->gate != NULL)
        admission_set_change_cb(w->gate, NULL, NULL);
    admin_free(w->adm);
    proxy_free(w->px); /* its exchanges release into the gate: admission goes after it */
    admission_free(w->gate);
    drain_free(w->drain);
    pub_free(w->pub);
    kvsub_free(w->kv);
    mock_engine_free(w->mock);
    free(w);
}
