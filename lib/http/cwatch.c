/* cwatch: client hang-up detection behind unread bytes. */
#include "http/cwatch.h"
#include "util/xmalloc.h"

#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/socket.h>

/* How often a watch behind unread bytes asks the kernel whether the peer reset. */
#define CWATCH_POLL_MS 100

struct cwatch {
    struct event *ev;
    struct event *poll; /* only_closed: the reset check, every CWATCH_POLL_MS */
    struct event_base *base;
    int fd;
    int only_closed; /* bytes are waiting: watch EV_CLOSED only, or we would spin */
    cwatch_cb cb;
    void *arg;
};

static void cwatch_on_event(evutil_socket_t fd, short what, void *arg);

/* What a peek at the socket shows, without waiting. */
enum peek { PEEK_NOTHING = 0, PEEK_BYTES, PEEK_GONE };

/* 1 if the TCP connection has had its peer's FIN or reset, whatever is still unread: a peek
 * sees only the first unread byte. 0 for a live connection or a socket that is not TCP. */
static int tcp_peer_done(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;

    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return 0;
    return ti.tcpi_state == TCP_CLOSE_WAIT || ti.tcpi_state == TCP_CLOSE ||
           ti.tcpi_state == TCP_LAST_ACK;
}

static enum peek peek(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

    if (n > 0)
        return tcp_peer_done(fd) ? PEEK_GONE : PEEK_BYTES;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return PEEK_GONE;
    return PEEK_NOTHING;
}

int cwatch_peer_gone(int fd)
{
    return peek(fd) == PEEK_GONE;
}

static void cwatch_disarm(struct cwatch *w)
{
    if (w->ev != NULL)
        event_free(w->ev);
    if (w->poll != NULL)
        event_free(w->poll);
    w->ev = w->poll = NULL;
}

static void cwatch_arm(struct cwatch *w, short events)
{
    w->ev = event_new(w->base, w->fd, events | EV_PERSIST, cwatch_on_event, w);
    if (w->ev == NULL)
        fatal("event_new failed for the client watcher");
    event_add(w->ev, NULL);
}

static void cwatch_on_event(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    struct cwatch *w = arg;
    enum peek p = peek(w->fd); /* the timer's call has no fd */

    /* Behind unread bytes a peek sees a byte, not the FIN or the reset after it: peek() then
     * asks TCP_INFO. A client that half-closes while queued is taken as gone, as one whose
     * FIN comes with no bytes before it. */
    (void) what;
    if (p == PEEK_GONE) {
        cwatch_disarm(w);
        w->cb(w->arg);
        return;
    }
    if (p == PEEK_BYTES && !w->only_closed) {
        /* A pipelined request or junk: the connection reads it later. Level-triggered
         * EV_READ would fire for ever, so keep only the close watch, which sees a FIN
         * behind those bytes. A reset is not reported as EV_CLOSED (epoll's
         * EPOLLHUP maps to EV_READ|EV_WRITE), so a timer asks TCP_INFO for it. */
        static const struct timeval every = {0, CWATCH_POLL_MS * 1000};

        event_free(w->ev);
        w->only_closed = 1;
        cwatch_arm(w, EV_CLOSED);
        w->poll = event_new(w->base, -1, EV_PERSIST, cwatch_on_event, w);
        if (w->poll == NULL)
            fatal("event_new failed for the client watcher's timer");
        event_add(w->poll, &every);
    }
}

struct cwatch *cwatch_new(struct event_base *base, int fd, cwatch_cb cb, void *arg)
{
    struct cwatch *w = xcalloc(1, sizeof *w);

    w->base = base;
    w->fd = fd;
    w->cb = cb;
    w->arg = arg;
    cwatch_arm(w, EV_READ | EV_CLOSED);
    return w;
}

void cwatch_free(struct cwatch *w)
{
    if (w == NULL)
        return;
    cwatch_disarm(w);
    free(w);
}
