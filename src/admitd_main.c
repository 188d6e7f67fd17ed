/* admitd: the worker-side admission shim. Wires config, proxy, metrics and probe together. */
#include "admin.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "mock.h"
#include "probe.h"
#include "proxy.h"

#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *env_lookup(const char *name)
{
    return getenv(name);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void) what;
    log_info("%s received, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    event_base_loopbreak(arg);
}

/* Starts the built-in mock engine on a free loopback port and points the upstream at it. */
static struct mock_engine *start_mock(struct event_base *base, struct cfg *c)
{
    struct mock_opts o;
    struct mock_engine *e;
    char bound[NETADDR_HOST_MAX + 8], url[NETADDR_HOST_MAX + 16], err[256];

    mock_opts_defaults(&o);
    e = mock_engine_new(base, &o);
    if (mock_engine_bind(e, "127.0.0.1", 0, bound, sizeof bound, err, sizeof err) != 0 ||
        (snprintf(url, sizeof url, "http://%s", bound),
         http_url_parse(url, &c->upstream, err, sizeof err)) != 0) {
        log_error("cannot start the built-in mock engine: %s", err);
        mock_engine_free(e);
        return NULL;
    }
    log_info("built-in mock engine listening on %s", bound);
    return e;
}

int main(int argc, char **argv)
{
    static struct cfg cfg;
    struct metrics m;
    struct event_base *base;
    struct proxy *px;
    struct admin *adm;
    struct probe *pr;
    struct mock_engine *mock = NULL;
    struct event *sigterm, *sigint;
    char err[512], listen_at[NETADDR_HOST_MAX + 8], metrics_at[NETADDR_HOST_MAX + 8];
    int rc = 0;

    log_set_ident("admitd");
    signal(SIGPIPE, SIG_IGN); /* a client that vanishes mid-write must not kill the shim */
    switch (cfg_parse(&cfg, argc, argv, env_lookup, err, sizeof err)) {
    case CFG_HELP:
        cfg_usage(stdout, "admitd");
        return 0;
    case CFG_VERSION:
        printf("admitd %s\n", ADMIT_VERSION);
        return 0;
    case CFG_ERROR:
        fprintf(stderr, "admitd: error: %s\n", err);
        return 2;
    case CFG_RUN:
        break;
    }
    log_set_level(cfg.log_level);

    base = event_base_new();
    if (base == NULL) {
        log_error("event_base_new failed");
        return 1;
    }
    if (cfg.mock_engine && (mock = start_mock(base, &cfg)) == NULL) {
        event_base_free(base);
        return 1;
    }
    metrics_init(&m);
    px = proxy_new(base, &cfg, &m);
    adm = admin_new(base, px, &m, ADMIT_VERSION);
    if (proxy_bind(px, &cfg.listen, listen_at, sizeof listen_at, err, sizeof err) != 0 ||
        admin_bind(adm, &cfg.metrics_listen, metrics_at, sizeof metrics_at, err, sizeof err) != 0) {
        log_error("%s", err);
        rc = 1;
        goto out;
    }
    pr = probe_new(base, &cfg.upstream, cfg.health_path, cfg.health_interval_ms, &m.engine_ready);
    sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    sigint = evsignal_new(base, SIGINT, on_signal, base);
    evsignal_add(sigterm, NULL);
    evsignal_add(sigint, NULL);
    if (cfg.engine_request_limit > 0)
        log_info("ready listen=%s metrics=%s upstream=%s engine-request-limit=%u "
                 "request-queue-limit=%u overload-status=%d",
                 listen_at, metrics_at, cfg.upstream.hostport, cfg.engine_request_limit,
                 cfg.request_queue_limit, cfg.overload_status);
    else
        log_info("ready listen=%s metrics=%s upstream=%s engine-request-limit=none "
                 "(no cap: requests pass straight through)",
                 listen_at, metrics_at, cfg.upstream.hostport);
    event_base_dispatch(base);

    event_free(sigterm);
    event_free(sigint);
    probe_free(pr);
out:
    admin_free(adm);
    proxy_free(px);
    mock_engine_free(mock);
    event_base_free(base);
    return rc;
}
