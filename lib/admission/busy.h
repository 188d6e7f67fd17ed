/* busy: "does this rank have room?", the one rule every judgement of load uses.
 *
 * admit-router routes around busy workers and answers 529 only when every worker is busy, so
 * the judgement has to match NVIDIA Dynamo's (strict `>` everywhere) for operators who move
 * between the two. It lives here, pure, so that the router's selection (on the load it booked
 * itself, projected with the request), its monitor (on the load workers publish), the tests
 * and the benchmark all call the same function.
 *
 * A rank's capacity is apart from its load: the step budget and KV blocks change only when a
 * worker restarts, so callers keep them once and judge any load row against them. A rank has
 * room unless an enabled signal says otherwise:
 *  - prefill absolute: prefill tokens > active_prefill_tokens_threshold;
 *  - prefill fraction: prefill tokens > (int64)(frac * prefill budget), the budget being
 *    max_num_batched_tokens when reported, else BUSY_DEFAULT_MAX_BATCHED_TOKENS;
 *  - decode: decode blocks / kv_total_blocks > active_decode_blocks_threshold, when
 *    kv_total_blocks is known (> 0); unknown capacity skips the signal, never means full.
 * Unknown load (negative) never takes room away: refusing work because a number is missing
 * would turn a metrics hiccup into an outage. Nor does it give room back: the monitor judges
 * what workers publish through its latch (struct busy_latch), which keeps each number as last
 * known, so a rank full by a signal stays full until that signal is known and under.
 *
 * has_room() is busy_limits() (thresholds and capacity become the most a rank may hold) then
 * busy_within() (the comparison): a caller that judges many rows against the same thresholds
 * and capacity keeps the limits and calls busy_within() alone, which is the same rule. */
#ifndef ADMIT_BUSY_H
#define ADMIT_BUSY_H

#include "admit/load.h"

#include <stddef.h>
#include <stdint.h>

/* Thresholds; a field that is unset disables that signal. All unset = never busy. */
struct busy_thresholds {
    double active_decode_blocks_threshold;       /* fraction 0..1; NAN = unset */
    int64_t active_prefill_tokens_threshold;     /* tokens >= 0; -1 = unset */
    double active_prefill_tokens_threshold_frac; /* >= 0 fraction of the prefill budget */
};

/* The token budget assumed for a worker that does not report max_num_batched_tokens. */
#define BUSY_DEFAULT_MAX_BATCHED_TOKENS 10000000

/* What one rank can take; a value <= 0 is unknown. */
struct busy_capacity {
    int64_t max_num_batched_tokens; /* the engine's per-step token budget */
    int64_t kv_total_blocks;        /* KV blocks of the rank */
    int64_t kv_block_size;          /* tokens per KV block */
};

/* The load of one rank, as a check sees it; a negative count is unknown. */
struct busy_load {
    int64_t prefill_tokens; /* prompt tokens not yet past their first output token */
    int64_t decode_blocks;  /* KV blocks held */
    int64_t requests;       /* active requests */
    int observed;           /* 0: never heard from (idle, and flagged so callers can tell) */
};

/* The most a rank may hold and still have room; INT64_MAX = no limit. */
struct busy_limits {
    int64_t prefill_tokens;
    int64_t decode_blocks;
};

/** sets every threshold to unset (never busy) */
void busy_thresholds_unset(struct busy_thresholds *t);
/** 1 if any signal is enabled */
int busy_thresholds_any(const struct busy_thresholds *t);
/** 0 if the thresholds are acceptable, else -1 with a reason in err */
int busy_thresholds_validate(const struct busy_thresholds *t, char *err, size_t errlen);
/** the prefill budget: max_num_batched_tokens, or BUSY_DEFAULT_MAX_BATCHED_TOKENS unknown */
int64_t busy_prefill_budget(const struct busy_capacity *c);
/** the limits thresholds t give a rank of capacity c */
void busy_limits(const struct busy_capacity *c, const struct busy_thresholds *t,
                 struct busy_limits *out);
/** 1 when load l is within the limits (unknown counts never exceed them): the comparison of
 *  the rule, inline because selection makes it once per rank of every worker per request */
static inline int busy_within(const struct busy_load *l, const struct busy_limits *lim)
{
    return !(l->prefill_tokens >= 0 && l->prefill_tokens > lim->prefill_tokens) &&
           !(l->decode_blocks >= 0 && l->decode_blocks > lim->decode_blocks);
}
/** does a rank with load l and capacity c have room under t? The one rule */
int has_room(const struct busy_load *l, const struct busy_capacity *c,
             const struct busy_thresholds *t);
/** 1 when every one of n ranks lacks room (n == 0: not full) */
int worker_is_full(const struct busy_load *l, const struct busy_capacity *c, size_t n,
                   const struct busy_thresholds *t);

/* ---- worker-published load (the router's monitor, admit-top) -------------------------- */

/* Per (worker, rank) memory of the monitor, its latch: each number the judgement reads, as
 * the newest message that knew it said. A message with a signal unknown (a failed engine
 * scrape sends kv_used_blocks and kv_total_blocks as null) leaves that signal as it was, so a
 * rank marked busy by a signal stays busy until a message in which that signal is known and
 * at or below its threshold: a worker the engine reported full is not released on admitd's
 * own bookings alone. The numbers, not verdicts, are kept, so that any thresholds (several
 * sets, changed live) judge the same memory. Zero-initialise: a rank never heard from is
 * idle, with no capacity known. */
struct busy_latch {
    int64_t prefill_tokens;         /* active_prefill_tokens */
    int64_t kv_used_blocks;         /* the engine's KV blocks in use */
    int64_t active_decode_blocks;   /* admitd's booked blocks */
    int64_t kv_total_blocks;        /* what the decode signals are judged against; 0 = unknown */
    int64_t max_num_batched_tokens; /* the prefill fraction's budget; 0 = unknown (default) */
};

/** the capacity a load message reports */
void busy_capacity_of(const struct admit_load *m, struct busy_capacity *out);
/** the load row a message publishes: its prefill tokens, and the larger of its two decode
 *  signals (kv_used_blocks, active_decode_blocks), either one being over meaning over */
void busy_load_of(const struct admit_load *m, struct busy_load *out);
/** records in l every number the judgement reads that m knows (a count >= 0, a capacity
 *  > 0); those m does not know keep their last known value */
void busy_latch_note(struct busy_latch *l, const struct admit_load *m);
/** the load row and capacity the monitor judges a rank by: l's numbers, as busy_load_of() and
 *  busy_capacity_of() make them of a message (kv_block_size unknown: the judgement does not
 *  read it) */
void busy_latch_row(const struct busy_latch *l, struct busy_load *load, struct busy_capacity *cap);
/** one rank by its message: notes m in the latch, then says whether the rank is busy by what
 *  the latch holds (has_room(), the one rule, on busy_latch_row()) */
int busy_rank(const struct busy_thresholds *t, const struct admit_load *m, struct busy_latch *l);
/** a worker's n rank messages: busy only when every one is busy (n == 0: not); updates latches */
int busy_worker(const struct busy_thresholds *t, const struct admit_load *ranks, size_t n,
                struct busy_latch *latches);
/** "does this worker have room by what it publishes?": !busy_worker(...) */
int busy_has_room(const struct busy_thresholds *t, const struct admit_load *ranks, size_t n,
                  struct busy_latch *latches);

#endif
