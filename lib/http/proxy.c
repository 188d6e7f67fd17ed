/* proxy: arrival, the end of an exchange, client hang-ups and the proxy's own answers.
 * The engine side (forwarding, streaming, engine failures) is in proxy_forward.c; the life of
 * an exchange is drawn in proxy_impl.h. */
#include "http/proxy.h"
#include "core/httputil.h"
#include "core/log.h"
#include "core/ratewin.h"
#include "core/xmalloc.h"
#include "http/cwatch.h"
#include "http/evreq.h"
#include "http/netsock.h"
#include "http/proxy_impl.h"
#include "http/upstream.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Idle engine connections older than this are closed (uvicorn closes them at 5 s). */
#define UPSTREAM_IDLE_MS 4000

/* ---- lifetime ------------------------------------------------------------------------ */

void px_unhold(struct pxreq *x)
{
    if (--x->refs == 0 && x->finished)
        free(x);
}

static double ms_between(const struct timespec *a, const struct timespec *b)
{
    return (double) (b->tv_sec - a->tv_sec) * 1e3 + (double) (b->tv_nsec - a->tv_nsec) / 1e6;
}

/* One line per finished request, in logfmt (key=value). */
static void access_log(struct pxreq *x, enum outcome o)
{
    struct timespec now;
    char ttfb[32] = "-";

    clock_gettime(CLOCK_MONOTONIC, &now);
    if (x->got_body)
        snprintf(ttfb, sizeof ttfb, "%.1f", ms_between(&x->t_arrive, &x->t_first));
    log_info("access method=%s path=%.200s status=%d outcome=%s queue_ms=%.1f ttfb_ms=%s "
             "ms=%.1f bytes=%llu",
             x->req.method == HTTP_OTHER ? "?" : http_method_name(x->req.method),
             x->req.target[0] ? x->req.target : "-", x->status, metrics_outcome_name(o),
             x->queue_wait_s * 1000.0, ttfb, ms_between(&x->t_arrive, &now),
             (unsigned long long) x->bytes);
}

void px_finish(struct pxreq *x, enum outcome o)
{
    struct proxy *px = x->px;

    if (x->finished)
        return;
    x->finished = 1;
    px->m->outcomes[o]++;
    if (px->o->access_log && x->creq != NULL)
        access_log(x, o);
    cwatch_free(x->watch);
    x->watch = NULL;
    if (x->deadline != NULL) {
        event_free(x->deadline);
        x->deadline = NULL;
    }
    if (x->cevcon != NULL)
        evhttp_connection_set_closecb(x->cevcon, NULL, NULL);
    TAILQ_REMOVE(&px->live, x, link);
    px->nlive--;
    x->refs++;
    if (px->adm.finish != NULL)
        px->adm.finish(px->adm.arg, x, o); /* may start the next waiter right here */
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

/* The Date header of our own answers. evhttp would format one per reply (gmtime and printf,
 * about 7% of the rejection path); rendering it once a second is enough. */
const char *px_date(struct proxy *px)
{
    time_t now = time(NULL);

    if (now != px->date_at) {
        px->date_at = now;
        httpu_date(now, px->date);
    }
    return px->date;
}

int px_retry_after(struct proxy *px)
{
    return px->adm.retry_after != NULL ? px->adm.retry_after(px->adm.arg) : RETRY_AFTER_MIN;
}

static void send_json(struct pxreq *x, int status, const char *body, size_t len, int retry_after,
                      const char *reason)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(x->creq);
    char ra[16];

    if (retry_after > 0) {
        snprintf(ra, sizeof ra, "%d", retry_after);
        evhttp_add_header(h, "Retry-After", ra);
    }
    if (reason != NULL)
        evhttp_add_header(h, "X-Admitd-Reason", reason);
    x->status = status;
    evreq_reply(x->creq, status, "application/json", body, len, px_date(x->px));
}

void proxy_answer(struct pxreq *x, int status, const char *json, size_t len, int retry_after,
                  const char *reason, enum outcome o)
{
    send_json(x, status, json, len, retry_after, reason);
    px_finish(x, o);
}

void proxy_answer_error(struct pxreq *x, int status, const char *type, const char *msg,
                        int retry_after, const char *reason, enum outcome o)
{
    struct buf b;

    buf_init(&b);
    httpu_error_json(&b, status, type, msg);
    proxy_answer(x, status, b.data, b.len, retry_after, reason, o);
    buf_free(&b);
}

/* ---- held requests ---------------------------------------------------------------------- */

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct pxreq *x = arg;

    (void) fd;
    (void) what;
    x->refs++;
    x->px->adm.expired(x->px->adm.arg, x);
    px_unhold(x);
}

void proxy_wait_deadline(struct pxreq *x, unsigned ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    if (x->deadline == NULL) {
        x->deadline = evtimer_new(x->px->base, on_deadline, x);
        if (x->deadline == NULL)
            fatal("evtimer_new failed");
    }
    evtimer_add(x->deadline, &tv);
}

void proxy_forward(struct pxreq *x)
{
    if (x->deadline != NULL) {
        event_free(x->deadline);
        x->deadline = NULL;
    }
    px_start_upstream(x);
}

/* ---- client side ---------------------------------------------------------------------- */

int px_client_fd(struct evhttp_connection *c)
{
    return bufferevent_getfd(evhttp_connection_get_bufferevent(c));
}

/* The cwatch saw the client leave while nothing of the reply had been sent. */
void px_on_client_gone(void *arg)
{
    struct pxreq *x = arg;
    struct evhttp_connection *c = x->cevcon;

    x->px->m->cancelled[x->state == X_HELD ? STAGE_QUEUED : STAGE_WAITING]++;
    log_debug("client left while %s", x->state == X_HELD ? "queued" : "waiting for the engine");
    px_cancel_upstream(x);
    px_finish(x, OUT_CANCELLED);
    evhttp_connection_free(c); /* frees the request with it */
}

/* libevent is freeing the client connection: the client left mid-reply, timed out, or the
 * server is shutting down. A request that was detached first is ours to free. */
static void on_client_close(struct evhttp_connection *c, void *arg)
{
    struct pxreq *x = arg;
    struct evhttp_request *creq = x->creq;
    int detached = evhttp_request_get_connection(creq) == NULL;
    enum outcome o = OUT_CANCELLED;

    (void) c;
    if (x->state == X_BROKEN)
        o = x->broken_outcome;
    else
        x->px->m->cancelled[x->state == X_HELD       ? STAGE_QUEUED
                            : x->state == X_UPSTREAM ? STAGE_WAITING
                                                     : STAGE_STREAMING]++;
    px_cancel_upstream(x);
    x->cevcon = NULL;
    px_finish(x, o);
    if (detached)
        evhttp_request_free(creq);
}

void px_close_client(struct pxreq *x, enum outcome o)
{
    struct evhttp_connection *c = x->cevcon;

    px_finish(x, o);
    if (c != NULL)
        evhttp_connection_free(c);
}

/* ---- arrival -------------------------------------------------------------------------- */

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

/* The router answers some requests itself (/busy_threshold). */
static int answer_locally(struct pxreq *x)
{
    struct proxy *px = x->px;
    struct http_reply rep = {200, "application/json", {NULL, 0, 0}};

    if (px->route.local == NULL || !px->route.local(px->route.arg, &x->req, &rep)) {
        buf_free(&rep.body);
        return 0;
    }
    x->status = rep.status;
    evreq_reply(x->creq, rep.status, rep.content_type, rep.body.data, rep.body.len, px_date(px));
    buf_free(&rep.body);
    px_finish(x, OUT_OK);
    return 1;
}

/* The proxy's own checks, before admission sees the request; 1 if they answered it. */
static int refused_here(struct pxreq *x)
{
    struct proxy *px = x->px;
    struct evkeyvalq *oh = evhttp_request_get_output_headers(x->creq);
    const char *bad_framing;

    if (px->draining) {
        evhttp_add_header(oh, "Connection", "close");
        proxy_answer_error(x, 503, "unavailable_error", px->drain_msg, px_retry_after(px),
                           "draining", OUT_DRAINING);
        return 1;
    }
    bad_framing = framing_problem(x->creq);
    if (bad_framing != NULL) {
        char msg[160];

        snprintf(msg, sizeof msg, "Bad request: %s", bad_framing);
        /* The connection's framing is in doubt: answer and close it. */
        evhttp_add_header(oh, "Connection", "close");
        proxy_answer_error(x, 400, "invalid_request_error", msg, 0, NULL, OUT_BAD_REQUEST);
        return 1;
    }
    if (x->req.target[0] != '/') {
        proxy_answer_error(x, 400, "invalid_request_error",
                           "Bad request: the request target must be a path starting with /", 0,
                           NULL, OUT_BAD_REQUEST);
        return 1;
    }
    return 0;
}

static void on_request(struct evhttp_request *creq, void *arg)
{
    struct proxy *px = arg;
    struct pxreq *x = xcalloc(1, offsetof(struct pxreq, adm_state) + px->adm.size);

    x->px = px;
    x->creq = creq;
    x->cevcon = evhttp_request_get_connection(creq);
    evreq_view(creq, &x->req);
    clock_gettime(CLOCK_MONOTONIC, &x->t_arrive);
    TAILQ_INSERT_TAIL(&px->live, x, link);
    px->nlive++;
    net_set_nodelay(px_client_fd(x->cevcon));
    evhttp_connection_set_closecb(x->cevcon, on_client_close, x);

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
        x->state = X_HELD;
        x->watch = cwatch_new(px->base, px_client_fd(x->cevcon), px_on_client_gone, x);
        break;
    case PX_ANSWERED:
        break;
    }
    px_unhold(x);
}

/* ---- setup ---------------------------------------------------------------------------- */

struct proxy *proxy_new(struct event_base *base, const struct proxy_opts *o,
                        const struct http_url *upstream, struct metrics *m)
{
    struct proxy *px = xcalloc(1, sizeof *px);

    px->base = base;
    px->o = o;
    px->m = m;
    TAILQ_INIT(&px->live);
    px->client_tv.tv_sec = o->client_timeout_ms / 1000;
    px->client_tv.tv_usec = (o->client_timeout_ms % 1000) * 1000;
    if (upstream != NULL)
        px->up = upstream_new(base, upstream, o->upstream_timeout_ms, o->upstream_keepalive,
                              UPSTREAM_IDLE_MS);

    /* TRACE, CONNECT and unknown methods: evhttp's 501. */
    px->http = evreq_server(base, EVREQ_ALL_METHODS, o->max_header_bytes, o->max_body_bytes,
                            &px->client_tv, on_request, px);
    /* Read the rest of an oversized body before answering 413, so the client sees the
     * answer instead of a reset. */
    evhttp_set_flags(px->http, EVHTTP_SERVER_LINGERING_CLOSE);
    return px;
}

int proxy_bind(struct proxy *px, const struct hostport *hp, char *bound, size_t boundlen, char *err,
               size_t errlen)
{
    return net_evhttp_bind(px->http, hp, bound, boundlen, err, errlen);
}

void proxy_set_admission(struct proxy *px, const struct proxy_admission *a)
{
    px->adm = *a;
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

/* Cancels every exchange: engine requests are cancelled, clients are cut off (they see a
 * reset or an unfinished stream, not a clean end). Returns how many there were. */
unsigned proxy_cancel_all(struct proxy *px)
{
    struct pxreq *x;
    unsigned n = 0;

    px->closing = 1; /* nothing is let through while the queue is emptied */
    while ((x = TAILQ_FIRST(&px->live)) != NULL) {
        struct evhttp_request *creq = x->creq;
        struct evhttp_connection *c = x->cevcon;
        int detached = c == NULL || evhttp_request_get_connection(creq) == NULL;

        px_cancel_upstream(x);
        px_finish(x, OUT_CANCELLED);
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
    free(px);
}
