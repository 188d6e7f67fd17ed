/* netsock: socket helpers of the HTTP engine: TCP_NODELAY, the bound address, listening,
 * looking an engine up and connecting sockets. */
#include "http/netsock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

int net_listen(const struct hostport *hp, char *err, size_t errlen)
{
    struct addrinfo hints = {0}, *res = NULL, *ai;
    char port[16];
    int fd = -1, rv, saved = 0;

    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(port, sizeof port, "%d", hp->port);
    rv = getaddrinfo(hp->host[0] ? hp->host : NULL, port, &hints, &res);
    if (rv != 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", hp->host, hp->port, gai_strerror(rv));
        return -1;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        int one = 1;

        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, NET_LISTEN_BACKLOG) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        snprintf(err, errlen, "cannot listen on %s:%d: %s", hp->host, hp->port, strerror(saved));
    return fd;
}

int net_pick(const struct addrinfo *res, struct sockaddr_storage *addr, socklen_t *len)
{
    const struct addrinfo *pick = NULL;

    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
        if (pick == NULL || (ai->ai_family == AF_INET && pick->ai_family != AF_INET))
            pick = ai;
    if (pick == NULL || pick->ai_addrlen > sizeof *addr)
        return -1;
    memcpy(addr, pick->ai_addr, pick->ai_addrlen);
    *len = pick->ai_addrlen;
    return 0;
}

int net_is_numeric(const char *host)
{
    unsigned char bin[16];

    return inet_pton(AF_INET, host, bin) == 1 || inet_pton(AF_INET6, host, bin) == 1;
}

int net_resolve(const char *host, int port, struct sockaddr_storage *addr, socklen_t *len)
{
    struct addrinfo hints = {0}, *res = NULL;
    char num[16];
    int rv;

    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(num, sizeof num, "%d", port);
    if (getaddrinfo(host, num, &hints, &res) != 0 || res == NULL)
        return -1;
    rv = net_pick(res, addr, len);
    freeaddrinfo(res);
    return rv;
}

int net_connect(const struct sockaddr *addr, socklen_t len, int *in_progress)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    *in_progress = 0;
    if (fd < 0)
        return -1;
    net_set_nodelay(fd);
    if (connect(fd, addr, len) == 0)
        return fd;
    if (errno == EINPROGRESS) {
        *in_progress = 1;
        return fd;
    }
    {
        int saved = errno;
        close(fd);
        errno = saved;
    }
    return -1;
}
