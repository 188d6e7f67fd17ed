/* metrics: the daemons' counters and their Prometheus rendering (the admitd_* and Dynamo
 * families that admitd and admit-router serve on /metrics).
 *
 * A plain struct of numbers owned by the program: the layers beneath keep their own counts
 * in it (the proxy's outcomes in px, each listener's connections in listen[]), the daemon's
 * glue bumps the rest, and the metrics listener renders them. Rendering is pure so tests can
 * read the exact text. */
#ifndef ADMIT_DAEMON_METRICS_H
#define ADMIT_DAEMON_METRICS_H

#include "admit/gate.h"
#include "admission/book.h"
#include "util/buf.h"
#include "wire/prom.h"
#include "net/acceptor.h"
#include "http/proxy.h"

#include <stdint.h>

/* The HTTP listeners of a daemon, each with its own connections and counters. */
enum listener {
    LISTENER_CLIENT = 0, /* --listen */
    LISTENER_METRICS,    /* --metrics-listen */
    LISTENER__COUNT
};

struct metrics {
    struct proxy_stats px;      /* the proxy's: outcomes, cancellations, engine failures */
    uint64_t requests_bypass;   /* requests that did not go through the gate (GET, HEAD, ...) */
    uint64_t tokenizer_reqs;    /* POST /tokenize, /detokenize: not through the gate either */
    unsigned inflight_bypass;   /* of both, in flight now */
    unsigned inflight_nocap;    /* gated requests in flight when there is no cap (N unset) */
    int engine_ready;           /* the last health probe succeeded */
    uint64_t scrapes_ok;        /* engine /metrics scrapes that parsed */
    uint64_t scrapes_failed;    /* ... that failed (no answer, not 200, nothing recognised) */
    uint64_t models_scrapes[3]; /* engine /v1/models scrapes: ok, failed, too_many */
    uint64_t load_messages;     /* load messages published */
    int load_pub_seen;          /* our own PUB: the three below are known (nng's shows none) */
    unsigned load_subscribers;  /* subscribers open now */
    uint64_t load_dropped;      /* messages a slow subscriber's queue had no room for */
    uint64_t load_bad_peers;    /* connections dropped for breaking the SP protocol */
    uint64_t drain_cancelled;   /* requests cancelled when --drain-timeout-ms ran out */
    uint64_t limit_changes;     /* POST /admission or SIGHUP changes applied */
    struct listen_stats listen[LISTENER__COUNT];
    struct prom_hist queue_wait; /* seconds from arrival to slot, for admitted requests */
    const char *role;            /* admitd's --role, a label of admitd_build_info; NULL: no label */
};

/* The limits and live occupancy that the render needs besides the counters. */
struct metrics_view {
    const struct metrics *m;
    const struct gate_stats *gate; /* NULL when there is no cap */
    const struct book *book;       /* booked load per rank; NULL to leave it out */
    const char *version;
};

/** zeroes the counters and sets up the histogram buckets */
void metrics_init(struct metrics *m);
/** renders every family in Prometheus text format */
void metrics_render(const struct metrics_view *v, struct buf *out);

#endif
