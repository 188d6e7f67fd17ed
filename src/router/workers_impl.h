/* workers_impl: the worker table's state, shared by workers.c (the table: adding, retiring,
 * holding, removing) and workers_load.c (each worker's load messages). Not for anything
 * else: the rest of the router speaks workers.h. */
#ifndef ADMIT_ROUTER_WORKERS_IMPL_H
#define ADMIT_ROUTER_WORKERS_IMPL_H

#include "admit/load.h"
#include "kvfollow.h"
#include "pubsub/spsub.h"
#include "util/netaddr.h"
#include "workers.h"

#include <stddef.h>
#include <stdint.h>

struct event;
struct evdns_base;
struct subscriber;

struct worker {
    struct workers *ws;
    int idx; /* its index in ws->w, the selection view and the model table */
    enum worker_state state;
    int holds;         /* sources that name it; 0 once retired */
    unsigned inflight; /* exchanges holding its upstream: from the pick to the end */
    unsigned pins;     /* exchanges whose pin header names it */
    char proxy_url[NETADDR_HOST_MAX + 16];
    char pub_url[300];
    char worker_id[ADMIT_LOAD_WORKER_ID_MAX + 1]; /* from its newest message ("" = none yet) */
    int src_role; /* the role its source gave (enum admit_load_role), or ROUTER_ROLE_PUBLISHED */
    int pub_role; /* the role its newest message published (enum admit_load_role; both before) */
    struct upstream *up;
    struct subscriber *sub;
    struct kvfollow *kvf; /* its kv_events stream, with its subscriber */
    int64_t last_ms;      /* monotonic time of the newest message; 0 = never heard */
    int bad_messages;
    int unresolved_said; /* logged that its engine's name is not looked up yet */
    int lost;            /* lose() logged it lost; its next message brings it back */
    int id_said;         /* logged that its messages' worker_id is refused (claim()) */
    int http_down; /* logged that its engine refused (workers_unreachable()); until it answers */
    int pub_down;  /* logged that its publisher was unreachable at start; until it publishes */
};

struct workers {
    struct event_base *base;
    const struct router_cfg *cfg; /* replaced by each reload (workers_reconfigure) */
    struct sel *sel;
    struct model_route *models;
    struct kvroute *kv;     /* the prefix index: capacities from messages, forgetting the retired */
    struct evdns_base *dns; /* the workers' host names' resolver, made for the first */
    struct worker **w;
    size_t n;
    struct event *reap; /* removes retired workers whose last request ended (not in its callback) */
    void (*room)(void *arg);
    void *room_arg;
    struct workers_changes changes;
    struct spsub_stats load_gone; /* what the subscribers of workers retired since counted */
    uint64_t load_invalid;        /* load messages that did not decode */
    uint64_t load_bad_id;         /* ... whose worker_id breaks admitd's rule */
    uint64_t load_id_taken;       /* ... whose worker_id another live worker holds */
    struct kvf_stats kvf;         /* the kv_events streams' (kvfollow.h), of every worker */
};

/* ---- workers_load.c: each worker's load messages ------------------------------------------ */

/** follows w's publisher as --subscriber and --load-batch-ms say; 0, or -1 with err */
int wl_subscribe(struct workers *ws, struct worker *w, const char *pub_url, char *err,
                 size_t errlen);
/** closes w's subscriber (never blocking for long), keeping what it counted */
void wl_unsubscribe(struct workers *ws, struct worker *w);

#endif
