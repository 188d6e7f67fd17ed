/* resolver: admit-router's DNS resolver: libevent's evdns, on the router's loop (no thread).
 * One for the --worker-dns names (discover.c), one for workers named by host name (their
 * engine connections, workers.c); both as the configuration says. */
#ifndef ADMIT_RESOLVER_H
#define ADMIT_RESOLVER_H

#include "config.h"

#include <stddef.h>

struct event_base;
struct evdns_base;

/** a resolver on base: cfg's --dns-nameserver alone, else /etc/resolv.conf's (its search
 *  domains and ndots too, which Kubernetes' short Service names need, and /etc/hosts); NULL
 *  with err when evdns refuses the nameserver */
struct evdns_base *resolver_new(struct event_base *base, const struct router_cfg *cfg, char *err,
                                size_t errlen);
/** a lookup waits half of interval_ms per attempt, between 0.5 and 5 s */
void resolver_set_interval(struct evdns_base *dns, unsigned interval_ms);

#endif
