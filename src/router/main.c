/* admit-router: the frontend that routes around busy admitd workers.
 *
 *   admit-router --worker http://gpu1:8080=tcp://gpu1:5557 --worker http://gpu2:8080=... \
 *                --active-decode-blocks-threshold 0.85 --model meta-llama/Llama-3.1-8B
 *   admit-router --worker-dns admitd-workers.llm.svc.cluster.local:8080:5557 ...
 *   admit-router --workers-file /etc/admit-router/workers ...   (kill -HUP re-reads it)
 */
#include "daemon/admin.h"
#include "core/busy.h"
#include "daemon/drain.h"
#include "core/log.h"
#include "core/metrics.h"
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
    struct metrics m;
    struct proxy_opts popts;
    struct proxy *px;
    struct router *r;
    struct discover *disc;
    struct event_base *base;
    unsigned drain_timeout_ms;
    struct drain *drain;
};

static void render_metrics(void *arg, struct buf *out)
{
    struct app *a = arg;
    struct metrics_view v = {&a->m, NULL, NULL, ADMIT_VERSION};

    metrics_render(&v, out);
    router_render_metrics(a->r, out);
    discover_render_metrics(a->disc, out);
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
    if (drain_start(a->drain, "Server unavailable: router draining", a->drain_timeout_ms) != 0) {
        log_info("second signal: exiting now");
        event_base_loopbreak(a->base);
    }
}

/* ---- SIGHUP: read again what can change while the router runs ---------------------- */

/* Each step applies what it read, or logs why it could not and leaves its part as it was, so
 * that one bad file does not hold back the others. The steps today: the workers file and the
 * DNS names. The config file's own settings (thresholds, classes, log level) are not read
 * again yet: a restart applies them; their step goes first, before the workers file, when it
 * comes (a new config may name another workers file or other names). */
static void reload(struct app *a)
{
    discover_reload_file(a->disc); /* logs file:line when the file is bad */
    discover_resolve_now(a->disc);
}

static void on_sighup(evutil_socket_t sig, short what, void *arg)
{
    (void) sig;
    (void) what;
    log_info("SIGHUP received: reading the workers file and resolving the DNS names again "
             "(the other settings need a restart)");
    reload(arg);
}

static const char *env_lookup(const char *name)
{
    return getenv(name);
}

int main(int argc, char **argv)
{
    static struct router_cfg rcfg;
    static struct app app;
    char err[512], listen_at[NETADDR_HOST_MAX + 8], metrics_at[NETADDR_HOST_MAX + 8];
    struct event_base *base;
    struct admin *adm;
    struct event *sigterm, *sigint, *sighup;
    struct admin_hooks hooks = {render_metrics, render_workers, is_ready, no_admission, &app};
    const struct router_cfg *cfg = &rcfg;
    int rc = 0;

    log_set_ident("admit-router");
    signal(SIGPIPE, SIG_IGN);
    switch (router_cfg_parse(&rcfg, argc, argv, env_lookup, err, sizeof err)) {
    case OPT_HELP:
        router_cfg_usage(stdout);
        return 0;
    case OPT_VERSION:
        printf("admit-router %s\n", ADMIT_VERSION);
        return 0;
    case OPT_CHECK:
        printf("admit-router: configuration OK%s%s\n", rcfg.config_path[0] ? ": " : "",
               rcfg.config_path);
        router_cfg_free(&rcfg);
        return 0;
    case OPT_ERROR:
        fprintf(stderr, "admit-router: error: %s\n", err);
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
    app.base = base;
    app.drain_timeout_ms = cfg->drain_timeout_ms;
    app.popts = (struct proxy_opts){cfg->client_timeout_ms,  cfg->max_header_bytes,
                                    cfg->max_body_bytes,     cfg->upstream_timeout_ms,
                                    cfg->upstream_keepalive, cfg->stream_buffer_bytes,
                                    cfg->access_log};
    app.px = proxy_new(base, &app.popts, NULL, &app.m);
    app.drain = drain_new(base, app.px, &app.m);
    /* The router's own admission: no cap, it counts and books what it sends. */
    if ((app.r = router_new(base, app.px, &app.m, cfg)) == NULL) {
        proxy_free(app.px);
        drain_free(app.drain);
        event_base_free(base);
        router_cfg_free(&rcfg);
        return 2;
    }
    router_set_change_cb(app.r, on_change, &app);
    for (size_t i = 0; i < rcfg.models.n; i++)
        router_add_model(app.r, rcfg.models.items[i]);
    adm = admin_new(base, &hooks, "");
    for (size_t i = 0; i < rcfg.workers.n && rc == 0; i++) {
        char *eq = strchr(rcfg.workers.items[i], '='); /* there is one: checked at parse time */

        *eq = '\0';
        if (router_add_worker(app.r, rcfg.workers.items[i], eq + 1, err, sizeof err) != 0) {
            fprintf(stderr, "admit-router: error: worker: %s\n", err);
            rc = 2;
        }
    }
    if (rc == 0 && ((app.disc = discover_new(base, app.r, cfg, err, sizeof err)) == NULL ||
                    discover_start(app.disc, err, sizeof err) != 0)) {
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
    router_cfg_free(&rcfg);
    return rc; /* nng's sockets are left to the exit (see nngclose.h) */
}
