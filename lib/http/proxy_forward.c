/* proxy_forward: the engine side of an exchange. Sends the request to the engine, streams its
 * reply to the client with backpressure, and turns engine failures into answers the client
 * cannot mistake for success. The client side and the end of an exchange are in proxy.c. */
#include "core/httputil.h"
#include "core/log.h"
#include "core/xmalloc.h"
#include "http/cwatch.h"
#include "http/proxy_impl.h"
#include "http/upstream.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Bytes a client may send while its reply streams before admitd stops reading them. */
#define CLIENT_READ_HIGH_WATER (64 * 1024)

static int on_up_headers(struct evhttp_request *ureq, void *arg);

static void release_upstream(struct pxreq *x)
{
    if (x->uc != NULL) {
        upstream_put(x->up, x->uc);
        x->uc = NULL;
    }
}

void px_cancel_upstream(struct pxreq *x)
{
    struct evhttp_request *ureq = x->ureq;

    if (ureq != NULL) {
        x->ureq = NULL; /* the error callback (REQUEST_CANCEL) must find nothing to do */
        evhttp_cancel_request(ureq);
    }
    release_upstream(x);
}

/* ---- the client's side of a streaming reply ------------------------------------------- */

/* The whole reply has been written to the client: only now is the exchange over (and its
 * slot released). */
static void on_client_complete(struct evhttp_request *creq, void *arg)
{
    struct pxreq *x = arg;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(x->cevcon);

    (void) creq;
    /* Undo the streaming settings before the connection reads its next request. */
    evhttp_connection_set_timeout_tv(x->cevcon, &x->px->client_tv);
    bufferevent_setwatermark(bev, EV_READ, 0, 0);
    px_finish(x, OUT_OK);
}

/* The client's output buffer drained: read from the engine again. */
static void on_client_flushed(struct evhttp_connection *c, void *arg)
{
    struct pxreq *x = arg;

    (void) c;
    if (x->paused && x->uc != NULL) {
        x->paused = 0;
        bufferevent_enable(evhttp_connection_get_bufferevent(uconn_evcon(x->uc)), EV_READ);
    }
}

static void on_broken_flushed(struct evhttp_connection *c, void *arg)
{
    struct pxreq *x = arg;

    (void) c;
    px_close_client(x, x->broken_outcome);
}

/* ---- engine failures ------------------------------------------------------------------ */

static void upstream_failed(struct pxreq *x, enum upstream_error e)
{
    struct proxy *px = x->px;
    char msg[256 + NETADDR_HOST_MAX];

    px->m->upstream_errors[e]++;
    release_upstream(x);
    if (x->state == X_UPSTREAM) {
        /* Nothing sent yet: a clean error answer, and the connection stays usable. */
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
    x->broken_outcome = e == UERR_TIMEOUT ? OUT_TIMEOUT : OUT_UPSTREAM_ERROR;
    if (x->sse && x->state == X_STREAMING) {
        struct buf b;
        struct evbuffer *eb = evbuffer_new();

        if (eb == NULL)
            fatal("evbuffer_new failed");
        buf_init(&b);
        httpu_error_json(&b, 502, "upstream_error",
                         e == UERR_TIMEOUT ? "Gateway timeout: engine stream stalled"
                                           : "Bad gateway: engine stream broke");
        evbuffer_add_printf(eb, "event: error\ndata: %s\n\n", b.data);
        buf_free(&b);
        x->state = X_BROKEN;
        evhttp_send_reply_chunk_with_cb(x->creq, eb, on_broken_flushed, x);
        evbuffer_free(eb);
        return;
    }
    px_close_client(x, x->broken_outcome);
}

static void on_up_error(enum evhttp_request_error err, void *arg)
{
    struct pxreq *x = arg;

    if (err == EVREQ_HTTP_REQUEST_CANCEL)
        return;     /* our own cancel: the caller is already tearing the exchange down */
    x->ureq = NULL; /* libevent freed it; the done callback follows with NULL */
    x->has_uerr = 1;
    switch (err) {
    case EVREQ_HTTP_TIMEOUT:
        x->uerr = UERR_TIMEOUT;
        break;
    case EVREQ_HTTP_INVALID_HEADER:
    case EVREQ_HTTP_DATA_TOO_LONG:
        x->uerr = UERR_INVALID;
        break;
    default:
        x->uerr = UERR_BROKEN;
        break;
    }
}

/* ---- the reply ------------------------------------------------------------------------ */

static void copy_headers(struct evkeyvalq *from, struct evkeyvalq *to, int request)
{
    const char *conn = evhttp_find_header(from, "Connection");
    struct evkeyval *kv;

    TAILQ_FOREACH(kv, from, next)
    {
        if (httpu_is_hop_by_hop(kv->key) || (conn && httpu_connection_lists(conn, kv->key)))
            continue;
        /* Host and Content-Length are set by us; Expect was already answered by evhttp. */
        if (request &&
            (strcasecmp(kv->key, "Host") == 0 || strcasecmp(kv->key, "Content-Length") == 0 ||
             strcasecmp(kv->key, "Expect") == 0))
            continue;
        evhttp_add_header(to, kv->key, kv->value);
    }
}

/* The engine's status line and headers arrived: start the client's reply. */
static int on_up_headers(struct evhttp_request *ureq, void *arg)
{
    struct pxreq *x = arg;
    struct proxy *px = x->px;
    struct evkeyvalq *uh = evhttp_request_get_input_headers(ureq);
    const char *ct = evhttp_find_header(uh, "Content-Type");
    struct bufferevent *bev = evhttp_connection_get_bufferevent(x->cevcon);
    struct timeval write_tv = px->client_tv;
    struct evkeyvalq *oh = evhttp_request_get_output_headers(x->creq);
    const char *why = evhttp_find_header(uh, "X-Admitd-Reason");
    int code = evhttp_request_get_response_code(ureq);

    /* Router: a worker that refuses with its overload answer gets one more chance elsewhere,
     * as long as nothing has reached the client. */
    if (px->route.pick != NULL && !x->retried &&
        (code == 529 ||
         (why && (strcmp(why, "queue-full") == 0 || strcmp(why, "queue-timeout") == 0)))) {
        x->retry_pending = 1;
        return 0;
    }
    if (px->route.refused != NULL && x->retried &&
        (code == 529 || (why && strncmp(why, "queue-", 6) == 0))) {
        /* The second refusal goes to the client; that worker is skipped too, as the first. */
        if (px->route.overloaded != NULL)
            px->route.overloaded(px->route.arg, x->up);
        px->route.refused(px->route.arg, &x->req);
    }
    copy_headers(uh, oh, 0);
    if (x->has_wait) {
        /* Tells clients and load balancers how long admission held the request. */
        char ms[32];
        snprintf(ms, sizeof ms, "%.1f", x->queue_wait_s * 1000.0);
        evhttp_add_header(oh, "X-Admitd-Queue-Wait-Ms", ms);
    }
    x->sse = ct != NULL && strncasecmp(ct, "text/event-stream", 17) == 0;
    /* An HTTP/1.0 client cannot take chunks: without a length the body ends at close. */
    if (x->req.http_minor == 0 && evhttp_find_header(uh, "Content-Length") == NULL)
        evhttp_remove_header(evhttp_request_get_input_headers(x->creq), "Connection");
    cwatch_free(x->watch); /* from here evhttp reads the client and reports a close */
    x->watch = NULL;
    x->state = X_STREAMING;
    evhttp_request_set_on_complete_cb(x->creq, on_client_complete, x);
    x->status = code;
    evhttp_send_reply_start(x->creq, code, evhttp_request_get_response_code_line(ureq));
    /* evhttp now reads the client only to see a close: bound what it may buffer, and drop
     * the read timeout, which would otherwise cut any stream longer than it. */
    bufferevent_setwatermark(bev, EV_READ, 0, CLIENT_READ_HIGH_WATER);
    bufferevent_set_timeouts(bev, NULL, &write_tv);
    return 0;
}

/* The SSE events completed by this chunk: each one a token, as vLLM and SGLang send them. */
static unsigned chunk_tokens(struct pxreq *x, struct evbuffer *in)
{
    struct evbuffer_iovec vec[8];
    unsigned tokens = 0;
    int n;

    if (!x->sse)
        return 0;
    n = evbuffer_peek(in, -1, NULL, vec, 8);
    if (n > 8) {
        /* Rare: a chunk spread over many buffers. Make it one, then count. */
        vec[0].iov_base = evbuffer_pullup(in, -1);
        vec[0].iov_len = evbuffer_get_length(in);
        n = 1;
    }
    for (int i = 0; i < n; i++)
        tokens += sse_feed(&x->sse_count, vec[i].iov_base, vec[i].iov_len);
    return tokens;
}

static void on_up_chunk(struct evhttp_request *ureq, void *arg)
{
    struct pxreq *x = arg;
    struct proxy *px = x->px;
    struct evbuffer *in = evhttp_request_get_input_buffer(ureq);
    struct bufferevent *cbev = evhttp_connection_get_bufferevent(x->cevcon);
    int first = !x->got_body;

    if (x->retry_pending)
        return; /* the refusal's body is dropped; libevent drains it */
    if (first) {
        x->got_body = 1;
        clock_gettime(CLOCK_MONOTONIC, &x->t_first);
    }
    x->bytes += evbuffer_get_length(in);
    if (x->count_tokens)
        px->adm.output(px->adm.arg, x, first, chunk_tokens(x, in));
    evhttp_send_reply_chunk_with_cb(x->creq, in, on_client_flushed, x);
    /* Backpressure: a slow client must not make admitd buffer the whole reply. */
    if (!x->paused &&
        evbuffer_get_length(bufferevent_get_output(cbev)) > px->o->stream_buffer_bytes) {
        x->paused = 1;
        bufferevent_disable(evhttp_connection_get_bufferevent(uconn_evcon(x->uc)), EV_READ);
    }
}

static void on_up_done(struct evhttp_request *ureq, void *arg)
{
    struct pxreq *x = arg;

    x->ureq = NULL; /* libevent frees it after this callback */
    if (ureq == NULL || evhttp_request_get_response_code(ureq) == 0) {
        /* Connection refused arrives here with code 0 and no error callback. */
        upstream_failed(x, x->has_uerr ? x->uerr : UERR_CONNECT);
        return;
    }
    release_upstream(x);
    if (x->retry_pending) {
        x->retry_pending = 0;
        x->retried = 1;
        if (x->px->route.overloaded != NULL)
            x->px->route.overloaded(x->px->route.arg, x->up);
        px_start_upstream(x);
        return;
    }
    if (x->state == X_UPSTREAM)
        on_up_headers(ureq, x);
    x->state = X_FLUSHING;
    evhttp_send_reply_end(x->creq); /* on_client_complete finishes once it is written */
}

/* ---- the request ---------------------------------------------------------------------- */

/* Router mode: the engine route.pick chooses; NULL when it answered the request instead. */
static struct upstream *choose(struct pxreq *x)
{
    struct proxy *px = x->px;
    int status = 503, busy = 0;
    const char *msg = "Server unavailable: no worker available";
    struct upstream *up;

    if (px->route.pick == NULL)
        return px->up;
    up = px->route.pick(px->route.arg, x, &x->req, x->retried ? x->up : NULL, &status, &msg, &busy);
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

void px_start_upstream(struct pxreq *x)
{
    struct proxy *px = x->px;
    struct upstream *up;
    struct evhttp_request *ureq;
    struct evbuffer *body = evhttp_request_get_input_buffer(x->creq);
    struct evkeyvalq *oh;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(x->creq);
    char len[24];

    x->state = X_UPSTREAM;
    if (x->watch == NULL)
        x->watch = cwatch_new(px->base, px_client_fd(x->cevcon), px_on_client_gone, x);
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
    ureq = evhttp_request_new(on_up_done, x);
    if (ureq == NULL)
        fatal("evhttp_request_new failed");
    evhttp_request_set_header_cb(ureq, on_up_headers);
    evhttp_request_set_chunked_cb(ureq, on_up_chunk);
    evhttp_request_set_error_cb(ureq, on_up_error);
    oh = evhttp_request_get_output_headers(ureq);
    copy_headers(evhttp_request_get_input_headers(x->creq), oh, 1);
    evhttp_add_header(oh, "Host", upstream_hostport(x->up));
    if (x->req.body_len > 0 || cmd == EVHTTP_REQ_POST || cmd == EVHTTP_REQ_PUT ||
        cmd == EVHTTP_REQ_PATCH) {
        snprintf(len, sizeof len, "%zu", x->req.body_len);
        evhttp_add_header(oh, "Content-Length", len);
    }
    /* By reference, not moved: the body stays readable in the client's request for the
     * whole exchange (struct http_req promises it), and a router may send it again. */
    if (evbuffer_add_buffer_reference(evhttp_request_get_output_buffer(ureq), body) != 0)
        evbuffer_add(evhttp_request_get_output_buffer(ureq), x->req.body, x->req.body_len);

    x->uc = upstream_get(x->up);
    x->ureq = ureq;
    x->refs++; /* a refused connect may call on_up_done before uconn_request returns */
    if (uconn_request(x->uc, ureq, cmd, x->req.target) != 0) {
        x->ureq = NULL;
        evhttp_request_free(ureq);
        upstream_failed(x, UERR_CONNECT);
    }
    px_unhold(x);
}
