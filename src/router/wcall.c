/* wcall: a POST to a worker, its answer read whole (see wcall.h). */
#include "wcall.h"
#include "http/hreply.h"
#include "http/upstream.h"
#include "util/buf.h"
#include "util/xmalloc.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <stdlib.h>
#include <string.h>

/* An answer's head, in bytes (admitd and vLLM send a few hundred). */
#define WCALL_HEAD_MAX (32 * 1024)

struct wcall {
    struct upstream *up;
    struct uconn *uc;    /* NULL between a broken kept connection and the next */
    struct event timer;  /* the deadline */
    struct buf req;      /* head and body, kept for a second try */
    int reused, retried; /* on a kept connection; already sent a second time */
    int resend;          /* the caller allows a second try */
    int got;             /* a byte of the answer came */
    size_t body_max;
    struct hreply ans;
    wcall_cb cb;
    void *arg;
};

static void on_conn(void *arg, enum uc_event ev);

/* Frees the call: its connection given back when the answer left it whole, else closed. */
static void release(struct wcall *c, int keep_conn)
{
    if (c->uc != NULL) {
        if (keep_conn)
            upstream_put(c->up, c->uc);
        else
            uconn_drop(c->uc);
    }
    event_del(&c->timer);
    buf_free(&c->req);
    free(c);
}

/* The call ends: freed first (the callback may start another call on the same pool, which
 * then finds this connection there), then its callback told. */
static void end(struct wcall *c, enum wcall_end e)
{
    wcall_cb cb = c->cb;
    void *arg = c->arg;

    release(c, 0);
    cb(arg, e, 0, NULL, 0);
}

/* The answer is whole: its body handed over, the connection kept if the answer allows. The
 * body is copied out first, since the connection goes back to the pool before the callback. */
static void answered(struct wcall *c, int keep_conn)
{
    struct iobuf *in = uconn_in(c->uc);
    wcall_cb cb = c->cb;
    void *arg = c->arg;
    int status = c->ans.rp.status;
    char *body = xmalloc(c->ans.blen + 1);
    size_t len = c->ans.blen;

    memcpy(body, in->p + in->off, len);
    body[len] = '\0';
    in->off = in->len = 0; /* the body is taken: a connection with nothing held is kept */
    release(c, keep_conn);
    cb(arg, WCALL_OK, status, body, len);
    free(body);
}

/* Sends the request on a connection of the pool; 0, or -1 when none could even start. */
static int send_request(struct wcall *c)
{
    struct iovec v = {c->req.data, c->req.len};

    for (int attempt = 0;; attempt++) {
        if ((c->uc = upstream_get(c->up, on_conn, c, &c->reused)) == NULL)
            return -1;
        c->got = 0;
        hreply_init(&c->ans, H1_M_POST, WCALL_HEAD_MAX, c->body_max);
        if (uconn_write(c->uc, &v, 1) == 0)
            return 0;
        uconn_drop(c->uc); /* a kept connection found closed: nothing of it went out */
        c->uc = NULL;
        if (!c->reused || attempt > 0)
            return -1;
    }
}

/* The connection broke before the answer was whole: on a kept one before any byte of it, once
 * more on a new connection when the caller allows; else the call failed. */
static void broken(struct wcall *c)
{
    int retry = c->resend && c->reused && !c->got && !c->retried;

    uconn_drop(c->uc);
    c->uc = NULL;
    if (retry) {
        c->retried = 1;
        if (send_request(c) == 0)
            return;
    }
    end(c, WCALL_FAILED);
}

/* One read of the answer, and what it completes. */
static void read_answer(struct wcall *c)
{
    ssize_t got = uconn_fill(c->uc, hreply_read_max(&c->ans));
    int rv;

    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (got == 0 && hreply_eof(&c->ans)) {
        answered(c, 0); /* the close ends the body */
        return;
    }
    if (got <= 0) {
        broken(c);
        return;
    }
    c->got = 1;
    uconn_touch(c->uc);
    if ((rv = hreply_take(&c->ans, uconn_in(c->uc))) == H1_DONE)
        answered(c, c->ans.keep);
    else if (rv == H1_ERROR)
        end(c, WCALL_INVALID);
}

static void on_conn(void *arg, enum uc_event ev)
{
    struct wcall *c = arg;

    switch (ev) {
    case UC_READABLE:
        read_answer(c);
        break;
    case UC_DRAINED:
        break;
    case UC_CONNECT_FAILED:
    case UC_WRITE_FAILED:
        broken(c);
        break;
    case UC_TIMEOUT:
        end(c, WCALL_TIMEOUT);
        break;
    }
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    end(arg, WCALL_TIMEOUT);
}

struct wcall *wcall_start(struct event_base *base, struct upstream *up, const struct wcall_req *rq,
                          wcall_cb cb, void *arg)
{
    struct wcall *c = xcalloc(1, sizeof *c);
    struct timeval tv = {rq->timeout_ms / 1000, (rq->timeout_ms % 1000) * 1000};

    c->up = up;
    c->body_max = rq->body_max;
    c->resend = rq->resend;
    c->cb = cb;
    c->arg = arg;
    buf_init(&c->req);
    buf_printf(&c->req,
               "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
               "Content-Length: %zu\r\n%s\r\n",
               rq->target, upstream_hostport(up), rq->len, rq->headers ? rq->headers : "");
    buf_append(&c->req, rq->body, rq->len);
    evtimer_assign(&c->timer, base, on_deadline, c);
    evtimer_add(&c->timer, &tv);
    if (send_request(c) != 0) {
        release(c, 0);
        return NULL;
    }
    return c;
}

void wcall_cancel(struct wcall *c)
{
    if (c != NULL)
        release(c, 0);
}
