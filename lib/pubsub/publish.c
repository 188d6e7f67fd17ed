/* publish: the PUB (our own, sppub, or nng's), coalescing timer, heartbeat timer, change
 * detection. */
#include "pubsub/publish.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "pubsub/nngclose.h"
#include "pubsub/sppub.h"
#include "util/clock.h"

#include <event2/event.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* Changes closer together than this go out as one message per rank. */
#define COALESCE_US 1000
/* How long closing a socket that could not be set up may take (see nngclose.h). */
#define PUB_CLOSE_MS 500

struct publisher {
    struct sppub *sp; /* ours; NULL: nng's, sock and aio */
    nng_socket sock;
    nng_aio *aio; /* every send's: nng_send would allocate one per call */
    struct event *coalesce, *heartbeat;
    struct timeval heartbeat_tv;
    pub_fill_fn fill;
    void *arg;
    char worker_id[ADMIT_LOAD_WORKER_ID_MAX + 1];
    int64_t heartbeat_ms;
    int64_t last_us; /* monotonic time of the last change-driven publish */
    int64_t seq;
    uint64_t sent;
    unsigned nlast;
    struct admit_load last[PUB_MAX_RANKS]; /* what was last sent, seq and ts zeroed */
};

/* Sends one message and waits for it: PUB0 finishes a send as soon as it has queued the
 * message for each subscriber (dropping a slow one's oldest), so the wait never blocks.
 * What nng_send does, less the aio it allocates and frees each time; the message itself is
 * nng's to allocate, one per send, and to free once the last subscriber has it. */
static int send_msg(struct publisher *p, const char *buf, size_t len)
{
    nng_msg *msg;
    int rv;

    if (p->sp != NULL)
        return sppub_send(p->sp, buf, len) == 0 ? 0 : NNG_EMSGSIZE;
    if ((rv = nng_msg_alloc(&msg, 0)) != 0)
        return (rv);
    if ((rv = nng_msg_append(msg, buf, len)) != 0) {
        nng_msg_free(msg);
        return (rv);
    }
    nng_aio_set_msg(p->aio, msg);
    nng_send_aio(p->sock, p->aio);
    nng_aio_wait(p->aio);
    if ((rv = nng_aio_result(p->aio)) != 0)
        nng_msg_free(msg); /* a failed send leaves the message with the caller */
    return (rv);
}

/* Sends the ranks that changed since last time, or all of them. */
static void publish(struct publisher *p, int all)
{
    struct admit_load msgs[PUB_MAX_RANKS];
    unsigned n = 0;
    int64_t now = clock_wall_ms();
    char buf[ADMIT_LOAD_MSG_MAX];

    p->fill(p->arg, msgs, &n);
    if (n > PUB_MAX_RANKS)
        n = PUB_MAX_RANKS;
    for (unsigned i = 0; i < n; i++) {
        struct admit_load *m = &msgs[i];
        int len, rv;

        memcpy(m->worker_id, p->worker_id, sizeof m->worker_id);
        m->dp_rank = i;
        m->heartbeat_ms = p->heartbeat_ms;
        m->seq = 0;
        m->ts_ms = 0;
        if (!all && i < p->nlast && memcmp(m, &p->last[i], sizeof *m) == 0)
            continue;
        p->last[i] = *m;
        m->seq = ++p->seq;
        m->ts_ms = now;
        len = admit_load_encode(m, buf, sizeof buf);
        if (len < 0)
            continue;
        /* Never blocks: PUB drops the oldest message of a slow subscriber instead. */
        if ((rv = send_msg(p, buf, (size_t) len)) != 0)
            log_debug("load publish failed: %s", nng_strerror(rv));
        else
            p->sent++;
    }
    p->nlast = n;
}

static void on_coalesce(evutil_socket_t fd, short what, void *arg)
{
    struct publisher *p = arg;

    (void) fd;
    (void) what;
    p->last_us = clock_mono_us();
    publish(p, 0);
}

static void on_heartbeat(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    publish(arg, 1);
}

/* "tcp://host:0" + the bound port -> "tcp://host:PORT"; other URLs are kept. */
static void bound_url(nng_listener l, const char *url, char *out, size_t outlen)
{
    int port;
    const char *colon = strrchr(url, ':');

    snprintf(out, outlen, "%s", url);
    if (strncmp(url, "tcp://", 6) != 0 || colon == NULL || colon < url + 6)
        return;
    if (nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
        snprintf(out, outlen, "%.*s:%d", (int) (colon - url), url, port);
}

/* nng's PUB on url; 0, or -1 with err. */
static int open_nng(struct publisher *p, const char *url, char *bound, size_t boundlen, char *err,
                    size_t errlen)
{
    nng_listener l;
    int rv;

    if ((rv = nng_pub0_open(&p->sock)) != 0) {
        snprintf(err, errlen, "cannot open the load publisher: %s", nng_strerror(rv));
        return -1;
    }
    if ((rv = nng_listen(p->sock, url, &l, 0)) != 0) {
        snprintf(err, errlen, "cannot publish load on %s: %s", url, nng_strerror(rv));
        nngc_close(p->sock, PUB_CLOSE_MS);
        return -1;
    }
    if ((rv = nng_aio_alloc(&p->aio, NULL, NULL)) != 0)
        fatal("cannot allocate the load publisher's aio: %s", nng_strerror(rv));
    nng_aio_set_timeout(p->aio, NNG_DURATION_ZERO); /* never wait, as NNG_FLAG_NONBLOCK */
    bound_url(l, url, bound, boundlen);
    return 0;
}

struct publisher *pub_new(struct event_base *base, const char *url, enum pub_via via,
                          const char *worker_id, unsigned heartbeat_ms, pub_fill_fn fill, void *arg,
                          char *bound, size_t boundlen, char *err, size_t errlen)
{
    struct publisher *p = xcalloc(1, sizeof *p);

    if (via == PUB_NNG ? open_nng(p, url, bound, boundlen, err, errlen) != 0
                       : (p->sp = sppub_new(base, url, bound, boundlen, err, errlen)) == NULL) {
        free(p);
        return NULL;
    }
    snprintf(p->worker_id, sizeof p->worker_id, "%s", worker_id);
    p->fill = fill;
    p->arg = arg;
    p->heartbeat_ms = heartbeat_ms;
    p->heartbeat_tv.tv_sec = heartbeat_ms / 1000;
    p->heartbeat_tv.tv_usec = (heartbeat_ms % 1000) * 1000;
    p->coalesce = evtimer_new(base, on_coalesce, p);
    p->heartbeat = event_new(base, -1, EV_PERSIST, on_heartbeat, p);
    if (p->coalesce == NULL || p->heartbeat == NULL)
        fatal("cannot create the publisher's timers");
    event_add(p->heartbeat, &p->heartbeat_tv);
    return p;
}

/* Leading and trailing edge: a change after a quiet millisecond goes out at once; changes
 * that follow within the millisecond are coalesced into one message when it ends. */
void pub_changed(struct publisher *p)
{
    int64_t now, since;

    if (p == NULL || evtimer_pending(p->coalesce, NULL))
        return;
    now = clock_mono_us();
    since = now - p->last_us;
    if (since >= COALESCE_US) {
        p->last_us = now;
        publish(p, 0);
    } else {
        struct timeval tv = {0, (suseconds_t) (COALESCE_US - since)};
        evtimer_add(p->coalesce, &tv);
    }
}

void pub_now(struct publisher *p)
{
    if (p != NULL)
        publish(p, 1);
}

void pub_set_queue(struct publisher *p, unsigned n)
{
    int rv;

    if (p == NULL)
        return;
    if (p->sp != NULL) {
        sppub_set_queue(p->sp, n);
        return;
    }
    if ((rv = nng_socket_set_int(p->sock, NNG_OPT_SENDBUF, (int) n)) != 0)
        log_warn("load publisher: cannot set its send buffer to %u messages: %s", n,
                 nng_strerror(rv));
}

int pub_send_raw(struct publisher *p, const void *msg, size_t len)
{
    int rv;

    if (p == NULL || len > ADMIT_LOAD_MSG_MAX)
        return -1;
    if ((rv = send_msg(p, msg, len)) != 0) {
        log_debug("publish failed: %s", nng_strerror(rv));
        return -1;
    }
    return 0;
}

int64_t pub_seq(const struct publisher *p)
{
    return p ? p->seq : 0;
}

uint64_t pub_sent(const struct publisher *p)
{
    return p ? p->sent : 0;
}

int pub_get_stats(const struct publisher *p, struct sppub_stats *out)
{
    if (p == NULL || p->sp == NULL)
        return -1;
    sppub_get_stats(p->sp, out);
    return 0;
}

void pub_free(struct publisher *p)
{
    if (p == NULL)
        return;
    event_free(p->coalesce);
    event_free(p->heartbeat);
    if (p->sp != NULL) {
        sppub_free(p->sp); /* ours closes at once */
        free(p);
        return;
    }
    nng_aio_free(p->aio); /* idle: every send was waited for */
    /* nng's socket is not closed: see nngclose.h, "at exit". */
    free(p);
}
