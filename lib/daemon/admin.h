/* admin: the metrics listener (/metrics, /load, /admission, /health, /ready).
 *
 * Kept apart from the client listener so that scrapes and probes never queue behind client
 * traffic and can be firewalled separately. Reading is open; the one mutation, POST
 * /admission, needs a loopback peer or the bearer token. What each page shows comes from
 * hooks, so this module knows the pages and nothing of the proxy; HTTP itself is the
 * engine's (http/server.h). */
#ifndef ADMIT_ADMIN_H
#define ADMIT_ADMIN_H

#include "util/buf.h"
#include "net/acceptor.h"
#include "util/netaddr.h"

#include <stddef.h>

struct event_base;
struct admin;

struct admin_hooks {
    void (*metrics)(void *arg, struct buf *out); /* Prometheus text */
    void (*load)(void *arg, struct buf *out);    /* the load snapshot as JSON */
    int (*ready)(void *arg);                     /* 1 when the engine answers */
    /* GET (body NULL) or an authorised POST of /admission: writes JSON, returns the status;
     * who is the peer's address, for the log */
    int (*admission)(void *arg, const char *body, size_t len, const char *who, struct buf *out);
    void *arg;
};

/* Largest body a POST to the admin listener may carry. */
#define ADMIN_MAX_BODY 4096
/* Connections open at once at most: scrapes, probes and operators need a handful, and a
 * flood here must not take the descriptors the client listener needs. */
#define ADMIN_MAX_CONNS 64
/* A request head (one line and a few headers) not whole this long: 408. */
#define ADMIN_HEADER_TIMEOUT_S 10

/** creates the listener's server; token "" means mutations only from loopback peers; st
 *  gets the listener's counts (NULL: not kept) */
struct admin *admin_new(struct event_base *base, const struct admin_hooks *hooks, const char *token,
                        struct listen_stats *st);
/** binds it; writes the bound "host:port" into bound; 0 or -1 with err */
int admin_bind(struct admin *a, const struct hostport *hp, char *bound, size_t boundlen, char *err,
               size_t errlen);
/** closes the listener and frees */
void admin_free(struct admin *a);

#endif
