/* proxy: the client-facing HTTP server that admits, queues, rejects and forwards.
 *
 * This is the I/O glue around the gate: it owns each exchange (one client request and, once
 * admitted, one engine request), streams the engine's reply back chunk by chunk with
 * backpressure, and releases the slot on every exit. See README "How a request flows". */
#ifndef ADMIT_PROXY_H
#define ADMIT_PROXY_H

#include "admit/gate.h"
#include "core/config.h"
#include "core/metrics.h"

#include <stddef.h>

struct event_base;
struct evhttp_request;
struct book;
struct proxy;
struct upstream;

/* Router mode: the engine is chosen per request among several (admit-router). */
struct proxy_route {
    /* picks an engine; exclude is the one that just refused (or NULL); NULL when none can
     * take the request, with the status and message to answer in *status and *msg */
    struct upstream *(*pick)(void *arg, struct evhttp_request *creq, const struct upstream *exclude,
                             int *status, const char **msg);
    /* the engine answered with its overload status before anything was sent */
    void (*overloaded)(void *arg, struct upstream *up);
    /* a second engine refused too: its overload answer goes to the client */
    void (*refused)(void *arg, struct evhttp_request *creq);
    /* answers requests the router handles itself (e.g. /busy_threshold); 1 if it did */
    int (*local)(void *arg, struct evhttp_request *creq);
    void *arg;
};

/** creates the proxy (gate, upstream pool, server) on base; does not bind yet */
struct proxy *proxy_new(struct event_base *base, const struct cfg *cfg, struct metrics *m);
/** binds the client listener; writes the bound "host:port" into bound; 0 or -1 with err */
int proxy_bind(struct proxy *px, const struct hostport *hp, char *bound, size_t boundlen, char *err,
               size_t errlen);
/** current gate occupancy; returns NULL when there is no cap (N unset) */
const struct gate_stats *proxy_gate_stats(struct proxy *px, struct gate_stats *st);
/** switches to router mode: every request goes to the engine r->pick chooses */
void proxy_set_route(struct proxy *px, const struct proxy_route *r);
/** calls cb whenever the load changes (gate occupancy, queue, booked tokens) */
void proxy_set_change_cb(struct proxy *px, void (*cb)(void *arg), void *arg);
/** the book of admitted load (the caller may reconfigure ranks and block size) */
struct book *proxy_book(struct proxy *px);
/** number of exchanges alive (queued, in a slot, or passing through) */
unsigned proxy_active(const struct proxy *px);
/** re-reads what the proxy derives from its cfg (after a reload changed it) */
void proxy_reconfigure(struct proxy *px);
/** stops admitting: new requests get 503 with msg (e.g. "Server unavailable: worker draining");
 * queued and running ones go on */
void proxy_drain(struct proxy *px, const char *msg);
/** changes N and/or Q live (0 keeps a value); -1 when admitd runs without a cap */
int proxy_set_limits(struct proxy *px, unsigned n, unsigned q);
/** cancels every exchange at once; returns how many there were */
unsigned proxy_cancel_all(struct proxy *px);
/** aborts every exchange and frees everything */
void proxy_free(struct proxy *px);

#endif
