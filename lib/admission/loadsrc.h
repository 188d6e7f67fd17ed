/* loadsrc: composes the load messages from what admitd knows.
 *
 * Three sources: the gate (slots and queue, whole worker), the book (what admitd let in,
 * per rank) and the engine's last scrape (KV cache, per rank); and the engine's model names
 * (whole worker, from its /v1/models: the last list known, kept across failed scrapes). Pure: the
 * caller decides whether the scrape is fresh enough to use, and passes NULL when it is not, so that
 * every engine-reported field becomes unknown instead of a stale or made-up number. */
#ifndef ADMIT_LOADSRC_H
#define ADMIT_LOADSRC_H

#include "admit/gate.h"
#include "admit/load.h"
#include "admission/book.h"
#include "admission/engine_metrics.h"

struct loadsrc_in {
    const struct gate_stats *gate;        /* NULL when there is no cap */
    unsigned inflight_nocap;              /* gated requests in flight when there is no cap */
    const struct book *book;              /* one message per rank; its block size is sent */
    const struct engine_snapshot *engine; /* NULL when unknown or stale */
    unsigned fallback_max_batched_tokens; /* 0 = unknown */
    enum admit_load_state state;
    const struct admit_load_models *models; /* the engine's model names; NULL = unknown */
    enum admit_load_role role;              /* the worker's (--role), in every message */
};

/** fills msgs[0..*n) (at most max) with one message per rank; identity fields are left to
 *  the caller (worker_id, dp_rank, seq, ts_ms, heartbeat_ms) */
void loadsrc_fill(const struct loadsrc_in *in, struct admit_load *msgs, unsigned max, unsigned *n);

#endif
