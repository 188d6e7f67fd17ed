/* netsock: socket helpers of the HTTP engine: TCP_NODELAY, the bound address, listeners. */
#include "http/netsock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

int net_set_nodelay(int fd)
{
    int one = 1;

    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int net_local_name(int fd, char *out, size_t outlen)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN];

    if (getsockname(fd, (struct sockaddr *) &ss, &sl) != 0)
        return -1;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *) &ss;
        inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
        snprintf(out, outlen, "%s:%d", host, ntohs(sin->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *) &ss;
        inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
        snprintf(out, outlen, "[%s]:%d", host, ntohs(sin6->sin6_port));
    } else {
        errno = EAFNOSUPPORT;
        return -1;
    }
    return 0;
}

int net_evhttp_bind(struct evhttp *http, const struct hostport *hp, char *bound, size_t boundlen,
                    char *err, size_t errlen)
{
    struct evhttp_bound_socket *bs;

    bs = evhttp_bind_socket_with_handle(http, hp->host, (unsigned short) hp->port);
    if (bs == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", hp->host, hp->port, strerror(errno));
        return -1;
    }
    /* libevent listens with a backlog of 128: a burst of connects beyond it is dropped and
     * retried by the clients a second later. Calling listen() again raises it (the kernel
     * caps it at net.core.somaxconn). */
    listen(evhttp_bound_socket_get_fd(bs), NET_LISTEN_BACKLOG);
    if (net_local_name(evhttp_bound_socket_get_fd(bs), bound, boundlen) != 0)
        snprintf(bound, boundlen, "%s:%d", hp->host, hp->port);
    return 0;
}
