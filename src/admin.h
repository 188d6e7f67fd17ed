/* admin: the metrics listener (/metrics, /health, /ready).
 *
 * Kept apart from the client listener so that scrapes and probes never queue behind client
 * traffic and can be firewalled separately. Read-only. */
#ifndef ADMIT_ADMIN_H
#define ADMIT_ADMIN_H

#include "metrics.h"
#include "netaddr.h"

#include <stddef.h>

struct event_base;
struct proxy;
struct admin;

/** creates the listener's server; px supplies live gate occupancy */
struct admin *admin_new(struct event_base *base, struct proxy *px, struct metrics *m,
                        const char *version);
/** binds it; writes the bound "host:port" into bound; 0 or -1 with err */
int admin_bind(struct admin *a, const struct hostport *hp, char *bound, size_t boundlen, char *err,
               size_t errlen);
/** closes the listener and frees */
void admin_free(struct admin *a);

#endif
