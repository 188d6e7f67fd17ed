/* router: admit-router's brain. Follows many admitd workers through their load messages,
 * judges each against the busy thresholds, and picks the worker for each request.
 *
 * It plugs into the proxy (router mode) for everything HTTP: streaming, backpressure and
 * cancellation are admitd's own code. Selection: among workers heard from recently, not
 * draining, not marked overloaded, and with room under the thresholds of the request's
 * model, the least loaded (engine requests + queued, ties taken in turn). No such worker:
 * the overload status "All workers are busy, please retry later" when some are routable,
 * 503 when none is. */
#ifndef ADMIT_ROUTER_H
#define ADMIT_ROUTER_H

#include "core/busy.h"
#include "core/buf.h"
#include "config.h"

#include <stddef.h>

struct event_base;
struct proxy;
struct router;

/** creates a router on base for the proxy px (which it switches to router mode); it keeps c */
struct router *router_new(struct event_base *base, struct proxy *px, const struct router_cfg *c);
/** adds a worker: its admitd URL and its load publisher URL; 0 or -1 with err */
int router_add_worker(struct router *r, const char *proxy_url, const char *pub_url, char *err,
                      size_t errlen);
/** registers a model name for /busy_threshold */
void router_add_model(struct router *r, const char *model);
/** appends the router's own Prometheus families */
void router_render_metrics(struct router *r, struct buf *out);
/** the workers and their state as JSON */
void router_render_workers(struct router *r, struct buf *out);
/** number of workers that are routable now */
unsigned router_routable(struct router *r);
/** frees everything */
void router_free(struct router *r);

#endif
