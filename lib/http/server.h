/* server: an HTTP listener whose every request is answered at once by a handler.
 *
 * The admin and metrics listener needs no engine and no streaming: each request is read
 * whole, handed to the handler as a struct http_req, and the struct http_reply it fills is
 * sent back. Keeping it behind the seam means the admin pages speak admitd's types, and
 * change nothing when the engine's HTTP code does. */
#ifndef ADMIT_SERVER_H
#define ADMIT_SERVER_H

#include "net/acceptor.h"
#include "util/netaddr.h"
#include "http/httpreq.h"

#include <stddef.h>

struct event_base;
struct hsrv;

/* A server's limits. Requests over them are refused by the engine itself (400, 413, 501). */
struct hsrv_limits {
    unsigned methods;           /* bit (1 << enum http_method) per method accepted */
    unsigned max_header_bytes;  /* largest header block */
    unsigned max_body_bytes;    /* largest body */
    unsigned timeout_s;         /* a client silent this long is closed */
    unsigned header_timeout_s;  /* a request head not whole this long: 408 */
    unsigned max_conns;         /* open connections at most: accepting pauses there */
    const char *name;           /* the listener's name in the log ("metrics") */
    struct listen_stats *stats; /* its counts (NULL: kept by the server) */
};

/** answers one request; rep arrives with status 200, JSON and an empty body */
typedef void (*hsrv_handler)(void *arg, const struct http_req *req, struct http_reply *rep);

/** creates a server on base (not listening yet); allocation failure aborts */
struct hsrv *hsrv_new(struct event_base *base, const struct hsrv_limits *lim, hsrv_handler h,
                      void *arg);
/** listens on hp; writes the bound "host:port" into bound; 0 or -1 with err */
int hsrv_bind(struct hsrv *s, const struct hostport *hp, char *bound, size_t boundlen, char *err,
              size_t errlen);
/** closes the listener and its connections, and frees; NULL is a no-op */
void hsrv_free(struct hsrv *s);

#endif
