/* upstream: non-blocking connects, a LIFO pool of idle connections, silence timers.
 *
 * LIFO keeps the hottest connections in use and lets the cold tail expire. An idle
 * connection keeps its read event armed: the engine closing it, or sending anything
 * unasked, drops it before a request can be written to it. */
#include "http/upstream.h"
#include "util/xmalloc.h"
#include "http/netsock.h"

#include <errno.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

struct uconn {
    struct ioconn io;
    struct upstream *u;
    struct event tmo; /* silence (and connect) timeout, judged when it fires */
    int tmo_on;
    struct timeval last; /* the engine's last sign of life, or the request's start */
    int connecting;
    int idle;     /* in the pool */
    int conn_err; /* errno of a failed connect */
    uconn_cb cb;
    void *arg;
    struct timeval idle_at; /* when it went idle */
    struct uconn *next;     /* in the idle list or the spare list */
};

/* A lookup in flight: u is NULL once the pool that started it is gone (the answer is then
 * dropped), so that the lookup can end after it. */
struct ulookup {
    struct upstream *u;
};

struct upstream {
    struct event_base *base;
    struct evdns_base *dns;   /* NULL: names are looked up with getaddrinfo, blocking */
    struct ulookup *lookup;   /* the name's lookup in flight, or NULL */
    struct timeval failed_at; /* when the last lookup failed (upstream_resolved waits 1 s) */
    struct http_url url;
    const struct timeval *timeout; /* a common timeout: O(1) to arm */
    struct timeval timeout_tv;
    unsigned max_idle;
    struct timeval idle_max;
    struct sockaddr_storage addr;
    socklen_t addrlen;  /* 0 until the address is known */
    struct uconn *idle; /* most recently used first */
    unsigned nidle;
    struct uconn *spare;  /* closed connection structs, for the next connect */
    struct event *reaper; /* expires idle connections */
};

/* Lookups started, in every pool (see upstream_lookups_started). */
static unsigned lookups_started;

static void on_lookup(int result, struct evutil_addrinfo *res, void *arg)
{
    struct ulookup *l = arg;
    struct upstream *u = l->u;

    if (u != NULL) {
        u->lookup = NULL;
        if (result != 0 || net_pick(res, &u->addr, &u->addrlen) != 0) {
            u->addrlen = 0; /* looked up again at the next connect */
            event_base_gettimeofday_cached(u->base, &u->failed_at);
        }
    }
    if (res != NULL)
        evutil_freeaddrinfo(res);
    free(l);
}

/* Looks the engine's address up: at start, and again after a failure (IPv4 preferred, as
 * net_resolve does). A numeric address is parsed at once; a name, with a resolver, is asked
 * without waiting (0 only once its answer is in); without one, with getaddrinfo. */
static int resolve(struct upstream *u)
{
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct ulookup *l;
    struct evdns_getaddrinfo_request *req;
    char port[16];

    if (u->dns == NULL || net_is_numeric(u->url.host))
        return net_resolve(u->url.host, u->url.port, &u->addr, &u->addrlen);
    if (u->lookup != NULL)
        return -1; /* its answer is as new as another's would be */
    snprintf(port, sizeof port, "%d", u->url.port);
    l = xcalloc(1, sizeof *l);
    l->u = u;
    u->lookup = l;
    lookups_started++;
    req = evdns_getaddrinfo(u->dns, u->url.host, port, &hints, on_lookup, l);
    if (req == NULL && u->lookup == l) { /* refused without an answer: no on_lookup comes */
        u->lookup = NULL;
        free(l);
    } /* else it answered already, from the hosts file or at once */
    return u->addrlen > 0 ? 0 : -1;
}

static void free_conn(struct uconn *c)
{
    ioc_close(&c->io);
    ioc_trim(&c->io, 4096); /* a closed struct kept for the next connect keeps small buffers */
    if (c->tmo_on)
        event_del(&c->tmo);
    c->tmo_on = 0;
    c->next = c->u->spare;
    c->u->spare = c;
}

static void reap(evutil_socket_t fd, short what, void *arg)
{
    struct upstream *u = arg;
    struct timeval now, cut;
    struct uconn **pp;

    (void) fd;
    (void) what;
    /* The idle list is ordered newest first, so everything after the first expired entry
     * has expired too. */
    event_base_gettimeofday_cached(u->base, &now);
    timersub(&now, &u->idle_max, &cut);
    for (pp = &u->idle; *pp != NULL && timercmp(&(*pp)->idle_at, &cut, >);)
        pp = &(*pp)->next;
    while (*pp != NULL) {
        struct uconn *c = *pp;
        *pp = c->next;
        u->nidle--;
        free_conn(c);
    }
    if (u->nidle > 0) {
        struct timeval tick = {0, 500000};
        event_add(u->reaper, &tick);
    }
}

static void unlink_idle(struct uconn *c)
{
    struct uconn **pp;

    for (pp = &c->u->idle; *pp != NULL; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            c->u->nidle--;
            return;
        }
}

static void on_io(struct ioconn *io, short what)
{
    struct uconn *c = (struct uconn *) (void *) ((char *) io - offsetof(struct uconn, io));

    if (c->idle) {
        /* Idle: an EOF, a reset or unasked bytes. Either way it cannot carry a request. */
        c->idle = 0;
        unlink_idle(c);
        free_conn(c);
        return;
    }
    if (c->connecting) {
        int err = io->err != 0 ? io->err : ioc_connect_error(io);

        if (err == 0 && (what & EV_READ)) {
            /* Connected, and the engine already sent something: there is no request yet
             * on a new connection, so this is read with the answer below. */
            c->connecting = 0;
        } else if (err != 0) {
            c->conn_err = err;
            c->cb(c->arg, UC_CONNECT_FAILED);
            return;
        } else {
            c->connecting = 0;
            if (ioc_pending(io) == 0)
                return; /* connected; the request was sent with the connect */
        }
    }
    if (what & EV_WRITE) {
        c->cb(c->arg, io->err != 0 ? UC_WRITE_FAILED : UC_DRAINED);
        return;
    }
    c->cb(c->arg, UC_READABLE);
}

static void stamp(struct uconn *c)
{
    event_base_gettimeofday_cached(c->u->base, &c->last);
}

/* Reads only stamp the time; the timer, armed once, judges the silence when it fires and
 * re-arms itself for what is left. An idle connection's timer lapses. */
static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct uconn *c = arg;
    struct timeval now, left;

    (void) fd;
    (void) what;
    c->tmo_on = 0;
    if (c->idle)
        return;
    event_base_gettimeofday_cached(c->u->base, &now);
    timeradd(&c->last, &c->u->timeout_tv, &left);
    if (timercmp(&now, &left, <)) {
        timersub(&left, &now, &left);
        event_add(&c->tmo, &left);
        c->tmo_on = 1;
        return;
    }
    c->cb(c->arg, UC_TIMEOUT);
}

struct upstream *upstream_new(struct event_base *base, const struct http_url *url,
                              struct evdns_base *dns, unsigned timeout_ms, unsigned max_idle,
                              unsigned idle_ms)
{
    struct upstream *u = xcalloc(1, sizeof *u);
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};

    u->base = base;
    u->dns = dns;
    u->url = *url;
    u->timeout = event_base_init_common_timeout(base, &tv);
    u->timeout_tv = tv;
    u->max_idle = max_idle;
    u->idle_max.tv_sec = idle_ms / 1000;
    u->idle_max.tv_usec = (idle_ms % 1000) * 1000;
    u->reaper = evtimer_new(base, reap, u);
    if (u->reaper == NULL)
        fatal("evtimer_new failed");
    if (resolve(u) != 0)
        u->addrlen = 0; /* tried again at the first connect */
    return u;
}

void upstream_free(struct upstream *u)
{
    if (u == NULL)
        return;
    /* A lookup in flight is left to end: its answer, now or later, frees it and touches
     * nothing else. Not cancelled: a cancel is answered from the loop, and one still queued
     * when the loop stops for good would take evdns's records with it, unreachable. Left
     * running, they stay in the resolver's own lists (see upstream_lookups_started). */
    if (u->lookup != NULL) {
        u->lookup->u = NULL;
        u->lookup = NULL;
    }
    while (u->idle != NULL) {
        struct uconn *c = u->idle;
        u->idle = c->next;
        free_conn(c);
    }
    while (u->spare != NULL) {
        struct uconn *c = u->spare;
        u->spare = c->next;
        ioc_release(&c->io);
        free(c);
    }
    event_free(u->reaper);
    free(u);
}

struct uconn *upstream_get(struct upstream *u, uconn_cb cb, void *arg, int *reused)
{
    struct uconn *c = u->idle;

    if (c != NULL) {
        u->idle = c->next;
        u->nidle--;
        c->idle = 0;
        c->next = NULL;
        *reused = 1;
    } else {
        *reused = 0;
        if (u->addrlen == 0 && resolve(u) != 0) {
            errno = EHOSTUNREACH;
            return NULL;
        }
        if ((c = u->spare) != NULL)
            u->spare = c->next;
        else
            c = xcalloc(1, sizeof *c);
        if (ioc_connect(&c->io, u->base, (struct sockaddr *) &u->addr, u->addrlen, on_io,
                        &c->connecting) != 0) {
            c->next = u->spare; /* kept for the next connect */
            u->spare = c;
            return NULL;
        }
        c->u = u;
        c->next = NULL;
        c->idle = 0;
        c->conn_err = 0;
        event_assign(&c->tmo, u->base, -1, 0, on_timeout, c);
        c->tmo_on = 0;
    }
    c->cb = cb;
    c->arg = arg;
    stamp(c);
    if (!c->tmo_on) {
        event_add(&c->tmo, u->timeout);
        c->tmo_on = 1;
    }
    return c;
}

int uconn_write(struct uconn *c, const struct iovec *iov, int n)
{
    return ioc_writev(&c->io, iov, n);
}

ssize_t uconn_fill(struct uconn *c, size_t max)
{
    return ioc_fill(&c->io, max, 1);
}

struct iobuf *uconn_in(struct uconn *c)
{
    return &c->io.in;
}

void uconn_pause(struct uconn *c, int paused)
{
    ioc_read(&c->io, !paused);
}

void uconn_touch(struct uconn *c)
{
    stamp(c);
}

int uconn_error(const struct uconn *c)
{
    return c->conn_err;
}

void upstream_put(struct upstream *u, struct uconn *c)
{
    if (u->nidle >= u->max_idle || c->io.in.len > c->io.in.off || ioc_pending(&c->io) > 0 ||
        c->connecting) {
        free_conn(c);
        return;
    }
    c->io.in.off = c->io.in.len = 0;
    ioc_trim(&c->io, 16 * 1024); /* idle: a large reply's buffer goes back */
    ioc_read(&c->io, 1);
    c->idle = 1;
    event_base_gettimeofday_cached(u->base, &c->idle_at);
    c->next = u->idle;
    u->idle = c;
    if (u->nidle++ == 0) {
        struct timeval tick = {0, 500000};
        event_add(u->reaper, &tick);
    }
}

void uconn_drop(struct uconn *c)
{
    free_conn(c);
}

const char *upstream_hostport(const struct upstream *u)
{
    return u->url.hostport;
}

int upstream_resolved(struct upstream *u)
{
    struct timeval now, next = {1, 0};

    if (u->addrlen > 0)
        return 1;
    event_base_gettimeofday_cached(u->base, &now);
    timeradd(&u->failed_at, &next, &next);
    if (u->lookup == NULL && !timercmp(&now, &next, <))
        resolve(u);
    return u->addrlen > 0;
}

unsigned upstream_lookups_started(void)
{
    return lookups_started;
}

unsigned upstream_idle_count(const struct upstream *u)
{
    return u->nidle;
}
