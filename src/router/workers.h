/* workers: admit-router's table of workers, each from the moment a source names it (a
 * --worker, the workers file, a DNS name: discover.h) to the end of its last request: its
 * engine's upstream, its load publisher's subscriber, and what its load messages said.
 *
 * A worker is known by its URL's host:port, and by its index, which is its index in the
 * selection view (select.h) and in the model table (model_route.h) too. Its life:
 *  - added (workers_add): its publisher followed, routable at its first message; a source
 *    that names it again holds it once more;
 *  - retired when the last source lets go (workers_retire): selection skips it and its
 *    subscriber is closed, but requests in flight there finish, so it keeps its index, its
 *    bookings and its upstream until the last exchange that holds or pins it ends;
 *  - removed then, from the event loop (not inside that exchange's callbacks): its index is
 *    the next new worker's;
 *  - revived in place when named again while retired, its bookings still counted.
 *
 * Its load messages (workers_load.c) are decoded, checked (admitd's rule for a worker_id, and
 * the id's ownership: one live worker per id) and taken into the selection view and the model
 * table. A worker whose publisher's connection ends, or whose engine refuses a connection, is
 * lost: not routable until its next message (an engine that refused is logged unreachable
 * once, and reachable when it answers again). Each message, and each retirement, may make room
 * for a waiting request: the owner's room callback hears of it. */
#ifndef ADMIT_ROUTER_WORKERS_H
#define ADMIT_ROUTER_WORKERS_H

#include "config.h"
#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct model_route;
struct pools;
struct sel;
struct upstream;
struct workers;
struct kvroute;
struct kvf_stats;

/* Where a worker is in its life (above). */
enum worker_state { WORKER_ACTIVE, WORKER_RETIRED, WORKER_FREE };

/* A worker as the reports show it; the strings are valid until the table changes. */
struct worker_info {
    enum worker_state state;
    const char *url;       /* its URL's host:port */
    const char *pub_url;   /* its load publisher */
    const char *worker_id; /* from its newest message; "" until its first */
    unsigned inflight;     /* exchanges holding its upstream */
    int64_t last_ms;       /* monotonic time of its newest message; 0: never heard */
    int role;              /* its effective role (workers_role) */
};

/* Workers that came and went, since the start. */
struct workers_changes {
    uint64_t added, revived, retired, removed;
    uint64_t lost, back; /* lost (a publisher's end, a refusal), and heard again */
};

/** an empty table on base, following cfg (kept), feeding sel, models and the prefix index kv
 *  (which must outlive it); room(arg) is called when a message or a retirement may have made
 *  room */
struct workers *workers_new(struct event_base *base, const struct router_cfg *cfg, struct sel *sel,
                            struct model_route *models, struct kvroute *kv, struct pools *pools,
                            void (*room)(void *arg), void *arg);
/** a reload: cfg (kept) from now on, for the workers added next */
void workers_reconfigure(struct workers *ws, const struct router_cfg *cfg);
/** frees every worker and the table; after the proxy (no exchange holds one any more) */
void workers_free(struct workers *ws);

/** adds a worker: its admitd URL and its load publisher URL; 0 or -1 with err. One that is
 *  there already is held by one more source (and keeps its publisher; another one is logged
 *  and ignored); one that is retired is revived in place (bookings kept, routable at its next
 *  message, following pub_url); a new one takes the index of a worker that left, if any */
int workers_add(struct workers *ws, const char *proxy_url, const char *pub_url, int role, char *err,
                size_t errlen);
/** one source lets go of the worker at proxy_url; the last one retires it (no new request
 *  goes there, its subscriber closed within 100 ms); removed when nothing holds it. 0, or -1
 *  when no active worker has that URL */
int workers_retire(struct workers *ws, const char *proxy_url);

/** worker k's role (enum admit_load_role): its source's, else the one it publishes; -1 when k
 *  is free */
int workers_role(const struct workers *ws, int k);
/** workers that are not retired */
unsigned workers_active(const struct workers *ws);
/** indices in use or free, 0 .. n-1 (those of the selection view) */
int workers_slots(const struct workers *ws);
/** worker k as the reports show it; 0 when k is free (out untouched), else 1 */
int workers_info(const struct workers *ws, int k, struct worker_info *out);
/** worker k's URL's host:port */
const char *workers_url(const struct workers *ws, int k);
/** what came and went */
void workers_changes(const struct workers *ws, struct workers_changes *out);

/** the active worker a pin header names (by worker_id, or by its URL's host:port), pinned by
 *  one more exchange: its index stays its own until workers_unpin(); -1 when none */
int workers_pin(struct workers *ws, const char *name);
/** an exchange that pinned worker k ends */
void workers_unpin(struct workers *ws, int k);
/** an exchange holds worker k's upstream (from its pick to its end): returns it */
struct upstream *workers_hold(struct workers *ws, int k);
/** an exchange lets go of worker k's upstream; a retired worker's last is removed soon */
void workers_release(struct workers *ws, int k);
/** worker k's upstream (its engine's connections) */
struct upstream *workers_upstream(const struct workers *ws, int k);
/** the index of the worker (active or retired) whose upstream is up, or -1 */
int workers_index_of(const struct workers *ws, const struct upstream *up);
/** nothing of a request reached worker k (why: its engine's port refused a connection, or
 *  closed it first): logged once until it answers again, and lost (not routable until its
 *  next message) */
void workers_unreachable(struct workers *ws, int k, const char *why);
/** worker k answered a request: reachable again, which is logged after workers_unreachable() */
void workers_answered(struct workers *ws, int k);

/** appends the load intake's families (admit_router_load_*) */
void workers_render_metrics(const struct workers *ws, struct buf *out);
/** active workers that send KV events */
unsigned workers_event_workers(const struct workers *ws);
/** the kv_events streams' counters (kvfollow.h), of every worker since the start */
const struct kvf_stats *workers_kvf_stats(const struct workers *ws);

#endif
