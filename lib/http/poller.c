/* poller: a periodic GET on a keep-alive connection of its own, read with admitd's HTTP/1.1
 * pieces (ioconn, h1parse, h1body) rather than evhttp.
 *
 * One poll at a time: the timer starts a poll and the poll's end arms it again, so a slow
 * engine stretches the interval rather than piling requests up. The connection stays open
 * between polls with its read event armed, so an engine that closes it while idle (uvicorn
 * does after 5 s) is seen at once and the next poll connects anew. The close can still cross
 * a request on the wire: a poll on a kept connection that breaks before any byte of the
 * answer came is sent once more on a new connection, which a GET allows. The answer is read
 * whole into the connection's buffer and decoded there (hreply), so once that buffer has
 * grown to the engine's page a poll allocates nothing. */
#include "http/poller.h"
#include "util/buf.h"
#include "http/hreply.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "http/ioconn.h"
#include "http/netsock.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Largest body handed over; a bigger answer counts as a failure (a metrics page is KBs). */
#define POLLER_MAX_BODY (8 * 1024 * 1024)
/* An answer's head, in bytes: an engine's takes a few hundred. */
#define POLLER_HEAD_MAX (32 * 1024)
/* A buffer that grew past this is freed after the poll: a one-off large answer must not stay
 * pinned, while a usual metrics page (tens of KiB) keeps its buffer from poll to poll. */
#define POLLER_KEEP_CAP (1024 * 1024)

enum pstate { P_IDLE, P_POLLING };

struct poller {
    struct event_base *base;
    struct ioconn io;      /* io.fd < 0: no connection */
    struct event timer;    /* starts a poll */
    struct event deadline; /* ends a poll that took timeout_ms */
    struct timeval interval, timeout;
    struct http_url url;
    struct sockaddr_storage addr;
    socklen_t addrlen; /* 0 until the engine's address is known */
    struct buf req;    /* the request's bytes, made once */
    enum pstate state;
    int reused; /* this poll's connection carried an earlier one: one retry is allowed */
    int got;    /* a byte of the answer came on it */
    struct hreply ans;
    unsigned timeout_ms;
    char why[128]; /* why the last poll got no answer; "" after one (poller_error) */
    poller_cb cb;
    void *arg;
};

static void on_io(struct ioconn *io, short what);

/* The poll is over: the next one is timed from now, and the connection is kept only when the
 * answer left it fit for another request. */
static void finish(struct poller *p, int status)
{
    struct iobuf *in = &p->io.in;
    const char *body = "";
    size_t len = 0;

    event_del(&p->deadline);
    p->state = P_IDLE;
    evtimer_add(&p->timer, &p->interval);
    if (status != 0) {
        p->why[0] = '\0';
        if (in->len == in->cap)
            iob_reserve(in, 1); /* room for the NUL */
        in->p[in->off + p->ans.blen] = '\0';
        body = in->p + in->off;
        len = p->ans.blen;
    }
    p->cb(p->arg, status, body, len);
    if (!p->ans.keep || status == 0)
        ioc_close(&p->io);
    in->off = in->len = 0;
    ioc_trim(&p->io, POLLER_KEEP_CAP);
}

/* Notes why this poll gets no answer: errno err's text, or what when err is 0. */
static void note(struct poller *p, int err, const char *what)
{
    snprintf(p->why, sizeof p->why, "%s", err != 0 ? strerror(err) : what);
}

/* Sends the request on the kept connection or, without one, on a new one; 0, or -1 when the
 * engine cannot be reached (the lookup or the connect failed at once). */
static int send_request(struct poller *p)
{
    struct iovec v = {p->req.data, p->req.len};

    p->reused = p->io.fd >= 0;
    if (!p->reused) {
        if (p->addrlen == 0 && net_resolve(p->url.host, p->url.port, &p->addr, &p->addrlen) != 0) {
            note(p, 0, "name lookup failed");
            return -1; /* looked up again at the next poll */
        }
        if (ioc_connect(&p->io, p->base, (struct sockaddr *) &p->addr, p->addrlen, on_io, NULL) !=
            0) {
            note(p, errno, "connect failed");
            return -1; /* the request waits in the spill buffer while the connect runs */
        }
    }
    p->state = P_POLLING;
    p->got = 0;
    hreply_init(&p->ans, H1_M_GET, POLLER_HEAD_MAX, POLLER_MAX_BODY);
    if (ioc_writev(&p->io, &v, 1) == 0)
        return 0;
    note(p, errno, "write failed");
    ioc_close(&p->io);
    return p->reused ? send_request(p) : -1; /* the engine had closed the kept one */
}

/* The connection broke (errno err, or 0 for the engine's close): before any byte of the
 * answer on a kept connection, that is the engine's idle close crossing the request, and the
 * poll goes on on a new one; else it failed. */
static void broken(struct poller *p, int err)
{
    int retry = p->reused && !p->got;

    ioc_close(&p->io);
    if (retry && send_request(p) == 0)
        return;
    if (!retry)
        note(p, err, "connection closed before an answer");
    finish(p, 0);
}

/* The answer is no HTTP the poller takes: no answer at all, and the connection goes. */
static void refuse(struct poller *p, const char *why)
{
    log_debug("engine at %s: answer refused: %s", p->url.hostport, why);
    snprintf(p->why, sizeof p->why, "invalid answer: %s", why);
    finish(p, 0);
}

/* One read of the answer, and what it completes. */
static void read_answer(struct poller *p)
{
    ssize_t n = ioc_fill(&p->io, hreply_read_max(&p->ans), 1);
    int rv;

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n == 0 && hreply_eof(&p->ans)) {
        finish(p, p->ans.rp.status); /* the close ends the body */
        return;
    }
    if (n <= 0) {
        broken(p, n < 0 ? errno : 0);
        return;
    }
    p->got = 1;
    if ((rv = hreply_take(&p->ans, &p->io.in)) == H1_DONE)
        finish(p, p->ans.rp.status);
    else if (rv == H1_ERROR)
        refuse(p, p->ans.err);
}

static void on_io(struct ioconn *io, short what)
{
    struct poller *p = (struct poller *) (void *) ((char *) io - offsetof(struct poller, io));

    if (p->state == P_IDLE) {
        /* Idle: the engine closed the connection or sent something unasked; either way it
         * cannot carry the next request. */
        if (what & EV_READ)
            ioc_close(io);
        return;
    }
    if (what & EV_WRITE) {
        if (io->err != 0)
            broken(p, io->err); /* the connect failed, or the engine is gone */
        return;
    }
    read_answer(p);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct poller *p = arg;

    (void) fd;
    (void) what;
    event_add(&p->deadline, &p->timeout);
    if (send_request(p) != 0)
        finish(p, 0);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct poller *p = arg;

    (void) fd;
    (void) what;
    snprintf(p->why, sizeof p->why, "no answer within %u ms", p->timeout_ms);
    finish(p, 0);
}

struct poller *poller_new(struct event_base *base, const struct http_url *url, const char *path,
                          unsigned interval_ms, unsigned timeout_ms, poller_cb cb, void *arg)
{
    struct poller *p = xcalloc(1, sizeof *p);

    p->base = base;
    p->url = *url;
    p->cb = cb;
    p->arg = arg;
    p->io.fd = -1;
    /* Minimal: the Host that HTTP/1.1 requires, an Accept, no body. */
    buf_init(&p->req);
    buf_printf(&p->req, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: */*\r\n\r\n", path, url->hostport);
    p->interval.tv_sec = interval_ms / 1000;
    p->interval.tv_usec = (interval_ms % 1000) * 1000;
    p->timeout.tv_sec = timeout_ms / 1000;
    p->timeout.tv_usec = (timeout_ms % 1000) * 1000;
    p->timeout_ms = timeout_ms;
    evtimer_assign(&p->timer, base, on_timer, p);
    evtimer_assign(&p->deadline, base, on_deadline, p);
    if (net_resolve(url->host, url->port, &p->addr, &p->addrlen) != 0)
        p->addrlen = 0;                     /* looked up again at the first poll */
    event_active(&p->timer, EV_TIMEOUT, 0); /* poll at once, not after one interval */
    return p;
}

const char *poller_error(const struct poller *p)
{
    return p->why;
}

void poller_kick(struct poller *p)
{
    if (p == NULL || p->state != P_IDLE)
        return;
    evtimer_del(&p->timer);
    event_active(&p->timer, EV_TIMEOUT, 0);
}

void poller_free(struct poller *p)
{
    if (p == NULL)
        return;
    evtimer_del(&p->timer);
    evtimer_del(&p->deadline);
    ioc_close(&p->io);
    ioc_release(&p->io);
    buf_free(&p->req);
    free(p);
}
