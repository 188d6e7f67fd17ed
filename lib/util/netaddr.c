/* netaddr: address parsing (pure; the socket helpers are in http/netsock.c). */
#include "util/netaddr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Parses a decimal port in [min, 65535] from exactly the bytes [s, end). */
static int port_parse(const char *s, const char *end, int min, int *out)
{
    long v = 0;

    if (s == end)
        return -1;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
        if (v > 65535)
            return -1;
    }
    if (v < min)
        return -1;
    *out = (int) v;
    return 0;
}

/* Splits "host:port" / "[v6]:port" at the port colon. Returns the colon or NULL. */
static const char *split_host(const char *s, const char *end, const char **hs, const char **he)
{
    if (s < end && *s == '[') {
        const char *rb = memchr(s, ']', (size_t) (end - s));
        if (rb == NULL)
            return NULL;
        *hs = s + 1;
        *he = rb;
        return (rb + 1 < end && rb[1] == ':') ? rb + 1 : (rb + 1 == end ? rb + 1 : NULL);
    }
    const char *colon = NULL;
    for (const char *p = s; p < end; p++)
        if (*p == ':')
            colon = p;
    *hs = s;
    *he = colon ? colon : end;
    return colon ? colon : end;
}

int hostport_parse(const char *s, struct hostport *out, char *err, size_t errlen)
{
    const char *end = s + strlen(s), *hs, *he, *colon;
    size_t hl;

    colon = split_host(s, end, &hs, &he);
    if (colon == NULL || colon == end || *colon != ':') {
        snprintf(err, errlen, "'%s' is not HOST:PORT", s);
        return -1;
    }
    hl = (size_t) (he - hs);
    if (hl >= sizeof out->host) {
        snprintf(err, errlen, "host in '%s' is too long", s);
        return -1;
    }
    if (port_parse(colon + 1, end, 0, &out->port) != 0) {
        snprintf(err, errlen, "port in '%s' must be a number from 0 to 65535", s);
        return -1;
    }
    if (hl == 0 || (hl == 1 && *hs == '*'))
        strcpy(out->host, "0.0.0.0");
    else {
        memcpy(out->host, hs, hl);
        out->host[hl] = '\0';
    }
    return 0;
}

int http_url_parse(const char *s, struct http_url *out, char *err, size_t errlen)
{
    const char *p, *end, *hs, *he, *colon;
    size_t hl;

    if (strncasecmp(s, "http://", 7) != 0) {
        snprintf(err, errlen, "'%s' must start with http:// (TLS to the engine is not supported)",
                 s);
        return -1;
    }
    p = s + 7;
    end = p + strcspn(p, "/?#");
    if (*end != '\0' && strcmp(end, "/") != 0) {
        snprintf(err, errlen, "'%s' must not have a path: requests keep their own path", s);
        return -1;
    }
    if (memchr(p, '@', (size_t) (end - p)) != NULL) {
        snprintf(err, errlen, "'%s' must not carry user information", s);
        return -1;
    }
    colon = split_host(p, end, &hs, &he);
    hl = (size_t) (he - hs);
    if (colon == NULL || hl == 0 || hl >= sizeof out->host) {
        snprintf(err, errlen, "'%s' has no valid host", s);
        return -1;
    }
    memcpy(out->host, hs, hl);
    out->host[hl] = '\0';
    out->port = 80;
    if (colon < end && port_parse(colon + 1, end, 1, &out->port) != 0) {
        snprintf(err, errlen, "port in '%s' must be a number from 1 to 65535", s);
        return -1;
    }
    if (memchr(out->host, ':', hl) != NULL)
        snprintf(out->hostport, sizeof out->hostport, "[%s]:%d", out->host, out->port);
    else
        snprintf(out->hostport, sizeof out->hostport, "%s:%d", out->host, out->port);
    return 0;
}

int http_url_parse_path(const char *s, struct http_url *out, char *path, size_t pathlen, char *err,
                        size_t errlen)
{
    char base[NETADDR_HOST_MAX + 32];
    const char *p = strncasecmp(s, "http://", 7) == 0 ? s + 7 : s;
    size_t hl = strcspn(p, "/?#");

    if ((size_t) (p - s) + hl >= sizeof base) {
        snprintf(err, errlen, "'%s' has no valid host", s);
        return -1;
    }
    memcpy(base, s, (size_t) (p - s) + hl);
    base[(size_t) (p - s) + hl] = '\0';
    if (http_url_parse(base, out, err, errlen) != 0)
        return -1;
    if (p[hl] == '\0')
        snprintf(path, pathlen, "/");
    else if (p[hl] != '/' || strlen(p + hl) >= pathlen || strpbrk(p + hl, " \r\n#")) {
        snprintf(err, errlen, "'%s' has an invalid path", s);
        return -1;
    } else
        snprintf(path, pathlen, "%s", p + hl);
    return 0;
}

int net_is_loopback(const char *addr)
{
    return strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0 ||
           strncasecmp(addr, "::ffff:127.", 11) == 0;
}
