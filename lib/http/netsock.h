/* netsock: the socket helpers of the HTTP engine.
 *
 * Kept apart from util/netaddr (which only parses) so that the pure layers know nothing of
 * sockets. */
#ifndef ADMIT_NETSOCK_H
#define ADMIT_NETSOCK_H

#include "util/netaddr.h"

#include <stddef.h>
#include <netdb.h>
#include <sys/socket.h>

/* The listen backlog of our HTTP listeners (libevent's own is 128). */
#define NET_LISTEN_BACKLOG 4096

/** sets TCP_NODELAY on a socket; returns 0 or -1 */
int net_set_nodelay(int fd);
/** writes the local "host:port" of a bound socket into out; returns 0 or -1 */
int net_local_name(int fd, char *out, size_t outlen);
/** a non-blocking listening TCP socket on hp (SO_REUSEADDR, backlog NET_LISTEN_BACKLOG); the
 *  fd, or -1 with err */
int net_listen(const struct hostport *hp, char *err, size_t errlen);
/** looks host up for a TCP connect to port, preferring IPv4 ("localhost" engines listen on
 *  127.0.0.1 more often than on ::1); 0 with the address in *addr and *len, or -1 */
int net_resolve(const char *host, int port, struct sockaddr_storage *addr, socklen_t *len);
/** the address net_resolve would take from a lookup's answer (IPv4 first, else the first);
 *  0, or -1 when res is empty */
int net_pick(const struct addrinfo *res, struct sockaddr_storage *addr, socklen_t *len);
/** true when host is a numeric IPv4 or IPv6 address (looking it up never asks a server) */
int net_is_numeric(const char *host);
/** a non-blocking socket connecting to addr (TCP_NODELAY set); the fd, or -1 with errno;
 *  *in_progress is 1 when the connect has not finished yet */
int net_connect(const struct sockaddr *addr, socklen_t len, int *in_progress);

#endif
