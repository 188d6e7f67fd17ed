/* admit-router: the frontend that routes around busy admitd workers.
 *
 *   admit-router --worker http://gpu1:8080=tcp://gpu1:5557 --worker http://gpu2:8080=... \
 *                --active-decode-blocks-threshold 0.85 --model meta-llama/Llama-3.1-8B
 *   admit-router --worker-dns admitd-workers.llm.svc.cluster.local:8080:5557 ...
 *   admit-router --config /etc/admit-router.yaml --workers-file /etc/admit-router/workers ...
 *                (kill -HUP reloads the config and re-reads the workers file)
 */
#include "daemon/admin.h"
#include "admission/busy.h"
#include "daemon/drain.h"
#include "util/log.h"
#include "daemon/metrics.h"
#include "wire/prom.h"
#include "util/xmalloc.h"
#include "util/buildinfo.h"
#include "pubsub/nngver.h"
#include "http/proxy.h"
#include "config.h"
#include "discover.h"
#include "router.h"

#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct app {
    struct router_cfg *cfg; /* what runs: replaced by each reload that applies */
    int argc;               /* the command line, read again by each reload */
    char **argv;
    struct metrics m;
    struct proxy_opts popts; /* the proxy keeps a pointer: its live fields follow reloads */
    struct proxy *px;
    struct router *r;
    struct discover *disc;
    struct event_base *base;
    struct drain *drain;
    uint64_t reloads_ok, reloads_failed;
};

static void render_metrics(void *arg, struct buf *out)
{
    struct app *a = arg;
    struct metrics_view v = {&a->m, NULL, NULL, ADMIT_VERSION};

    metrics_render(&v, out);
    router_render_metrics(a->r, out);
    discover_render_metrics(a->disc, out);
    prom_family(out, "admit_router_config_reloads_total", "counter",
                "Reloads of the configuration on SIGHUP, by result (failed: it did not parse or "
                "validate, and the running configuration stayed)");
    prom_sample(out, "admit_router_config_reloads_total{result=\"ok\"}", NULL,
                (double) a->reloads_ok);
    prom_sample(out, "admit_router_config_reloads_total{result=\"failed\"}", NULL,
                (double) a->reloads_failed);
}

static void render_workers(void *arg, struct buf *out)
{
    router_render_workers(((struct app *) arg)->r, out);
}

static int is_ready(void *arg)
{
    struct app *a = arg;

    return !drain_active(a->drain) && router_routable(a->r) > 0;
}

static int no_admission(void *arg, const char *body, size_t len, const char *who, struct buf *out)
{
    (void) arg;
    (void) body;
    (void) len;
    (void) who;
    buf_puts(out, "{\"error\":\"admit-router has no admission limits; see /busy_threshold\"}\n");
    return 404;
}

/* ---- drain: as admitd's, so a rolling restart of routers loses no request ---------- */

static void on_change(void *arg)
{
    drain_check(((struct app *) arg)->drain);
}

/* The first SIGTERM/SIGINT drains (see drain.h); a second one exits at once. */
static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct app *a = arg;

    (void) what;
    log_info("%s received", sig == SIGINT ? "SIGINT" : "SIGTERM");
    if (drain_start(a->drain, "Server unavailable: router draining", a->cfg->drain_timeout_ms) !=
        0) {
        log_info("second signal: exiting now");
        event_base_loopbreak(a->base);
    }
}

/* ---- SIGHUP: the configuration read again, and what can change applied ----------------- */

static const char *env_lookup(const char *name)
{
    return getenv(name);
}

/* The sources are read again as at start: the config file (--config or its variable), the
 * environment and the command line, with the same precedence and checks. A reading that
 * fails is logged with its reason (the file's file:line:column) and counted, and nothing of
 * it is applied. Else the settings that need a restart keep their running values (each
 * named in the log), the log, the proxy's live fields, the router (thresholds, models,
 * classes) and discovery (the --worker entries, the DNS names and interval, which workers
 * file) follow the new configuration, which replaces the old one.
 *
 * Either way the workers file is then read again and the names resolved: each step applies
 * what it read, or logs why it could not and leaves its part as it was, so that one bad file
 * holds back no other. */
static void reload(struct app *a)
{
    struct router_cfg *was = a->cfg, *nc = xcalloc(1, sizeof *nc);
    char err[512];

    if (router_cfg_reparse(nc, a->argc, a->argv, env_lookup, err, sizeof err) != 0) {
        log_error("reload failed, the running configuration stays: %s", err);
        a->reloads_failed++;
        free(nc);
    } else {
        log_set_level(nc->log_level); /* first: this reload's own lines follow the new level */
        log_set_json(nc->log_json);
        router_cfg_diff(was, nc);
        a->popts.stream_buffer_bytes = nc->stream_buffer_bytes;
        a->popts.access_log = nc->access_log;
        router_reconfigure(a->r, nc);
        discover_reconfigure(a->disc, nc);
        a->cfg = nc;
        router_cfg_free(was);
        free(was);
        a->reloads_ok++;
        log_notice("configuration reloaded%s%s", nc->config_path[0] ? " from " : "",
                   nc->config_path);
    }
    discover_reload_file(a->disc); /* logs file:line when the file is bad */
    discover_resolve_now(a->disc);
}

static void on_sighup(evutil_socket_t sig, short what, void *arg)
{
    (void) sig;
    (void) what;
    log_info("SIGHUP received: reloading the configuration");
    reload(arg);
}

int main(int argc, char **argv)
{
    static struct app app;
    char err[512], listen_at[NETADDR_HOST_MAX + 8], metrics_at[NETADDR_HOST_MAX + 8];
    struct event_base *base;
    struct admin *adm;
    struct event *sigterm, *sigint, *sighup;
    struct admin_hooks hooks = {render_metrics, render_workers, is_ready, no_admission, &app};
    struct router_cfg *cfg = xcalloc(1, sizeof *cfg);
    int rc = 0;

    log_set_ident("admit-router");
    signal(SIGPIPE, SIG_IGN);
    switch (router_cfg_parse(cfg, argc, argv, env_lookup, err, sizeof err)) {
    case OPT_HELP:
        router_cfg_usage(stdout);
        free(cfg);
        return 0;
    case OPT_VERSION: {
        const struct buildinfo_lib libs[] = {{"libevent", event_get_version()},
                                             {"nng", nngver_runtime()}};

        free(cfg);
        return buildinfo_print(stdout, "admit-router", libs, 2) == 0 ? 0 : 1;
    }
    case OPT_CHECK:
        printf("admit-router: configuration OK%s%s\n", cfg->config_path[0] ? ": " : "",
               cfg->config_path);
        router_cfg_free(cfg);
        free(cfg);
        return 0;
    case OPT_ERROR:
        fprintf(stderr, "admit-router: error: %s\n", err);
        free(cfg);
        return 2;
    case OPT_RUN:
        break;
    }
    log_set_level(cfg->log_level);
    log_set_json(cfg->log_json);
    if (cfg->classes.n > 0)
        log_info("policy classes: %zu, default %s, %zu rules", cfg->classes.n,
                 cfg->classes.c[cfg->classes.default_cls].name, cfg->classes.nrules);
    base = event_base_new();
    if (base == NULL)
        return 1;
    metrics_init(&app.m);
    app.cfg = cfg;
    app.argc = argc;
    app.argv = argv;
    app.base = base;
    app.popts = (struct proxy_opts){
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
    app.px = proxy_new(base, &app.popts, NULL, &app.m.px, &app.m.listen[LISTENER_CLIENT]);
    app.drain = drain_new(base, app.px, &app.m);
    /* The router's own admission: no cap, it counts and books what it sends. */
    if ((app.r = router_new(base, app.px, &app.m, cfg)) == NULL) {
        proxy_free(app.px);
        drain_free(app.drain);
        event_base_free(base);
        router_cfg_free(cfg);
        free(cfg);
        return 2;
    }
    router_set_change_cb(app.r, on_change, &app);
    for (size_t i = 0; i < cfg->models.n; i++)
        router_add_model(app.r, cfg->models.items[i]);
    adm = admin_new(base, &hooks, "", &app.m.listen[LISTENER_METRICS]);
    if ((app.disc = discover_new(base, app.r, cfg, err, sizeof err)) == NULL ||
        discover_start(app.disc, err, sizeof err) != 0) {
        fprintf(stderr, "admit-router: error: %s\n", err);
        rc = 2;
    }
    if (rc == 0 &&
        (proxy_bind(app.px, &cfg->listen, listen_at, sizeof listen_at, err, sizeof err) != 0 ||
         admin_bind(adm, &cfg->metrics_listen, metrics_at, sizeof metrics_at, err, sizeof err) !=
             0)) {
        log_error("%s", err);
        rc = 1;
    }
    if (rc == 0) {
        sigterm = evsignal_new(base, SIGTERM, on_signal, &app);
        sigint = evsignal_new(base, SIGINT, on_signal, &app);
        sighup = evsignal_new(base, SIGHUP, on_sighup, &app);
        evsignal_add(sigterm, NULL);
        evsignal_add(sigint, NULL);
        evsignal_add(sighup, NULL);
        log_notice("ready listen=%s metrics=%s workers=%u", listen_at, metrics_at,
                   router_workers(app.r));
        event_base_dispatch(base);
        event_free(sigterm);
        event_free(sigint);
        event_free(sighup);
    }
    admin_free(adm);
    proxy_free(app.px); /* may report a last change: the drain and router go after it */
    drain_free(app.drain);
    discover_free(app.disc); /* its callbacks call the router */
    router_free(app.r);
    event_base_free(base);
    router_cfg_free(app.cfg);
    free(app.cfg);
    return rc; /* nng's sockets are left to the exit (see nngclose.h) */
}
