/* upstream: a LIFO pool of idle keep-alive connections to one engine.
 *
 * LIFO keeps the hottest connections in use and lets the cold tail expire. Connections are
 * freed from a zero-delay timer, never inside a libevent callback of the same connection:
 * evhttp touches the connection after the user's done callback returns. */
#include "http/upstream.h"
#include "http/netsock.h"
#include "core/xmalloc.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdlib.h>
#include <sys/time.h>

struct uconn {
    struct evhttp_connection *evcon;
    struct uconn *next;     /* in the idle list or the graveyard */
    struct timeval idle_at; /* when it went idle */
};

struct upstream {
    struct event_base *base;
    struct http_url url;
    struct timeval timeout;
    unsigned max_idle;
    struct timeval idle_max;
    struct uconn *idle; /* most recently used first */
    unsigned nidle;
    struct uconn *graveyard; /* to be freed from the reaper */
    struct event *reaper;    /* frees the graveyard and expires idle connections */
};

static void reap(evutil_socket_t fd, short what, void *arg)
{
    struct upstream *u = arg;
    struct timeval now, cut;
    struct uconn **pp;

    (void) fd;
    (void) what;
    while (u->graveyard != NULL) {
        struct uconn *c = u->graveyard;
        u->graveyard = c->next;
        evhttp_connection_free(c->evcon);
        free(c);
    }
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
        evhttp_connection_free(c->evcon);
        free(c);
    }
    if (u->nidle > 0) {
        struct timeval tick = {0, 500000};
        event_add(u->reaper, &tick);
    }
}

struct upstream *upstream_new(struct event_base *base, const struct http_url *url,
                              unsigned timeout_ms, unsigned max_idle, unsigned idle_ms)
{
    struct upstream *u = xcalloc(1, sizeof *u);

    u->base = base;
    u->url = *url;
    u->timeout.tv_sec = timeout_ms / 1000;
    u->timeout.tv_usec = (timeout_ms % 1000) * 1000;
    u->max_idle = max_idle;
    u->idle_max.tv_sec = idle_ms / 1000;
    u->idle_max.tv_usec = (idle_ms % 1000) * 1000;
    u->reaper = evtimer_new(base, reap, u);
    if (u->reaper == NULL)
        fatal("evtimer_new failed");
    return u;
}

void upstream_free(struct upstream *u)
{
    if (u == NULL)
        return;
    u->idle_max.tv_sec = 0;
    u->idle_max.tv_usec = 0;
    /* Expire everything: with idle_max zero every idle connection is past its time. */
    while (u->idle != NULL) {
        struct uconn *c = u->idle;
        u->idle = c->next;
        c->next = u->graveyard;
        u->graveyard = c;
    }
    u->nidle = 0;
    reap(-1, 0, u);
    event_free(u->reaper);
    free(u);
}

struct uconn *upstream_get(struct upstream *u)
{
    struct uconn *c = u->idle;

    if (c != NULL) {
        u->idle = c->next;
        u->nidle--;
        c->next = NULL;
        return c;
    }
    c = xcalloc(1, sizeof *c);
    c->evcon = evhttp_connection_base_new(u->base, NULL, u->url.host, (unsigned short) u->url.port);
    if (c->evcon == NULL)
        fatal("evhttp_connection_base_new failed");
    /* libevent's 50 s default would cut a long time-to-first-token; ours is explicit. */
    evhttp_connection_set_timeout_tv(c->evcon, &u->timeout);
    evhttp_connection_set_retries(c->evcon, 0);
    return c;
}

struct evhttp_connection *uconn_evcon(struct uconn *c)
{
    return c->evcon;
}

int uconn_request(struct uconn *c, struct evhttp_request *req, enum evhttp_cmd_type cmd,
                  const char *uri)
{
    int fd;

    if (evhttp_make_request(c->evcon, req, cmd, uri) != 0)
        return -1;
    /* The socket exists only once the request is made (a reconnect makes a new one), and
     * libevent never sets TCP_NODELAY itself. */
    fd = bufferevent_getfd(evhttp_connection_get_bufferevent(c->evcon));
    if (fd >= 0)
        net_set_nodelay(fd);
    return 0;
}

void upstream_put(struct upstream *u, struct uconn *c)
{
    if (u->nidle >= u->max_idle) {
        c->next = u->graveyard;
        u->graveyard = c;
        event_active(u->reaper, EV_TIMEOUT, 0);
        return;
    }
    event_base_gettimeofday_cached(u->base, &c->idle_at);
    c->next = u->idle;
    u->idle = c;
    if (u->nidle++ == 0) {
        struct timeval tick = {0, 500000};
        event_add(u->reaper, &tick);
    }
}

const char *upstream_hostport(const struct upstream *u)
{
    return u->url.hostport;
}

unsigned upstream_idle_count(const struct upstream *u)
{
    return u->nidle;
}
