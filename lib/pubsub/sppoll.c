/* sppoll: an epoll set per event base, read in passes (see sppoll.h).
 *
 * Between passes either the gate is open (idle: the next ready socket makes `watch` fire and
 * starts a pass at once), or the timer behind `tick` is armed, periodic (flowing: the last
 * pass found something, so the next is due at the next period).
 *
 * The gate is a second epoll set whose only member is the first, and it is what the loop
 * watches, once and for good: opening and closing it is an EPOLL_CTL_MOD of that member.
 * Watching the first set itself would take an EPOLL_CTL_ADD to the loop's epoll at every
 * silence, and the kernel checks an epoll set added to another for loops by walking every
 * descriptor in it: measured in admit-router at 1,000 workers of 1 message/s (a silence of
 * 2 ms every few passes), that walk took half the router's CPU.
 *
 * A pass takes up to SPPOLL_BATCH ready sockets per epoll_wait, a few times over when a batch
 * comes back full, so a burst is read in the same wakeup without one pass holding the loop
 * for long.
 *
 * A callback may stop watching any socket, its own or another's (a router retiring a worker
 * from inside a message), and may let go of the poller: sppoll_del blanks the socket's entry
 * among the pass's events not yet handled, and the pass holds a reference of its own. */
#include "pubsub/sppoll.h"
#include "util/xmalloc.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

/* Ready sockets taken by one epoll_wait, and the epoll_waits of one pass at most. */
#define SPPOLL_BATCH  256
#define SPPOLL_ROUNDS 4

struct sppoll {
    struct event_base *base;
    int ep, gate, tfd;        /* the epoll set; the set that holds it; the tick's timerfd */
    struct event watch, tick; /* gate readable; tfd readable */
    unsigned ms;
    int ticking, open; /* tfd armed; the gate lets ep's readiness through */
    size_t refs;
    size_t next, nready; /* the pass's events from next on are still to be handled */
    unsigned long long passes, ready;
    struct sppoll *link;
    struct epoll_event ev[SPPOLL_BATCH];
};

/* The pollers by event base; the lock covers loops on several threads, as subscribe.c's. */
static pthread_mutex_t poll_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sppoll *poll_list;

/* The tick is a periodic timerfd, not a libevent timer: the kernel fires it every interval
 * from when it was armed, whatever the passes take. libevent computes a timer's wait from
 * the time it cached before running the callbacks, so each of its ticks comes a pass's
 * length late, and a timer re-armed after each pass later still: measured in admit-router
 * following 1,000 workers (10,000 messages/s, each decoded in its pass) with 5 ms asked, 80
 * passes a second that way against 130 with the timerfd (the rest is this busy machine's
 * wakeup latency), so a message waited 40 % less. */
static void ticks(struct sppoll *p, int on)
{
    struct itimerspec its;

    memset(&its, 0, sizeof its);
    if (on) {
        its.it_value.tv_nsec = (long) p->ms * 1000000;
        its.it_interval = its.it_value;
    }
    timerfd_settime(p->tfd, 0, &its, NULL); /* tick stays in the loop: disarmed, it is silent */
    p->ticking = on;
}

/* Opens or closes the gate: ep in it waits for input, or for nothing. */
static void gate(struct sppoll *p, int open)
{
    struct epoll_event ev;

    if (p->open == open)
        return;
    memset(&ev, 0, sizeof ev);
    ev.events = open ? EPOLLIN : 0;
    epoll_ctl(p->gate, EPOLL_CTL_MOD, p->ep, &ev);
    p->open = open;
}

static void close_fds(struct sppoll *p)
{
    if (p->gate >= 0)
        close(p->gate);
    if (p->ep >= 0)
        close(p->ep);
    if (p->tfd >= 0)
        close(p->tfd);
}

static void unref(struct sppoll *p)
{
    struct sppoll **pp;

    pthread_mutex_lock(&poll_mu);
    if (--p->refs > 0) {
        pthread_mutex_unlock(&poll_mu);
        return;
    }
    for (pp = &poll_list; *pp != p; pp = &(*pp)->link)
        ;
    *pp = p->link;
    pthread_mutex_unlock(&poll_mu);
    event_del(&p->watch);
    event_del(&p->tick);
    close_fds(p);
    free(p);
}

static void pass(struct sppoll *p)
{
    size_t found = 0;
    int n = SPPOLL_BATCH;

    pthread_mutex_lock(&poll_mu);
    p->refs++; /* a callback may let go of the last reference */
    pthread_mutex_unlock(&poll_mu);
    p->passes++;
    for (int round = 0; round < SPPOLL_ROUNDS && n == SPPOLL_BATCH; round++) {
        n = epoll_wait(p->ep, p->ev, SPPOLL_BATCH, 0);
        if (n < 0 && errno == EINTR)
            n = SPPOLL_BATCH; /* a signal: try again */
        if (n <= 0)
            continue;
        p->ready += (unsigned long long) n;
        found += (size_t) n;
        p->nready = (size_t) n;
        for (p->next = 0; p->next < p->nready;) {
            struct sppoll_reg *reg = p->ev[p->next++].data.ptr;

            if (reg != NULL)
                reg->cb(reg->arg);
        }
        p->nready = 0;
    }
    /* Something came: more is on its way, read it in one go at the next tick. Nothing: wait
     * for the set itself, so the next message after a silence is read at once. */
    if (found > 0 && !p->ticking) {
        gate(p, 0);
        ticks(p, 1);
    } else if (found == 0) {
        if (p->ticking)
            ticks(p, 0);
        gate(p, 1);
    }
    unref(p);
}

static void on_watch(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    pass(arg);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    uint64_t expired;

    (void) what;
    if (read(fd, &expired, sizeof expired) < 0)
        return; /* EAGAIN: read already */
    pass(arg);
}

struct sppoll *sppoll_get(struct event_base *base, unsigned ms, char *err, size_t errlen)
{
    struct sppoll *p;
    struct epoll_event ev;

    if (ms < 1)
        ms = 1;
    if (ms > SPPOLL_MAX_MS)
        ms = SPPOLL_MAX_MS;
    pthread_mutex_lock(&poll_mu);
    for (p = poll_list; p != NULL && p->base != base; p = p->link)
        ;
    if (p != NULL) {
        p->refs++;
        p->ms = ms;
        pthread_mutex_unlock(&poll_mu);
        return p;
    }
    p = xcalloc(1, sizeof *p);
    p->ep = epoll_create1(EPOLL_CLOEXEC);
    p->gate = epoll_create1(EPOLL_CLOEXEC);
    p->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    if (p->ep < 0 || p->gate < 0 || p->tfd < 0 ||
        epoll_ctl(p->gate, EPOLL_CTL_ADD, p->ep, &ev) != 0) {
        snprintf(err, errlen, "cannot make the poller's epoll sets and timer: %s", strerror(errno));
        pthread_mutex_unlock(&poll_mu);
        close_fds(p);
        free(p);
        return NULL;
    }
    p->open = 1;
    p->base = base;
    p->ms = ms;
    p->refs = 1;
    event_assign(&p->watch, base, p->gate, EV_READ | EV_PERSIST, on_watch, p);
    event_assign(&p->tick, base, p->tfd, EV_READ | EV_PERSIST, on_tick, p);
    event_add(&p->watch, NULL);
    event_add(&p->tick, NULL);
    p->link = poll_list;
    poll_list = p;
    pthread_mutex_unlock(&poll_mu);
    return p;
}

void sppoll_put(struct sppoll *p)
{
    if (p != NULL)
        unref(p);
}

int sppoll_add(struct sppoll *p, struct sppoll_reg *reg, int fd)
{
    struct epoll_event ev;

    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.ptr = reg;
    if (epoll_ctl(p->ep, EPOLL_CTL_ADD, fd, &ev) != 0)
        return -1;
    reg->fd = fd;
    return 0;
}

void sppoll_del(struct sppoll *p, struct sppoll_reg *reg)
{
    if (reg->fd < 0)
        return;
    epoll_ctl(p->ep, EPOLL_CTL_DEL, reg->fd, NULL);
    reg->fd = -1;
    /* A pass under way may have it among the events still to be handled. */
    for (size_t i = p->next; i < p->nready; i++)
        if (p->ev[i].data.ptr == reg)
            p->ev[i].data.ptr = NULL;
}

void sppoll_counts(const struct sppoll *p, unsigned long long *passes, unsigned long long *ready)
{
    *passes = p->passes;
    *ready = p->ready;
}
