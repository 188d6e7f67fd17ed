/* hconn: one client connection: its events, answering requests in order, timeouts, and the
 * graceful close. Reading a request out of its buffer is hconn_read.c's; the listener and the
 * pool are hlisten.c's; the life of a connection is drawn in hconn_impl.h. */
#include "util/buf.h"
#include "wire/httputil.h"
#include "http/cwatch.h"
#include "http/hconn_impl.h"
#include "net/acceptor.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* A connection closing gracefully reads what the client still sends for at most this long. */
#define HC_LINGER_MS 2000
static void hc_io(struct ioconn *io, short what);
static void hc_timeout(evutil_socket_t fd, short what, void *arg);

static struct hconn *of_io(struct ioconn *io)
{
    return (struct hconn *) (void *) ((char *) io - offsetof(struct hconn, io));
}

/* ---- timers ---------------------------------------------------------------------------- */

static void tmo_set(struct hconn *c, const struct timeval *tv)
{
    event_add(&c->tmo, tv);
    c->tmo_on = 1;
}

static void tmo_clear(struct hconn *c)
{
    if (c->tmo_on) {
        event_del(&c->tmo);
        c->tmo_on = 0;
    }
}

static void mark_read(struct hconn *c)
{
    event_base_gettimeofday_cached(c->l->base, &c->last);
}

/* Milliseconds from then to the loop's time now (a clock that stepped back gives 0). */
static long ms_since(struct hconn *c, const struct timeval *then)
{
    struct timeval now, d;
    long ms;

    event_base_gettimeofday_cached(c->l->base, &now);
    timersub(&now, then, &d);
    ms = (long) d.tv_sec * 1000 + d.tv_usec / 1000;
    return ms > 0 ? ms : 0;
}

/* A request head begins now: its deadline runs. The timer, armed for the idle timeout,
 * is brought forward when the deadline is the shorter (one timer operation, and only for a
 * head that does not arrive whole in one read, or on a new connection). */
static void head_begins(struct hconn *c)
{
    c->head_on = 1;
    event_base_gettimeofday_cached(c->l->base, &c->head_at);
    if (c->l->head_tv != NULL)
        tmo_set(c, c->l->head_tv);
}

/* ---- closing ---------------------------------------------------------------------------- */

void hc_close(struct hconn *c)
{
    if (c->state == HC_CLOSED)
        return;
    cwatch_free(c->watch);
    c->watch = NULL;
    tmo_clear(c);
    ioc_close(&c->io);
    c->state = HC_CLOSED;
    c->owner = NULL;
    acc_closed(c->l->acc); /* a descriptor is free: below the cap, accepting goes on */
    if (c->depth == 0)
        hc_recycle(c);
}

void hc_destroy(struct hconn *c)
{
    ioc_release(&c->io);
    free(c->hdr_big);
    free(c);
}

static void unref(struct hconn *c)
{
    if (--c->depth == 0 && c->state == HC_CLOSED)
        hc_recycle(c);
}

/* The client left, or can no longer be written to: the owner of a request in progress ends
 * it, then the connection closes. */
static void lost(struct hconn *c)
{
    if (c->state == HC_BUSY && c->l->ops.gone != NULL) {
        void *owner = c->owner;

        c->owner = NULL;
        c->l->ops.gone(c->l->arg, c, owner);
    }
    hc_close(c);
}

static void linger(struct hconn *c)
{
    static const struct timeval tv = {HC_LINGER_MS / 1000, (HC_LINGER_MS % 1000) * 1000};

    cwatch_free(c->watch);
    c->watch = NULL;
    c->state = HC_LINGER;
    shutdown(c->io.fd, SHUT_WR);
    c->io.in.off = c->io.in.len = 0;
    ioc_read(&c->io, 1);
    tmo_clear(c);
    tmo_set(c, &tv);
}

/* ---- a request at a time ---------------------------------------------------------------- */

static void reset_request(struct hconn *c)
{
    h1_req_init(&c->hp, c->l->slots, HC_MAX_HEADERS, c->l->lim.max_header_bytes);
    c->hp_base = NULL;
    c->scanned = 0;
    c->body_at = c->body_len = c->raw_at = c->req_len = 0;
    c->sent_continue = 0;
    c->keep = 0;
    c->owner = NULL;
    c->head_on = 0;
}

/* The timer stays armed for the connection's life and judges when it fires (a read only
 * stamps the time): a request costs no timer operation. */
static void wait_request(struct hconn *c)
{
    c->state = HC_HEAD;
    mark_read(c);
    if (!c->tmo_on)
        tmo_set(c, c->l->idle_tv);
}

void hc_begin(struct hconn *c)
{
    c->depth = 0;
    c->watch = NULL;
    c->tmo_on = 0;
    c->kick = c->in_process = 0;
    c->io.cb = hc_io;
    event_assign(&c->tmo, c->l->base, -1, 0, hc_timeout, c);
    reset_request(c);
    ioc_read(&c->io, 1);
    head_begins(c); /* a new connection's first head is due from the accept (nginx) */
    wait_request(c);
}

/* The answer is written: the next request, or the graceful close. */
static void after_answer(struct hconn *c)
{
    cwatch_free(c->watch);
    c->watch = NULL;
    if (!c->keep) {
        linger(c);
        return;
    }
    c->io.in.off += c->req_len;
    if (c->io.in.off >= c->io.in.len)
        c->io.in.off = c->io.in.len = 0;
    ioc_trim(&c->io, 16 * 1024); /* an idle keep-alive connection keeps no large buffer */
    reset_request(c);
    ioc_read(&c->io, 1);
    wait_request(c);
    /* Bytes of the next request already read: the parsing loop goes on with them if it is
     * the caller; otherwise they are parsed from the event loop, not from inside the call
     * that ended this answer (which may be another connection's callback). */
    if (c->io.in.len > c->io.in.off && !c->in_process && !c->kick) {
        c->kick = 1;
        event_active(&c->io.rev, EV_READ, 0);
    }
}

/* Answers status and closes the connection (gracefully). The client's faults (4xx, 501,
 * 505) go to the refused hook; 500 is ours: no memory for the request's buffers. */
void hc_refuse(struct hconn *c, int status, const char *reason)
{
    const char *type = "invalid_request_error";
    char msg[200];
    struct buf b;

    if (status == 500) {
        c->l->st->oom_refusals++;
        type = "server_error";
    } else if (c->l->ops.refused != NULL) {
        c->l->ops.refused(c->l->arg, status);
    }
    switch (status) {
    case 413:
        snprintf(msg, sizeof msg, "Request body too large: over %u bytes",
                 c->l->lim.max_body_bytes);
        break;
    case 414:
    case 431:
        snprintf(msg, sizeof msg, "Request %s too large: over %u bytes",
                 status == 414 ? "line" : "header section", c->l->lim.max_header_bytes);
        break;
    case 500:
        snprintf(msg, sizeof msg, "Server out of memory: %s", reason);
        break;
    default:
        /* 400, 405, 408, 417, 501, 505: the reason phrase, then the parser's why. */
        snprintf(msg, sizeof msg, "%s: %s", status == 400 ? "Bad request" : httpu_reason(status),
                 reason);
        break;
    }
    buf_init(&b);
    httpu_error_json(&b, status, type, msg);
    c->state = HC_BUSY;
    if (hc_reply(c, status, "application/json", b.data, b.len, NULL, 1) != 0)
        hc_close(c);
    else
        hc_end(c, 0);
    buf_free(&b);
}

/* The head deadline passed: a head begun gets 408 (nginx and HAProxy answer so); a new
 * connection that sent nothing is closed without a word (a 408 there would go to clients
 * that opened a connection ahead of need, as browsers do). */
static void head_expired(struct hconn *c)
{
    char why[100];

    c->l->st->head_timeouts++;
    if (c->io.in.len == c->io.in.off) {
        hc_close(c);
        return;
    }
    snprintf(why, sizeof why, "the request head was not complete within %u ms",
             c->l->lim.header_timeout_ms);
    hc_refuse(c, 408, why);
}

/* ---- events ----------------------------------------------------------------------------- */

static void on_watch_gone(void *arg)
{
    struct hconn *c = arg;

    c->depth++; /* the watch disarmed itself; it is freed with the connection */
    lost(c);
    unref(c);
}

/* Parses what was read; a head left unfinished by it starts its deadline. */
static void parse_read(struct hconn *c)
{
    hc_process(c);
    if (c->state == HC_HEAD && !c->head_on && c->io.in.len > c->io.in.off)
        head_begins(c);
}

static void on_readable(struct hconn *c)
{
    ssize_t n;

    switch (c->state) {
    case HC_HEAD:
    case HC_BODY:
        if (c->kick) {
            c->kick = 0;
            parse_read(c);
            return;
        }
        n = ioc_fill(&c->io, hc_read_max(c), 1);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0 && errno == ENOBUFS) {
            hc_refuse(c, c->state == HC_HEAD ? 431 : 413, "too large");
            return;
        }
        if (n < 0 && errno == ENOMEM) {
            hc_refuse(c, 500, "no room for the request's bytes");
            return;
        }
        if (n <= 0) {
            hc_close(c); /* a client that left mid-request gets nothing; nothing was sent */
            return;
        }
        mark_read(c);
        parse_read(c);
        return;
    case HC_BUSY:
    case HC_FLUSH:
        /* Only to see a hang-up: the bytes (a pipelined request) wait their turn, in the
         * free room of the buffer (which cannot move while the request's strings point
         * into it); what does not fit stays in the socket. */
        n = ioc_fill(&c->io, SIZE_MAX, 0);
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
            return;
        if (n < 0 && errno == ENOBUFS) {
            /* Full: stop reading (level-triggered, it would fire for ever) and let a watch
             * see the FIN or reset behind the bytes. */
            ioc_read(&c->io, 0);
            c->watch = cwatch_new(c->l->base, c->io.fd, on_watch_gone, c);
            return;
        }
        if (n == 0 && c->state == HC_FLUSH) {
            /* A half-close after the answer was complete: it is still written, then the
             * connection closes. Reading stops (an EOF stays readable for ever). */
            ioc_read(&c->io, 0);
            c->keep = 0;
            return;
        }
        lost(c);
        return;
    case HC_LINGER:
        n = ioc_fill(&c->io, SIZE_MAX, 1);
        c->io.in.off = c->io.in.len = 0;
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            hc_close(c);
        return;
    case HC_CLOSED:
        return;
    }
}

static void on_writable(struct hconn *c)
{
    if (c->io.err != 0) {
        lost(c);
        return;
    }
    if (c->state == HC_FLUSH) {
        after_answer(c);
    } else if (c->state == HC_BUSY && c->l->ops.drained != NULL) {
        c->l->ops.drained(c->l->arg, c, c->owner);
    }
}

static void hc_io(struct ioconn *io, short what)
{
    struct hconn *c = of_io(io);

    c->depth++;
    if (what & EV_WRITE)
        on_writable(c);
    else
        on_readable(c);
    unref(c);
}

static void hc_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct hconn *c = arg;

    (void) fd;
    (void) what;
    c->tmo_on = 0;
    c->depth++;
    switch (c->state) {
    case HC_HEAD:
    case HC_BODY: {
        /* Lazy: reads do not re-arm the timer, they only stamp the time. It fires again at
         * the nearer of the idle timeout and the head deadline. */
        long left = (long) c->l->lim.timeout_ms - ms_since(c, &c->last);

        if (c->state == HC_HEAD && c->head_on && c->l->lim.header_timeout_ms > 0) {
            long head_left = (long) c->l->lim.header_timeout_ms - ms_since(c, &c->head_at);

            if (head_left <= 1) {
                head_expired(c);
                break;
            }
            if (head_left < left)
                left = head_left;
        }
        if (left > 1) {
            struct timeval tv = {left / 1000, (left % 1000) * 1000};

            tmo_set(c, &tv);
            break;
        }
        hc_close(c);
        break;
    }
    case HC_BUSY:
    case HC_FLUSH:
        /* Queued, waiting for the engine or streaming: the client's only duty is to read
         * what it is sent. One that had bytes waiting at the last tick and has taken none
         * since stopped reading (cut between one and two timeouts after it stopped). */
        if (ioc_pending(&c->io) > 0 && c->stalled && c->io.progress == c->progress_at) {
            lost(c);
            break;
        }
        c->stalled = ioc_pending(&c->io) > 0;
        c->progress_at = c->io.progress;
        tmo_set(c, c->l->idle_tv);
        break;
    case HC_LINGER:
    case HC_CLOSED:
        hc_close(c);
        break;
    }
    unref(c);
}

/* ---- the owner's side ------------------------------------------------------------------- */

void hc_set_owner(struct hconn *c, void *owner)
{
    c->owner = owner;
}

const struct h1_parser *hc_head(const struct hconn *c)
{
    return &c->hp;
}

size_t hc_pending(const struct hconn *c)
{
    return ioc_pending(&c->io);
}

int hc_write(struct hconn *c, const struct iovec *iov, int n)
{
    return ioc_writev(&c->io, iov, n);
}

void hc_end(struct hconn *c, int keep)
{
    if (c->state != HC_BUSY)
        return;
    c->keep = keep && c->hp.keep_alive;
    c->owner = NULL;
    if (ioc_pending(&c->io) > 0) {
        c->state = HC_FLUSH;
        return;
    }
    after_answer(c);
}

void hc_abort(struct hconn *c)
{
    hc_close(c);
}
