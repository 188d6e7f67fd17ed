/* proxy_relay: the engine's reply on its way to the client. Parses the reply head, starts
 * the client's reply (or, in router mode, drops an overload refusal to try another engine),
 * and passes the body on as it arrives: every read from the engine is written to the client
 * at once, in one system call, so SSE events are never held back. */
#include "wire/httputil.h"
#include "util/log.h"
#include "http/hconn.h"
#include "http/proxy_impl.h"
#include "http/upstream.h"
#include "util/clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* One read from the engine takes at most this much. */
#define PX_READ_MAX (256 * 1024)

static int slice_is(struct h1_str s, const char *lit)
{
    size_t n = strlen(lit);

    return s.len == n && memcmp(s.p, lit, n) == 0;
}

/* The router's second chance: a worker that refuses with its overload answer before
 * anything reached the client. */
static int is_refusal(const struct pxreq *x, const struct h1_header *why, int strict)
{
    if (x->rp.status == 529)
        return 1;
    if (why == NULL)
        return 0;
    if (strict)
        return slice_is(why->value, "queue-full") || slice_is(why->value, "queue-timeout");
    return why->value.len >= 6 && memcmp(why->value.p, "queue-", 6) == 0;
}

/* The engine's Content-Length line f, as the client gets it: once (the first line; the others
 * are skipped), and only where a reply may have one (not 1xx, not 204). A repeated line ("5"
 * twice) or a list ("5, 5"; the parser refused differing values) would reach strict clients,
 * such as Node's llhttp, which refuse it: a plain line goes as it came, a list as its first
 * value. */
static void put_content_length(const struct h1_parser *rp, const struct h1_header *f, struct buf *h)
{
    size_t n = 0;

    if (rp->status < 200 || rp->status == 204 || f != h1_get(rp, H1_H_CONTENT_LENGTH))
        return;
    while (n < f->value.len && f->value.p[n] >= '0' && f->value.p[n] <= '9')
        n++;
    if (n == f->value.len) {
        buf_append(h, f->name.p, f->line_len); /* the common case: one plain line */
        return;
    }
    buf_append(h, "Content-Length: ", 16);
    buf_append(h, f->value.p, n);
    buf_append(h, "\r\n", 2);
}

/* The client's reply head, from the engine's: its status line and fields minus the
 * hop-by-hop ones, with admitd's framing and connection fields. It reads the engine's field
 * lines, so it runs in the call that parsed them (they are in the proxy's shared slots). */
static void build_reply_head(struct pxreq *x, struct buf *h)
{
    const struct h1_parser *rp = &x->rp;
    const struct h1_parser *cp = hc_head(x->c);
    char num[24];

    buf_append(h, "HTTP/1.1 ", 9);
    buf_append(h, num, httpu_fmt_uint(num, (unsigned) rp->status));
    buf_append(h, " ", 1);
    buf_append(h, rp->reason.p, rp->reason.len);
    buf_append(h, "\r\n", 2);
    for (size_t i = 0; i < rp->nhdr; i++) {
        const struct h1_header *f = &rp->hdr[i];

        if (f->id == H1_H_CONTENT_LENGTH) {
            put_content_length(rp, f, h);
            continue;
        }
        if (px_hop_by_hop(rp, f))
            continue;
        buf_append(h, f->name.p, f->line_len); /* the line as it came, its CRLF included */
    }
    if (x->has_wait) {
        /* Tells clients and load balancers how long admission held the request, in ms
         * with one decimal. */
        unsigned long long tenths = (unsigned long long) (x->queue_wait_s * 10000.0 + 0.5);

        buf_append(h, "X-Admitd-Queue-Wait-Ms: ", 24);
        buf_append(h, num, httpu_fmt_uint(num, tenths / 10));
        num[0] = '.';
        num[1] = (char) ('0' + tenths % 10);
        buf_append(h, num, 2);
        buf_append(h, "\r\n", 2);
    }
    x->keep_client = cp->keep_alive && !x->px->draining;
    x->out_chunked = 0;
    if (rp->framing == H1_BODY_CHUNKED || rp->framing == H1_BODY_UNTIL_CLOSE) {
        if (cp->minor >= 1) {
            buf_append(h, "Transfer-Encoding: chunked\r\n", 28);
            x->out_chunked = 1;
        } else {
            x->keep_client = 0; /* an HTTP/1.0 client: the body ends at the close */
        }
    }
    if (!x->keep_client)
        buf_append(h, "Connection: close\r\n", 19);
    else if (cp->minor == 0)
        buf_append(h, "Connection: keep-alive\r\n", 24);
    buf_append(h, "\r\n", 2);
}

/* The reply head is parsed: everything its field lines decide is read here, in the call that
 * parsed them (the slots are shared), before any hook runs. Returns the client's reply head
 * in a buffer lent from the pool, or NULL when the reply is a refusal to drop (its body is
 * read and thrown away, then another worker is tried). */
static struct buf *on_head(struct pxreq *x)
{
    struct proxy *px = x->px;
    const struct h1_header *why = h1_find(&x->rp, "X-Admitd-Reason");
    const struct h1_header *ct = h1_get(&x->rp, H1_H_CONTENT_TYPE);
    int refused_again;
    struct buf *head;

    /* RFC 9112 9.6: after "Connection: close" (or an HTTP/1.0 reply without keep-alive) the
     * connection carries no other request, whether or not the engine closes it at once. */
    if (!x->rp.keep_alive)
        x->reusable = 0;
    if (px->route.pick != NULL && !x->retried && is_refusal(x, why, 1)) {
        x->retry_pending = 1;
        return NULL;
    }
    refused_again = px->route.refused != NULL && x->retried && is_refusal(x, why, 0);
    x->sse =
        ct != NULL && ct->value.len >= 17 && strncasecmp(ct->value.p, "text/event-stream", 17) == 0;
    head = buf_pool_take(&px->bufs);
    build_reply_head(x, head);
    /* The shared slots go on to other exchanges: nothing reads these fields again. */
    x->rp.hdr = NULL;
    x->rp.nhdr = 0;
    if (refused_again) {
        /* The second refusal goes to the client; that worker is skipped too, as the first. */
        if (px->route.overloaded != NULL)
            px->route.overloaded(px->route.arg, x->up);
        px->route.refused(px->route.arg, &x->req);
    }
    return head;
}

/* Body bytes of this read, decoded in place at in->p + in->off: their length, and *done
 * when the reply's body is complete; -1 for a broken chunked coding. */
static long take_body(struct pxreq *x, struct iobuf *in, int eof, int *done)
{
    char *p = in->p + in->off;
    size_t used = 0, dlen = 0;
    int rv = h1b_take(&x->body, p, in->len - in->off, eof, p, &used, &dlen);

    *done = rv == H1_DONE;
    if (rv == H1_ERROR)
        return -1;
    in->off += used;
    return (long) dlen;
}

/* Writes the head (when given: not sent yet) and this read's body bytes to the client in one
 * call. */
static int emit(struct pxreq *x, const struct buf *head, const char *data, size_t len, int done)
{
    struct iovec v[5];
    char size[26];
    int n = 0, body = x->req.method != HTTP_HEAD;

    if (head != NULL) {
        v[n].iov_base = head->data;
        v[n++].iov_len = head->len;
    }
    if (body && len > 0) {
        if (x->out_chunked) {
            size_t k = httpu_fmt_hex(size, len);

            size[k] = '\r';
            size[k + 1] = '\n';
            v[n].iov_base = size;
            v[n++].iov_len = k + 2;
        }
        v[n].iov_base = (void *) (size_t) data;
        v[n++].iov_len = len;
        if (x->out_chunked) {
            v[n].iov_base = (void *) "\r\n";
            v[n++].iov_len = 2;
        }
    }
    if (body && done && x->out_chunked) {
        v[n].iov_base = (void *) "0\r\n\r\n";
        v[n++].iov_len = 5;
    }
    return n == 0 ? 0 : hc_write(x->c, v, n);
}

/* The reply is whole: the engine connection goes back (or another worker is tried), and the
 * exchange ends once the client has taken the last bytes. */
static void reply_done(struct pxreq *x)
{
    struct uconn *uc = x->uc;
    struct iobuf *in = uconn_in(uc);

    x->uc = NULL;
    if (x->reusable && in->off == in->len)
        upstream_put(x->up, uc);
    else
        uconn_drop(uc); /* bytes past the reply's end, or a body that ends at the close */
    if (x->retry_pending) {
        x->retry_pending = 0;
        x->retried = 1;
        if (x->px->route.overloaded != NULL)
            x->px->route.overloaded(x->px->route.arg, x->up);
        px_start_upstream(x);
        return;
    }
    x->end = x->keep_client ? PX_END_KEEP : PX_END_CLOSE;
    if (x->c != NULL && hc_pending(x->c) > 0) {
        x->state = X_FLUSHING; /* the slot is held until the client has it all */
        return;
    }
    px_finish(x, OUT_OK);
}

/* Body bytes went to the client: the admission hears of them. Called after they are
 * written, never between building a head and writing it. */
static void tell_output(struct pxreq *x, const char *data, long dlen)
{
    struct proxy *px = x->px;
    int first = !x->got_body;

    if (first) {
        x->got_body = 1;
        clock_mono(&x->t_first);
    }
    x->bytes += (uint64_t) dlen;
    if (x->count_tokens) {
        px->adm.output(px->adm.arg, x, first,
                       x->sse ? sse_feed(&x->sse_count, data, (size_t) dlen) : 0);
        if (px->adm.body != NULL)
            px->adm.body(px->adm.arg, x, data, (size_t) dlen);
    }
}

void px_relay(struct pxreq *x)
{
    struct proxy *px = x->px;
    struct iobuf *in = uconn_in(x->uc);
    struct buf *head = NULL; /* the client's reply head, while it is not written */
    int eof = 0, done = 0, rc;
    ssize_t n;
    long dlen;
    const char *data;

    n = uconn_fill(x->uc, x->state == X_UPSTREAM ? (size_t) PX_READ_MAX + 32 * 1024 : PX_READ_MAX);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        /* The engine closed (or reset): the end of a body delimited by the close, or a
         * failure. */
        if (!((x->state == X_STREAMING || x->retry_pending) &&
              x->rp.framing == H1_BODY_UNTIL_CLOSE && n == 0)) {
            px_upstream_failed(x, UERR_BROKEN);
            return;
        }
        eof = 1;
    }
    uconn_touch(x->uc);
    if (x->state == X_UPSTREAM && !x->retry_pending) {
        size_t used;
        /* In the proxy's shared slots (engines send their heads in one piece). */
        int rv = h1_parse_final(&x->rp, px->rslots, PX_RESP_HEADERS, PX_RESP_HEAD_MAX,
                                x->req.method == HTTP_HEAD ? H1_M_HEAD : H1_M_GET, in->p + in->off,
                                in->len - in->off, &used);

        in->off += used;
        if (rv == H1_AGAIN)
            return;
        if (rv == H1_ERROR) {
            log_debug("engine reply refused: %s", x->rp.err_reason);
            px_upstream_failed(x, UERR_INVALID);
            return;
        }
        h1b_init(&x->body, &x->rp, UINT64_MAX); /* no limit: refuses nothing */
        if (x->rp.framing == H1_BODY_UNTIL_CLOSE)
            x->reusable = 0; /* the close ends the body */
        head = on_head(x);
        if (px->route.answered != NULL)
            px->route.answered(px->route.arg, x);
    }
    data = in->p + in->off; /* take_body leaves the body bytes here, decoded */
    dlen = take_body(x, in, eof, &done);
    if (dlen < 0) {
        /* A broken body. With the head still unwritten (it came in the same read) the state
         * is X_UPSTREAM: the client gets a clean 502, not a head cut short. */
        if (head != NULL)
            buf_pool_give(&px->bufs, head);
        px_upstream_failed(x, UERR_INVALID);
        return;
    }
    if (!x->retry_pending && x->c != NULL) {
        rc = emit(x, head, data, dlen > 0 ? (size_t) dlen : 0, done);
        if (head != NULL) {
            buf_pool_give(&px->bufs, head);
            head = NULL;
            x->state = X_STREAMING; /* from here on, a failure cuts the reply visibly */
            x->status = x->rp.status;
        }
        if (rc != 0) {
            /* The client is gone: the engine is told by the close. */
            px->st->cancelled[STAGE_STREAMING]++;
            px_cancel_upstream(x);
            px_close_client(x, OUT_CANCELLED);
            return;
        }
        if (dlen > 0) {
            tell_output(x, data, dlen);
            if (x->finished)
                return; /* a hook ended it (the caller holds a reference) */
        }
        /* Backpressure: a slow client must not make admitd buffer the whole reply. */
        if (!x->paused && hc_pending(x->c) > px->o->stream_buffer_bytes) {
            x->paused = 1;
            uconn_pause(x->uc, 1);
        }
    }
    if (head != NULL)
        buf_pool_give(&px->bufs, head); /* the client left before its head could go */
    if (in->off == in->len)
        in->off = in->len = 0; /* all taken: the next read starts at the front */
    if (done)
        reply_done(x);
}

void px_client_drained(struct pxreq *x)
{
    if (x->state == X_FLUSHING) {
        px_finish(x, OUT_OK);
        return;
    }
    if (x->paused && x->uc != NULL) {
        x->paused = 0;
        uconn_pause(x->uc, 0);
    }
}
