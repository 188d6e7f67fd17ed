/* proxy: arrival, the end of an exchange, client hang-ups and the proxy's own answers.
 * The engine side is in proxy_forward.c (the request) and proxy_relay.c (the reply); the
 * life of an exchange is drawn in proxy_impl.h. */
#include "http/proxy.h"
#include "wire/httputil.h"
#include "util/log.h"
#include "util/ratewin.h"
#include "util/xmalloc.h"
#include "http/hconn.h"
#include "http/proxy_impl.h"
#include "http/upstream.h"
#include "util/clock.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Idle engine connections older than this are closed (uvicorn closes them at 5 s). */
#define UPSTREAM_IDLE_MS 4000

/* ---- lifetime ------------------------------------------------------------------------ */

/* Exchanges are recycled, not freed: in steady state a request allocates nothing. */
static struct pxreq *px_alloc(struct proxy *px)
{
    struct pxreq *x = px->spare;

    if (x != NULL)
        px->spare = x->next_spare;
    else
        x = xmalloc(offsetof(struct pxreq, adm_state) + px->adm.size);
    memset(x, 0,
           offsetof(struct pxreq, adm_state) + (px->adm.zeroed != 0 && px->adm.zeroed < px->adm.size
                                                    ? px->adm.zeroed
                                                    : px->adm.size));
    x->px = px;
    return x;
}

void px_unhold(struct pxreq *x)
{
    if (--x->refs == 0 && x->finished) {
        x->next_spare = x->px->spare;
        x->px->spare = x;
    }
}

static const char *const outcome_names[OUT__COUNT] = {
    "ok",          "rejected",      "cancelled", "unavailable", "timeout", "upstream_error",
    "bad_request", "queue_timeout", "draining"};

const char *proxy_outcome_name(enum outcome o)
{
    return (o >= 0 && o < OUT__COUNT) ? outcome_names[o] : "unknown";
}

/* One line per finished request, in logfmt (key=value). */
static void access_log(struct pxreq *x, enum outcome o)
{
    struct timespec now;
    char ttfb[32] = "-";

    clock_mono(&now);
    if (x->got_body)
        snprintf(ttfb, sizeof ttfb, "%.1f", 1e3 * clock_seconds_between(&x->t_arrive, &x->t_first));
    log_info("access method=%s path=%.200s status=%d outcome=%s queue_ms=%.1f ttfb_ms=%s "
             "ms=%.1f bytes=%llu",
             x->req.method == HTTP_OTHER ? "?" : http_method_name(x->req.method),
             x->req.target[0] ? x->req.target : "-", x->status, proxy_outcome_name(o),
             x->queue_wait_s * 1000.0, ttfb, 1e3 * clock_seconds_between(&x->t_arrive, &now),
             (unsigned long long) x->bytes);
}

void px_finish(struct pxreq *x, enum outcome o)
{
    struct proxy *px = x->px;
    struct hconn *c = x->c;

    if (x->finished)
        return;
    x->finished = 1;
    px->st->outcomes[o]++;
    if (px->o->access_log)
        access_log(x, o);
    if (x->deadline_on) {
        event_del(&x->deadline);
        x->deadline_on = 0;
    }
    if (x->later_on) {
        event_del(&x->later);
        x->later_on = 0;
    }
    TAILQ_REMOVE(&px->live, x, link);
    px->nlive--;
    x->refs++;
    if (px->adm.finish != NULL)
        px->adm.finish(px->adm.arg, x, o); /* may start the next waiter right here */
    /* Last: the request's strings live in the connection's buffer, which the connection may
     * reuse or free once it has been given back. */
    x->c = NULL;
    if (c != NULL) {
        if (x->end == PX_END_ABORT)
            hc_abort(c);
        else
            hc_end(c, x->end == PX_END_KEEP);
    }
    px_unhold(x);
}

void *pxreq_state(struct pxreq *x)
{
    return x->adm_state;
}

struct pxreq *pxreq_of_state(void *state)
{
    return (struct pxreq *) (void *) ((char *) state - offsetof(struct pxreq, adm_state));
}

void pxreq_set_queue_wait(struct pxreq *x, double seconds)
{
    x->queue_wait_s = seconds;
    x->has_wait = 1;
}

/* ---- answers made by admitd itself ---------------------------------------------------- */

int px_retry_after(struct proxy *px)
{
    return px->adm.retry_after != NULL ? px->adm.retry_after(px->adm.arg) : RETRY_AFTER_MIN;
}

/* Sends a whole answer; close: the connection closes after it. */
static void send_answer(struct pxreq *x, int status, const char *content_type, const char *body,
                        size_t len, int retry_after, const char *reason, int close)
{
    char extra[160];
    size_t n = 0, rl;

    x->status = status;
    if (x->c == NULL)
        return;
    /* By hand, not printf: this is the rejection path, hot under overload. */
    if (retry_after > 0) {
        memcpy(extra, "Retry-After: ", 13);
        n = 13 + httpu_fmt_uint(extra + 13, (unsigned) retry_after);
        extra[n++] = '\r';
        extra[n++] = '\n';
    }
    if (reason != NULL && (rl = strlen(reason)) < sizeof extra - n - 20) {
        memcpy(extra + n, "X-Admitd-Reason: ", 17);
        memcpy(extra + n + 17, reason, rl);
        n += 17 + rl;
        extra[n++] = '\r';
        extra[n++] = '\n';
    }
    extra[n] = '\0';
    if (hc_reply(x->c, status, content_type, body, len, extra, close) != 0)
        x->end = PX_END_ABORT;
    else
        x->end = close ? PX_END_CLOSE : PX_END_KEEP;
}

static void answer(struct pxreq *x, int status, const char *json, size_t len, int retry_after,
                   const char *reason, enum outcome o, int close)
{
    send_answer(x, status, "application/json", json, len, retry_after, reason, close);
    px_finish(x, o);
}

void proxy_answer(struct pxreq *x, int status, const char *json, size_t len, int retry_after,
                  const char *reason, enum outcome o)
{
    answer(x, status, json, len, retry_after, reason, o, 0);
}

void proxy_answer_as(struct pxreq *x, int status, const char *content_type, const char *body,
                     size_t len, const char *fields, const char *reason, enum outcome o)
{
    struct buf *b = buf_pool_take(&x->px->bufs);

    x->status = status;
    if (fields != NULL)
        buf_puts(b, fields);
    if (reason != NULL)
        buf_printf(b, "X-Admitd-Reason: %s\r\n", reason);
    if (x->c != NULL)
        x->end = hc_reply(x->c, status, content_type, body, len, b->len ? b->data : "", 0) != 0
                     ? PX_END_ABORT
                     : PX_END_KEEP;
    buf_pool_give(&x->px->bufs, b);
    px_finish(x, o);
}

static void answer_error(struct pxreq *x, int status, const char *type, const char *msg,
                         int retry_after, const char *reason, enum outcome o, int close)
{
    struct proxy *px = x->px;
    struct buf *b = buf_pool_take(&px->bufs);

    httpu_error_json(b, status, type, msg);
    answer(x, status, b->data, b->len, retry_after, reason, o, close);
    buf_pool_give(&px->bufs, b);
}

void proxy_answer_error(struct pxreq *x, int status, const char *type, const char *msg,
                        int retry_after, const char *reason, enum outcome o)
{
    answer_error(x, status, type, msg, retry_after, reason, o, 0);
}

/* ---- held requests ---------------------------------------------------------------------- */

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct pxreq *x = arg;

    (void) fd;
    (void) what;
    x->deadline_on = 0;
    x->refs++;
    x->px->adm.expired(x->px->adm.arg, x);
    px_unhold(x);
}

void proxy_wait_deadline(struct pxreq *x, unsigned ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    if (!x->deadline_on)
        evtimer_assign(&x->deadline, x->px->base, on_deadline, x);
    evtimer_add(&x->deadline, &tv);
    x->deadline_on = 1;
}

void proxy_wait_clear(struct pxreq *x)
{
    if (x->deadline_on) {
        event_del(&x->deadline);
        x->deadline_on = 0;
    }
}

void proxy_forward(struct pxreq *x)
{
    proxy_wait_clear(x);
    px_start_upstream(x);
}

/* ---- client side ---------------------------------------------------------------------- */

/* The client left (FIN, reset, timeout, a failed write) before its reply was complete. */
static void on_client_gone(void *arg, struct hconn *c, void *owner)
{
    struct pxreq *x = owner;

    (void) arg;
    (void) c;
    if (x == NULL)
        return;
    x->c = NULL; /* the connection closes when this returns */
    x->px->st->cancelled[x->state == X_HELD       ? STAGE_QUEUED
                         : x->state == X_UPSTREAM ? STAGE_WAITING
                                                  : STAGE_STREAMING]++;
    log_debug("client left while %s", x->state == X_HELD       ? "queued"
                                      : x->state == X_UPSTREAM ? "waiting for the engine"
                                                               : "streaming");
    x->refs++;
    px_cancel_upstream(x);
    px_finish(x, OUT_CANCELLED);
    px_unhold(x);
}

static void on_client_drained(void *arg, struct hconn *c, void *owner)
{
    (void) arg;
    (void) c;
    if (owner != NULL)
        px_client_drained(owner);
}

/* The parser refused a request (the connection answered it and closes). */
static void on_refused(void *arg, int status)
{
    struct proxy *px = arg;

    (void) status;
    px->st->outcomes[OUT_BAD_REQUEST]++;
}

void px_close_client(struct pxreq *x, enum outcome o)
{
    x->end = PX_END_ABORT;
    px_finish(x, o);
}

/* ---- arrival -------------------------------------------------------------------------- */

/* The daemon answers some requests itself: admitd /admitd/kv_blocks, the router
 * /busy_threshold. Outside admission: they never reach an engine or a slot. */
static int answer_locally(struct pxreq *x)
{
    struct proxy *px = x->px;
    struct http_reply rep = {200, "application/json", {NULL, 0, 0}};

    if (px->local == NULL || !px->local(px->local_arg, &x->req, &rep)) {
        buf_free(&rep.body);
        return 0;
    }
    send_answer(x, rep.status, rep.content_type, rep.body.data ? rep.body.data : "", rep.body.len,
                0, NULL, 0);
    buf_free(&rep.body);
    px_finish(x, OUT_OK);
    return 1;
}

/* The proxy's own checks, before admission sees the request; 1 if they answered it. The
 * framing was checked by the parser already. */
static int refused_here(struct pxreq *x)
{
    struct proxy *px = x->px;

    if (px->draining) {
        answer_error(x, 503, "unavailable_error", px->drain_msg, px_retry_after(px), "draining",
                     OUT_DRAINING, 1);
        return 1;
    }
    if (x->req.target[0] != '/') {
        answer_error(x, 400, "invalid_request_error",
                     "Bad request: the request target must be a path starting with /", 0, NULL,
                     OUT_BAD_REQUEST, 0);
        return 1;
    }
    return 0;
}

static void on_request(void *arg, struct hconn *c, const struct http_req *r)
{
    struct proxy *px = arg;
    struct pxreq *x = px_alloc(px);

    x->c = c;
    x->req = *r;
    hc_set_owner(c, x);
    clock_mono(&x->t_arrive);
    TAILQ_INSERT_TAIL(&px->live, x, link);
    px->nlive++;

    x->refs++; /* the hooks below may end the exchange */
    if (px->adm.begin != NULL)
        px->adm.begin(px->adm.arg, x, &x->req);
    if (answer_locally(x) || refused_here(x)) {
        px_unhold(x);
        return;
    }
    switch (px->adm.arrive != NULL ? px->adm.arrive(px->adm.arg, x, &x->req) : PX_FORWARD) {
    case PX_FORWARD:
        px_start_upstream(x);
        break;
    case PX_WAIT:
        x->state = X_HELD; /* the connection goes on reading: it sees a hang-up */
        break;
    case PX_ANSWERED:
        break;
    }
    px_unhold(x);
}

/* ---- setup ---------------------------------------------------------------------------- */

struct proxy *proxy_new(struct event_base *base, const struct proxy_opts *o,
                        const struct http_url *upstream, struct proxy_stats *st,
                        struct listen_stats *client)
{
    struct proxy *px = xcalloc(1, sizeof *px);
    /* TRACE, CONNECT and unknown methods: 501, from the connection itself. */
    struct hc_limits lim = {(1u << HTTP_GET) | (1u << HTTP_HEAD) | (1u << HTTP_POST) |
                                (1u << HTTP_PUT) | (1u << HTTP_DELETE) | (1u << HTTP_OPTIONS) |
                                (1u << HTTP_PATCH),
                            o->max_header_bytes,
                            o->max_body_bytes,
                            o->client_timeout_ms,
                            o->client_header_timeout_ms,
                            o->max_client_connections,
                            "client",
                            client};
    struct hc_ops ops = {on_request, on_client_gone, on_client_drained, on_refused};

    px->base = base;
    px->o = o;
    px->st = st;
    TAILQ_INIT(&px->live);
    buf_pool_init(&px->bufs);
    if (upstream != NULL)
        px->up = upstream_new(base, upstream, NULL, o->upstream_timeout_ms, o->upstream_keepalive,
                              UPSTREAM_IDLE_MS);
    px->l = hl_new(base, &lim, &ops, px);
    return px;
}

int proxy_bind(struct proxy *px, const struct hostport *hp, char *bound, size_t boundlen, char *err,
               size_t errlen)
{
    return hl_bind(px->l, hp, bound, boundlen, err, errlen);
}

void proxy_set_admission(struct proxy *px, const struct proxy_admission *a)
{
    px->adm = *a;
}

void proxy_set_local(struct proxy *px, proxy_local_fn local, void *arg)
{
    px->local = local;
    px->local_arg = arg;
}

void proxy_set_route(struct proxy *px, const struct proxy_route *r)
{
    px->route = *r;
}

unsigned proxy_active(const struct proxy *px)
{
    return px->nlive;
}

int proxy_closing(const struct proxy *px)
{
    return px->closing;
}

void proxy_drain(struct proxy *px, const char *msg)
{
    px->draining = 1;
    px->drain_msg = msg;
}

/* Cancels every exchange. A request still held by admission never reached an engine: it
 * gets the drain's 503 (Retry-After, Connection: close), as new requests do, since another
 * worker can serve it. The others are cut off: their engine requests cancelled, their clients
 * see a reset or an unfinished stream, never a clean end. */
unsigned proxy_cancel_all(struct proxy *px, unsigned *held)
{
    struct pxreq *x;
    unsigned n = 0, h = 0;

    px->closing = 1; /* nothing is let through while the queue is emptied */
    while ((x = TAILQ_FIRST(&px->live)) != NULL) {
        x->refs++;
        if (x->state == X_HELD && x->c != NULL) {
            answer_error(x, 503, "unavailable_error",
                         px->draining ? px->drain_msg : "Server unavailable: shutting down",
                         px_retry_after(px), "draining", OUT_DRAINING, 1);
            h++;
        } else {
            px_cancel_upstream(x);
            px_close_client(x, OUT_CANCELLED);
        }
        px_unhold(x);
        n++;
    }
    px->closing = 0;
    if (held != NULL)
        *held = h;
    return n;
}

void proxy_free(struct proxy *px)
{
    if (px == NULL)
        return;
    proxy_cancel_all(px, NULL);
    px->closing = 1;
    hl_free(px->l);
    upstream_free(px->up);
    while (px->spare != NULL) {
        struct pxreq *x = px->spare;

        px->spare = x->next_spare;
        free(x);
    }
    buf_pool_free(&px->bufs);
    free(px);
}
