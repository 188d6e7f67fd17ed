/* wlist: worker entries, workers files, DNS answers and the difference of two lists. */
#include "wlist.h"
#include "admit/load.h"
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
    return wlist_canon_role(item, WLIST_ROLE_NONE, out, outlen, msg, msglen);
}

int wlist_canon_role(const char *item, int role, char *out, size_t outlen, char *msg, size_t msglen)
{
    const char *eq = strchr(item, '=');
    struct http_url url;
    char sub[192], *proxy;
    int rc, n;

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
    /* The publisher has no blank (opt_nng_url_ok), so the role's " role=" is unambiguous. */
    n = role < 0 ? snprintf(out, outlen, "http://%s=%s", url.hostport, eq + 1)
                 : snprintf(out, outlen, "http://%s=%s role=%s", url.hostport, eq + 1,
                            admit_load_role_name((enum admit_load_role) role));
    if (n < 0 || (size_t) n >= outlen) {
        snprintf(msg, msglen, "'%.120s' is too long", item);
        return -1;
    }
    return 0;
}

int wlist_split(const char *item, char *proxy, size_t proxylen, char *pub, size_t publen, int *role)
{
    const char *eq = strchr(item, '='), *sp;
    enum admit_load_role r;
    size_t n;

    if (eq == NULL || (size_t) (eq - item) >= proxylen)
        return -1;
    sp = strchr(eq + 1, ' ');
    n = sp != NULL ? (size_t) (sp - eq - 1) : strlen(eq + 1);
    if (n >= publen)
        return -1;
    if (sp != NULL &&
        (strncmp(sp, " role=", 6) != 0 || admit_load_role_parse(sp + 6, strlen(sp + 6), &r) != 0))
        return -1;
    memcpy(proxy, item, (size_t) (eq - item));
    proxy[eq - item] = '\0';
    memcpy(pub, eq + 1, n);
    pub[n] = '\0';
    if (role != NULL)
        *role = sp != NULL ? (int) r : WLIST_ROLE_NONE;
    return 0;
}

const char *wlist_role_label(int role)
{
    return role < 0 ? "as published" : admit_load_role_name((enum admit_load_role) role);
}

/* The role of a canonical entry (WLIST_ROLE_NONE for none, or one that does not split). */
static int role_of(const char *item)
{
    char proxy[WLIST_ENTRY_MAX], pub[WLIST_ENTRY_MAX];
    int role = WLIST_ROLE_NONE;

    wlist_split(item, proxy, sizeof proxy, pub, sizeof pub, &role);
    return role;
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

int wlist_role_clash(const struct wlist *l, const char *canon, int *other)
{
    const char *eq = strchr(canon, '=');
    char prefix[WLIST_ENTRY_MAX];
    size_t n;
    int found, role = role_of(canon);

    if (eq == NULL || (n = (size_t) (eq - canon) + 1) >= sizeof prefix)
        return 0;
    memcpy(prefix, canon, n); /* "http://HOST:PORT=": the entries of that worker sort after it */
    prefix[n] = '\0';
    for (size_t i = find(l, prefix, &found); i < l->n && strncmp(l->items[i], prefix, n) == 0; i++)
        if (role_of(l->items[i]) != role) {
            *other = role_of(l->items[i]);
            return 1;
        }
    return 0;
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

/* Writes "path:line:column: message" (col 0: "path:line: message") to err; returns -1. */
static int fail_col(char *err, size_t errlen, const char *path, int line, int col, const char *fmt,
                    ...) __attribute__((format(printf, 6, 7)));

static int fail_col(char *err, size_t errlen, const char *path, int line, int col, const char *fmt,
                    ...)
{
    char msg[400], at[16] = "";
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (col > 0)
        snprintf(at, sizeof at, ":%d", col);
    snprintf(err, errlen, "%s:%d%s: %s", path, line, at, msg);
    return -1;
}

/* The same at a line. */
#define fail_at(err, errlen, path, line, ...) fail_col(err, errlen, path, line, 0, __VA_ARGS__)

/* A role's name (n bytes) into *role, or -1 with the error at line:col. */
static int take_role(const char *name, size_t n, int *role, const char *path, int line, int col,
                     char *err, size_t errlen)
{
    enum admit_load_role r;

    if (admit_load_role_parse(name, n, &r) != 0)
        return fail_col(err, errlen, path, line, col,
                        "unknown role '%.*s': a worker's role is both, prefill or decode",
                        (int) (n > 60 ? 60 : n), name);
    *role = (int) r;
    return 0;
}

/* Checks an entry and adds its canonical form, with its role; 0, or -1 with the message. One
 * source that names a worker with two roles is ambiguous: an error, not a guess. */
static int take(struct wlist *out, const char *item, int role, const char *path, int line,
                char *err, size_t errlen)
{
    char canon[WLIST_ENTRY_MAX], msg[300];
    int other;

    if (wlist_canon_role(item, role, canon, sizeof canon, msg, sizeof msg) != 0)
        return fail_at(err, errlen, path, line, "%s", msg);
    if (wlist_role_clash(out, canon, &other))
        return fail_at(err, errlen, path, line,
                       "worker '%.120s' is named again with another role (%s, and %s before)", item,
                       wlist_role_label(role), wlist_role_label(other));
    if (wlist_add(out, canon) < 0)
        return fail_at(err, errlen, path, line, "more than %d workers", WLIST_MAX);
    return 0;
}

/* One entry's text, s .. end, whose first byte is at column col: "PROXY_URL=PUB_URL", then
 * "role=ROLE" when the source gives one, then (with comments, a line's) at most a # comment. */
static int take_words(struct wlist *out, const char *s, const char *end, int comments,
                      const char *path, int line, int col, char *err, size_t errlen)
{
    const char *w[2] = {s, s}, *we[2] = {s, s}, *p = s;
    int nw = 0, role = WLIST_ROLE_NONE, rc;
    char *item;

    for (;;) {
        while (p < end && isspace((unsigned char) *p))
            p++;
        if (p == end || (comments && *p == '#'))
            break;
        if (nw == 2)
            nw = 3; /* a third word */
        if (nw == 3)
            break;
        w[nw] = p;
        while (p < end && !isspace((unsigned char) *p))
            p++;
        we[nw++] = p;
    }
    if (nw == 3 || (nw == 2 && (we[1] - w[1] < 5 || memcmp(w[1], "role=", 5) != 0)))
        return fail_at(err, errlen, path, line, "%s",
                       comments ? "one worker a line, PROXY_URL=PUB_URL [role=ROLE] (then at most "
                                  "a # comment)"
                                : "a worker must be PROXY_URL=PUB_URL [role=ROLE]");
    if (memchr(w[0], '\0', (size_t) (we[0] - w[0])) != NULL)
        return fail_at(err, errlen, path, line, "a NUL byte");
    if (nw == 2 && take_role(w[1] + 5, (size_t) (we[1] - w[1] - 5), &role, path, line,
                             col + (int) (w[1] + 5 - s), err, errlen) != 0)
        return -1;
    item = xstrndup(w[0], (size_t) (we[0] - w[0]));
    rc = take(out, item, role, path, line, err, errlen);
    free(item);
    return rc;
}

/* One entry a line: "PROXY_URL=PUB_URL [role=ROLE]"; after it only a # comment. */
static int parse_lines(const char *path, const char *text, size_t len, struct wlist *out, char *err,
                       size_t errlen)
{
    const char *p = text, *end = text + len;
    int line = 0;

    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t) (end - p)), *w;

        if (eol == NULL)
            eol = end;
        line++;
        for (w = p; w < eol && isspace((unsigned char) *w); w++)
            ;
        if (w < eol && *w != '#' &&
            take_words(out, w, eol, 1, path, line, (int) (w - p) + 1, err, errlen) != 0)
            return -1;
        p = eol + 1; /* past a blank line, a comment, or an entry */
    }
    return 0;
}

/* The YAML form: one document, a list whose items are strings (an entry as a line has it) or
 * mappings {url, publish, role}. */
enum ykey { YK_NONE, YK_URL, YK_PUBLISH, YK_ROLE };

struct ywalk {
    const char *path;
    struct wlist *out;
    char *err;
    size_t errlen;
    int depth;            /* open sequences */
    int in_map, map_line; /* inside an item's mapping, which starts at map_line */
    enum ykey key;        /* the key whose value is next; YK_NONE: a key is next */
    unsigned have;        /* the keys given, bit (1 << ykey) */
    char url[WLIST_ENTRY_MAX], publish[WLIST_PUB_URL_MAX + 1];
    int role;
};

/* A scalar of an item's mapping: a key, or the value of the key before it. */
static int ywalk_map_scalar(struct ywalk *y, const char *s, size_t n, int line, int col)
{
    static const char *const keys[] = {NULL, "url", "publish", "role"};
    enum ykey k = y->key;

    if (k == YK_NONE) {
        for (k = YK_URL; k <= YK_ROLE; k++)
            if (strlen(keys[k]) == n && memcmp(keys[k], s, n) == 0)
                break;
        if (k > YK_ROLE)
            return fail_col(y->err, y->errlen, y->path, line, col,
                            "unknown key '%.60s' (a worker's keys are url, publish and role)", s);
        if (y->have & (1u << k))
            return fail_col(y->err, y->errlen, y->path, line, col, "'%s' given twice", keys[k]);
        y->key = k;
        return 0;
    }
    y->key = YK_NONE;
    y->have |= 1u << k;
    if (k == YK_ROLE)
        return take_role(s, n, &y->role, y->path, line, col, y->err, y->errlen);
    if (n >= (k == YK_URL ? sizeof y->url : sizeof y->publish) ||
        (k == YK_URL && memchr(s, '=', n) != NULL))
        return fail_col(y->err, y->errlen, y->path, line, col, "'%.60s' is not a worker's %s", s,
                        keys[k]);
    memcpy(k == YK_URL ? y->url : y->publish, s, n + 1);
    return 0;
}

/* The end of an item's mapping: its worker taken. */
static int ywalk_map_end(struct ywalk *y)
{
    char item[sizeof y->url + sizeof y->publish + 1];

    y->in_map = 0;
    if ((y->have & (1u << YK_URL | 1u << YK_PUBLISH)) != (1u << YK_URL | 1u << YK_PUBLISH))
        return fail_at(y->err, y->errlen, y->path, y->map_line,
                       "a worker's mapping needs url and publish (role is optional)");
    snprintf(item, sizeof item, "%s=%s", y->url, y->publish);
    return take(y->out, item, y->role, y->path, y->map_line, y->err, y->errlen);
}

static int ywalk_event(void *arg, const struct yaml_event_s *ev)
{
    struct ywalk *y = arg;
    int line = (int) ev->start_mark.line + 1, col = (int) ev->start_mark.column + 1;

    switch (ev->type) {
    case YAML_SEQUENCE_START_EVENT:
        if (y->depth++ > 0 || y->in_map)
            return fail_at(y->err, y->errlen, y->path, line,
                           "a worker must be a string PROXY_URL=PUB_URL or a mapping, not a list");
        return 0;
    case YAML_SEQUENCE_END_EVENT:
        y->depth--;
        return 0;
    case YAML_MAPPING_START_EVENT:
        if (y->depth == 0)
            return fail_at(y->err, y->errlen, y->path, line,
                           "the file must be a list of PROXY_URL=PUB_URL strings");
        if (y->in_map)
            return fail_at(y->err, y->errlen, y->path, line,
                           "a worker's url, publish and role must be strings, not mappings");
        y->in_map = 1;
        y->map_line = line;
        y->key = YK_NONE;
        y->have = 0;
        y->role = WLIST_ROLE_NONE;
        return 0;
    case YAML_MAPPING_END_EVENT:
        return ywalk_map_end(y);
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
        if (ev->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
            ev->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE)
            col++; /* past the quote */
        if (y->in_map)
            return ywalk_map_scalar(y, s, n, line, col);
        return take_words(y->out, s, s + n, 0, y->path, line, col, y->err, y->errlen);
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
        struct ywalk y = {.path = path, .out = out, .err = err, .errlen = errlen};

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
                       int role, struct wlist *out)
{
    const unsigned char *a = addrs;
    size_t step = af == AF_INET6 ? 16 : 4;
    const char *fmt = af == AF_INET6 ? "http://[%s]:%u=tcp://[%s]:%u" : "http://%s:%u=tcp://%s:%u";

    wlist_free(out);
    for (size_t i = 0; i < n; i++, a += step) {
        char ip[INET6_ADDRSTRLEN], item[2 * INET6_ADDRSTRLEN + 40], canon[WLIST_ENTRY_MAX], msg[8];

        if (inet_ntop(af, a, ip, sizeof ip) == NULL)
            continue;
        snprintf(item, sizeof item, fmt, ip, http_port, ip, pub_port);
        if (role < 0)
            wlist_add(out, item);
        else if (wlist_canon_role(item, role, canon, sizeof canon, msg, sizeof msg) == 0)
            wlist_add(out, canon); /* the same entry, " role=ROLE" appended */
    }
}

void wlist_from_ipv6(const void *addrs, size_t n, unsigned http_port, unsigned pub_port, int role,
                     struct wlist *out)
{
    from_addrs(AF_INET6, addrs, n, http_port, pub_port, role, out);
}

void wlist_from_ipv4(const void *addrs, size_t n, unsigned http_port, unsigned pub_port, int role,
                     struct wlist *out)
{
    from_addrs(AF_INET, addrs, n, http_port, pub_port, role, out);
}
