/* admit-router: the frontend that routes around busy admitd workers.
 *
 *   admit-router --worker http://gpu1:8080=tcp://gpu1:5557 --worker http://gpu2:8080=... \
 *                --active-decode-blocks-threshold 0.85 --model meta-llama/Llama-3.1-8B
 */
#include "daemon/admin.h"
#include "daemon/admission.h"
#include "core/busy.h"
#include "core/cfgfile.h"
#include "core/config.h"
#include "daemon/drain.h"
#include "core/log.h"
#include "core/metrics.h"
#include "pubsub/nngclose.h"
#include "http/proxy.h"
#include "router.h"
#include "core/xmalloc.h"

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
    struct proxy_opts popts;
    struct admission_opts aopts;
    struct proxy *px;
    struct admission *adm; /* no cap: counts what is in flight, and tells the drain */
    struct router *r;
    struct event_base *base;
    unsigned drain_timeout_ms;
    struct drain *drain;
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
            "  --drain-timeout-ms=MS   on SIGTERM, how long in-flight requests may take (30000)\n"
            "  --admin-token=T         POST /busy_threshold needs 'Authorization: Bearer T'\n"
            "                          (env ADMIT_ROUTER_ADMIN_TOKEN; default: open, as Dynamo)\n"
            "  --log-level=L           error, warn, info, debug\n"
            "  --config=FILE           YAML with the same settings (worker and model take\n"
            "                          comma-separated lists); flags win over the file\n"
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

/* Everything the command line and the config file can set. */
struct settings {
    struct cfg cfg;
    struct busy_thresholds t;
    long long missed;
    char *workers[256], *models[256];
    size_t nworkers, nmodels;
};

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
    {"drain-timeout-ms", required_argument, NULL, 'D'},
    {"admin-token", required_argument, NULL, 'A'},
    {"log-level", required_argument, NULL, 'L'},
    {"config", required_argument, NULL, 'c'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0}};

static const char *opt_name(int ch)
{
    for (const struct option *o = longopts; o->name; o++)
        if (o->val == ch)
            return o->name;
    return "?";
}

/* Adds the comma-separated items of val to a list (the config file gives lists that way). */
static void add_items(char **list, size_t *n, const char *val)
{
    const char *p = val;

    while (*p && *n < 256) {
        size_t len = strcspn(p, ",");
        if (len > 0)
            list[(*n)++] = xstrndup(p, len);
        p += len + (p[len] == ',');
    }
}

/* Applies one setting; 0, or -1 when the value is not valid for it. */
static int set_opt(struct settings *st, int ch, const char *val)
{
    char err[256];
    long long v;

    switch (ch) {
    case 'w':
        add_items(st->workers, &st->nworkers, val);
        return 0;
    case 'm':
        add_items(st->models, &st->nmodels, val);
        return 0;
    case 'l':
        return hostport_parse(val, &st->cfg.listen, err, sizeof err);
    case 'M':
        return hostport_parse(val, &st->cfg.metrics_listen, err, sizeof err);
    case 'd':
        return parse_double(val, &st->t.active_decode_blocks_threshold);
    case 'p':
        if (parse_int(val, 0, &v) != 0)
            return -1;
        st->t.active_prefill_tokens_threshold = v;
        return 0;
    case 'f':
        return parse_double(val, &st->t.active_prefill_tokens_threshold_frac);
    case 's':
        st->cfg.overload_status = cfg_parse_overload_status(val);
        return 0;
    case 'k':
        return parse_int(val, 1, &st->missed);
    case 't':
        if (parse_int(val, 1, &v) != 0 || v > 86400000)
            return -1;
        st->cfg.upstream_timeout_ms = (unsigned) v;
        return 0;
    case 'D':
        if (parse_int(val, 0, &v) != 0 || v < 0 || v > 86400000)
            return -1;
        st->cfg.drain_timeout_ms = (unsigned) v;
        return 0;
    case 'L':
        return log_level_parse(val, &st->cfg.log_level);
    case 'A':
        if (strlen(val) < 16 || strlen(val) >= sizeof st->cfg.admin_token ||
            strpbrk(val, " \t\r\n") != NULL)
            return -1;
        strcpy(st->cfg.admin_token, val);
        return 0;
    }
    return -1;
}

/* A key of the config file: an option's name with '_' for '-'. */
static int on_file_item(const struct cfgfile_item *it, void *arg, char *msg, size_t msglen,
                        int *at_key)
{
    for (const struct option *o = longopts; o->name; o++) {
        const char *a = o->name, *b = it->key;

        while (*a && *b && (*a == *b || (*a == '-' && *b == '_')))
            a++, b++;
        if (*a || *b || o->val == 'c' || o->val == 'h' || o->val == 'V')
            continue;
        *at_key = 0;
        if (it->is_null)
            return 0;
        if (set_opt(arg, o->val, it->value) != 0) {
            snprintf(msg, msglen, "'%.64s' is not a valid value for %s", it->value, it->key);
            return -1;
        }
        return 0;
    }
    *at_key = 1;
    snprintf(msg, msglen, "unknown setting '%.64s'", it->key);
    return -1;
}

int main(int argc, char **argv)
{
    static struct settings st;
    static struct app app;
    static int flag_ch[512];
    static char *flag_val[512];
    size_t nflags = 0;
    const char *config = NULL;
    char *def_argv[] = {"admit-router", NULL};
    char err[512], listen_at[NETADDR_HOST_MAX + 8], metrics_at[NETADDR_HOST_MAX + 8];
    struct event_base *base;
    struct admin *adm;
    struct event *sigterm, *sigint;
    struct admin_hooks hooks = {render_metrics, render_workers, is_ready, no_admission, &app};
    struct cfg *cfg = &st.cfg;
    int ch, rc = 0;

    log_set_ident("admit-router");
    signal(SIGPIPE, SIG_IGN);
    if (cfg_parse(cfg, 1, def_argv, NULL, err, sizeof err) != CFG_RUN)
        return 2;
    hostport_parse("0.0.0.0:8090", &cfg->listen, err, sizeof err);
    hostport_parse("0.0.0.0:9092", &cfg->metrics_listen, err, sizeof err);
    cfg->overload_status = cfg_parse_overload_status(getenv("DYN_HTTP_OVERLOAD_STATUS_CODE"));
    busy_thresholds_unset(&st.t);
    st.missed = 3;
    /* Flags win over the file: collect them first, apply them after it. */
    optind = 0;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (ch == 'h') {
            usage(stdout);
            return 0;
        }
        if (ch == 'V') {
            printf("admit-router %s\n", ADMIT_VERSION);
            return 0;
        }
        if (ch == 'c') {
            config = optarg;
            continue;
        }
        if (ch == '?' || ch == ':' || nflags == 512) {
            fprintf(stderr, "admit-router: error: bad option '%s' (see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
        flag_ch[nflags] = ch;
        flag_val[nflags++] = optarg;
    }
    if (config != NULL && cfgfile_load(config, on_file_item, &st, err, sizeof err) != 0) {
        fprintf(stderr, "admit-router: error: %s\n", err);
        return 2;
    }
    /* Precedence: flags, then the environment, then the file. */
    if (getenv("ADMIT_ROUTER_ADMIN_TOKEN") != NULL &&
        set_opt(&st, 'A', getenv("ADMIT_ROUTER_ADMIN_TOKEN")) != 0) {
        fprintf(stderr,
                "admit-router: error: ADMIT_ROUTER_ADMIN_TOKEN must be 16 to %zu "
                "characters without blanks\n",
                sizeof cfg->admin_token - 1);
        return 2;
    }
    for (size_t i = 0; i < nflags; i++)
        if (set_opt(&st, flag_ch[i], flag_val[i]) != 0) {
            fprintf(stderr, "admit-router: error: '%s' is not a valid value for --%s\n",
                    flag_val[i], opt_name(flag_ch[i]));
            return 2;
        }
    if (busy_thresholds_validate(&st.t, err, sizeof err) != 0) {
        fprintf(stderr, "admit-router: error: %s\n", err);
        return 2;
    }
    if (st.nworkers == 0 || optind < argc) {
        fprintf(stderr, "admit-router: error: %s\n",
                st.nworkers == 0 ? "name at least one --worker=PROXY_URL=PUB_URL"
                                 : "unexpected argument");
        return 2;
    }
    log_set_level(cfg->log_level);
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
    app.aopts = (struct admission_opts){.retry_after_s = cfg->retry_after_s,
                                        .overload_status = cfg->overload_status,
                                        .chars_per_token = cfg->chars_per_token,
                                        .block_size = cfg->block_size};
    app.px = proxy_new(base, &app.popts, NULL, &app.m);
    app.adm = admission_new(app.px, &app.m, &app.aopts);
    app.drain = drain_new(base, app.px, &app.m);
    admission_set_change_cb(app.adm, on_change, &app);
    app.r = router_new(base, app.px, cfg, &st.t, (unsigned) st.missed);
    for (size_t i = 0; i < st.nmodels; i++)
        router_add_model(app.r, st.models[i]);
    adm = admin_new(base, &hooks, "");
    for (size_t i = 0; i < st.nworkers && rc == 0; i++) {
        char *eq = strchr(st.workers[i], '=');
        if (eq == NULL) {
            fprintf(stderr, "admit-router: error: worker '%s' must be PROXY_URL=PUB_URL\n",
                    st.workers[i]);
            rc = 2;
            break;
        }
        *eq = '\0';
        if (router_add_worker(app.r, st.workers[i], eq + 1, err, sizeof err) != 0) {
            fprintf(stderr, "admit-router: error: worker: %s\n", err);
            rc = 2;
        }
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
        evsignal_add(sigterm, NULL);
        evsignal_add(sigint, NULL);
        log_notice("ready listen=%s metrics=%s workers=%zu", listen_at, metrics_at, st.nworkers);
        event_base_dispatch(base);
        event_free(sigterm);
        event_free(sigint);
    }
    admin_free(adm);
    proxy_free(app.px); /* may report a last change: the drain goes after it */
    admission_free(app.adm);
    drain_free(app.drain);
    router_free(app.r);
    event_base_free(base);
    for (size_t i = 0; i < st.nworkers; i++)
        free(st.workers[i]);
    for (size_t i = 0; i < st.nmodels; i++)
        free(st.models[i]);
    nngc_finish(rc, 500); /* nng's reaper finishes before the exit (see nngclose.h) */
    return rc;
}
