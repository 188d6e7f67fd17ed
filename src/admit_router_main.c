/* admit-router: the frontend that routes around busy admitd workers.
 *
 *   admit-router --worker http://gpu1:8080=tcp://gpu1:5557 --worker http://gpu2:8080=... \
 *                --active-decode-blocks-threshold 0.85 --model meta-llama/Llama-3.1-8B
 */
#include "admin.h"
#include "busy.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "proxy.h"
#include "router.h"

#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct app {
    struct metrics m;
    struct proxy *px;
    struct router *r;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: admit-router --worker=PROXY_URL=PUB_URL [--worker=...] [options]\n\n"
            "Routes OpenAI-compatible requests to admitd workers that have room, judged from\n"
            "their load messages, and answers the overload status when every worker is busy.\n\n"
            "  --worker=URL=PUB        an admitd (http://host:port) and its --publish URL\n"
            "  --listen=HOST:PORT      client listener (default 0.0.0.0:8090)\n"
            "  --metrics-listen=H:P    /metrics, /load, /health, /ready (default 0.0.0.0:9092)\n"
            "  --model=NAME            a model whose thresholds /busy_threshold may change\n"
            "  --active-decode-blocks-threshold=F       0..1, or None (default None)\n"
            "  --active-prefill-tokens-threshold=N      tokens, or None (default None)\n"
            "  --active-prefill-tokens-threshold-frac=F of max_num_batched_tokens, or None\n"
            "  --overload-status-code=S  env DYN_HTTP_OVERLOAD_STATUS_CODE (default 529)\n"
            "  --missed-heartbeats=K   a worker silent this many heartbeats is not routable (3)\n"
            "  --upstream-timeout-ms=MS  worker silent this long: 504 (default 600000)\n"
            "  --log-level=L           error, warn, info, debug\n"
            "  --help, --version\n");
}

static int parse_double(const char *s, double *out)
{
    char *end;

    if (strcmp(s, "None") == 0 || strcmp(s, "none") == 0) {
        *out = NAN;
        return 0;
    }
    errno = 0;
    *out = strtod(s, &end);
    return (errno || end == s || *end) ? -1 : 0;
}

static int parse_int(const char *s, long long min, long long *out)
{
    char *end;

    if (strcmp(s, "None") == 0 || strcmp(s, "none") == 0) {
        *out = -1;
        return 0;
    }
    errno = 0;
    *out = strtoll(s, &end, 10);
    return (errno || end == s || *end || *out < min) ? -1 : 0;
}

static void render_metrics(void *arg, struct buf *out)
{
    struct app *a = arg;
    struct metrics_view v = {&a->m, NULL, NULL, ADMIT_VERSION};

    metrics_render(&v, out);
    router_render_metrics(a->r, out);
}

static void render_workers(void *arg, struct buf *out)
{
    router_render_workers(((struct app *) arg)->r, out);
}

static int is_ready(void *arg)
{
    return router_routable(((struct app *) arg)->r) > 0;
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

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void) sig;
    (void) what;
    log_info("signal received, exiting");
    event_base_loopbreak(arg);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"worker", required_argument, NULL, 'w'},
        {"listen", required_argument, NULL, 'l'},
        {"metrics-listen", required_argument, NULL, 'M'},
        {"model", required_argument, NULL, 'm'},
        {"active-decode-blocks-threshold", required_argument, NULL, 'd'},
        {"active-prefill-tokens-threshold", required_argument, NULL, 'p'},
        {"active-prefill-tokens-threshold-frac", required_argument, NULL, 'f'},
        {"overload-status-code", required_argument, NULL, 's'},
        {"missed-heartbeats", required_argument, NULL, 'k'},
        {"upstream-timeout-ms", required_argument, NULL, 't'},
        {"log-level", required_argument, NULL, 'L'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0}};
    static struct cfg cfg;
    static char *workers[256], *models[256];
    static struct app app;
    size_t nworkers = 0, nmodels = 0;
    struct busy_thresholds t;
    long long missed = 3, v;
    char *def_argv[] = {"admit-router", NULL};
    char err[512], listen_at[NETADDR_HOST_MAX + 8], metrics_at[NETADDR_HOST_MAX + 8];
    struct event_base *base;
    struct admin *adm;
    struct event *sigterm, *sigint;
    struct admin_hooks hooks = {render_metrics, render_workers, is_ready, no_admission, &app};
    int ch, rc = 0;

    log_set_ident("admit-router");
    signal(SIGPIPE, SIG_IGN);
    if (cfg_parse(&cfg, 1, def_argv, NULL, err, sizeof err) != CFG_RUN)
        return 2;
    hostport_parse("0.0.0.0:8090", &cfg.listen, err, sizeof err);
    hostport_parse("0.0.0.0:9092", &cfg.metrics_listen, err, sizeof err);
    cfg.overload_status = cfg_parse_overload_status(getenv("DYN_HTTP_OVERLOAD_STATUS_CODE"));
    busy_thresholds_unset(&t);
    optind = 0;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'w':
            if (nworkers < 256)
                workers[nworkers++] = optarg;
            break;
        case 'm':
            if (nmodels < 256)
                models[nmodels++] = optarg;
            break;
        case 'l':
            bad = hostport_parse(optarg, &cfg.listen, err, sizeof err) != 0;
            break;
        case 'M':
            bad = hostport_parse(optarg, &cfg.metrics_listen, err, sizeof err) != 0;
            break;
        case 'd':
            bad = parse_double(optarg, &t.active_decode_blocks_threshold) != 0;
            break;
        case 'p':
            bad = parse_int(optarg, 0, &v) != 0;
            t.active_prefill_tokens_threshold = v;
            break;
        case 'f':
            bad = parse_double(optarg, &t.active_prefill_tokens_threshold_frac) != 0;
            break;
        case 's':
            cfg.overload_status = cfg_parse_overload_status(optarg);
            break;
        case 'k':
            bad = parse_int(optarg, 1, &missed) != 0;
            break;
        case 't':
            bad = parse_int(optarg, 1, &v) != 0 || v > 86400000;
            cfg.upstream_timeout_ms = (unsigned) v;
            break;
        case 'L':
            bad = log_level_parse(optarg, &cfg.log_level) != 0;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("admit-router %s\n", ADMIT_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "admit-router: error: '%s' is not a valid value for --%s\n", optarg,
                    longopts[0].name && ch ? argv[optind - 1] : "?");
            return 2;
        }
    }
    if (busy_thresholds_validate(&t, err, sizeof err) != 0) {
        fprintf(stderr, "admit-router: error: %s\n", err);
        return 2;
    }
    if (nworkers == 0 || optind < argc) {
        fprintf(stderr, "admit-router: error: %s\n",
                nworkers == 0 ? "name at least one --worker=PROXY_URL=PUB_URL"
                              : "unexpected argument");
        return 2;
    }
    log_set_level(cfg.log_level);
    base = event_base_new();
    if (base == NULL)
        return 1;
    metrics_init(&app.m);
    app.px = proxy_new(base, &cfg, &app.m);
    app.r = router_new(base, app.px, &cfg, &t, (unsigned) missed);
    for (size_t i = 0; i < nmodels; i++)
        router_add_model(app.r, models[i]);
    adm = admin_new(base, &hooks, "");
    for (size_t i = 0; i < nworkers && rc == 0; i++) {
        char *eq = strchr(workers[i], '=');
        if (eq == NULL) {
            fprintf(stderr, "admit-router: error: --worker '%s' must be PROXY_URL=PUB_URL\n",
                    workers[i]);
            rc = 2;
            break;
        }
        *eq = '\0';
        if (router_add_worker(app.r, workers[i], eq + 1, err, sizeof err) != 0) {
            fprintf(stderr, "admit-router: error: --worker: %s\n", err);
            rc = 2;
        }
    }
    if (rc == 0 &&
        (proxy_bind(app.px, &cfg.listen, listen_at, sizeof listen_at, err, sizeof err) != 0 ||
         admin_bind(adm, &cfg.metrics_listen, metrics_at, sizeof metrics_at, err, sizeof err) !=
             0)) {
        log_error("%s", err);
        rc = 1;
    }
    if (rc == 0) {
        sigterm = evsignal_new(base, SIGTERM, on_signal, base);
        sigint = evsignal_new(base, SIGINT, on_signal, base);
        evsignal_add(sigterm, NULL);
        evsignal_add(sigint, NULL);
        log_info("ready listen=%s metrics=%s workers=%zu", listen_at, metrics_at, nworkers);
        event_base_dispatch(base);
        event_free(sigterm);
        event_free(sigint);
    }
    admin_free(adm);
    proxy_free(app.px);
    router_free(app.r);
    event_base_free(base);
    return rc;
}
