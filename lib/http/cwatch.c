/* cwatch: client hang-up detection for requests that evhttp is not reading. */
#include "http/cwatch.h"
#include "core/xmalloc.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <sys/socket.h>

struct cwatch {
    struct event *ev;
    struct event_base *base;
    int fd;
    int only_closed; /* bytes are waiting: watch EV_CLOSED only, or we would spin */
    cwatch_cb cb;
    void *arg;
};

static void cwatch_on_event(evutil_socket_t fd, short what, void *arg);

/* What a peek at the socket shows, without waiting. */
enum peek { PEEK_NOTHING = 0, PEEK_BYTES, PEEK_GONE };

static enum peek peek(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

    if (n > 0)
        return PEEK_BYTES;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return PEEK_GONE;
    return PEEK_NOTHING;
}

int cwatch_peer_gone(int fd)
{
    return peek(fd) == PEEK_GONE;
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
    struct cwatch *w = arg;
    enum peek p = peek(fd);

    (void) what;
    if (p == PEEK_GONE) {
        event_free(w->ev);
        w->ev = NULL;
        w->cb(w->arg);
        return;
    }
    if (p == PEEK_BYTES && !w->only_closed) {
        /* A pipelined request or junk: it belongs to evhttp, which will read it later.
         * Level-triggered EV_READ would fire forever, so keep only the close watch. A reset
         * behind unread bytes is then seen when the reply is written. */
        event_free(w->ev);
        w->only_closed = 1;
        cwatch_arm(w, EV_CLOSED);
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
    if (w->ev != NULL)
        event_free(w->ev);
    free(w);
}
