/* netsock: the socket helpers of the HTTP engine.
 *
 * Kept apart from core/netaddr (which only parses) so that the pure core knows nothing of
 * sockets. */
#ifndef ADMIT_NETSOCK_H
#define ADMIT_NETSOCK_H

#include "core/netaddr.h"

#include <stddef.h>

struct evhttp;

/* The listen backlog of our HTTP listeners (libevent's own is 128). */
#define NET_LISTEN_BACKLOG 4096

/** sets TCP_NODELAY on a socket; returns 0 or -1 */
int net_set_nodelay(int fd);
/** writes the local "host:port" of a bound socket into out; returns 0 or -1 */
int net_local_name(int fd, char *out, size_t outlen);
/** binds an evhttp server to hp; writes the bound "host:port" (real port if 0 was asked) */
int net_evhttp_bind(struct evhttp *http, const struct hostport *hp, char *bound, size_t boundlen,
                    char *err, size_t errlen);

#endif
