/* discover: the workers file and DNS names, followed on the loop (see discover.h). */
#include "discover.h"
#include "resolver.h"
#include "router.h"
#include "wlist.h"
#include "admit/load.h"
#include "util/log.h"
#include "wire/prom.h"
#include "util/xmalloc.h"
#include "util/clock.h"

#include <event2/dns.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A name that keeps failing is logged again at most this often. */
#define DNS_LOG_EVERY_MS 60000

_Static_assert(WLIST_ROLE_NONE == ROUTER_ROLE_PUBLISHED, "a source without a role: published");

/* Room for one entry split into its URLs. */
#define PROXY_MAX (NETADDR_HOST_MAX + 16)

enum { LOOKUP_OK, LOOKUP_FAILED, LOOKUP_EMPTY, LOOKUP_RESULTS };
static const char *const lookup_results[LOOKUP_RESULTS] = {"ok", "failed", "empty"};

struct dname {
    struct discover *d;
    int gone; /* no longer configured: freed when its running lookup answers */
    char name[WLIST_DNS_NAME_MAX + 1];
    unsigned http_port, pub_port;
    int role; /* the role of its workers (--prefill-worker-dns...), or WLIST_ROLE_NONE */
    struct evdns_request *req; /* the lookup running, or NULL */
    int second;                /* it asks for the --dns-family's other records */
    struct wlist cur;          /* the workers of its last answer with addresses */
    uint64_t results[LOOKUP_RESULTS];
    int bad;           /* lookups that failed or came back empty since the last good one */
    int64_t logged_ms; /* when its bad run was last logged */
    unsigned quiet;    /* bad lookups not logged since then */
    char why[160];     /* what the last one logged said */
};

struct discover {
    struct event_base *base;
    struct router *r;
    const struct router_cfg *cfg;
    struct evdns_base *dns; /* NULL until there are names */
    struct event *tick;     /* resolves the names again every dns_interval_ms */
    struct dname **names;   /* those of the config, then those leaving (gone) */
    size_t nnames;
    struct wlist fixed; /* the --worker, --prefill-worker, --decode-worker entries, as applied */
    struct wlist file;  /* the workers file's workers, as last applied */
    uint64_t reloads_ok, reloads_failed;
};

/* ---- applying a source's new list -------------------------------------------------------- */

/* Makes *cur, the list a source gave last, next: retires what is gone, then adds what is new
 * (so that a worker whose publisher changed is retired and revived with the new one). With
 * strict, a worker that cannot be added fails it all (-1, err); without, it is logged and left
 * out of *cur, to be tried again at the next reading. next is consumed. */
static int apply(struct discover *d, const char *what, struct wlist *cur, struct wlist *next,
                 int strict, char *err, size_t errlen)
{
    struct wlist add = {0}, gone = {0};
    char proxy[PROXY_MAX], pub[WLIST_PUB_URL_MAX + 1], why[512];
    int rc = 0, role;

    wlist_diff(cur, next, &add, &gone);
    for (size_t i = 0; i < gone.n; i++)
        if (wlist_split(gone.items[i], proxy, sizeof proxy, pub, sizeof pub, NULL) == 0) {
            log_info("%s: worker %s is gone", what, proxy);
            router_retire_worker(d->r, proxy);
        }
    for (size_t i = 0; i < add.n && rc == 0; i++) {
        if (wlist_split(add.items[i], proxy, sizeof proxy, pub, sizeof pub, &role) != 0 ||
            router_add_worker(d->r, proxy, pub, role, why, sizeof why) != 0) {
            if (strict) {
                snprintf(err, errlen, "%s: %s", what, why);
                rc = -1;
            } else
                log_warn("%s: worker %s not added: %s", what, add.items[i], why);
            wlist_remove(next, add.items[i]);
        } else
            log_info("%s: worker %s added (load from %s, role %s)", what, proxy, pub,
                     wlist_role_label(role));
    }
    wlist_move(cur, next);
    wlist_free(&add);
    wlist_free(&gone);
    return rc;
}

/* ---- the workers file --------------------------------------------------------------------- */

int discover_reload_file(struct discover *d)
{
    struct wlist next = {0};
    char err[512];

    if (d->cfg->workers_file[0] == '\0')
        return -1;
    if (wlist_read(d->cfg->workers_file, &next, err, sizeof err) != 0) {
        log_error("workers file not applied, the workers stay as they are: %s", err);
        d->reloads_failed++;
        return -1;
    }
    log_info("workers file %s read: %zu workers", d->cfg->workers_file, next.n);
    apply(d, "workers file", &d->file, &next, 0, NULL, 0);
    d->reloads_ok++;
    return 0;
}

/* ---- DNS ---------------------------------------------------------------------------------- */

/* A lookup that failed or came back empty: counted, and logged at the first of a run, when
 * the reason changes, and else at most every DNS_LOG_EVERY_MS. */
static void bad_lookup(struct dname *n, const char *why)
{
    int64_t now = clock_mono_ms();

    if (n->bad++ == 0 || strcmp(n->why, why) != 0 || now - n->logged_ms >= DNS_LOG_EVERY_MS) {
        snprintf(n->why, sizeof n->why, "%s", why);
        log_warn("dns %s: %s; keeping the %zu workers of its last answer (%d bad lookups in a "
                 "row, %u of them not logged)",
                 n->name, why, n->cur.n, n->bad, n->quiet);
        n->logged_ms = now;
        n->quiet = 0;
    } else
        n->quiet++;
}

/* A name that left the config, once no lookup of its own runs: forgotten. */
static void drop(struct dname *n)
{
    struct discover *d = n->d;

    for (size_t i = 0; i < d->nnames; i++)
        if (d->names[i] == n) {
            memmove(&d->names[i], &d->names[i + 1], (d->nnames - i - 1) * sizeof *d->names);
            d->nnames--;
            break;
        }
    wlist_free(&n->cur);
    free(n);
}

/* Whether a lookup asks for AAAA records: the family's first kind, or its second. */
static int asks_v6(enum rc_dns_family f, int second)
{
    int first_v6 = f == RC_DNS_V6 || f == RC_DNS_V6_PREFERRED;

    return second ? !first_v6 : first_v6;
}

static const char *const no_records[] = {"no A record", "no AAAA record", "no A or AAAA record",
                                         "no AAAA or A record"};

static int start_lookup(struct dname *n, int second);

static void on_answer(int result, char type, int count, int ttl, void *addresses, void *arg)
{
    struct dname *n = arg;
    struct wlist next = {0};
    char what[WLIST_DNS_NAME_MAX + 8], why[160];

    (void) ttl; /* re-resolved every interval, whatever the TTL (Envoy's default) */
    n->req = NULL;
    if (n->gone) {
        drop(n);
        return;
    }
    if (result == DNS_ERR_CANCEL || result == DNS_ERR_SHUTDOWN)
        return;
    if (result == DNS_ERR_NONE && (type == DNS_IPv4_A || type == DNS_IPv6_AAAA) && count > 0) {
        n->results[LOOKUP_OK]++;
        if (n->bad > 0)
            log_info("dns %s: resolves again after %d bad lookups", n->name, n->bad);
        n->bad = 0;
        n->why[0] = '\0';
        if (type == DNS_IPv4_A)
            wlist_from_ipv4(addresses, (size_t) count, n->http_port, n->pub_port, n->role, &next);
        else
            wlist_from_ipv6(addresses, (size_t) count, n->http_port, n->pub_port, n->role, &next);
        snprintf(what, sizeof what, "dns %s", n->name);
        apply(n->d, what, &n->cur, &next, 0, NULL, 0);
        return;
    }
    if (result == DNS_ERR_NONE || result == DNS_ERR_NODATA) {
        enum rc_dns_family f = n->d->cfg->dns_family;

        /* The name has none of the first kind: the preferred families ask for the other. */
        if (!n->second && (f == RC_DNS_V4_PREFERRED || f == RC_DNS_V6_PREFERRED) &&
            start_lookup(n, 1) == 0)
            return;
        n->results[LOOKUP_EMPTY]++;
        bad_lookup(n, no_records[f]);
        return;
    }
    if (result == DNS_ERR_NOTEXIST) {
        n->results[LOOKUP_EMPTY]++;
        bad_lookup(n, "no such name (NXDOMAIN)");
        return;
    }
    n->results[LOOKUP_FAILED]++;
    snprintf(why, sizeof why, "lookup failed: %s", evdns_err_to_string(result));
    bad_lookup(n, why);
}

/* Asks for the name's first (or second) kind of records; 0, or -1 when evdns would not. */
static int start_lookup(struct dname *n, int second)
{
    n->second = second;
    n->req = asks_v6(n->d->cfg->dns_family, second)
                 ? evdns_base_resolve_ipv6(n->d->dns, n->name, 0, on_answer, n)
                 : evdns_base_resolve_ipv4(n->d->dns, n->name, 0, on_answer, n);
    return n->req != NULL ? 0 : -1;
}

static void resolve(struct dname *n)
{
    if (n->req != NULL)
        return; /* still running: its answer is as new as a second one would be */
    if (start_lookup(n, 0) != 0) {
        n->results[LOOKUP_FAILED]++;
        bad_lookup(n, "lookup could not start");
    }
}

void discover_resolve_now(struct discover *d)
{
    if (d->dns == NULL)
        return; /* no name yet, or a resolver that could not be set up (logged) */
    for (size_t i = 0; i < d->nnames; i++)
        if (!d->names[i]->gone)
            resolve(d->names[i]);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    discover_resolve_now(arg);
}

/* The name followed (not leaving) with these ports and role, or NULL. */
static struct dname *find_name(const struct discover *d, const char *name, unsigned http_port,
                               unsigned pub_port, int role)
{
    for (size_t i = 0; i < d->nnames; i++) {
        struct dname *n = d->names[i];

        if (n->gone != 1 && strcmp(n->name, name) == 0 && n->http_port == http_port &&
            n->pub_port == pub_port && n->role == role)
            return n;
    }
    return NULL;
}

/* cfg's lists of names, each with the role of its workers. */
static const struct opt_list *dns_list(const struct router_cfg *cfg, int i, int *role)
{
    static const int roles[] = {WLIST_ROLE_NONE, ADMIT_LOAD_ROLE_PREFILL, ADMIT_LOAD_ROLE_DECODE};

    *role = roles[i];
    return i == 0 ? &cfg->worker_dns : i == 1 ? &cfg->prefill_worker_dns : &cfg->decode_worker_dns;
}

/* Follows cfg's names: each new one is added (resolved by the caller), each one no longer
 * there retires its workers and is forgotten once its running lookup answers. A name given
 * twice is followed once; one whose role changed is another name (the old one retires its
 * workers, the new one adds them with the new role). */
static void follow_names(struct discover *d, const struct router_cfg *cfg, int reloading)
{
    char name[WLIST_DNS_NAME_MAX + 1], msg[256];
    unsigned http_port, pub_port;
    int role;

    for (size_t i = 0; i < d->nnames; i++)
        if (!d->names[i]->gone)
            d->names[i]->gone = 2; /* marked: unmarked below if cfg still names it */
    for (size_t j = 0, i = 0; j < 3; j++, i = 0)
        for (const struct opt_list *l = dns_list(cfg, (int) j, &role); i < l->n; i++) {
            struct dname *n;

            if (wlist_dns_spec(l->items[i], name, &http_port, &pub_port, msg, sizeof msg) != 0)
                fatal("--worker-dns: %s", msg); /* checked at parse time: this cannot fail */
            if ((n = find_name(d, name, http_port, pub_port, role)) != NULL) {
                n->gone = 0; /* still named (or named twice) */
                continue;
            }
            n = xcalloc(1, sizeof *n);
            n->d = d;
            snprintf(n->name, sizeof n->name, "%s", name);
            n->http_port = http_port;
            n->pub_port = pub_port;
            n->role = role;
            d->names = xrealloc(d->names, (d->nnames + 1) * sizeof *d->names);
            d->names[d->nnames++] = n;
            if (reloading)
                log_info("dns %s: new in the configuration; its workers are followed (role %s)",
                         n->name, wlist_role_label(role));
        }
    for (size_t i = d->nnames; i-- > 0;) {
        struct dname *n = d->names[i];
        struct wlist none = {0};
        char what[WLIST_DNS_NAME_MAX + 8];

        if (n->gone != 2)
            continue;
        n->gone = 1;
        log_info("dns %s: no longer in the configuration; its %zu workers are retired", n->name,
                 n->cur.n);
        snprintf(what, sizeof what, "dns %s", n->name);
        apply(d, what, &n->cur, &none, 0, NULL, 0);
        if (n->req == NULL)
            drop(n); /* else on_answer() does, when its lookup ends */
    }
}

/* Names to resolve: the resolver set up (the first time), its wait and the interval's timer
 * set for the interval; none: the timer stopped. 0, or -1 with err (the resolver). */
static int schedule(struct discover *d, const struct router_cfg *cfg, char *err, size_t errlen)
{
    struct timeval tv = {cfg->dns_interval_ms / 1000, (cfg->dns_interval_ms % 1000) * 1000};
    int any = 0;

    for (size_t i = 0; i < d->nnames; i++)
        any |= !d->names[i]->gone;
    if (!any) {
        event_del(d->tick);
        return 0;
    }
    if (d->dns == NULL && (d->dns = resolver_new(d->base, cfg, err, errlen)) == NULL)
        return -1;
    resolver_set_interval(d->dns, cfg->dns_interval_ms);
    event_add(d->tick, &tv); /* again: the interval starts over */
    return 0;
}

struct discover *discover_new(struct event_base *base, struct router *r,
                              const struct router_cfg *cfg, char *err, size_t errlen)
{
    struct discover *d = xcalloc(1, sizeof *d);

    d->base = base;
    d->r = r;
    d->cfg = cfg;
    d->tick = event_new(base, -1, EV_PERSIST, on_tick, d);
    if (d->tick == NULL)
        fatal("event_new failed");
    if (cfg->worker_dns.n + cfg->prefill_worker_dns.n + cfg->decode_worker_dns.n > 0 &&
        (d->dns = resolver_new(base, cfg, err, errlen)) == NULL) {
        discover_free(d);
        return NULL;
    }
    follow_names(d, cfg, 0);
    return d;
}

/* cfg's lists of workers, each with the role it gives them. */
static const struct opt_list *worker_list(const struct router_cfg *cfg, int i, int *role)
{
    static const int roles[] = {WLIST_ROLE_NONE, ADMIT_LOAD_ROLE_PREFILL, ADMIT_LOAD_ROLE_DECODE};

    *role = roles[i];
    return i == 0 ? &cfg->workers : i == 1 ? &cfg->prefill_workers : &cfg->decode_workers;
}

int discover_start(struct discover *d, char *err, size_t errlen)
{
    struct wlist first = {0};
    char canon[WLIST_ENTRY_MAX], proxy[PROXY_MAX], pub[WLIST_PUB_URL_MAX + 1], why[512];
    int role;

    /* The --worker entries, then --prefill-worker's and --decode-worker's, in their order
     * (which is the workers' order in /load). */
    for (size_t j = 0, i = 0; j < 3; j++, i = 0)
        for (const struct opt_list *l = worker_list(d->cfg, (int) j, &role); i < l->n; i++) {
            if (wlist_canon_role(l->items[i], role, canon, sizeof canon, why, sizeof why) != 0 ||
                wlist_add(&d->fixed, canon) == 0)
                continue; /* checked at parse time; or named twice: one worker */
            if (wlist_split(canon, proxy, sizeof proxy, pub, sizeof pub, NULL) != 0 ||
                router_add_worker(d->r, proxy, pub, role, why, sizeof why) != 0) {
                snprintf(err, errlen, "worker: %s", why);
                return -1;
            }
        }
    if (d->cfg->workers_file[0] != '\0') {
        /* As read with the configuration (so --check-config judged the same file). */
        for (size_t i = 0; i < d->cfg->file_workers.n; i++)
            wlist_add(&first, d->cfg->file_workers.items[i]);
        if (apply(d, "workers file", &d->file, &first, 1, err, errlen) != 0)
            return -1;
        if (d->file.n == 0)
            log_warn("workers file %s names no worker yet", d->cfg->workers_file);
    }
    if (schedule(d, d->cfg, err, errlen) != 0)
        return -1;
    discover_resolve_now(d);
    return 0;
}

void discover_reconfigure(struct discover *d, const struct router_cfg *cfg)
{
    struct wlist next = {0}, none = {0};
    char canon[WLIST_ENTRY_MAX], err[512];
    int role;

    for (size_t j = 0, i = 0; j < 3; j++, i = 0)
        for (const struct opt_list *l = worker_list(cfg, (int) j, &role); i < l->n; i++)
            if (wlist_canon_role(l->items[i], role, canon, sizeof canon, err, sizeof err) == 0)
                wlist_add(&next, canon); /* checked at parse time */
    apply(d, "--worker", &d->fixed, &next, 0, NULL, 0);
    if (strcmp(d->cfg->workers_file, cfg->workers_file) != 0 && cfg->workers_file[0] == '\0') {
        log_info("workers file %s: no longer in the configuration; its %zu workers are retired",
                 d->cfg->workers_file, d->file.n);
        apply(d, "workers file", &d->file, &none, 0, NULL, 0);
    }
    d->cfg = cfg; /* a new workers file is read by discover_reload_file(), as a step of its own */
    follow_names(d, cfg, 1);
    if (schedule(d, cfg, err, sizeof err) != 0)
        log_error("dns: %s; the names are not resolved", err);
}

void discover_render_metrics(struct discover *d, struct buf *out)
{
    if (d == NULL)
        return;
    if (d->cfg->worker_dns.n + d->cfg->prefill_worker_dns.n + d->cfg->decode_worker_dns.n > 0) {
        prom_family(out, "admit_router_dns_lookups_total", "counter",
                    "DNS lookups of --worker-dns names, by result (ok: addresses; failed: "
                    "timeout, SERVFAIL, refused; empty: NXDOMAIN or no A record; failed and "
                    "empty keep the last workers)");
        for (size_t i = 0; i < d->nnames; i++)
            for (int k = 0; k < LOOKUP_RESULTS && !d->names[i]->gone; k++) {
                struct buf l;

                buf_init(&l);
                prom_label(&l, "name", d->names[i]->name);
                prom_label(&l, "result", lookup_results[k]);
                prom_sample(out, "admit_router_dns_lookups_total", l.data,
                            (double) d->names[i]->results[k]);
                buf_free(&l);
            }
        prom_family(out, "admit_router_dns_workers", "gauge",
                    "Workers a --worker-dns name gives now (its last answer with addresses)");
        for (size_t i = 0; i < d->nnames; i++) {
            struct buf l;

            if (d->names[i]->gone)
                continue;
            buf_init(&l);
            prom_label(&l, "name", d->names[i]->name);
            prom_sample(out, "admit_router_dns_workers", l.data, (double) d->names[i]->cur.n);
            buf_free(&l);
        }
    }
    if (d->cfg->workers_file[0] != '\0') {
        prom_family(out, "admit_router_workers_file_reloads_total", "counter",
                    "Readings of the workers file on SIGHUP, by result (failed: the workers "
                    "stayed as they were)");
        prom_sample1(out, "admit_router_workers_file_reloads_total", "result", "ok",
                     (double) d->reloads_ok);
        prom_sample1(out, "admit_router_workers_file_reloads_total", "result", "failed",
                     (double) d->reloads_failed);
        prom_gauge(out, "admit_router_workers_file_workers",
                   "Workers the workers file gives now (as last applied)", (double) d->file.n);
    }
}

void discover_free(struct discover *d)
{
    if (d == NULL)
        return;
    if (d->tick != NULL)
        event_free(d->tick);
    if (d->dns != NULL)
        evdns_base_free(d->dns, 0); /* running lookups are dropped, their callbacks not run */
    for (size_t i = 0; i < d->nnames; i++) {
        wlist_free(&d->names[i]->cur);
        free(d->names[i]);
    }
    free(d->names);
    wlist_free(&d->fixed);
    wlist_free(&d->file);
    free(d);
}
