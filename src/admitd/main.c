/* admitd: the worker-side admission shim. Parses options, runs the loop, cleans up. */
#include "config.h"
#include "pubsub/nngver.h"
#include "util/buildinfo.h"
#include "util/log.h"
#include "worker.h"

#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static const char *env_lookup(const char *name)
{
    return getenv(name);
}

static struct event_base *base;

/* The first SIGTERM/SIGINT drains gracefully; a second one exits at once. */
static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void) what;
    log_info("%s received", sig == SIGINT ? "SIGINT" : "SIGTERM");
    if (worker_drain(arg) != 0) {
        log_info("second signal: exiting now");
        event_base_loopbreak(base);
    }
}

static int saved_argc;
static char **saved_argv;

static void on_sighup(evutil_socket_t sig, short what, void *arg)
{
    (void) sig;
    (void) what;
    log_info("SIGHUP received: reloading the configuration");
    worker_reload(arg, saved_argc, saved_argv, env_lookup);
}

int main(int argc, char **argv)
{
    static struct cfg cfg;
    struct worker *w;
    struct event *sigterm, *sigint, *sighup;
    char err[512], line[1024];

    log_set_ident("admitd");
    signal(SIGPIPE, SIG_IGN); /* a client that vanishes mid-write must not kill the shim */
    switch (cfg_parse(&cfg, argc, argv, env_lookup, err, sizeof err)) {
    case CFG_HELP:
        cfg_usage(stdout, "admitd");
        return 0;
    case CFG_VERSION: {
        const struct buildinfo_lib libs[] = {{"libevent", event_get_version()},
                                             {"nng", nngver_runtime()}};

        return buildinfo_print(stdout, "admitd", libs, 2) == 0 ? 0 : 1;
    }
    case CFG_CHECK:
        printf("admitd: configuration OK%s%s\n", cfg.config_path[0] ? ": " : "", cfg.config_path);
        return 0;
    case CFG_ERROR:
        fprintf(stderr, "admitd: error: %s\n", err);
        return 2;
    case CFG_RUN:
        break;
    }
    log_set_level(cfg.log_level);
    log_set_json(cfg.log_json);

    base = event_base_new();
    if (base == NULL) {
        log_error("event_base_new failed");
        return 1;
    }
    w = worker_start(base, &cfg, err, sizeof err);
    if (w == NULL) {
        log_error("%s", err);
        event_base_free(base);
        return 1;
    }
    sigterm = evsignal_new(base, SIGTERM, on_signal, w);
    sigint = evsignal_new(base, SIGINT, on_signal, w);
    sighup = evsignal_new(base, SIGHUP, on_sighup, w);
    saved_argc = argc;
    saved_argv = argv;
    evsignal_add(sigterm, NULL);
    evsignal_add(sigint, NULL);
    evsignal_add(sighup, NULL);
    worker_describe(w, line, sizeof line);
    log_notice("%s", line);
    event_base_dispatch(base);

    event_free(sigterm);
    event_free(sigint);
    event_free(sighup);
    worker_free(w);
    event_base_free(base);
    return 0; /* nng's sockets are left to the exit (see nngclose.h) */
}
