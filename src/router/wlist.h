/* wlist: admit-router's lists of workers as its discovery sources see them.
 *
 * A worker is one entry, "PROXY_URL=PUB_URL": its admitd URL and its load publisher, and the
 * role the source gives it, if any (issue 27: "prefill", "decode" or "both"; none: the role its
 * load messages publish). Each
 * source of workers (the --workers-file, each --worker-dns name) keeps the list it gave last,
 * and a new reading of the source (the file again, a new DNS answer) is compared with it:
 * what is new is added to the router, what is gone is retired. That comparison, the reading
 * of a workers file and the entries of a DNS answer are here, pure, so that the unit tests
 * cover them without a socket; the event loop's side is discover.h.
 *
 * Entries are kept canonical ("http://" + the URL's host:port, "=", the publisher as given,
 * then " role=ROLE" when the source gives one), so that "http://h" and "http://h:80/" are one
 * worker and a change of role is a worker gone and one new (retired, then revived with its new
 * role), and a list is kept sorted and unique, so that the comparison is one merge. Pure: no
 * sockets, no event loop. */
#ifndef ADMIT_WLIST_H
#define ADMIT_WLIST_H

#include "util/netaddr.h"

#include <stddef.h>
#include <stdint.h>

/* Longest load publisher URL, as admitd's --publish. */
#define WLIST_PUB_URL_MAX 256
/* Longest DNS name followed (RFC 1035: 253 bytes written out). */
#define WLIST_DNS_NAME_MAX 253
/* Room for a canonical entry: "http://" host:port "=" publisher " role=" role. */
#define WLIST_ENTRY_MAX (7 + NETADDR_HOST_MAX + 8 + 1 + WLIST_PUB_URL_MAX + 16)
/* An entry whose source gives no role: the worker's load messages say it (as
 * ROUTER_ROLE_PUBLISHED); else a role is an enum admit_load_role. */
#define WLIST_ROLE_NONE (-1)
/* Most entries one list (a file, an answer) may hold. */
#define WLIST_MAX 4096

/* A sorted list of unique canonical entries. Zeroed is empty. */
struct wlist {
    char **items;
    size_t n, cap;
};

/** checks one "PROXY_URL=PUB_URL" entry (an http:// URL, a tcp:// or ipc:// publisher);
 *  0, or -1 with what is wrong in msg */
int wlist_check(const char *item, char *msg, size_t msglen);
/** the canonical form of an entry into out ("http://HOST:PORT=PUB"); 0, or -1 with msg */
int wlist_canon(const char *item, char *out, size_t outlen, char *msg, size_t msglen);
/** the same with a role (an enum admit_load_role: " role=ROLE" appended), or WLIST_ROLE_NONE */
int wlist_canon_role(const char *item, int role, char *out, size_t outlen, char *msg,
                     size_t msglen);
/** splits a canonical entry into its proxy URL and its publisher, both NUL-terminated copies
 *  in the caller's buffers, and its role into *role (WLIST_ROLE_NONE when it has none; role
 *  may be NULL); 0, or -1 when one does not fit or there is no '=' */
int wlist_split(const char *item, char *proxy, size_t proxylen, char *pub, size_t publen,
                int *role);
/** the name of a role as the messages say it: the wire name, or "as published" for none */
const char *wlist_role_label(int role);
/** 1 when l holds an entry for canon's proxy URL with another role than canon's (that role
 *  into *other), else 0: one source that gives a worker two roles is a configuration error */
int wlist_role_clash(const struct wlist *l, const char *canon, int *other);
/** adds a copy of a canonical entry, in order; 1 if added, 0 if it was there, -1 if full */
int wlist_add(struct wlist *l, const char *item);
/** removes item from l; 1 if it was there, else 0 */
int wlist_remove(struct wlist *l, const char *item);
/** 1 when l holds item */
int wlist_has(const struct wlist *l, const char *item);
/** empties l and frees what it holds; l stays usable */
void wlist_free(struct wlist *l);
/** moves src into dst (dst's old items freed), leaving src empty */
void wlist_move(struct wlist *dst, struct wlist *src);

/** what changes from cur to next: the entries of next that cur lacks into add, those of cur
 *  that next lacks into gone (both emptied first) */
void wlist_diff(const struct wlist *cur, const struct wlist *next, struct wlist *add,
                struct wlist *gone);

/** a workers file's text (len bytes, NUL-terminated): one entry a line, "PROXY_URL=PUB_URL"
 *  and optionally "role=ROLE" after it (blank lines and # comments ignored, a comment may
 *  follow an entry), or a YAML list whose items are such strings or mappings {url: PROXY_URL,
 *  publish: PUB_URL, role: ROLE} (role optional; the file's first text is "-" or "["); the
 *  entries into out (emptied first). A worker named twice with two roles is an error. 0, or -1
 *  with "path:line: message" in err (a role, or a YAML error, also with its column) and out
 *  empty */
int wlist_parse(const char *path, const char *text, size_t len, struct wlist *out, char *err,
                size_t errlen);
/** reads the workers file at path and parses it as wlist_parse does */
int wlist_read(const char *path, struct wlist *out, char *err, size_t errlen);

/** checks a --worker-dns value, NAME:HTTP_PORT:PUB_PORT, and splits it (name into name of
 *  WLIST_DNS_NAME_MAX + 1 bytes); 0, or -1 with what is wrong in msg */
int wlist_dns_spec(const char *spec, char *name, unsigned *http_port, unsigned *pub_port, char *msg,
                   size_t msglen);
/** the workers of a DNS answer: "http://A:HTTP_PORT=tcp://A:PUB_PORT" for each IPv4 address
 *  (4 bytes each, in network order, as evdns gives them), with role (or WLIST_ROLE_NONE), into
 *  out (emptied first) */
void wlist_from_ipv4(const void *addrs, size_t n, unsigned http_port, unsigned pub_port, int role,
                     struct wlist *out);
/** the same for IPv6 addresses (16 bytes each): "http://[A]:HTTP_PORT=tcp://[A]:PUB_PORT",
 *  A in its shortest form (RFC 5952, as inet_ntop writes it) */
void wlist_from_ipv6(const void *addrs, size_t n, unsigned http_port, unsigned pub_port, int role,
                     struct wlist *out);

#endif
