/* wlist: worker entries, workers files, DNS answers and the difference of two lists. */
#include "wlist.h"
#include "config/cfgfile.h"
#include "util/netaddr.h"
#include "config/opt.h"
#include "util/xmalloc.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

int wlist_check(const char *item, char *msg, size_t msglen)
{
    char out[WLIST_ENTRY_MAX];

    return wlist_canon(item, out, sizeof out, msg, msglen);
}

int wlist_canon(const char *item, char *out, size_t outlen, char *msg, size_t msglen)
{
    const char *eq = strchr(item, '=');
    struct http_url url;
    char sub[192], *proxy;
    int rc;

    if (eq == NULL) {
        snprintf(msg, msglen, "'%.120s' must be PROXY_URL=PUB_URL", item);
        return -1;
    }
    proxy = xstrndup(item, (size_t) (eq - item));
    rc = http_url_parse(proxy, &url, sub, sizeof sub);
    free(proxy);
    if (rc != 0) {
        snprintf(msg, msglen, "'%.120s': %s", item, sub);
        return -1;
    }
    if (!opt_nng_url_ok(eq + 1, WLIST_PUB_URL_MAX)) {
        snprintf(msg, msglen, "'%.120s': the load publisher must be tcp://HOST:PORT or ipc:///PATH",
                 item);
        return -1;
    }
    if ((size_t) snprintf(out, outlen, "http://%s=%s", url.hostport, eq + 1) >= outlen) {
        snprintf(msg, msglen, "'%.120s' is too long", item);
        return -1;
    }
    return 0;
}

int wlist_split(const char *item, char *proxy, size_t proxylen, char *pub, size_t publen)
{
    const char *eq = strchr(item, '=');

    if (eq == NULL || (size_t) (eq - item) >= proxylen || strlen(eq + 1) >= publen)
        return -1;
    memcpy(proxy, item, (size_t) (eq - item));
    proxy[eq - item] = '\0';
    strcpy(pub, eq + 1);
    return 0;
}

/* The index of item in l, or where it would go (*found 0). */
static size_t find(const struct wlist *l, const char *item, int *found)
{
    size_t lo = 0, hi = l->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(l->items[mid], item);

        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

int wlist_add(struct wlist *l, const char *item)
{
    int found;
    size_t at = find(l, item, &found);

    if (found)
        return 0;
    if (l->n == WLIST_MAX)
        return -1;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->items = xrealloc(l->items, l->cap * sizeof *l->items);
    }
    memmove(&l->items[at + 1], &l->items[at], (l->n - at) * sizeof *l->items);
    l->items[at] = xstrdup(item);
    l->n++;
    return 1;
}

int wlist_remove(struct wlist *l, const char *item)
{
    int found;
    size_t at = find(l, item, &found);

    if (!found)
        return 0;
    free(l->items[at]);
    memmove(&l->items[at], &l->items[at + 1], (l->n - at - 1) * sizeof *l->items);
    l->n--;
    return 1;
}

int wlist_has(const struct wlist *l, const char *item)
{
    int found;

    find(l, item, &found);
    return found;
}

void wlist_free(struct wlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i]);
    free(l->items);
    memset(l, 0, sizeof *l);
}

void wlist_move(struct wlist *dst, struct wlist *src)
{
    if (dst == src)
        return;
    wlist_free(dst);
    *dst = *src;
    memset(src, 0, sizeof *src);
}

void wlist_diff(const struct wlist *cur, const struct wlist *next, struct wlist *add,
                struct wlist *gone)
{
    size_t i = 0, j = 0;

    wlist_free(add);
    wlist_free(gone);
    /* Both sorted: one merge. */
    while (i < cur->n || j < next->n) {
        int c = i == cur->n ? 1 : j == next->n ? -1 : strcmp(cur->items[i], next->items[j]);

        if (c == 0) {
            i++;
            j++;
        } else if (c < 0)
            wlist_add(gone, cur->items[i++]);
        else
            wlist_add(add, next->items[j++]);
    }
}

/* ---- workers files ---------------------------------------------------------------------- */

/* Writes "path:line: message" to err; returns -1. */
static int fail_at(char *err, size_t errlen, const char *path, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int fail_at(char *err, size_t errlen, const char *path, int line, const char *fmt, ...)
{
    char msg[400];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "%s:%d: %s", path, line, msg);
    return -1;
}

/* Checks an entry and adds its canonical form; 0, or -1 with the message. */
static int take(struct wlist *out, const char *item, const char *path, int line, char *err,
                size_t errlen)
{
    char canon[WLIST_ENTRY_MAX], msg[300];

    if (wlist_canon(item, canon, sizeof canon, msg, sizeof msg) != 0)
        return fail_at(err, errlen, path, line, "%s", msg);
    if (wlist_add(out, canon) < 0)
        return fail_at(err, errlen, path, line, "more than %d workers", WLIST_MAX);
    return 0;
}

/* One entry a line: the entry is the line's first word; after it only a # comment. */
static int parse_lines(const char *path, const char *text, size_t len, struct wlist *out, char *err,
                       size_t errlen)
{
    const char *p = text, *end = text + len;
    int line = 0;

    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t) (end - p)), *w, *we, *rest;
        char *item;
        int rc;

        if (eol == NULL)
            eol = end;
        line++;
        for (w = p; w < eol && isspace((unsigned char) *w); w++)
            ;
        for (we = w; we < eol && !isspace((unsigned char) *we); we++)
            ;
        for (rest = we; rest < eol && isspace((unsigned char) *rest); rest++)
            ;
        p = eol + 1;
        if (w == we || *w == '#')
            continue; /* blank, or a comment */
        if (rest < eol && *rest != '#')
            return fail_at(err, errlen, path, line,
                           "one worker a line, PROXY_URL=PUB_URL (then at most a # comment)");
        if (memchr(w, '\0', (size_t) (we - w)) != NULL)
            return fail_at(err, errlen, path, line, "a NUL byte");
        item = xstrndup(w, (size_t) (we - w));
        rc = take(out, item, path, line, err, errlen);
        free(item);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* The YAML form: one document, a list of strings. */
struct ywalk {
    const char *path;
    struct wlist *out;
    char *err;
    size_t errlen;
    int depth; /* open collections */
};

static int ywalk_event(void *arg, const struct yaml_event_s *ev)
{
    struct ywalk *y = arg;
    int line = (int) ev->start_mark.line + 1;

    switch (ev->type) {
    case YAML_SEQUENCE_START_EVENT:
        if (y->depth++ > 0)
            return fail_at(y->err, y->errlen, y->path, line,
                           "a worker must be a string PROXY_URL=PUB_URL, not a list");
        return 0;
    case YAML_SEQUENCE_END_EVENT:
        y->depth--;
        return 0;
    case YAML_MAPPING_START_EVENT:
        return fail_at(y->err, y->errlen, y->path, line,
                       y->depth ? "a worker must be a string PROXY_URL=PUB_URL, not a mapping"
                                : "the file must be a list of PROXY_URL=PUB_URL strings");
    case YAML_ALIAS_EVENT:
        return fail_at(y->err, y->errlen, y->path, line, "anchors and aliases are not allowed");
    case YAML_SCALAR_EVENT: {
        const char *s = (const char *) ev->data.scalar.value;
        size_t n = ev->data.scalar.length;

        if (y->depth == 0)
            return fail_at(y->err, y->errlen, y->path, line,
                           "the file must be a list of PROXY_URL=PUB_URL strings");
        if (ev->data.scalar.anchor != NULL)
            return fail_at(y->err, y->errlen, y->path, line, "anchors and aliases are not allowed");
        if (memchr(s, '\0', n) != NULL || strlen(s) != n)
            return fail_at(y->err, y->errlen, y->path, line, "a NUL byte");
        return take(y->out, s, y->path, line, y->err, y->errlen);
    }
    default:
        return 0;
    }
}

/* The YAML form when the file's first text (past blanks and comments) opens a list. */
static int is_yaml_list(const char *text, size_t len)
{
    const char *p = text, *end = text + len;

    if (len >= 3 && (unsigned char) p[0] == 0xEF && (unsigned char) p[1] == 0xBB &&
        (unsigned char) p[2] == 0xBF)
        p += 3; /* a BOM */
    while (p < end) {
        if (isspace((unsigned char) *p))
            p++;
        else if (*p == '#') {
            const char *eol = memchr(p, '\n', (size_t) (end - p));

            p = eol != NULL ? eol + 1 : end;
        } else
            return *p == '[' || (*p == '-' && (p + 1 == end || isspace((unsigned char) p[1]) ||
                                               (p + 2 < end && p[1] == '-' && p[2] == '-')));
    }
    return 0;
}

int wlist_parse(const char *path, const char *text, size_t len, struct wlist *out, char *err,
                size_t errlen)
{
    int rc;

    wlist_free(out);
    if (is_yaml_list(text, len)) {
        struct ywalk y = {path, out, err, errlen, 0};

        rc = cfgfile_walk(path, text, len, ywalk_event, &y, err, errlen);
    } else
        rc = parse_lines(path, text, len, out, err, errlen);
    if (rc != 0)
        wlist_free(out);
    return rc;
}

int wlist_read(const char *path, struct wlist *out, char *err, size_t errlen)
{
    char *text;
    size_t len;
    int rc;

    wlist_free(out);
    if (cfgfile_read(path, &text, &len, err, errlen) != 0)
        return -1;
    rc = wlist_parse(path, text, len, out, err, errlen);
    free(text);
    return rc;
}

/* ---- DNS -------------------------------------------------------------------------------- */

/* A port, 1..65535, as all of s..e. */
static int port_of(const char *s, const char *e, unsigned *port)
{
    unsigned v = 0;

    if (s == e || e - s > 5)
        return -1;
    for (; s < e; s++) {
        if (!isdigit((unsigned char) *s))
            return -1;
        v = v * 10 + (unsigned) (*s - '0');
    }
    if (v < 1 || v > 65535)
        return -1;
    *port = v;
    return 0;
}

int wlist_dns_spec(const char *spec, char *name, unsigned *http_port, unsigned *pub_port, char *msg,
                   size_t msglen)
{
    const char *c2 = strrchr(spec, ':'), *c1;
    size_t n;

    c1 = c2 != NULL && c2 > spec ? memrchr(spec, ':', (size_t) (c2 - spec)) : NULL;
    if (c1 == NULL) {
        snprintf(msg, msglen, "'%.120s' must be NAME:HTTP_PORT:PUB_PORT", spec);
        return -1;
    }
    n = (size_t) (c1 - spec);
    if (n == 0 || n > WLIST_DNS_NAME_MAX) {
        snprintf(msg, msglen, "'%.120s': the name must be 1 to %d bytes", spec, WLIST_DNS_NAME_MAX);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char) spec[i]) && spec[i] != '-' && spec[i] != '.' &&
            spec[i] != '_') {
            snprintf(msg, msglen,
                     "'%.120s': the name may hold only letters, digits, '-', '.' and '_'", spec);
            return -1;
        }
    if (port_of(c1 + 1, c2, http_port) != 0 ||
        port_of(c2 + 1, spec + strlen(spec), pub_port) != 0) {
        snprintf(msg, msglen, "'%.120s': HTTP_PORT and PUB_PORT must be ports (1-65535)", spec);
        return -1;
    }
    memcpy(name, spec, n);
    name[n] = '\0';
    return 0;
}

/* The workers of n addresses of family af (4 or 16 bytes each, network order, as evdns gives
 * them), each written by inet_ntop: an IPv6 one in brackets. */
static void from_addrs(int af, const void *addrs, size_t n, unsigned http_port, unsigned pub_port,
                       struct wlist *out)
{
    const unsigned char *a = addrs;
    size_t step = af == AF_INET6 ? 16 : 4;
    const char *fmt = af == AF_INET6 ? "http://[%s]:%u=tcp://[%s]:%u" : "http://%s:%u=tcp://%s:%u";

    wlist_free(out);
    for (size_t i = 0; i < n; i++, a += step) {
        char ip[INET6_ADDRSTRLEN], item[2 * INET6_ADDRSTRLEN + 40];

        if (inet_ntop(af, a, ip, sizeof ip) == NULL)
            continue;
        snprintf(item, sizeof item, fmt, ip, http_port, ip, pub_port);
        wlist_add(out, item);
    }
}

void wlist_from_ipv6(const void *addrs, size_t n, unsigned http_port, unsigned pub_port,
                     struct wlist *out)
{
    from_addrs(AF_INET6, addrs, n, http_port, pub_port, out);
}

void wlist_from_ipv4(const void *addrs, size_t n, unsigned http_port, unsigned pub_port,
                     struct wlist *out)
{
    from_addrs(AF_INET, addrs, n, http_port, pub_port, out);
}
