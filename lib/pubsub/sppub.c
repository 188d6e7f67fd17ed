/* sppub: an SP PUB0 listener on libevent (see sppub.h).
 *
 * A subscriber (struct peer) owns one descriptor, its three events and, while it is behind,
 * a ring of whole framed messages. It is HELLO until its header is taken, then OPEN; every
 * failure goes through peer_drop(), the one path that closes the descriptor, deletes the
 * events and frees the peer, so a peer in the list always has a live descriptor.
 *
 * The queue holds framed bytes (prefix and body) so that a write never has to rebuild what
 * part of a message went out: `qoff` bytes of the head are written, and a head that was
 * started is never dropped, since the stream would lose its framing. */
#include "pubsub/sppub.h"
#include "util/log.h"
#include "util/netaddr.h"
#include "wire/spframe.h"
#include "util/xmalloc.h"
#include "net/acceptor.h"
#include "pubsub/spaddr.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

/* A framed message waiting for one subscriber: an allocation of its own length (only a peer
 * that is behind queues, and kv_events messages are mostly far shorter than the maximum). */
struct qmsg {
    size_t len;
    unsigned char b[];
};

struct peer {
    struct sppub *pub;
    struct peer *prev, *next;
    int fd, open;
    struct event rd, wr, timer;
    size_t hello_sent, hello_have; /* bytes of our header sent, of theirs read */
    unsigned char hello_in[SPFRAME_HELLO_LEN];
    struct qmsg **q; /* a ring of qcap slots (up to the publisher's queue length), made the
                        first time the peer falls behind and doubled as it falls further */
    unsigned qcap, qhead, qlen;
    size_t qoff; /* bytes of the head message written */
};

struct sppub {
    struct event_base *base;
    int lfd;
    struct acceptor *acc; /* accepts on lfd (and owns it): pauses when descriptors run out */
    enum spframe_mode mode;
    char path[sizeof(((struct sockaddr_un *) 0)->sun_path)]; /* ipc: removed at free */
    char url[300];
    struct peer *peers;
    unsigned npeers;       /* in the list, open or not */
    unsigned handshake_ms; /* SPPUB_HANDSHAKE_MS unless a test says otherwise */
    unsigned queue;        /* messages queued per subscriber at most: SPPUB_QUEUE or more */
    int bound;             /* the address is bound (ipc: the socket file is ours) */
    struct sppub_stats st;
    unsigned char hello[SPFRAME_HELLO_LEN];
};

static void peer_drop(struct peer *c, enum log_level level, const char *why)
{
    struct sppub *p = c->pub;

    if (log_enabled(level))
        log_msg(level, "load publisher %s: subscriber dropped: %s", p->url, why);
    if (c->open)
        p->st.subscribers--;
    p->npeers--;
    event_del(&c->rd);
    event_del(&c->wr);
    event_del(&c->timer);
    close(c->fd);
    acc_closed(p->acc);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        p->peers = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    for (unsigned i = 0; i < c->qlen; i++)
        free(c->q[(c->qhead + i) % c->qcap]);
    free(c->q);
    free(c);
}

static void peer_drop_errno(struct peer *c, const char *what, int err)
{
    char why[160];

    snprintf(why, sizeof why, "%s: %s", what, strerror(err));
    peer_drop(c, LOG_INFO, why);
}

/* Writes our header's rest, then the queue, as far as the kernel takes; the write event is
 * armed exactly while something is left. Returns 0, or -1 when the peer was dropped. */
static int peer_flush(struct peer *c)
{
    while (c->hello_sent < SPFRAME_HELLO_LEN || c->qlen > 0) {
        struct iovec iov[SPPUB_IOV + 1];
        int n = 0;
        ssize_t w;

        if (c->hello_sent < SPFRAME_HELLO_LEN) {
            iov[n].iov_base = c->pub->hello + c->hello_sent;
            iov[n++].iov_len = SPFRAME_HELLO_LEN - c->hello_sent;
        }
        for (unsigned i = 0; i < c->qlen && i < SPPUB_IOV; i++) {
            struct qmsg *m = c->q[(c->qhead + i) % c->qcap];
            size_t skip = i == 0 ? c->qoff : 0;

            iov[n].iov_base = m->b + skip;
            iov[n++].iov_len = m->len - skip;
        }
        /* sendmsg, not writev: a subscriber that reset must not raise SIGPIPE in a process
         * that did not ignore it (a bench, a test). */
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t) n};

        w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_add(&c->wr, NULL);
            return 0;
        }
        if (w < 0) {
            peer_drop_errno(c, "write", errno);
            return -1;
        }
        size_t left = (size_t) w;

        if (c->hello_sent < SPFRAME_HELLO_LEN) {
            size_t t = SPFRAME_HELLO_LEN - c->hello_sent;

            t = t < left ? t : left;
            c->hello_sent += t;
            left -= t;
        }
        while (left > 0 && c->qlen > 0) {
            struct qmsg *m = c->q[c->qhead];
            size_t t = m->len - c->qoff;

            if (left < t) {
                c->qoff += left;
                left = 0;
                break;
            }
            left -= t;
            c->qoff = 0;
            free(m);
            c->qhead = (c->qhead + 1) % c->qcap;
            c->qlen--;
        }
    }
    event_del(&c->wr);
    return 0;
}

/* Puts a framed message at the queue's tail; when it is full, the oldest message not yet
 * started makes room (the head, unless part of it went out: then the one after it). */
static void peer_queue(struct peer *c, const unsigned char *pre, size_t plen, const void *msg,
                       size_t len)
{
    struct qmsg *m;

    if (c->qlen == c->qcap && c->qcap < c->pub->queue) {
        unsigned cap = c->qcap ? c->qcap * 2 : SPPUB_QUEUE;
        struct qmsg **q;

        cap = cap < c->pub->queue ? cap : c->pub->queue;
        q = xmalloc(cap * sizeof *q);
        for (unsigned i = 0; i < c->qlen; i++)
            q[i] = c->q[(c->qhead + i) % c->qcap];
        free(c->q);
        c->q = q;
        c->qcap = cap;
        c->qhead = 0;
    }
    if (c->qlen == c->qcap) {
        unsigned second = (c->qhead + 1) % c->qcap;

        /* A started head moves over the one after it, which is the one dropped. */
        if (c->qoff > 0) {
            free(c->q[second]);
            c->q[second] = c->q[c->qhead];
        } else {
            free(c->q[c->qhead]);
        }
        c->qhead = second;
        c->qlen--;
        c->pub->st.dropped++;
    }
    m = xmalloc(sizeof *m + plen + len);
    c->q[(c->qhead + c->qlen) % c->qcap] = m;
    memcpy(m->b, pre, plen);
    memcpy(m->b + plen, msg, len);
    m->len = plen + len;
    c->qlen++;
}

/* Sends to one open peer: at once when nothing is waiting before it, else behind the rest. */
static void peer_send(struct peer *c, const unsigned char *pre, size_t plen, const void *msg,
                      size_t len)
{
    struct iovec iov[2] = {{(void *) pre, plen}, {(void *) msg, len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t w;

    if (c->qlen > 0 || c->hello_sent < SPFRAME_HELLO_LEN) {
        peer_queue(c, pre, plen, msg, len);
        return;
    }
    do
        w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    if (w == (ssize_t) (plen + len))
        return;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        peer_drop_errno(c, "send", errno);
        return;
    }
    peer_queue(c, pre, plen, msg, len);
    c->qoff = w > 0 ? (size_t) w : 0;
    event_add(&c->wr, NULL);
}

int sppub_send(struct sppub *p, const void *msg, size_t len)
{
    unsigned char pre[SPFRAME_PREFIX_MAX];
    size_t plen;

    if (len > SPPUB_MSG_MAX)
        return -1;
    plen = spframe_prefix(p->mode, len, pre);
    for (struct peer *c = p->peers, *next; c != NULL; c = next) {
        next = c->next; /* c may be dropped */
        if (c->open)
            peer_send(c, pre, plen, msg, len);
    }
    return 0;
}

/* Readable: the header while HELLO; after it, anything at all ends the peer. */
static void on_peer_read(evutil_socket_t fd, short what, void *arg)
{
    struct peer *c = arg;
    unsigned char junk[64];
    ssize_t n;

    (void) what;
    if (c->open) {
        n = recv(fd, junk, sizeof junk, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0)
            peer_drop_errno(c, "read", errno);
        else if (n == 0)
            peer_drop(c, LOG_INFO, "the subscriber closed the connection");
        else {
            c->pub->st.bad_peers++;
            peer_drop(c, LOG_WARN, "the subscriber sent data (a SUB0 peer never does)");
        }
        return;
    }
    n = recv(fd, c->hello_in + c->hello_have, SPFRAME_HELLO_LEN - c->hello_have, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        if (n < 0)
            peer_drop_errno(c, "read", errno);
        else
            peer_drop(c, LOG_DEBUG, "closed during the handshake");
        return;
    }
    c->hello_have += (size_t) n;
    if (c->hello_have < SPFRAME_HELLO_LEN)
        return;

    struct spframe fr;
    struct spframe_unit u;
    enum spframe_result r;

    spframe_init(&fr, c->pub->mode, SPFRAME_PROTO_SUB0, SPPUB_MSG_MAX);
    if ((r = spframe_next(&fr, c->hello_in, SPFRAME_HELLO_LEN, &u)) != SPFRAME_HELLO) {
        char why[160];

        if (r == SPFRAME_WRONG_PEER)
            snprintf(why, sizeof why, "the peer speaks SP protocol 0x%04x, not SUB0", u.proto);
        else
            snprintf(why, sizeof why, "%s", spframe_result_name(r));
        c->pub->st.bad_peers++;
        peer_drop(c, LOG_WARN, why);
        return;
    }
    event_del(&c->timer);
    c->open = 1;
    c->pub->st.subscribers++;
}

static void on_peer_write(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    peer_flush(arg);
}

static void on_peer_timer(evutil_socket_t fd, short what, void *arg)
{
    struct peer *c = arg;

    (void) fd;
    (void) what;
    c->pub->st.bad_peers++;
    peer_drop(c, LOG_WARN, "no SP header within the handshake's time");
}

static void peer_new(struct sppub *p, int fd)
{
    struct peer *c = xcalloc(1, sizeof *c);
    struct timeval tv = {p->handshake_ms / 1000, (suseconds_t) (p->handshake_ms % 1000) * 1000};
    int one = 1;

    if (p->mode == SPFRAME_TCP) {
        /* Small messages go out as they are sent; a router that vanished is noticed. */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    }
    c->pub = p;
    c->fd = fd;
    c->next = p->peers;
    if (p->peers != NULL)
        p->peers->prev = c;
    p->peers = c;
    p->npeers++;
    p->st.accepted++;
    event_assign(&c->rd, p->base, fd, EV_READ | EV_PERSIST, on_peer_read, c);
    event_assign(&c->wr, p->base, fd, EV_WRITE, on_peer_write, c);
    evtimer_assign(&c->timer, p->base, on_peer_timer, c);
    event_add(&c->rd, NULL);
    evtimer_add(&c->timer, &tv);
    peer_flush(c); /* our header, at once: SP peers do not wait for each other's */
}

static void on_accept(void *arg, int fd, const struct sockaddr *sa, socklen_t salen)
{
    struct sppub *p = arg;

    (void) sa;
    (void) salen;
    if (p->npeers >= SPPUB_PEERS_MAX) {
        if (p->st.refused++ == 0)
            log_warn("load publisher %s: %d subscribers already: closing new ones", p->url,
                     SPPUB_PEERS_MAX);
        close(fd);
        acc_closed(p->acc);
        return;
    }
    peer_new(p, fd);
}

/* The address of url and its mode; the ipc path into p->path. 0, or -1 with err. */
static int listen_addr(struct sppub *p, const char *url, struct sockaddr_storage *sa,
                       socklen_t *salen, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    struct hostport hp;
    char port[8], why[160];
    int rv;

    memset(sa, 0, sizeof *sa);
    if (strncmp(url, "ipc://", 6) == 0) {
        if (spaddr_ipc(url, sa, salen, err, errlen) != 0)
            return -1;
        memcpy(p->path, ((struct sockaddr_un *) sa)->sun_path, sizeof p->path);
        p->mode = SPFRAME_IPC;
        return 0;
    }
    p->mode = SPFRAME_TCP;
    if (strncmp(url, "tcp://", 6) != 0) {
        snprintf(err, errlen, "only tcp:// and ipc://");
        return -1;
    }
    /* "*:P" is nng's spelling of every address; hostport_parse takes ":P" for it. */
    if (hostport_parse(url + 6 + (url[6] == '*'), &hp, why, sizeof why) != 0) {
        snprintf(err, errlen, "not tcp://HOST:PORT: %.150s", why);
        return -1;
    }
    snprintf(port, sizeof port, "%d", hp.port);
    rv = getaddrinfo(url[6] == '*' || url[6] == ':' ? NULL : hp.host, port, &hints, &res);
    if (rv != 0 || res == NULL) {
        snprintf(err, errlen, "cannot resolve %.100s: %s", hp.host,
                 rv != 0 ? gai_strerror(rv) : "no address");
        return -1;
    }
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    *salen = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* An ipc path in use: a socket file no one listens on (a publisher that died) is removed
 * and bound again, as nng does; one that answers belongs to someone. */
static int bind_ipc_again(struct sppub *p, const struct sockaddr_storage *sa, socklen_t salen)
{
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), stale;

    if (probe < 0)
        return -1;
    stale = connect(probe, (const struct sockaddr *) sa, salen) != 0 && errno == ECONNREFUSED;
    close(probe);
    if (!stale) {
        errno = EADDRINUSE;
        return -1;
    }
    unlink(p->path);
    return bind(p->lfd, (const struct sockaddr *) sa, salen);
}

/* url with the port the kernel chose in place of a 0 (tcp); the url itself otherwise. */
static void bound_url(const struct sppub *p, const char *url, char *out, size_t outlen)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    const char *colon = strrchr(url, ':');
    int port = 0;

    snprintf(out, outlen, "%s", url);
    if (p->mode != SPFRAME_TCP || colon == NULL || colon < url + 6 ||
        getsockname(p->lfd, (struct sockaddr *) &ss, &len) != 0)
        return;
    if (ss.ss_family == AF_INET)
        port = ntohs(((struct sockaddr_in *) &ss)->sin_port);
    else if (ss.ss_family == AF_INET6)
        port = ntohs(((struct sockaddr_in6 *) &ss)->sin6_port);
    snprintf(out, outlen, "%.*s:%d", (int) (colon - url), url, port);
}

struct sppub *sppub_new(struct event_base *base, const char *url, char *bound, size_t boundlen,
                        char *err, size_t errlen)
{
    struct sppub *p = xcalloc(1, sizeof *p);
    struct sockaddr_storage sa;
    socklen_t salen;
    char why[200], name[sizeof p->url + 20];
    int one = 1;

    p->base = base;
    p->lfd = -1;
    p->handshake_ms = SPPUB_HANDSHAKE_MS;
    p->queue = SPPUB_QUEUE;
    snprintf(p->url, sizeof p->url, "%s", url);
    if (listen_addr(p, url, &sa, &salen, why, sizeof why) != 0)
        goto fail;
    p->lfd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p->lfd < 0)
        goto fail_errno;
    if (p->mode == SPFRAME_TCP)
        setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(p->lfd, (struct sockaddr *) &sa, salen) != 0 &&
        !(p->mode == SPFRAME_IPC && errno == EADDRINUSE && bind_ipc_again(p, &sa, salen) == 0))
        goto fail_errno;
    p->bound = 1;
    if (listen(p->lfd, 128) != 0)
        goto fail_errno;
    spframe_hello(SPFRAME_PROTO_PUB0, p->hello);
    snprintf(name, sizeof name, "load publisher %s", p->url);
    p->acc = acc_new(base, p->lfd, name, on_accept, p, NULL);
    bound_url(p, url, bound, boundlen);
    return p;
fail_errno:
    snprintf(why, sizeof why, "%s", strerror(errno));
fail:
    snprintf(err, errlen, "cannot publish load on %s: %s", url, why);
    if (p->lfd >= 0)
        close(p->lfd);
    if (p->mode == SPFRAME_IPC && p->bound)
        unlink(p->path);
    free(p);
    return NULL;
}

void sppub_set_queue(struct sppub *p, unsigned n)
{
    /* peers' rings only grow up to it: one longer than a lowered bound empties as it drains */
    p->queue = n < SPPUB_QUEUE ? SPPUB_QUEUE : n > SPPUB_QUEUE_MAX ? SPPUB_QUEUE_MAX : n;
}

void sppub_set_handshake_ms(struct sppub *p, unsigned ms)
{
    p->handshake_ms = ms;
}

void sppub_get_stats(const struct sppub *p, struct sppub_stats *out)
{
    *out = p->st;
}

void sppub_free(struct sppub *p)
{
    if (p == NULL)
        return;
    while (p->peers != NULL)
        peer_drop(p->peers, LOG_DEBUG, "the publisher is closing");
    acc_free(p->acc); /* closes lfd */
    if (p->mode == SPFRAME_IPC && p->bound)
        unlink(p->path);
    free(p);
}
