/* workers: the worker table: adding, retiring, reviving and removing workers, and the
 * exchanges that hold or pin them (see workers.h). Their load messages: workers_load.c. */
#include "workers.h"
#include "http/netsock.h"
#include "http/upstream.h"
#include "kvroute.h"
#include "model_route.h"
#include "pools.h"
#include "pubsub/subscribe.h"
#include "resolver.h"
#include "select.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "workers_impl.h"

#include <event2/dns.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- removing retired workers that nothing holds any more -------------------------------- */

/* A retired worker that nothing holds any more: its upstream freed, its index free. */
static void bury(struct workers *ws, struct worker *w)
{
    upstream_free(w->up);
    w->up = NULL;
    sel_reset(ws->sel, w->idx);
    w->state = WORKER_FREE;
    w->worker_id[0] = '\0';
    w->last_ms = 0;
    w->bad_messages = 0;
    w->unresolved_said = 0;
    w->lost = 0;
    w->id_said = 0;
    w->http_down = 0;
    ws->changes.removed++;
    log_info("worker %s removed: its last request ended", w->proxy_url);
}

static int unheld(const struct worker *w)
{
    return w->inflight == 0 && w->pins == 0;
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    struct workers *ws = arg;

    (void) fd;
    (void) what;
    for (size_t k = 0; k < ws->n; k++)
        if (ws->w[k]->state == WORKER_RETIRED && unheld(ws->w[k]))
            bury(ws, ws->w[k]);
}

/* An exchange lets go of worker k: the last one of a retired worker frees it, from a callback
 * of its own so that no caller up the stack (the proxy's relay) still has its upstream. */
static void let_go(struct workers *ws, int k, int pin)
{
    struct worker *w = ws->w[k];
    static const struct timeval now = {0, 0};

    if (pin)
        w->pins--;
    else
        w->inflight--;
    if (w->state == WORKER_RETIRED && unheld(w) && !evtimer_pending(ws->reap, NULL))
        evtimer_add(ws->reap, &now);
}

void workers_release(struct workers *ws, int k)
{
    let_go(ws, k, 0);
}

void workers_unpin(struct workers *ws, int k)
{
    let_go(ws, k, 1);
}

struct upstream *workers_hold(struct workers *ws, int k)
{
    ws->w[k]->inflight++;
    return ws->w[k]->up;
}

struct upstream *workers_upstream(const struct workers *ws, int k)
{
    return ws->w[k]->up;
}

int workers_pin(struct workers *ws, const char *name)
{
    for (size_t k = 0; k < ws->n; k++) {
        struct worker *w = ws->w[k];

        if (w->state == WORKER_ACTIVE &&
            (strcmp(w->worker_id, name) == 0 || strcmp(w->proxy_url, name) == 0)) {
            w->pins++; /* its index stays this worker's until the exchange ends */
            return (int) k;
        }
    }
    return -1;
}

int workers_index_of(const struct workers *ws, const struct upstream *up)
{
    for (size_t k = 0; k < ws->n; k++)
        if (ws->w[k]->up == up && ws->w[k]->state != WORKER_FREE)
            return (int) k;
    return -1;
}

/* ---- the table ---------------------------------------------------------------------------- */

struct workers *workers_new(struct event_base *base, const struct router_cfg *cfg, struct sel *sel,
                            struct model_route *models, struct kvroute *kv, struct pools *pools,
                            void (*room)(void *arg), void *arg)
{
    struct workers *ws = xcalloc(1, sizeof *ws);

    ws->pools = pools;
    ws->base = base;
    ws->cfg = cfg;
    ws->sel = sel;
    ws->models = models;
    ws->kv = kv;
    ws->room = room;
    ws->room_arg = arg;
    ws->reap = evtimer_new(base, on_reap, ws);
    if (ws->reap == NULL)
        fatal("evtimer_new failed");
    return ws;
}

void workers_reconfigure(struct workers *ws, const struct router_cfg *cfg)
{
    ws->cfg = cfg;
}

/* The worker at host:port, active or retired; NULL if none. */
static struct worker *find_worker(const struct workers *ws, const char *hostport)
{
    for (size_t k = 0; k < ws->n; k++)
        if (ws->w[k]->state != WORKER_FREE && strcmp(ws->w[k]->proxy_url, hostport) == 0)
            return ws->w[k];
    return NULL;
}

/* A retired worker named again: revived in place, with what it still has booked. */
static int revive(struct workers *ws, struct worker *w, const char *pub_url, char *err,
                  size_t errlen)
{
    if (wl_subscribe(ws, w, pub_url, err, errlen) != 0)
        return -1;
    snprintf(w->pub_url, sizeof w->pub_url, "%s", pub_url);
    w->state = WORKER_ACTIVE;
    w->holds = 1;
    w->bad_messages = 0;
    w->lost = 0;
    sel_revive(ws->sel, w->idx); /* routable at its next message */
    workers_note_role(ws, w);
    ws->changes.revived++;
    log_info("worker %s is back (publisher %s): %u requests still in flight there", w->proxy_url,
             w->pub_url, w->inflight);
    return 0;
}

/* The one rule of a worker's role: its source's, else the one it publishes. */
static int role_of(const struct worker *w)
{
    return w->src_role >= 0 ? w->src_role : w->pub_role;
}

void workers_note_role(struct workers *ws, struct worker *w)
{
    int role = role_of(w);

    if (role != pools_role(ws->pools, w->idx) && w->last_ms != 0)
        log_info("worker %s: role %s", w->proxy_url, admit_load_role_name(role));
    pools_set(ws->pools, w->idx, role);
}

int workers_role(const struct workers *ws, int k)
{
    return k >= 0 && (size_t) k < ws->n && ws->w[k]->state != WORKER_FREE ? role_of(ws->w[k]) : -1;
}

int workers_add(struct workers *ws, const char *proxy_url, const char *pub_url, int role, char *err,
                size_t errlen)
{
    struct worker *w;
    struct http_url url;
    size_t k;

    if (http_url_parse(proxy_url, &url, err, errlen) != 0)
        return -1;
    if ((w = find_worker(ws, url.hostport)) != NULL && w->state == WORKER_RETIRED) {
        w->src_role = role;
        return revive(ws, w, pub_url, err, errlen);
    }
    if (w != NULL) { /* one more source names it */
        if (strcmp(w->pub_url, pub_url) != 0)
            log_warn("worker %s is followed at %s already: %s ignored", w->proxy_url, w->pub_url,
                     pub_url);
        if (role >= 0 && w->src_role < 0) { /* a source that says its role beats none */
            w->src_role = role;
            workers_note_role(ws, w);
        } else if (role >= 0 && role != w->src_role)
            log_warn("worker %s is a %s worker already: the role %s ignored", w->proxy_url,
                     admit_load_role_name(w->src_role), admit_load_role_name(role));
        w->holds++;
        return 0;
    }
    /* A new one: in the index of one that left, or a new index. */
    for (k = 0; k < ws->n && ws->w[k]->state != WORKER_FREE; k++)
        ;
    w = k < ws->n ? ws->w[k] : xcalloc(1, sizeof *w);
    w->ws = ws;
    w->src_role = role;
    w->pub_role = ADMIT_LOAD_ROLE_BOTH;
    snprintf(w->proxy_url, sizeof w->proxy_url, "%s", url.hostport);
    snprintf(w->pub_url, sizeof w->pub_url, "%s", pub_url);
    if (wl_subscribe(ws, w, pub_url, err, errlen) != 0) {
        if (k == ws->n)
            free(w);
        return -1;
    }
    if (k == ws->n) {
        w->idx = sel_add_worker(ws->sel);
        ws->w = xrealloc(ws->w, (ws->n + 1) * sizeof *ws->w);
        ws->w[ws->n++] = w;
    } else /* the index of one that left: its models unknown until its first message */
        mroute_unknown(ws->models, w->idx);
    /* A name is looked up on the loop without waiting: a worker added on SIGHUP, or one whose
     * lookup failed, must not stop every other request while a DNS server is slow. */
    if (!net_is_numeric(url.host) && ws->dns == NULL) {
        char why[256];

        if ((ws->dns = resolver_new(ws->base, ws->cfg, why, sizeof why)) == NULL)
            log_warn("worker %s: %s; its name is looked up with getaddrinfo, blocking",
                     url.hostport, why);
    }
    w->up = upstream_new(ws->base, &url, ws->dns, ws->cfg->upstream_timeout_ms,
                         ws->cfg->upstream_keepalive, 4000);
    w->state = WORKER_ACTIVE;
    workers_note_role(ws, w);
    w->holds = 1;
    ws->changes.added++;
    return 0;
}

int workers_retire(struct workers *ws, const char *proxy_url)
{
    struct http_url url;
    struct worker *w;
    char err[256];

    if (http_url_parse(proxy_url, &url, err, sizeof err) != 0 ||
        (w = find_worker(ws, url.hostport)) == NULL || w->state != WORKER_ACTIVE)
        return -1;
    if (--w->holds > 0)
        return 0; /* another source still names it */
    w->state = WORKER_RETIRED;
    sel_retire(ws->sel, w->idx);
    pools_set(ws->pools, w->idx, -1); /* in no pool: never chosen, its index may be reused */
    kvr_forget(ws->kv, w->idx);       /* its index may be another worker's next */
    mroute_drop(ws->models, w->idx);  /* it serves nothing now: a model only it had gets 404 */
    wl_unsubscribe(ws, w);
    ws->changes.retired++;
    log_info("worker %s retired: no new request goes there, %u in flight finish", w->proxy_url,
             w->inflight);
    if (unheld(w))
        bury(ws, w);
    ws->room(ws->room_arg); /* a request pinned to it and waiting now gets its answer */
    return 0;
}

unsigned workers_active(const struct workers *ws)
{
    unsigned n = 0;

    for (size_t k = 0; k < ws->n; k++)
        n += ws->w[k]->state == WORKER_ACTIVE;
    return n;
}

int workers_slots(const struct workers *ws)
{
    return (int) ws->n;
}

int workers_info(const struct workers *ws, int k, struct worker_info *out)
{
    const struct worker *w = ws->w[k];

    if (w->state == WORKER_FREE)
        return 0;
    out->state = w->state;
    out->url = w->proxy_url;
    out->pub_url = w->pub_url;
    out->worker_id = w->worker_id;
    out->inflight = w->inflight;
    out->last_ms = w->last_ms;
    out->role = workers_role(ws, k);
    return 1;
}

const char *workers_url(const struct workers *ws, int k)
{
    return ws->w[k]->proxy_url;
}

void workers_changes(const struct workers *ws, struct workers_changes *out)
{
    *out = ws->changes;
}

/* Reachable, so that what a resolver still holds at exit is not reported as lost. */
static struct evdns_base *volatile dns_left_at_exit; /* volatile: never read, kept */

void workers_free(struct workers *ws)
{
    if (ws == NULL)
        return;
    event_free(ws->reap);
    for (size_t k = 0; k < ws->n; k++) {
        sub_free(ws->w[k]->sub);
        kvf_free(ws->w[k]->kvf);
        upstream_free(ws->w[k]->up);
        free(ws->w[k]);
    }
    free(ws->w);
    /* After the pools, each of which left its lookup to end. One still pending is answered
     * from the loop, which runs no more: freeing the resolver would lose what evdns holds
     * for it, so the resolver is left to the exit, as nng's sockets are. Also when every
     * lookup has been answered: evdns answers an AF_UNSPEC lookup once one family's answer
     * is in and cancels the other's request from the loop later, so a resolver that ever
     * looked a name up may still hold a request (LeakSanitizer saw one at a stop, once). */
    if (ws->dns != NULL && upstream_lookups_started() == 0)
        evdns_base_free(ws->dns, 0);
    else if (ws->dns != NULL)
        dns_left_at_exit = ws->dns;
    free(ws);
}
