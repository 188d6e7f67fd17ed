/* wlist: admit-router's lists of workers as its discovery sources see them.
 *
 * A worker is one entry, "PROXY_URL=PUB_URL": its admitd URL and its load publisher. Each
 * source of workers (the --workers-file, each --worker-dns name) keeps the list it gave last,
 * and a new reading of the source (the file again, a new DNS answer) is compared with it:
 * what is new is added to the router, what is gone is retired. That comparison, the reading
 * of a workers file and the entries of a DNS answer are here, pure, so that the unit tests
 * cover them without a socket; the event loop's side is discover.h.
 *
 * Entries are kept canonical ("http://" + the URL's host:port, "=", the publisher as given),
 * so that "http://h" and "http://h:80/" are one worker, and a list is kept sorted and unique,
 * so that the comparison is one merge. Pure: no sockets, no event loop. */
#ifndef ADMIT_WLIST_H
#define ADMIT_WLIST_H

#include "util/netaddr.h"

#include <stddef.h>
#include <stdint.h>

/* Longest load publisher URL, as admitd's --publish. */
#define WLIST_PUB_URL_MAX 256
/* Longest DNS name followed (RFC 1035: 253 bytes written out). */
#define WLIST_DNS_NAME_MAX 253
/* Room for a canonical entry: "http://" host:port "=" publisher. */
#define WLIST_ENTRY_MAX (7 + NETADDR_HOST_MAX + 8 + 1 + WLIST_PUB_URL_MAX)
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
/** splits a canonical entry into its proxy URL and its publisher, both NUL-terminated copies
 *  in the caller's buffers; 0, or -1 when one does not fit or there is no '=' */
int wlist_split(const char *item, char *proxy, size_t proxylen, char *pub, size_t publen);
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

/** a workers file's text (len bytes, NUL-terminated): one entry a line (blank lines and
 *  # comments ignored, a comment may follow an entry), or a YAML list of entries (the file's
 *  first text is "-" or "["); the entries into out (emptied first). 0, or -1 with
 *  "path:line: message" (a YAML error also with its column) in err and out empty */
int wlist_parse(const char *path, const char *text, size_t len, struct wlist *out, char *err,
                size_t errlen);
/** reads the workers file at path and parses it as wlist_parse does */
int wlist_read(const char *path, struct wlist *out, char *err, size_t errlen);

/** checks a --worker-dns value, NAME:HTTP_PORT:PUB_PORT, and splits it (name into name of
 *  WLIST_DNS_NAME_MAX + 1 bytes); 0, or -1 with what is wrong in msg */
int wlist_dns_spec(const char *spec, char *name, unsigned *http_port, unsigned *pub_port, char *msg,
                   size_t msglen);
/** the workers of a DNS answer: "http://A:HTTP_PORT=tcp://A:PUB_PORT" for each IPv4 address
 *  (4 bytes each, in network order, as evdns gives them) into out (emptied first) */
void wlist_from_ipv4(const void *addrs, size_t n, unsigned http_port, unsigned pub_port,
                     struct wlist *out);
/** the same for IPv6 addresses (16 bytes each): "http://[A]:HTTP_PORT=tcp://[A]:PUB_PORT",
 *  A in its shortest form (RFC 5952, as inet_ntop writes it) */
void wlist_from_ipv6(const void *addrs, size_t n, unsigned http_port, unsigned pub_port,
                     struct wlist *out);

#endif
