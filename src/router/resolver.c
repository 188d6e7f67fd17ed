/* resolver: the router's evdns resolver, as its configuration says (see resolver.h). */
#include "resolver.h"
#include "util/log.h"

#include <event2/dns.h>
#include <stdio.h>

/* Attempts per lookup; each waits the resolver's timeout (below). */
#define DNS_ATTEMPTS "2"

/* evdns's own messages (a nameserver down, back up): ours say what matters, at warn. */
static void evdns_log(int is_warning, const char *msg)
{
    log_debug("evdns%s: %s", is_warning ? " (warning)" : "", msg);
}

/* A lookup waits half the interval at each attempt, between 0.5 and 5 s, so that a dead
 * server is known within about an interval. */
void resolver_set_interval(struct evdns_base *dns, unsigned interval_ms)
{
    unsigned wait_ms = interval_ms / 2;
    char timeout[32];

    if (wait_ms < 500)
        wait_ms = 500;
    if (wait_ms > 5000)
        wait_ms = 5000;
    snprintf(timeout, sizeof timeout, "%u.%03u", wait_ms / 1000, wait_ms % 1000);
    evdns_base_set_option(dns, "timeout:", timeout);
}

struct evdns_base *resolver_new(struct event_base *base, const struct router_cfg *cfg, char *err,
                                size_t errlen)
{
    int own = cfg->dns_nameserver[0] != '\0';
    struct evdns_base *dns = evdns_base_new(base, (own ? 0 : EVDNS_BASE_INITIALIZE_NAMESERVERS) |
                                                      EVDNS_BASE_DISABLE_WHEN_INACTIVE);

    if (dns == NULL) {
        snprintf(err, errlen, "cannot set up the DNS resolver");
        return NULL;
    }
    evdns_set_log_fn(evdns_log);
    if (own && evdns_base_nameserver_ip_add(dns, cfg->dns_nameserver) != 0) {
        snprintf(err, errlen, "--dns-nameserver %s: not a nameserver evdns takes",
                 cfg->dns_nameserver);
        evdns_base_free(dns, 0);
        return NULL;
    }
    resolver_set_interval(dns, cfg->dns_interval_ms);
    evdns_base_set_option(dns, "attempts:", DNS_ATTEMPTS);
    return dns;
}
