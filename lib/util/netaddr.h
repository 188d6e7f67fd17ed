/* netaddr: parsing of listen addresses and upstream URLs.
 *
 * Pure, so the CLI and config code can reject a bad address before anything is bound, with a
 * message that names what was wrong. The socket helpers live in http/netsock.h. */
#ifndef ADMIT_NETADDR_H
#define ADMIT_NETADDR_H

#include <stddef.h>

/* Longest host we accept; DNS names are at most 253 bytes. */
#define NETADDR_HOST_MAX 256

struct hostport {
    char host[NETADDR_HOST_MAX]; /* without IPv6 brackets */
    int port;                    /* 0..65535 (0 = pick a free port) */
};

struct http_url {
    char host[NETADDR_HOST_MAX];         /* without IPv6 brackets */
    int port;                            /* 1..65535; 80 when the URL has none */
    char hostport[NETADDR_HOST_MAX + 8]; /* the Host header value, e.g. "127.0.0.1:8000" */
};

/** parses "HOST:PORT", "[V6]:PORT" or ":PORT" (host 0.0.0.0); returns 0 or -1 with err set */
int hostport_parse(const char *s, struct hostport *out, char *err, size_t errlen);
/** parses "http://HOST[:PORT][/]"; returns 0 or -1 with err set (https and paths refused) */
int http_url_parse(const char *s, struct http_url *out, char *err, size_t errlen);
/** like http_url_parse, but a path (and query) is allowed and copied into path ("/" if none) */
int http_url_parse_path(const char *s, struct http_url *out, char *path, size_t pathlen, char *err,
                        size_t errlen);
/** true when a numeric peer address (as libevent prints it) is a loopback address */
int net_is_loopback(const char *addr);

#endif
