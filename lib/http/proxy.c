/* proxy: exchanges between clients and the engine, through the gate.
 *
 * One struct exch per client request. Its life:
 *
 *   arrive --gate--> QUEUED --slot--> UPSTREAM --headers--> STREAMING --engine done-->
 *   FLUSHING --last byte written--> finished (slot released)
 *
 * and from any state a failure or a client hang-up finishes it early. exch_finish() is the
 * one release path: it counts the outcome once, releases the gate ticket (which dispatches
 * the next waiter in the same call), stops the hang-up watcher and detaches from the client
 * connection. An exchange is freed when it is finished and no call that might re-enter it
 * is still on the stack (refs).
 *
 * Who notices a client hang-up: while QUEUED or UPSTREAM, evhttp reads nothing from the
 * client, so a cwatch does; once the reply has started, evhttp itself does and fires the
 * connection's close callback. */
#include "http/proxy.h"
#include "core/book.h"
#include "http/cwatch.h"
#include "http/netsock.h"
#include "core/httputil.h"
#include "core/log.h"
#include "core/ratewin.h"
#include "core/sse.h"
#include "core/tokcount.h"
#include "http/upstream.h"
#include "core/xmalloc.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <time.h>

/* Bytes a client may send while its reply streams before admitd stops reading them. */
#define CLIENT_READ_HIGH_WATER (64 * 1024)
/* Idle engine connections older than this are closed (uvicorn closes them at 5 s). */
#define UPSTREAM_IDLE_MS 4000

enum xstate {
    X_QUEUED,    /* waiting in the gate */
    X_UPSTREAM,  /* engine request sent, no reply headers yet */
    X_STREAMING, /* reply started, body flowing */
    X_FLUSHING,  /* engine finished; last bytes on their way to the client */
    X_BROKEN     /* engine broke mid-stream; an error event is flushing, then we close */
};

enum xkind {
    XK_GATED, /* holds a gate ticket */
    XK_NOCAP, /* would be gated, but there is no cap */
    XK_BYPASS /* GET/HEAD/OPTIONS: never takes a slot */
};

struct exch {
    struct gate_ticket ticket; /* first member: the dispatch callback casts back */
    struct proxy *px;
    struct evhttp_request *creq;
    struct evhttp_connection *cevcon; /* NULL once libevent is freeing it */
    struct cwatch *watch;
    struct event *qtimer; /* queue timeout, while queued */
    struct upstream *up;  /* the engine chosen for this request */
    struct uconn *uc;
    struct evhttp_request *ureq; /* owned by libevent; NULL once it is gone */
    enum xstate state;
    enum xkind kind;
    enum upstream_error uerr;
    enum outcome broken_outcome;
    int has_uerr;
    double queue_wait_s; /* arrival to slot, for gated requests */
    struct book_req bk;  /* booked load while in a slot (gated and no-cap requests) */
    struct sse_counter sse_count;
    int got_body;            /* the engine sent a first body byte */
    int booked;              /* book_admit was called (once per exchange) */
    int retry_pending;       /* router: the engine said overloaded; nothing sent yet */
    int retried;             /* router: already moved to a second engine */
    int status;              /* status sent to the client (0 until one is) */
    uint64_t bytes;          /* body bytes passed to the client */
    struct timespec t_first; /* first body byte from the engine */
    int paused;              /* engine reads stopped: the client is behind */
    int sse;
    int refs;
    int finished;
    struct timespec t_arrive;
    TAILQ_ENTRY(exch) link;
};

struct proxy {
    struct event_base *base;
    const struct cfg *cfg;
    struct metrics *m;
    struct evhttp *http;
    struct gate *gate; /* NULL: no cap */
    struct upstream *up;
    TAILQ_HEAD(exch_list, exch) live;
    unsigned nlive;
    int closing;
    struct timeval client_tv;
    char *overload_body; /* rendered once: the rejection path is hot under overload */
    time_t date_at;      /* the second date[] was rendered for */
    char date[HTTPU_DATE_LEN];
    size_t overload_len;
    struct book *book;
    struct proxy_route route;     /* router mode when route.pick is set */
    struct ratewin releases;      /* slot releases, for the Retry-After estimate */
    int draining;                 /* new requests get 503; the rest finish */
    const char *drain_msg;        /* what those 503s say (static storage) */
    void (*on_change)(void *arg); /* load changed: gate, queue or book */
    void *on_change_arg;
};

static void on_dispatch(struct gate_ticket *t, void *arg);
static void render_overload(struct proxy *px);
static void start_upstream(struct exch *x);

/* ---- lifetime ------------------------------------------------------------------------ */

static void exch_unhold(struct exch *x)
{
    if (--x->refs == 0 && x->finished)
        free(x);
}

static void changed(struct proxy *px)
{
    if (px->on_change != NULL)
        px->on_change(px->on_change_arg);
}

static void release_upstream(struct exch *x)
{
    if (x->uc != NULL) {
        upstream_put(x->up, x->uc);
        x->uc = NULL;
    }
}

/* Cancels the engine request, if any: the engine sees its connection close and stops. */
static void cancel_upstream(struct exch *x)
{
    struct evhttp_request *ureq = x->ureq;

    if (ureq != NULL) {
        x->ureq = NULL; /* the error callback (REQUEST_CANCEL) must find nothing to do */
        evhttp_cancel_request(ureq);
    }
    release_upstream(x);
}

static int64_t mono_ms(void)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t) now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static double ms_between(const struct timespec *a, const struct timespec *b)
{
    return (double) (b->tv_sec - a->tv_sec) * 1e3 + (double) (b->tv_nsec - a->tv_nsec) / 1e6;
}

/* One line per finished request, in logfmt (key=value). */
static void access_log(struct exch *x, enum outcome o)
{
    static const char *const methods[] = {"GET",     "POST",  "HEAD",    "PUT",  "DELETE",
                                          "OPTIONS", "TRACE", "CONNECT", "PATCH"};
    enum evhttp_cmd_type cmd = evhttp_request_get_command(x->creq);
    const char *uri = evhttp_request_get_uri(x->creq);
    const char *method = "?";
    struct timespec now;
    char ttfb[32] = "-";

    for (int i = 0; i < 9; i++)
        if (cmd == (enum evhttp_cmd_type)(1 << i))
            method = methods[i];
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (x->got_body)
        snprintf(ttfb, sizeof ttfb, "%.1f", ms_between(&x->t_arrive, &x->t_first));
    log_info("access method=%s path=%.200s status=%d outcome=%s queue_ms=%.1f ttfb_ms=%s "
             "ms=%.1f bytes=%llu",
             method, uri ? uri : "-", x->status, metrics_outcome_name(o), x->queue_wait_s * 1000.0,
             ttfb, ms_between(&x->t_arrive, &now), (unsigned long long) x->bytes);
}

static void exch_finish(struct exch *x, enum outcome o)
{
    struct proxy *px = x->px;

    if (x->finished)
        return;
    x->finished = 1;
    px->m->outcomes[o]++;
    if (px->cfg->access_log && x->creq != NULL)
        access_log(x, o);
    cwatch_free(x->watch);
    x->watch = NULL;
    if (x->qtimer != NULL) {
        event_free(x->qtimer);
        x->qtimer = NULL;
    }
    if (x->cevcon != NULL)
        evhttp_connection_set_closecb(x->cevcon, NULL, NULL);
    TAILQ_REMOVE(&px->live, x, link);
    px->nlive--;
    x->refs++;
    book_release(px->book, &x->bk);
    switch (x->kind) {
    case XK_BYPASS:
        px->m->inflight_bypass--;
        break;
    case XK_NOCAP:
        px->m->inflight_nocap--;
        break;
    case XK_GATED:
        if (gate_ticket_state(&x->ticket) == GATE_SLOT)
            ratewin_add(&px->releases, mono_ms());
        gate_leave(px->gate, &x->ticket); /* may start the next waiter right here */
        break;
    }
    changed(px);
    exch_unhold(x);
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double) (now.tv_sec - t0->tv_sec) + (double) (now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* ---- replies made by admitd itself ---------------------------------------------------- */

/* The Date header of our own answers. evhttp would format one per reply (gmtime and printf,
 * about 7% of the rejection path); rendering it once a second is enough. */
static const char *date_now(struct proxy *px)
{
    time_t now = time(NULL);

    if (now != px->date_at) {
        px->date_at = now;
        httpu_date(now, px->date);
    }
    return px->date;
}

static void send_body(struct exch *x, int status, const char *body, size_t len, int retry_after,
                      const char *reason)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(x->creq);
    char ra[16];

    /* Straight into the request's own output buffer: no evbuffer of ours to allocate. */
    evbuffer_add(evhttp_request_get_output_buffer(x->creq), body, len);
    evhttp_add_header(h, "Date", date_now(x->px));
    evhttp_add_header(h, "Content-Type", "application/json");
    if (retry_after > 0) {
        snprintf(ra, sizeof ra, "%d", retry_after);
        evhttp_add_header(h, "Retry-After", ra);
    }
    if (reason != NULL)
        evhttp_add_header(h, "X-Admitd-Reason", reason);
    x->status = status;
    evhttp_send_reply(x->creq, status, httpu_reason(status), NULL);
}

static void send_error(struct exch *x, int status, const char *type, const char *msg,
                       int retry_after, const char *reason)
{
    struct buf b;

    buf_init(&b);
    httpu_error_json(&b, status, type, msg);
    send_body(x, status, b.data, b.len, retry_after, reason);
    buf_free(&b);
}

/* The configured Retry-After, or an estimate from how fast slots have been freeing up. */
static int retry_after(struct proxy *px)
{
    struct gate_stats st;

    if (px->cfg->retry_after_s > 0)
        return (int) px->cfg->retry_after_s;
    if (px->gate == NULL)
        return RETRY_AFTER_MIN;
    gate_get_stats(px->gate, &st);
    return (int) retry_after_estimate(st.queued, ratewin_rate(&px->releases, mono_ms()));
}

static void reject_overload(struct exch *x)
{
    struct proxy *px = x->px;

    send_body(x, px->cfg->overload_status, px->overload_body, px->overload_len, retry_after(px),
              "queue-full");
    exch_finish(x, OUT_REJECTED);
}

/* Waited longer than --queue-timeout-ms: leave the queue with the overload status. */
static void on_queue_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct exch *x = arg;
    struct proxy *px = x->px;

    (void) fd;
    (void) what;
    gate_leave(px->gate, &x->ticket);
    send_error(x, px->cfg->overload_status, "overloaded_error", HTTPU_QUEUE_TIMEOUT_MESSAGE,
               retry_after(px), "queue-timeout");
    exch_finish(x, OUT_QUEUE_TIMEOUT);
}

/* ---- client side ---------------------------------------------------------------------- */

static int client_fd(struct evhttp_connection *c)
{
    return bufferevent_getfd(evhttp_connection_get_bufferevent(c));
}

/* The cwatch saw the client leave while nothing of the reply had been sent. */
static void on_client_gone(void *arg)
{
    struct exch *x = arg;
    struct evhttp_connection *c = x->cevcon;

    x->px->m->cancelled[x->state == X_QUEUED ? STAGE_QUEUED : STAGE_WAITING]++;
    log_debug("client left while %s", x->state == X_QUEUED ? "queued" : "waiting for the engine");
    cancel_upstream(x);
    exch_finish(x, OUT_CANCELLED);
    evhttp_connection_free(c); /* frees the request with it */
}

/* libevent is freeing the client connection: the client left mid-reply, timed out, or the
 * server is shutting down. A request that was detached first is ours to free. */
static void on_client_close(struct evhttp_connection *c, void *arg)
{
    struct exch *x = arg;
    struct evhttp_request *creq = x->creq;
    int detached = evhttp_request_get_connection(creq) == NULL;
    enum outcome o = OUT_CANCELLED;

    (void) c;
    if (x->state == X_BROKEN)
        o = x->broken_outcome;
    else
        x->px->m->cancelled[x->state == X_QUEUED     ? STAGE_QUEUED
                            : x->state == X_UPSTREAM ? STAGE_WAITING
                                                     : STAGE_STREAMING]++;
    cancel_upstream(x);
    x->cevcon = NULL;
    exch_finish(x, o);
    if (detached)
        evhttp_request_free(creq);
}

/* The whole reply has been written to the client: only now is the slot released. */
static void on_client_complete(struct evhttp_request *creq, void *arg)
{
    struct exch *x = arg;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(x->cevcon);

    (void) creq;
    /* Undo the streaming settings before the connection reads its next request. */
    evhttp_connection_set_timeout_tv(x->cevcon, &x->px->client_tv);
    bufferevent_setwatermark(bev, EV_READ, 0, 0);
    exch_finish(x, OUT_OK);
}

/* The client's output buffer drained: read from the engine again. */
static void on_client_flushed(struct evhttp_connection *c, void *arg)
{
    struct exch *x = arg;

    (void) c;
    if (x->paused && x->uc != NULL) {
        x->paused = 0;
        bufferevent_enable(evhttp_connection_get_bufferevent(uconn_evcon(x->uc)), EV_READ);
    }
}

static void close_client(struct exch *x, enum outcome o)
{
    struct evhttp_connection *c = x->cevcon;

    exch_finish(x, o);
    if (c != NULL)
        evhttp_connection_free(c);
}

static void on_broken_flushed(struct evhttp_connection *c, void *arg)
{
    struct exch *x = arg;

    (void) c;
    close_client(x, x->broken_outcome);
}

/* ---- engine side ---------------------------------------------------------------------- */

static void upstream_failed(struct exch *x, enum upstream_error e)
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
            send_error(x, 503, "unavailable_error", msg, retry_after(px), "engine-unavailable");
            exch_finish(x, OUT_UNAVAILABLE);
            return;
        case UERR_TIMEOUT:
            snprintf(msg, sizeof msg, "Gateway timeout: engine sent nothing for %u ms",
                     px->cfg->upstream_timeout_ms);
            send_error(x, 504, "timeout_error", msg, 0, "engine-timeout");
            exch_finish(x, OUT_TIMEOUT);
            return;
        case UERR_INVALID:
        default:
            send_error(x, 502, "upstream_error", "Bad gateway: engine sent an invalid response", 0,
                       "engine-error");
            exch_finish(x, OUT_UPSTREAM_ERROR);
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
    close_client(x, x->broken_outcome);
}

static void on_up_error(enum evhttp_request_error err, void *arg)
{
    struct exch *x = arg;

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
    struct exch *x = arg;
    struct evkeyvalq *uh = evhttp_request_get_input_headers(ureq);
    const char *ct = evhttp_find_header(uh, "Content-Type");
    struct bufferevent *bev = evhttp_connection_get_bufferevent(x->cevcon);
    struct timeval write_tv = x->px->client_tv;

    struct evkeyvalq *oh = evhttp_request_get_output_headers(x->creq);
    const char *why = evhttp_find_header(uh, "X-Admitd-Reason");
    int code = evhttp_request_get_response_code(ureq);

    /* Router: a worker that refuses with its overload answer gets one more chance elsewhere,
     * as long as nothing has reached the client. */
    if (x->px->route.pick != NULL && !x->retried &&
        (code == 529 ||
         (why && (strcmp(why, "queue-full") == 0 || strcmp(why, "queue-timeout") == 0)))) {
        x->retry_pending = 1;
        return 0;
    }
    if (x->px->route.refused != NULL && x->retried &&
        (code == 529 || (why && strncmp(why, "queue-", 6) == 0)))
        x->px->route.refused(x->px->route.arg, x->creq);
    copy_headers(uh, oh, 0);
    if (x->kind == XK_GATED) {
        /* Tells clients and load balancers how long the gate held the request. */
        char ms[32];
        snprintf(ms, sizeof ms, "%.1f", x->queue_wait_s * 1000.0);
        evhttp_add_header(oh, "X-Admitd-Queue-Wait-Ms", ms);
    }
    x->sse = ct != NULL && strncasecmp(ct, "text/event-stream", 17) == 0;
    /* An HTTP/1.0 client cannot take chunks: without a length the body ends at close. */
    if (x->creq->minor == 0 && evhttp_find_header(uh, "Content-Length") == NULL)
        evhttp_remove_header(evhttp_request_get_input_headers(x->creq), "Connection");
    cwatch_free(x->watch); /* from here evhttp reads the client and reports a close */
    x->watch = NULL;
    x->state = X_STREAMING;
    evhttp_request_set_on_complete_cb(x->creq, on_client_complete, x);
    x->status = evhttp_request_get_response_code(ureq);
    evhttp_send_reply_start(x->creq, evhttp_request_get_response_code(ureq),
                            evhttp_request_get_response_code_line(ureq));
    /* evhttp now reads the client only to see a close: bound what it may buffer, and drop
     * the read timeout, which would otherwise cut any stream longer than it. */
    bufferevent_setwatermark(bev, EV_READ, 0, CLIENT_READ_HIGH_WATER);
    bufferevent_set_timeouts(bev, NULL, &write_tv);
    return 0;
}

/* Books the first output byte and the tokens of the SSE events in this chunk. */
static void book_chunk(struct exch *x, struct evbuffer *in, int first)
{
    struct evbuffer_iovec vec[8];
    unsigned tokens = 0;
    int n;

    if (first)
        book_first_byte(x->px->book, &x->bk);
    if (x->sse) {
        n = evbuffer_peek(in, -1, NULL, vec, 8);
        if (n > 8) {
            /* Rare: a chunk spread over many buffers. Make it one, then count. */
            vec[0].iov_base = evbuffer_pullup(in, -1);
            vec[0].iov_len = evbuffer_get_length(in);
            n = 1;
        }
        for (int i = 0; i < n; i++)
            tokens += sse_feed(&x->sse_count, vec[i].iov_base, vec[i].iov_len);
        book_output(x->px->book, &x->bk, tokens);
    }
    changed(x->px);
}

static void on_up_chunk(struct evhttp_request *ureq, void *arg)
{
    struct exch *x = arg;
    struct bufferevent *cbev = evhttp_connection_get_bufferevent(x->cevcon);

    if (x->retry_pending)
        return; /* the refusal's body is dropped; libevent drains it */
    int first = !x->got_body;

    if (first) {
        x->got_body = 1;
        clock_gettime(CLOCK_MONOTONIC, &x->t_first);
    }
    x->bytes += evbuffer_get_length(evhttp_request_get_input_buffer(ureq));
    if (x->kind != XK_BYPASS)
        book_chunk(x, evhttp_request_get_input_buffer(ureq), first);
    evhttp_send_reply_chunk_with_cb(x->creq, evhttp_request_get_input_buffer(ureq),
                                    on_client_flushed, x);
    /* Backpressure: a slow client must not make admitd buffer the whole reply. */
    if (!x->paused &&
        evbuffer_get_length(bufferevent_get_output(cbev)) > x->px->cfg->stream_buffer_bytes) {
        x->paused = 1;
        bufferevent_disable(evhttp_connection_get_bufferevent(uconn_evcon(x->uc)), EV_READ);
    }
}

static void on_up_done(struct evhttp_request *ureq, void *arg)
{
    struct exch *x = arg;

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
        start_upstream(x);
        return;
    }
    if (x->state == X_UPSTREAM)
        on_up_headers(ureq, x);
    x->state = X_FLUSHING;
    evhttp_send_reply_end(x->creq); /* on_client_complete finishes once it is written */
}

static void start_upstream(struct exch *x)
{
    struct proxy *px = x->px;
    struct evhttp_request *ureq;
    struct evbuffer *body = evhttp_request_get_input_buffer(x->creq);
    struct evkeyvalq *oh;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(x->creq);
    char len[24];

    x->state = X_UPSTREAM;
    if (x->watch == NULL)
        x->watch = cwatch_new(px->base, client_fd(x->cevcon), on_client_gone, x);
    x->up = px->up;
    if (px->route.pick != NULL) {
        int status = 503;
        const char *msg = "Server unavailable: no worker available";
        enum outcome o;

        x->up = px->route.pick(px->route.arg, x->creq, x->retried ? x->up : NULL, &status, &msg);
        if (x->up == NULL) {
            o = status == px->cfg->overload_status ? OUT_REJECTED : OUT_UNAVAILABLE;
            if (o == OUT_REJECTED)
                send_error(x, status, "overloaded_error", msg, retry_after(px), "all-busy");
            else
                send_error(x, status, "unavailable_error", msg, retry_after(px), "no-worker");
            exch_finish(x, o);
            return;
        }
    }
    if (x->kind != XK_BYPASS && !x->booked) {
        x->booked = 1;
        struct tokcount tc;
        size_t blen = evbuffer_get_length(body);

        tokcount_body(blen ? (const char *) evbuffer_pullup(body, -1) : "", blen,
                      px->cfg->chars_per_token, &tc);
        book_admit(px->book, &x->bk, tc.tokens);
        sse_init(&x->sse_count);
        changed(px);
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
    if (evbuffer_get_length(body) > 0 || cmd == EVHTTP_REQ_POST || cmd == EVHTTP_REQ_PUT ||
        cmd == EVHTTP_REQ_PATCH) {
        snprintf(len, sizeof len, "%zu", evbuffer_get_length(body));
        evhttp_add_header(oh, "Content-Length", len);
    }
    if (px->route.pick != NULL) /* keep the body: the request may move to another engine */
        evbuffer_add(evhttp_request_get_output_buffer(ureq), evbuffer_pullup(body, -1),
                     evbuffer_get_length(body));
    else
        evbuffer_add_buffer(evhttp_request_get_output_buffer(ureq), body);

    x->uc = upstream_get(x->up);
    x->ureq = ureq;
    x->refs++; /* a refused connect may call on_up_done before uconn_request returns */
    if (uconn_request(x->uc, ureq, cmd, evhttp_request_get_uri(x->creq)) != 0) {
        x->ureq = NULL;
        evhttp_request_free(ureq);
        upstream_failed(x, UERR_CONNECT);
    }
    exch_unhold(x);
}

/* ---- arrival -------------------------------------------------------------------------- */

static void admitted(struct exch *x)
{
    if (x->qtimer != NULL) {
        event_free(x->qtimer);
        x->qtimer = NULL;
    }
    x->queue_wait_s = seconds_since(&x->t_arrive);
    prom_hist_observe(&x->px->m->queue_wait, x->queue_wait_s);
    start_upstream(x);
}

static void on_dispatch(struct gate_ticket *t, void *arg)
{
    struct proxy *px = arg;

    if (px->closing)
        return; /* shutting down: proxy_free finishes every exchange */
    admitted((struct exch *) (void *) t);
}

/* Refuses requests whose framing a server behind us might read differently. */
static const char *framing_problem(struct evhttp_request *creq)
{
    const char *cl[8], *te[8];
    size_t ncl = 0, nte = 0;
    struct evkeyval *kv;

    TAILQ_FOREACH(kv, evhttp_request_get_input_headers(creq), next)
    {
        size_t kl = strlen(kv->key);

        if (!httpu_is_token(kv->key))
            return "a header name is not a token (whitespace before the colon?)";
        if (kl == 14 && strcasecmp(kv->key, "Content-Length") == 0)
            cl[ncl < 8 ? ncl++ : 7] = kv->value;
        else if (kl == 17 && strcasecmp(kv->key, "Transfer-Encoding") == 0)
            te[nte < 8 ? nte++ : 7] = kv->value;
    }
    return httpu_framing_problem(cl, ncl, te, nte);
}

static void on_request(struct evhttp_request *creq, void *arg)
{
    struct proxy *px = arg;
    struct exch *x = xcalloc(1, sizeof *x);
    const char *uri = evhttp_request_get_uri(creq);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(creq);

    x->px = px;
    x->creq = creq;
    x->cevcon = evhttp_request_get_connection(creq);
    clock_gettime(CLOCK_MONOTONIC, &x->t_arrive);
    gate_ticket_init(&x->ticket);
    TAILQ_INSERT_TAIL(&px->live, x, link);
    px->nlive++;
    net_set_nodelay(client_fd(x->cevcon));
    evhttp_connection_set_closecb(x->cevcon, on_client_close, x);

    if (cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD || cmd == EVHTTP_REQ_OPTIONS) {
        x->kind = XK_BYPASS;
        px->m->requests_bypass++;
        px->m->inflight_bypass++;
    } else {
        x->kind = px->gate ? XK_GATED : XK_NOCAP;
        if (!px->gate)
            px->m->inflight_nocap++;
    }
    if (px->route.local != NULL && px->route.local(px->route.arg, creq)) {
        x->status = 200;
        exch_finish(x, OUT_OK);
        return;
    }
    if (px->draining) {
        evhttp_add_header(evhttp_request_get_output_headers(creq), "Connection", "close");
        send_error(x, 503, "unavailable_error", px->drain_msg, retry_after(px), "draining");
        exch_finish(x, OUT_DRAINING);
        return;
    }
    const char *bad_framing = framing_problem(creq);
    if (bad_framing != NULL) {
        char msg[160];

        snprintf(msg, sizeof msg, "Bad request: %s", bad_framing);
        /* The connection's framing is in doubt: answer and close it. */
        evhttp_add_header(evhttp_request_get_output_headers(creq), "Connection", "close");
        send_error(x, 400, "invalid_request_error", msg, 0, NULL);
        exch_finish(x, OUT_BAD_REQUEST);
        return;
    }
    if (uri == NULL || uri[0] != '/') {
        send_error(x, 400, "invalid_request_error",
                   "Bad request: the request target must be a path starting with /", 0, NULL);
        exch_finish(x, OUT_BAD_REQUEST);
        return;
    }
    if (x->kind != XK_GATED) {
        start_upstream(x);
        return;
    }
    switch (gate_enter(px->gate, &x->ticket)) {
    case GATE_ADMITTED:
        admitted(x);
        break;
    case GATE_QUEUED:
        x->state = X_QUEUED;
        x->watch = cwatch_new(px->base, client_fd(x->cevcon), on_client_gone, x);
        if (px->cfg->queue_timeout_ms > 0) {
            struct timeval tv = {px->cfg->queue_timeout_ms / 1000,
                                 (px->cfg->queue_timeout_ms % 1000) * 1000};
            x->qtimer = evtimer_new(px->base, on_queue_timeout, x);
            if (x->qtimer == NULL)
                fatal("evtimer_new failed");
            evtimer_add(x->qtimer, &tv);
        }
        changed(px);
        break;
    case GATE_REJECTED:
        reject_overload(x);
        break;
    }
}

/* ---- setup ---------------------------------------------------------------------------- */

struct proxy *proxy_new(struct event_base *base, const struct cfg *cfg, struct metrics *m)
{
    struct proxy *px = xcalloc(1, sizeof *px);

    px->base = base;
    px->cfg = cfg;
    px->m = m;
    TAILQ_INIT(&px->live);
    px->client_tv.tv_sec = cfg->client_timeout_ms / 1000;
    px->client_tv.tv_usec = (cfg->client_timeout_ms % 1000) * 1000;
    if (cfg->engine_request_limit > 0)
        px->gate = gate_new(cfg->engine_request_limit, cfg->request_queue_limit, on_dispatch, px);
    ratewin_init(&px->releases);
    px->book = book_new(cfg->data_parallel_size ? cfg->data_parallel_size : 1, cfg->block_size);
    px->up = upstream_new(base, &cfg->upstream, cfg->upstream_timeout_ms, cfg->upstream_keepalive,
                          UPSTREAM_IDLE_MS);
    render_overload(px);

    px->http = evhttp_new(base);
    if (px->http == NULL)
        fatal("evhttp_new failed");
    evhttp_set_max_headers_size(px->http, cfg->max_header_bytes);
    evhttp_set_max_body_size(px->http, cfg->max_body_bytes);
    evhttp_set_timeout_tv(px->http, &px->client_tv);
    evhttp_set_allowed_methods(px->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                             EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                             EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_default_content_type(px->http, NULL);
    /* Read the rest of an oversized body before answering 413, so the client sees the
     * answer instead of a reset. */
    evhttp_set_flags(px->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_gencb(px->http, on_request, px);
    return px;
}

int proxy_bind(struct proxy *px, const struct hostport *hp, char *bound, size_t boundlen, char *err,
               size_t errlen)
{
    return net_evhttp_bind(px->http, hp, bound, boundlen, err, errlen);
}

const struct gate_stats *proxy_gate_stats(struct proxy *px, struct gate_stats *st)
{
    if (px->gate == NULL)
        return NULL;
    gate_get_stats(px->gate, st);
    return st;
}

void proxy_set_route(struct proxy *px, const struct proxy_route *r)
{
    px->route = *r;
}

void proxy_set_change_cb(struct proxy *px, void (*cb)(void *arg), void *arg)
{
    px->on_change = cb;
    px->on_change_arg = arg;
}

struct book *proxy_book(struct proxy *px)
{
    return px->book;
}

unsigned proxy_active(const struct proxy *px)
{
    return px->nlive;
}

/* The overload body is rendered once; a reload may change its status. */
static void render_overload(struct proxy *px)
{
    struct buf b;

    free(px->overload_body);
    buf_init(&b);
    httpu_error_json(&b, px->cfg->overload_status, "overloaded_error", HTTPU_OVERLOAD_MESSAGE);
    px->overload_body = b.data;
    px->overload_len = b.len;
}

void proxy_reconfigure(struct proxy *px)
{
    render_overload(px);
}

void proxy_drain(struct proxy *px, const char *msg)
{
    px->draining = 1;
    px->drain_msg = msg;
}

int proxy_set_limits(struct proxy *px, unsigned n, unsigned q)
{
    if (px->gate == NULL)
        return -1;
    gate_set_limits(px->gate, n, q);
    changed(px);
    return 0;
}

/* Cancels every exchange: engine requests are cancelled, clients are cut off (they see a
 * reset or an unfinished stream, not a clean end). Returns how many there were. */
unsigned proxy_cancel_all(struct proxy *px)
{
    struct exch *x;
    unsigned n = 0;

    px->closing = 1; /* no dispatch while the queue is emptied */
    while ((x = TAILQ_FIRST(&px->live)) != NULL) {
        struct evhttp_request *creq = x->creq;
        struct evhttp_connection *c = x->cevcon;
        int detached = c == NULL || evhttp_request_get_connection(creq) == NULL;

        cancel_upstream(x);
        exch_finish(x, OUT_CANCELLED);
        if (detached)
            evhttp_request_free(creq);
        else
            evhttp_connection_free(c);
        n++;
    }
    px->closing = 0;
    return n;
}

void proxy_free(struct proxy *px)
{
    if (px == NULL)
        return;
    proxy_cancel_all(px);
    px->closing = 1;
    evhttp_free(px->http);
    upstream_free(px->up);
    gate_free(px->gate);
    book_free(px->book);
    free(px->overload_body);
    free(px);
}
