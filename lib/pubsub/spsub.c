/* spsub: one SP SUB0 connection on libevent, with nng's reconnect (see spsub.h).
 *
 * A subscription is in one of four states, and owns at most one descriptor:
 *
 *   WAIT        no descriptor; the timer is the backoff before the next attempt
 *   CONNECTING  a non-blocking connect in flight; `wr` waits for it, the timer is the deadline
 *   HELLO       connected; our header goes out (`wr` again if the kernel took part of it),
 *               `rd` reads the peer's; the timer is still the deadline
 *   OPEN        the peer's header was accepted; `rd` reads messages; no timer
 *
 * Every failure goes through drop(), which closes the descriptor, deletes both of its events
 * and arms the backoff: so a descriptor is open exactly when the state is not WAIT, and no
 * event of a closed descriptor is ever pending. */
#include "pubsub/spsub.h"
#include "admit/load.h"
#include "util/log.h"
#include "util/netaddr.h"
#include "wire/spframe.h"
#include "wire/kvmsg.h"
#include "util/xmalloc.h"
#include "pubsub/spaddr.h"
#include "pubsub/sppoll.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* One message at its largest with its framing, and one byte more: after every whole unit is
 * taken the rest is shorter than prefix + max (wire/spframe.h), so a read always has room. */
#define SPSUB_BUF (SPFRAME_PREFIX_MAX + ADMIT_LOAD_MSG_MAX + 1)

enum sp_state { SP_WAIT, SP_CONNECTING, SP_HELLO, SP_OPEN };

struct spsub {
    struct event_base *base;
    char *url;
    spsub_cb cb;
    spsub_cb events;           /* the kv_events topic's; NULL: filtered as any other */
    spsub_lost_cb lost;        /* NULL: nobody asked */
    spsub_lost_cb unreachable; /* NULL: nobody asked */
    void *arg;
    struct sockaddr_storage sa;
    socklen_t salen;
    enum spframe_mode mode;
    enum sp_state state;
    int fd;                     /* -1 in SP_WAIT */
    struct event rd, wr, timer; /* rd, wr: assigned to fd for each connection */
    struct sppoll *poll;        /* non-NULL: fd is read in its passes, not by rd */
    struct sppoll_reg reg;
    unsigned min_ms, max_ms, handshake_ms;
    unsigned backoff_ms;     /* what the next wait is drawn from */
    uint64_t rng;            /* the jitter's state */
    int started;             /* a connect was started before: the next is a reconnect */
    int delivered;           /* this session passed a message on (resets the backoff) */
    int ever_open;           /* a session was open once: unreachable is no longer told */
    int told_unreachable;    /* ... or it was told already */
    enum log_level logged;   /* the gravest failure logged since the last message */
    int in_cb, dead;         /* spsub_free from the callback: freed when it returns */
    size_t hello_sent, have; /* bytes of our header sent; bytes in buf */
    struct spframe fr;
    struct spsub_stats st;
    unsigned char hello[SPFRAME_HELLO_LEN];
    unsigned char buf[SPSUB_BUF];
};

/* "tcp://A.B.C.D:P", "tcp://[V6]:P" or "ipc://PATH" into s's address; 0, or -1 with err. */
static int parse_url(const char *url, struct sockaddr_storage *sa, socklen_t *salen,
                     enum spframe_mode *mode, char *err, size_t errlen)
{
    struct hostport hp;
    char why[160];

    memset(sa, 0, sizeof *sa);
    if (strncmp(url, "ipc://", 6) == 0) {
        if (spaddr_ipc(url, sa, salen, err, errlen) != 0)
            return -1;
        *mode = SPFRAME_IPC;
        return 0;
    }
    if (strncmp(url, "tcp://", 6) != 0) {
        snprintf(err, errlen, "only tcp:// and ipc:// (the rest is nng's)");
        return -1;
    }
    /* ":P" and "*:P" are a listener's wildcards, never a peer to dial. */
    if (hostport_parse(url + 6, &hp, why, sizeof why) != 0 || url[6] == ':' || url[6] == '*' ||
        hp.port == 0) {
        snprintf(err, errlen, "not tcp://HOST:PORT with a port from 1 to 65535");
        return -1;
    }
    *mode = SPFRAME_TCP;
    if (url[6] == '[') {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) sa;

        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t) hp.port);
        *salen = (socklen_t) sizeof *s6;
        if (inet_pton(AF_INET6, hp.host, &s6->sin6_addr) == 1)
            return 0;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *) sa;

        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t) hp.port);
        *salen = (socklen_t) sizeof *s4;
        if (inet_pton(AF_INET, hp.host, &s4->sin_addr) == 1)
            return 0;
    }
    snprintf(err, errlen, "the host is not a numeric address (names are resolved by nng)");
    return -1;
}

int spsub_supported(const char *url, char *err, size_t errlen)
{
    struct sockaddr_storage sa;
    socklen_t len;
    enum spframe_mode mode;
    char why[160];

    if (parse_url(url, &sa, &len, &mode, why, sizeof why) == 0)
        return 1;
    if (err != NULL)
        snprintf(err, errlen, "%s", why);
    return 0;
}

/* The next wait: uniform in [backoff/2, backoff), then the backoff doubles up to its cap. */
static unsigned next_wait_ms(struct spsub *s)
{
    unsigned b = s->backoff_ms, half = b / 2;

    s->rng = s->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    s->backoff_ms = b >= s->max_ms / 2 ? s->max_ms : 2 * b;
    return half + (half > 0 ? (unsigned) ((s->rng >> 33) % half) : 0);
}

static void arm_timer(struct spsub *s, unsigned ms)
{
    struct timeval tv = {(time_t) (ms / 1000), (suseconds_t) (ms % 1000) * 1000};

    evtimer_add(&s->timer, &tv);
}

static void on_read(evutil_socket_t fd, short what, void *arg);

/* A pass of the poller found the descriptor readable. */
static void on_ready(void *arg)
{
    struct spsub *s = arg;

    on_read(s->fd, EV_READ, s);
}

/* Reads fd from now on, by the poller or by an event of its own; 0, or -1 with errno. */
static int watch_read(struct spsub *s)
{
    if (s->poll != NULL)
        return sppoll_add(s->poll, &s->reg, s->fd);
    if (event_add(&s->rd, NULL) == 0)
        return 0;
    errno = ENOMEM; /* libevent's own failure: an allocation */
    return -1;
}

static void unwatch_read(struct spsub *s)
{
    if (s->poll != NULL)
        sppoll_del(s->poll, &s->reg);
    event_del(&s->rd);
}

/* Ends the connection (if any) and waits to try again. A failure is logged at the level
 * given (a peer that breaks the protocol: warn; a session lost: info; a connect that fails:
 * debug, since a router reports a silent worker as stale anyway) when nothing as grave was
 * logged since the last message, else at debug: 1,000 publishers that are not up yet, or
 * one that keeps failing, do not flood the log, and a refusal does not hide a bad peer. */
static void drop(struct spsub *s, enum log_level first, const char *why)
{
    unsigned ms;
    int was_open = s->state == SP_OPEN;

    if (s->fd >= 0) {
        unwatch_read(s);
        event_del(&s->wr);
        close(s->fd);
        s->fd = -1;
    }
    evtimer_del(&s->timer);
    s->st.connected = 0;
    s->state = SP_WAIT;
    ms = next_wait_ms(s);
    if (first >= s->logged)
        first = LOG_DEBUG;
    else
        s->logged = first;
    if (log_enabled(first))
        log_msg(first, "load subscriber %s: %s; reconnecting in %u ms", s->url, why, ms);
    arm_timer(s, ms);
    /* Last, with the subscription whole again: a router stops routing to the worker at once
     * rather than after its missed heartbeats. */
    if (was_open && s->lost != NULL)
        s->lost(s->arg, why);
    else if (!s->ever_open && !s->told_unreachable && s->unreachable != NULL) {
        /* Once, and only before the first session: a publisher down at start is said at
         * once, while the log above keeps a thousand refusals at debug. */
        s->told_unreachable = 1;
        s->unreachable(s->arg, why);
    }
}

static void drop_errno(struct spsub *s, enum log_level first, const char *what, int err)
{
    char why[160];

    snprintf(why, sizeof why, "%s: %s", what, strerror(err));
    drop(s, first, why);
}

/* Our header: it goes out whole at once on any fresh connection, but a kernel that takes
 * part of it gets the rest when the socket is writable again. */
static void send_hello(struct spsub *s)
{
    while (s->hello_sent < sizeof s->hello) {
        ssize_t n =
            send(s->fd, s->hello + s->hello_sent, sizeof s->hello - s->hello_sent, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_add(&s->wr, NULL);
            return;
        }
        if (n < 0) {
            drop_errno(s, LOG_INFO, "sending the SP header", errno);
            return;
        }
        s->hello_sent += (size_t) n;
    }
}

/* The connect completed: both headers are exchanged from here on, within the deadline. */
static void connected(struct spsub *s)
{
    s->state = SP_HELLO;
    s->hello_sent = 0;
    s->have = 0;
    s->delivered = 0;
    spframe_init(&s->fr, s->mode, SPFRAME_PROTO_PUB0, ADMIT_LOAD_MSG_MAX);
    if (watch_read(s) != 0) {
        drop_errno(s, LOG_WARN, "watching the connection", errno);
        return;
    }
    send_hello(s);
}

/* One unit that is not a message: the peer's header, or why the stream cannot go on.
 * Returns 0 to read on, -1 when the connection was dropped. */
static int take_other(struct spsub *s, enum spframe_result r, const struct spframe_unit *u)
{
    char why[160];

    switch (r) {
    case SPFRAME_HELLO:
        s->state = SP_OPEN;
        s->ever_open = 1;
        s->st.sessions++;
        s->st.connected = 1;
        evtimer_del(&s->timer);
        return 0;
    case SPFRAME_TOO_LONG:
        s->st.oversized++;
        snprintf(why, sizeof why, "a message of %llu bytes (at most %d)",
                 (unsigned long long) u->announced, ADMIT_LOAD_MSG_MAX);
        drop(s, LOG_WARN, why);
        return -1;
    case SPFRAME_WRONG_PEER:
        s->st.bad_headers++;
        snprintf(why, sizeof why, "the peer speaks SP protocol 0x%04x, not PUB0", u->proto);
        drop(s, LOG_WARN, why);
        return -1;
    default:
        s->st.bad_headers++;
        drop(s, LOG_WARN, spframe_result_name(r));
        return -1;
    }
}

/* A message: the load topic's go to the callback, as SUB's subscription would let them, and
 * the kv_events topic's to its own when one was set. */
static void take_message(struct spsub *s, const struct spframe_unit *u)
{
    static const char topic[] = ADMIT_LOAD_TOPIC " ";
    spsub_cb cb = s->cb;

    if (u->len >= sizeof topic - 1 && memcmp(u->body, topic, sizeof topic - 1) == 0) {
        s->st.messages++;
        s->st.bytes += u->len;
    } else if (s->events != NULL && u->len >= KVM_TOPIC_LEN &&
               memcmp(u->body, KVM_TOPIC, KVM_TOPIC_LEN) == 0) {
        s->st.events++;
        cb = s->events;
    } else {
        s->st.filtered++;
        return;
    }
    if (!s->delivered) {
        s->delivered = 1;
        s->logged = LOG_DEBUG;
        s->backoff_ms = s->min_ms;
    }
    s->in_cb = 1;
    cb(s->arg, u->body, u->len);
    s->in_cb = 0;
}

/* Takes every whole unit of the buffer and keeps the rest at its start. Returns 0, or -1
 * when the connection was dropped or the callback freed the subscription. */
static int parse(struct spsub *s)
{
    size_t off = 0;

    for (;;) {
        struct spframe_unit u;
        enum spframe_result r = spframe_next(&s->fr, s->buf + off, s->have - off, &u);

        if (r == SPFRAME_NEED)
            break;
        if (r == SPFRAME_MESSAGE)
            take_message(s, &u);
        else if (take_other(s, r, &u) != 0)
            return -1;
        if (s->dead)
            return -1;
        off += u.used;
    }
    if (off > 0 && off < s->have)
        memmove(s->buf, s->buf + off, s->have - off);
    s->have -= off;
    return 0;
}

static void destroy(struct spsub *s)
{
    if (s->fd >= 0) {
        unwatch_read(s);
        event_del(&s->wr);
        close(s->fd);
    }
    evtimer_del(&s->timer);
    free(s->url);
    free(s);
}

/* Reads what the kernel has, within the per-wakeup budget (see spsub.h). */
static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct spsub *s = arg;

    (void) what;
    for (int i = 0; i < SPSUB_READS_PER_WAKEUP; i++) {
        size_t room = sizeof s->buf - s->have;
        ssize_t n = recv(fd, s->buf + s->have, room, 0);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0) {
            drop_errno(s, LOG_INFO, "read", errno);
            return;
        }
        if (n == 0) {
            drop(s, LOG_INFO,
                 s->state == SP_OPEN ? "the publisher closed the connection"
                                     : "closed during the handshake");
            return;
        }
        s->have += (size_t) n;
        if (parse(s) != 0) {
            if (s->dead)
                destroy(s);
            return;
        }
        if ((size_t) n < room)
            return; /* a short read: the kernel had no more */
    }
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    struct spsub *s = arg;
    int err = 0;
    socklen_t len = sizeof err;

    (void) what;
    if (s->state != SP_CONNECTING) {
        send_hello(s);
        return;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err != 0)
        drop_errno(s, LOG_DEBUG, "connect", err);
    else
        connected(s);
}

static void start_connect(struct spsub *s)
{
    int one = 1;

    if (s->started)
        s->st.reconnects++;
    s->started = 1;
    s->fd = socket(s->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->fd < 0) {
        drop_errno(s, LOG_WARN, "socket", errno);
        return;
    }
    /* A peer that vanished without a word (power, partition) is noticed in the end. */
    if (s->mode == SPFRAME_TCP)
        setsockopt(s->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    event_assign(&s->rd, s->base, s->fd, EV_READ | EV_PERSIST, on_read, s);
    event_assign(&s->wr, s->base, s->fd, EV_WRITE, on_write, s);
    arm_timer(s, s->handshake_ms);
    if (connect(s->fd, (struct sockaddr *) &s->sa, s->salen) == 0) {
        connected(s);
        return;
    }
    if (errno == EINPROGRESS || errno == EINTR) {
        s->state = SP_CONNECTING;
        event_add(&s->wr, NULL);
        return;
    }
    /* A unix socket's full backlog says EAGAIN: a refusal like any other. */
    drop_errno(s, LOG_DEBUG, "connect", errno);
}

/* The backoff ended (WAIT), or the deadline passed (CONNECTING, HELLO). */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct spsub *s = arg;

    (void) fd;
    (void) what;
    if (s->state == SP_WAIT) {
        start_connect(s);
        return;
    }
    s->st.timeouts++;
    drop(s, LOG_WARN, s->state == SP_CONNECTING ? "connect timed out" : "handshake timed out");
}

struct spsub *spsub_new(struct event_base *base, const char *url, spsub_cb cb, void *arg, char *err,
                        size_t errlen)
{
    struct spsub *s = xcalloc(1, sizeof *s);
    char why[160];

    if (parse_url(url, &s->sa, &s->salen, &s->mode, why, sizeof why) != 0) {
        snprintf(err, errlen, "cannot subscribe to %s: %s", url, why);
        free(s);
        return NULL;
    }
    s->base = base;
    s->url = xstrdup(url);
    s->cb = cb;
    s->arg = arg;
    s->fd = -1;
    s->reg.fd = -1;
    s->reg.cb = on_ready;
    s->reg.arg = s;
    s->state = SP_WAIT;
    s->min_ms = SPSUB_RECONNECT_MIN_MS;
    s->max_ms = SPSUB_RECONNECT_MAX_MS;
    s->handshake_ms = SPSUB_HANDSHAKE_MS;
    s->backoff_ms = s->min_ms;
    s->logged = LOG_DEBUG;
    s->rng = (uint64_t) (uintptr_t) s ^ (uint64_t) time(NULL);
    spframe_hello(SPFRAME_PROTO_SUB0, s->hello);
    /* The first connect starts from the loop, not in here: the caller can set the timing
     * first, and nothing of the connection happens before the caller has s. */
    evtimer_assign(&s->timer, base, on_timer, s);
    arm_timer(s, 0);
    return s;
}

void spsub_set_events(struct spsub *s, spsub_cb cb)
{
    s->events = cb;
}

void spsub_set_lost(struct spsub *s, spsub_lost_cb cb)
{
    s->lost = cb;
}

void spsub_set_unreachable(struct spsub *s, spsub_lost_cb cb)
{
    s->unreachable = cb;
}

void spsub_set_timing(struct spsub *s, const struct spsub_timing *t)
{
    if (t->reconnect_min_ms > 0)
        s->min_ms = t->reconnect_min_ms;
    if (t->reconnect_max_ms > 0)
        s->max_ms = t->reconnect_max_ms;
    if (s->max_ms < s->min_ms)
        s->max_ms = s->min_ms;
    if (t->handshake_ms > 0)
        s->handshake_ms = t->handshake_ms;
    if (s->backoff_ms < s->min_ms || s->backoff_ms > s->max_ms)
        s->backoff_ms = s->min_ms;
}

void spsub_set_poll(struct spsub *s, struct sppoll *p)
{
    int watching = s->fd >= 0 && (s->state == SP_HELLO || s->state == SP_OPEN);

    if (watching)
        unwatch_read(s);
    s->poll = p;
    if (watching && watch_read(s) != 0)
        drop_errno(s, LOG_WARN, "watching the connection", errno);
}

void spsub_get_stats(const struct spsub *s, struct spsub_stats *out)
{
    *out = s->st;
}

const char *spsub_url(const struct spsub *s)
{
    return s->url;
}

void spsub_free(struct spsub *s)
{
    if (s == NULL)
        return;
    if (s->in_cb) {
        s->dead = 1; /* on_read frees it once the callback returns */
        return;
    }
    destroy(s);
}
