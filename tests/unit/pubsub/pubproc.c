/* pubproc: a load publisher in a process of its own, for tests that restart one.
 *
 *   pubproc URL HEARTBEAT_MS
 *
 * Listens on URL with lib/pubsub/publish.c (as admitd does), prints `ready BOUND_URL` once it
 * listens, then sends one message per heartbeat, seq counting from 1, until it is killed.
 * A test kills it (SIGKILL, as a crash would) and starts another on the same URL, which nng
 * can bind again at once (SO_REUSEADDR; a stale ipc path is removed). */
#include "admit/load.h"
#include "pubsub/publish.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>

static void fill(void *arg, struct admit_load *msgs, unsigned *n)
{
    (void) arg;
    admit_load_init(&msgs[0]);
    msgs[0].engine_requests = 1;
    *n = 1;
}

int main(int argc, char **argv)
{
    struct event_base *base;
    struct publisher *p;
    char bound[512], err[256];

    if (argc != 3) {
        fprintf(stderr, "usage: pubproc URL HEARTBEAT_MS\n");
        return 2;
    }
    base = event_base_new();
    if (base == NULL)
        return 1;
    /* nng's PUB: spsub's tests hold our reader against nng's own wire. */
    p = pub_new(base, argv[1], PUB_NNG, "pubproc", (unsigned) atoi(argv[2]), fill, NULL, bound,
                sizeof bound, err, sizeof err);
    if (p == NULL) {
        fprintf(stderr, "pubproc: %s\n", err);
        return 1;
    }
    printf("ready %s\n", bound);
    fflush(stdout);
    event_base_dispatch(base);
    return 0;
}
