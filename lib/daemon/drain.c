/* drain: stop taking work, finish what is in flight, then end the loop. */
#include "daemon/drain.h"
#include "util/log.h"
#include "daemon/metrics.h"
#include "http/proxy.h"
#include "util/xmalloc.h"

#include <event2/event.h>
#include <stdlib.h>

struct drain {
    struct event_base *base;
    struct proxy *px;
    struct metrics *m;
    struct event *timer; /* armed while draining with work in flight */
    int active;
    int timed_out; /* the timeout ended what was left: drain_check has nothing to say */
};

struct drain *drain_new(struct event_base *base, struct proxy *px, struct metrics *m)
{
    struct drain *d = xcalloc(1, sizeof *d);

    d->base = base;
    d->px = px;
    d->m = m;
    return d;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct drain *d = arg;
    unsigned held, n;

    (void) fd;
    (void) what;
    d->timed_out = 1;
    n = proxy_cancel_all(d->px, &held);
    d->m->drain_cancelled += n;
    log_warn("drain timeout: cancelled %u request%s still in flight (%u still queued: answered "
             "503)",
             n, n == 1 ? "" : "s", held);
    event_base_loopbreak(d->base);
}

int drain_start(struct drain *d, const char *msg, unsigned timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    unsigned n = proxy_active(d->px);

    if (d->active)
        return 1;
    d->active = 1;
    proxy_drain(d->px, msg);
    log_info("draining: %u request%s in flight, new ones get 503, waiting at most %u ms", n,
             n == 1 ? "" : "s", timeout_ms);
    if (n == 0) {
        event_base_loopbreak(d->base);
        return 0;
    }
    d->timer = evtimer_new(d->base, on_timeout, d);
    if (d->timer == NULL)
        fatal("evtimer_new failed");
    evtimer_add(d->timer, &tv);
    return 0;
}

int drain_active(const struct drain *d)
{
    return d->active;
}

void drain_check(struct drain *d)
{
    if (d->active && !d->timed_out && proxy_active(d->px) == 0) {
        log_info("drained: nothing in flight, exiting");
        event_base_loopbreak(d->base);
    }
}

void drain_free(struct drain *d)
{
    if (d == NULL)
        return;
    if (d->timer != NULL)
        event_free(d->timer);
    free(d);
}
