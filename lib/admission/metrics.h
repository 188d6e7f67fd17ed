/* metrics: admitd's counters and their Prometheus rendering.
 *
 * A plain struct of numbers owned by the proxy; the I/O glue bumps fields and the metrics
 * listener renders them. Rendering is pure so tests can read the exact text. */
#ifndef ADMIT_METRICS_H
#define ADMIT_METRICS_H

#include "admit/gate.h"
#include "admission/book.h"
#include "util/buf.h"
#include "wire/prom.h"

#include <stdint.h>

/* How a request ended; each request is counted exactly once. */
enum outcome {
    OUT_OK = 0,         /* response delivered to the client completely */
    OUT_REJECTED,       /* overload answer: slots and queue full */
    OUT_CANCELLED,      /* the client left first */
    OUT_UNAVAILABLE,    /* engine unreachable: 503 */
    OUT_TIMEOUT,        /* engine silent too long: 504 (or a cut stream) */
    OUT_UPSTREAM_ERROR, /* engine broke the response (or sent garbage) */
    OUT_BAD_REQUEST,    /* refused by admitd itself (bad request target) */
    OUT_QUEUE_TIMEOUT,  /* overload answer: waited longer than --queue-timeout-ms */
    OUT_DRAINING,       /* 503: arrived while the worker was draining */
    OUT__COUNT
};

/* Where a client was when it left. */
enum cancel_stage {
    STAGE_QUEUED = 0, /* waiting for a slot */
    STAGE_WAITING,    /* in a slot (or passing through), before the reply started */
    STAGE_STREAMING,  /* while the reply was being sent */
    STAGE__COUNT
};

/* What went wrong talking to the engine. */
enum upstream_error {
    UERR_CONNECT = 0, /* connection refused or not established */
    UERR_TIMEOUT,     /* silent past --upstream-timeout-ms */
    UERR_BROKEN,      /* connection lost in the middle of a response */
    UERR_INVALID,     /* unparseable response */
    UERR__COUNT
};

/* The HTTP listeners of a daemon, each with its own connections and counters. */
enum listener {
    LISTENER_CLIENT = 0, /* --listen */
    LISTENER_METRICS,    /* --metrics-listen */
    LISTENER__COUNT
};

/* One listener's connections, kept by the listener itself (net/acceptor accepting them,
 * http/hconn reading them) and rendered here: a plain struct, so nothing copies them. */
struct listen_stats {
    unsigned conns;         /* open now */
    uint64_t accept_pauses; /* 100 ms pauses: no descriptor (or memory) to accept with */
    uint64_t cap_reached;   /* times the connection cap stopped accepting */
    uint64_t head_timeouts; /* request heads not whole within the head deadline */
    uint64_t oom_refusals;  /* requests refused (500) for want of memory for their buffers */
};

struct metrics {
    uint64_t outcomes[OUT__COUNT];
    uint64_t cancelled[STAGE__COUNT];
    uint64_t upstream_errors[UERR__COUNT];
    uint64_t requests_bypass;   /* requests that did not go through the gate (GET, HEAD, ...) */
    unsigned inflight_bypass;   /* of those, in flight now */
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
/** the label value of an outcome ("ok", "rejected", ...) */
const char *metrics_outcome_name(enum outcome o);
/** renders every family in Prometheus text format */
void metrics_render(const struct metrics_view *v, struct buf *out);

#endif
