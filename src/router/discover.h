/* discover: admit-router's workers from its sources: the --worker entries, the workers file
 * (--workers-file, re-read on SIGHUP) and DNS names (--worker-dns, resolved every
 * --dns-interval-ms and on SIGHUP). A reload of the config may change each of them.
 *
 * Each source keeps the list of workers it gave last (wlist.h); a new reading is compared with
 * it, and the router adds what is new (router_add_worker) and retires what is gone
 * (router_retire_worker). A worker named by several sources (a --worker too, or two names) is
 * retired only when none names it any more.
 *
 * A source may give its workers a role (issue 27): --prefill-worker and --decode-worker, their
 * DNS forms, role=ROLE in the workers file; --worker, --worker-dns and the file's entries
 * without one leave it to what the worker publishes (ROUTER_ROLE_PUBLISHED). The role is part
 * of a source's entry (wlist.h), so a change of role is a worker retired and added again.
 *
 * DNS is libevent's evdns, on the router's loop: no thread, and no blocking getaddrinfo. Each
 * name is asked for its A records (or AAAA, --dns-family); every address is a worker,
 * http://ADDR:HTTP_PORT with its publisher tcp://ADDR:PUB_PORT. A name whose answer has addresses
 * is the whole truth (as Envoy's STRICT_DNS); a lookup that fails (timeout, SERVFAIL, refused) or
 * comes back empty (NXDOMAIN, no A record) changes nothing, as HAProxy's "hold" keeps the last
 * valid answer: one bad lookup is no outage. Every result is counted and a bad run is logged,
 * rate-limited. A lookup still running when the next is due is left to finish, not doubled. */
#ifndef ADMIT_DISCOVER_H
#define ADMIT_DISCOVER_H

#include "config.h"
#include "util/buf.h"

#include <stddef.h>

struct event_base;
struct discover;
struct router;

/** sets the sources of cfg up for r (the resolver when there are names); NULL with err when
 *  evdns cannot be set up (a nameserver it refuses) */
struct discover *discover_new(struct event_base *base, struct router *r,
                              const struct router_cfg *cfg, char *err, size_t errlen);
/** adds the workers file's workers as read with the config, and starts resolving the names;
 *  0, or -1 with err when a worker cannot be added */
int discover_start(struct discover *d, char *err, size_t errlen);
/** a reload: follows cfg (kept) from now on. The --worker entries are compared with those
 *  followed, and the DNS names too (a new name is resolved at the next discover_resolve_now;
 *  one gone retires its workers); the interval is cfg's. A workers file no longer configured
 *  retires its workers; another file is read by the next discover_reload_file(), whose
 *  workers it is compared with. A worker that cannot be added is logged and left out */
void discover_reconfigure(struct discover *d, const struct router_cfg *cfg);
/** reads the workers file again and applies it; a file that cannot be read or parsed is
 *  logged (file:line) and changes nothing; 0, or -1 when it was bad (or there is none) */
int discover_reload_file(struct discover *d);
/** resolves every name now (SIGHUP); one whose lookup is running is left to it */
void discover_resolve_now(struct discover *d);
/** appends the families of discovery: lookups by name and result, workers by name, reloads */
void discover_render_metrics(struct discover *d, struct buf *out);
/** stops every lookup and frees; before the router and the loop are freed; NULL is a no-op */
void discover_free(struct discover *d);

#endif
