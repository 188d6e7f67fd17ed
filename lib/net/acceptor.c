/* acceptor: accept4 on a level-triggered watch that is taken off while accepting cannot
 * succeed (see acceptor.h). */
#include "net/acceptor.h"
#include "util/log.h"
#include "util/xmalloc.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* A listener that keeps reaching its cap says so at most this often. */
#define ACC_CAP_LOG_S 60

struct acceptor {
    struct event_base *base;
    int fd;
    struct event watch, pause;
    acc_fn fn;
    void *arg;
    struct listen_stats *st, own;
    unsigned cap;        /* 0: none */
    int watching;        /* the watch is added */
    int pausing;         /* the pause timer runs: no descriptor or memory at the last try */
    int starved;         /* since the warning, the backlog was never found empty */
    uint64_t starved_at; /* accept_pauses when the warning was logged */
    time_t cap_logged;   /* when reaching the cap was last logged */
    char name[160];
};

/* The watch is on exactly when accepting can succeed: not pausing, below the cap. */
static void follow(struct acceptor *a)
{
    int want = !a->pausing && (a->cap == 0 || a->st->conns < a->cap);

    if (want && !a->watching)
        event_add(&a->watch, NULL);
    else if (!want && a->watching)
        event_del(&a->watch);
    a->watching = want;
}

/* The watch is back after a pause. A starved listener must try accept4 once even if nothing
 * is waiting: Linux takes a descriptor before it looks at the backlog, so out of descriptors
 * an empty backlog fails with EMFILE too, and the level-triggered watch of an empty backlog
 * never fires, so without this try the listener would never learn it has recovered. */
static void resume(struct acceptor *a)
{
    a->pausing = 0;
    follow(a);
    if (a->starved && a->watching)
        event_active(&a->watch, EV_READ, 0);
}

/* accept4 failed for want of a descriptor or of memory: the connection is still in the
 * backlog and the socket still readable, so the watch rests ACC_PAUSE_MS. */
static void starve(struct acceptor *a, int err)
{
    static const struct timeval tv = {0, ACC_PAUSE_MS * 1000};

    if (!a->starved) {
        log_warn("%s: cannot accept: %s: pausing, trying again every %d ms or when a "
                 "connection closes",
                 a->name, strerror(err), ACC_PAUSE_MS);
        a->starved = 1;
        a->starved_at = a->st->accept_pauses;
    }
    a->st->accept_pauses++;
    a->pausing = 1;
    evtimer_add(&a->pause, &tv);
    follow(a);
}

static void at_cap(struct acceptor *a)
{
    time_t now = time(NULL);

    a->st->cap_reached++;
    if (a->cap_logged == 0 || now - a->cap_logged >= ACC_CAP_LOG_S) {
        log_warn("%s: %u connections open, its cap: new ones wait in the backlog until one "
                 "closes (said at most once a minute)",
                 a->name, a->cap);
        a->cap_logged = now;
    }
}

static void on_ready(evutil_socket_t lfd, short what, void *arg)
{
    struct acceptor *a = arg;

    (void) what;
    for (int i = 0; i < ACC_PER_WAKEUP && a->watching; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd = accept4(lfd, (struct sockaddr *) &ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            switch (errno) {
            case EAGAIN:
#if EWOULDBLOCK != EAGAIN
            case EWOULDBLOCK:
#endif
                /* Every waiting connection taken: a starved listener has recovered. (Not
                 * at its first accept: at the limit, closes and accepts alternate with
                 * failures, and each would be a pair of lines.) */
                if (a->starved) {
                    log_info("%s: accepting again, no connection waiting (after %llu pauses)",
                             a->name, (unsigned long long) (a->st->accept_pauses - a->starved_at));
                    a->starved = 0;
                }
                return;
            case EINTR:
            case ECONNABORTED:
            case EPROTO:
            case EPERM:
            case ENETDOWN:
            case ENOPROTOOPT:
            case EHOSTDOWN:
            case ENONET:
            case EHOSTUNREACH:
            case EOPNOTSUPP:
            case ENETUNREACH:
                continue; /* that connection failed before it was taken: the next one */
            default:
                /* EMFILE, ENFILE, ENOBUFS, ENOMEM, and anything unforeseen: a retry at
                 * once would fail the same way, for ever. */
                starve(a, errno);
                return;
            }
        }
        a->st->conns++;
        if (a->cap != 0 && a->st->conns >= a->cap) {
            at_cap(a);
            follow(a);
        }
        a->fn(a->arg, fd, (struct sockaddr *) &ss, len);
    }
    /* The quota is used up. A starved listener knows it has recovered only when it finds the
     * backlog empty (EAGAIN): if the last accept emptied it, the socket is not readable and
     * no wakeup would come, so it looks again on the next loop pass. */
    if (a->starved && a->watching)
        event_active(&a->watch, EV_READ, 0);
}

static void on_pause_end(evutil_socket_t fd, short what, void *arg)
{
    struct acceptor *a = arg;

    (void) fd;
    (void) what;
    resume(a);
}

struct acceptor *acc_new(struct event_base *base, int lfd, const char *name, acc_fn fn, void *arg,
                         struct listen_stats *st)
{
    struct acceptor *a = xcalloc(1, sizeof *a);

    a->base = base;
    a->fd = lfd;
    a->fn = fn;
    a->arg = arg;
    a->st = st != NULL ? st : &a->own;
    snprintf(a->name, sizeof a->name, "%s", name);
    event_assign(&a->watch, base, lfd, EV_READ | EV_PERSIST, on_ready, a);
    evtimer_assign(&a->pause, base, on_pause_end, a);
    follow(a);
    return a;
}

void acc_set_cap(struct acceptor *a, unsigned cap)
{
    a->cap = cap;
    follow(a);
}

unsigned acc_cap(const struct acceptor *a)
{
    return a->cap;
}

void acc_closed(struct acceptor *a)
{
    if (a->st->conns > 0)
        a->st->conns--;
    if (a->pausing) {
        /* A descriptor was just freed: the connection waiting can have it. */
        event_del(&a->pause);
        resume(a);
        return;
    }
    follow(a);
}

int acc_starved(const struct acceptor *a)
{
    return a->starved;
}

const struct listen_stats *acc_stats(const struct acceptor *a)
{
    return a->st;
}

unsigned acc_auto_cap(void)
{
    struct rlimit rl;
    rlim_t n;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return ACC_CAP_MAX;
    n = rl.rlim_cur > ACC_FD_RESERVE ? (rl.rlim_cur - ACC_FD_RESERVE) / 2 : 0;
    if (n < ACC_CAP_MIN)
        return ACC_CAP_MIN;
    return n > ACC_CAP_MAX ? ACC_CAP_MAX : (unsigned) n;
}

void acc_free(struct acceptor *a)
{
    if (a == NULL)
        return;
    event_del(&a->watch);
    event_del(&a->pause);
    close(a->fd);
    free(a);
}
