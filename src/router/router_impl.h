/* router_impl: the router's private state, shared by router.c (workers, admission and
 * selection) and router_report.c (metrics and /load). Not for anything else. */
#ifndef ADMIT_ROUTER_IMPL_H
#define ADMIT_ROUTER_IMPL_H

#include "admit/load.h"
#include "core/bt_api.h"
#include "core/netaddr.h"
#include "config.h"
#include "select.h"

#include <stdint.h>

/* Distinct (model, endpoint) rejection counters kept. */
#define ROUTER_MAX_REJECT_KEYS 256

struct rworker {
    struct router *r;
    int idx; /* its index in the selection view */
    char proxy_url[NETADDR_HOST_MAX + 16];
    char pub_url[300];
    char worker_id[ADMIT_LOAD_WORKER_ID_MAX + 1]; /* from its newest message ("" = none yet) */
    struct upstream *up;
    struct subscriber *sub;
    int64_t last_ms; /* monotonic time of the newest message; 0 = never heard */
    int bad_messages;
};

struct reject_key {
    char model[128];
    char endpoint[32];
    uint64_t count;
};

struct router {
    struct event_base *base;
    struct proxy *px;
    struct metrics *m;
    const struct router_cfg *cfg;
    struct bt_registry *bt;
    struct sel *sel;
    struct rworker **w;
    size_t n;
    struct reject_key rejects[ROUTER_MAX_REJECT_KEYS];
    size_t nrejects;
    uint64_t rejected_all_busy, rejected_no_worker;
    void (*on_change)(void *arg);
    void *on_change_arg;
    char msg[ADMIT_LOAD_WORKER_ID_MAX + 96]; /* the answer of a pick that found none */
};

/** the monotonic clock in ms, as selection sees it */
int64_t router_now_ms(void);

#endif
