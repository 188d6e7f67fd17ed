/* proxy_forward: the request's way to the engine. Chooses the engine (router mode), writes
 * the request head and body in one system call, and turns engine failures into answers the
 * client cannot mistake for success. The reply is relayed by proxy_relay.c. */
#include "wire/httputil.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "http/hconn.h"
#include "http/proxy_impl.h"
#include "http/upstream.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <string.h>

void px_cancel_upstream(struct pxreq *x)
{
    /* Closed, never pooled: the engine sees the close and stops generating. */
    if (x->uc != NULL) {
        uconn_drop(x->uc);
        x->uc = NULL;
    }
}

/* ---- engine failures ------------------------------------------------------------------ */

/* Why nothing of x's request reached its engine, for route.unreachable. */
static const char *unsent_why(const struct pxreq *x, enum upstream_error e)
{
    int err = x->uc != NULL ? uconn_error(x->uc) : x->conn_err;

    if (e != UERR_CONNECT)
        return "connection closed before the request was sent";
    return err != 0 ? strerror(err) : "connect failed";
}

/* Router mode: an engine that nothing of the request reached (a refused connect, or a
 * connection found closed before a byte was written; never once one was) is not serving it,
 * so the request may go to another, once, as after an overload answer; the router skips the
 * engine (route.unreachable). 1 when it went on, 0 when the failure is the answer. */
static int px_retry_unsent(struct pxreq *x, enum upstream_error e)
{
    struct proxy *px = x->px;
    char why[128];

    if (px->route.unreachable == NULL || x->retried || x->retry_pending || x->c == NULL ||
        x->state != X_UPSTREAM)
        return 0;
    px->st->upstream_errors[e]++;
    snprintf(why, sizeof why, "%s", unsent_why(x, e));
    px_cancel_upstream(x);
    x->retried = 1;
    px->route.unreachable(px->route.arg, x->up, why);
    px_start_upstream(x);
    return 1;
}

void px_upstream_failed(struct pxreq *x, enum upstream_error e)
{
    struct proxy *px = x->px;
    char msg[256 + NETADDR_HOST_MAX];

    if (e == UERR_CONNECT && px_retry_unsent(x, e))
        return; /* a refused connect: nothing was sent */
    px->st->upstream_errors[e]++;
    px_cancel_upstream(x);
    if (x->state == X_UPSTREAM || x->retry_pending) {
        /* Nothing sent yet: a clean error answer, and the connection stays usable. */
        x->retry_pending = 0;
        switch (e) {
        case UERR_CONNECT:
        case UERR_BROKEN:
            /* Refused, or accepted and closed before a byte of answer (an engine dying or
             * restarting): either way it is not serving, and the request may go elsewhere. */
            snprintf(
                msg, sizeof msg, "Server unavailable: engine at %s %s", upstream_hostport(x->up),
                e == UERR_CONNECT ? "is unreachable" : "closed the connection before answering");
            proxy_answer_error(x, 503, "unavailable_error", msg, px_retry_after(px),
                               "engine-unavailable", OUT_UNAVAILABLE);
            return;
        case UERR_TIMEOUT:
            snprintf(msg, sizeof msg, "Gateway timeout: engine sent nothing for %u ms",
                     px->o->upstream_timeout_ms);
            proxy_answer_error(x, 504, "timeout_error", msg, 0, "engine-timeout", OUT_TIMEOUT);
            return;
        case UERR_INVALID:
        default:
            proxy_answer_error(x, 502, "upstream_error",
                               "Bad gateway: engine sent an invalid response", 0, "engine-error",
                               OUT_UPSTREAM_ERROR);
            return;
        }
    }
    /* Mid-reply: the client must see an error, never a clean end. The connection is
     * closed without the final chunk; an SSE client also gets an error event first. */
    if (x->sse && x->state == X_STREAMING && x->c != NULL) {
        struct buf *b = buf_pool_take(&px->bufs);
        struct buf *ev = buf_pool_take(&px->bufs);
        struct iovec v[3];
        char size[24];
        int n = 0;

        httpu_error_json(b, 502, "upstream_error",
                         e == UERR_TIMEOUT ? "Gateway timeout: engine stream stalled"
                                           : "Bad gateway: engine stream broke");
        buf_printf(ev, "event: error\ndata: %s\n\n", b->data);
        if (x->out_chunked) {
            v[n].iov_base = size;
            v[n++].iov_len = (size_t) snprintf(size, sizeof size, "%zx\r\n", ev->len);
        }
        v[n].iov_base = ev->data;
        v[n++].iov_len = ev->len;
        if (x->out_chunked) {
            v[n].iov_base = (void *) "\r\n";
            v[n++].iov_len = 2;
        }
        x->end = hc_write(x->c, v, n) == 0 ? PX_END_CLOSE : PX_END_ABORT;
        buf_pool_give(&px->bufs, ev);
        buf_pool_give(&px->bufs, b);
        px_finish(x, e == UERR_TIMEOUT ? OUT_TIMEOUT : OUT_UPSTREAM_ERROR);
        return;
    }
    px_close_client(x, e == UERR_TIMEOUT ? OUT_TIMEOUT : OUT_UPSTREAM_ERROR);
}

static void on_engine(void *arg, enum uc_event ev)
{
    struct pxreq *x = arg;

    x->refs++;
    switch (ev) {
    case UC_READABLE:
        px_relay(x);
        break;
    case UC_DRAINED:
        break;
    case UC_CONNECT_FAILED:
        px_upstream_failed(x, UERR_CONNECT);
        break;
    case UC_WRITE_FAILED:
        px_upstream_failed(x, UERR_BROKEN);
        break;
    case UC_TIMEOUT:
        px_upstream_failed(x, UERR_TIMEOUT);
        break;
    }
    px_unhold(x);
}

/* ---- the request ---------------------------------------------------------------------- */

static void on_connect_failed_later(evutil_socket_t fd, short what, void *arg)
{
    struct pxreq *x = arg;

    (void) fd;
    (void) what;
    x->later_on = 0;
    x->refs++;
    px_upstream_failed(x, UERR_CONNECT);
    px_unhold(x);
}

/* Router mode: the engine route.pick chooses; NULL when it answered the request instead. */
static struct upstream *choose(struct pxreq *x)
{
    struct proxy *px = x->px;
    int status = 503, busy = 0;
    char msg[256] = "Server unavailable: no worker available";
    struct upstream *up;

    if (px->route.pick == NULL)
        return px->up;
    up = px->route.pick(px->route.arg, x, &x->req, x->retried ? x->up : NULL, &status, msg,
                        sizeof msg, &busy);
    if (up == NULL) {
        if (busy)
            proxy_answer_error(x, status, "overloaded_error", msg, px_retry_after(px), "all-busy",
                               OUT_REJECTED);
        else
            proxy_answer_error(x, status, "unavailable_error", msg, px_retry_after(px), "no-worker",
                               OUT_UNAVAILABLE);
    }
    return up;
}

int px_hop_by_hop(const struct h1_parser *p, const struct h1_header *h)
{
    if (httpu_is_hop_by_hop_n(h->name.p, h->name.len))
        return 1;
    if (!(p->flags & H1_F_CONN_OTHER))
        return 0;
    /* A field a Connection field names is hop-by-hop too. */
    for (size_t i = 0; i < p->nhdr; i++)
        if (p->hdr[i].id == H1_H_CONNECTION &&
            httpu_connection_lists_n(p->hdr[i].value.p, p->hdr[i].value.len, h->name.p,
                                     h->name.len))
            return 1;
    return 0;
}

/* The body the engine gets: the client's, or the one pxreq_set_body() gave. */
static const char *body_of(const struct pxreq *x, size_t *len)
{
    *len = x->fwd_body != NULL ? x->fwd_len : x->req.body_len;
    return x->fwd_body != NULL ? x->fwd_body : x->req.body;
}

/* The head sent to the engine: the client's fields minus the hop-by-hop ones, Host set to
 * the engine's, Content-Length recomputed (a chunked body goes with its decoded length),
 * and Expect dropped (the connection answered it). */
static void build_head(struct pxreq *x, struct buf *h)
{
    const struct h1_parser *p = hc_head(x->c);
    enum http_method m = x->req.method;
    size_t fwd_len;
    char len[24];

    (void) body_of(x, &fwd_len);
    buf_puts(h, http_method_name(m));
    buf_append(h, " ", 1);
    buf_puts(h, x->req.target);
    buf_append(h, " HTTP/1.1\r\n", 11);
    for (size_t i = 0; i < p->nhdr; i++) {
        const struct h1_header *f = &p->hdr[i];

        if (f->id == H1_H_HOST || f->id == H1_H_CONTENT_LENGTH || f->id == H1_H_EXPECT ||
            px_hop_by_hop(p, f))
            continue;
        buf_append(h, f->name.p, f->name.len);
        buf_append(h, ": ", 2);
        buf_append(h, f->value.p, f->value.len);
        buf_append(h, "\r\n", 2);
    }
    buf_append(h, "Host: ", 6);
    buf_puts(h, upstream_hostport(x->up));
    buf_append(h, "\r\n", 2);
    if (fwd_len > 0 || m == HTTP_POST || m == HTTP_PUT || m == HTTP_PATCH) {
        buf_append(h, "Content-Length: ", 16);
        buf_append(h, len, httpu_fmt_uint(len, fwd_len));
        buf_append(h, "\r\n", 2);
    }
    buf_append(h, "\r\n", 2);
}

void pxreq_set_body(struct pxreq *x, const char *body, size_t len)
{
    x->fwd_body = body != NULL ? body : ""; /* set, even when empty */
    x->fwd_len = len;
}

/* Where a request's bytes went (write_request). */
enum px_sent {
    PX_SENT,     /* written (what the socket did not take waits in the connection) */
    PX_NO_CONN,  /* no connect could even start: refused at once */
    PX_NOT_SENT, /* the connection was found closed before a byte of it went out */
};

/* Writes the request (v: head and body) on a connection to up: a pooled one, or a new one.
 * A pooled connection the engine closed before we wrote a byte carried nothing of it, so a
 * fresh connection may carry it; once written, never. Calls no hook. */
static enum px_sent write_request(struct pxreq *x, struct upstream *up, const struct iovec *v)
{
    int reused;

    for (int attempt = 0;; attempt++) {
        if ((x->uc = upstream_get(up, on_engine, x, &reused)) == NULL) {
            x->conn_err = errno;
            return PX_NO_CONN;
        }
        if (uconn_write(x->uc, v, 2) == 0)
            return PX_SENT;
        uconn_drop(x->uc);
        x->uc = NULL;
        if (!reused || attempt > 0)
            return PX_NOT_SENT;
    }
}

void px_start_upstream(struct pxreq *x)
{
    struct proxy *px = x->px;
    struct upstream *up;
    struct buf *head;
    struct iovec v[2];
    enum px_sent sent;

    x->state = X_UPSTREAM;
    if (x->c == NULL) {
        px_finish(x, OUT_CANCELLED);
        return;
    }
    /* choose() may answer the request, and a retry holds no reference: x may be gone. */
    if ((up = choose(x)) == NULL)
        return;
    x->up = up;
    if (!x->forwarded) {
        x->forwarded = 1;
        if (px->adm.forwarding != NULL && px->adm.forwarding(px->adm.arg, x, &x->req)) {
            x->count_tokens = 1;
            sse_init(&x->sse_count);
        }
    }
    /* Built, written (what the socket does not take is copied) and given back with no hook
     * in between. */
    head = buf_pool_take(&px->bufs);
    build_head(x, head);
    v[0].iov_base = head->data;
    v[0].iov_len = head->len;
    v[1].iov_base = (void *) (size_t) body_of(x, &v[1].iov_len);
    x->reusable = 1;
    sent = write_request(x, up, v);
    buf_pool_give(&px->bufs, head);
    switch (sent) {
    case PX_SENT:
        break;
    case PX_NO_CONN:
        /* Refused at once (a dead engine on this host): answered from the loop, as a
         * refusal that takes a moment is, not from inside the call that let this request
         * through, which may be the end of the one before it. Otherwise a queue of requests
         * meeting a dead engine would end one inside the other. */
        evtimer_assign(&x->later, px->base, on_connect_failed_later, x);
        event_active(&x->later, EV_TIMEOUT, 0);
        x->later_on = 1;
        break;
    case PX_NOT_SENT:
        if (!px_retry_unsent(x, UERR_BROKEN)) /* nothing of it was written */
            px_upstream_failed(x, UERR_BROKEN);
        break;
    }
}
