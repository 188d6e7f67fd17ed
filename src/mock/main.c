/* admit-mock-engine: the mock engine as a program, for tests and demos of admitd. */
#include "util/log.h"
#include "mock.h"

#include <event2/event.h>
#include <signal.h>
#include <stdio.h>

/* SIGTERM or SIGINT: leave the loop; main then frees everything. */
static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void) what;
    log_debug("signal %d: shutting down", (int) sig);
    event_base_loopbreak(arg);
}

int main(int argc, char **argv)
{
    struct mock_opts o;
    struct event_base *base;
    struct mock_engine *e;
    struct event *sigterm, *sigint;
    char err[512], bound[300];
    int rc;

    signal(SIGPIPE, SIG_IGN);
    log_set_ident("admit-mock-engine");
    mock_opts_defaults(&o);
    rc = mock_opts_parse(&o, argc, argv, err, sizeof err);
    if (rc == 1)
        return 0;
    if (rc != 0) {
        fprintf(stderr, "admit-mock-engine: %s\n", err);
        return 2;
    }
    log_set_level(o.log_level);
    base = event_base_new();
    if (base == NULL) {
        fprintf(stderr, "admit-mock-engine: cannot create the event loop\n");
        return 1;
    }
    e = mock_engine_new(base, &o);
    if (mock_engine_bind(e, o.listen.host, o.listen.port, bound, sizeof bound, err, sizeof err) !=
        0) {
        fprintf(stderr, "admit-mock-engine: %s\n", err);
        mock_engine_free(e);
        event_base_free(base);
        return 1;
    }
    sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    sigint = evsignal_new(base, SIGINT, on_signal, base);
    if (sigterm == NULL || sigint == NULL || evsignal_add(sigterm, NULL) != 0 ||
        evsignal_add(sigint, NULL) != 0) {
        fprintf(stderr, "admit-mock-engine: cannot install the signal handlers\n");
        rc = 1;
    } else {
        log_notice("listening on %s", bound);
        event_base_dispatch(base);
        rc = 0;
    }
    if (sigterm != NULL)
        event_free(sigterm);
    if (sigint != NULL)
        event_free(sigint);
    mock_engine_free(e);
    event_base_free(base);
    libevent_global_shutdown();
    return rc;
}
