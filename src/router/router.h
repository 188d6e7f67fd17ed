/* router: admit-router's brain. Follows many admitd workers through their load messages,
 * books the load it sends them, and picks the worker for each request.
 *
 * It plugs into the proxy with both hook sets (http/proxy.h): the admission hooks count and
 * book each exchange (the router has no cap of its own; with policy classes a request may
 * wait in its class's queue, class_queue.h), the route hooks choose its worker. Streaming,
 * backpressure and cancellation are admitd's own code. The choice itself is select.h's: the
 * booked load projected with the request, judged by the router-wide reject thresholds of the
 * request's model, on workers that are alive, not busy by what they publish, and serve the
 * model (model_route.h). No such worker: the overload status "All workers are busy, please
 * retry later" when some are alive, 503 when none is. The workers themselves are workers.h's,
 * what the router shows of them report.h's; router.c wires these parts together. */
#ifndef ADMIT_ROUTER_H
#define ADMIT_ROUTER_H

#include "util/buf.h"
#include "admission/busy.h"
#include "daemon/metrics.h"
#include "config.h"

#include <stddef.h>

struct event_base;
struct proxy;
struct router;

/* The request header that pins a worker: its worker_id, or the host:port of its URL. */
#define ROUTER_PIN_HEADER "X-Admit-Worker"

/** creates a router on base for the proxy px (its admission and route); it keeps c and m */
struct router *router_new(struct event_base *base, struct proxy *px, struct metrics *m,
                          const struct router_cfg *c);
/** a reload: the router follows c (kept; the one it had must stay valid until this returns)
 *  from now on. Its thresholds become the defaults of every model, but for the fields
 *  POST /busy_threshold set for a model, which stay; its models join /busy_threshold; its
 *  policy classes replace the queue's (cq_reconfigure: no waiting request is lost); what is
 *  read at use (overload status, Retry-After, chars per token, the admin token, output
 *  tracking) is c's. Its settings that need a restart must be the running ones
 *  (router_cfg_diff) */
void router_reconfigure(struct router *r, const struct router_cfg *c);
/** calls cb whenever an exchange ends (the drain's check) */
void router_set_change_cb(struct router *r, void (*cb)(void *arg), void *arg);
/* A source that does not say a worker's role: the router takes the one its load messages
 * publish (admitd's --role; both when they say none). */
#define ROUTER_ROLE_PUBLISHED (-1)

/** adds a worker: its admitd URL, its load publisher URL and the role its source gives it (an
 *  enum admit_load_role, or ROUTER_ROLE_PUBLISHED); 0 or -1 with err (workers_add: one named
 *  again is held once more, a retired one revived in place) */
int router_add_worker(struct router *r, const char *proxy_url, const char *pub_url, int role,
                      char *err, size_t errlen);
/** one source lets go of the worker at proxy_url (http://HOST:PORT); the last one retires it
 *  (workers_retire): no new request goes there (pinned ones get 503), requests in flight
 *  finish, and once the last has ended it leaves /load and the metrics. 0, or -1 when no
 *  active worker has that URL */
int router_retire_worker(struct router *r, const char *proxy_url);
/** number of workers that are not retired */
unsigned router_workers(struct router *r);
/** registers a model name for /busy_threshold */
void router_add_model(struct router *r, const char *model);
/** appends the router's own Prometheus families */
void router_render_metrics(struct router *r, struct buf *out);
/** the workers, their ranks' booked and published load, capacity and room, as JSON */
void router_render_workers(struct router *r, struct buf *out);
/** number of workers that are routable now */
unsigned router_routable(struct router *r);
/** frees everything; the proxy must have been freed first */
void router_free(struct router *r);

#endif
