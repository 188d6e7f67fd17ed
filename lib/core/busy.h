/* busy: the predicate that says whether a worker is too loaded to be sent more work.
 *
 * admit-router routes around busy workers and answers 529 only when every worker is busy, so
 * the judgement has to match NVIDIA Dynamo's (WorkerLoadState::is_overloaded) for operators
 * who move between the two. It lives here, pure and separate from the router's I/O, so the
 * router, admit-top and the tests all call the same function on the same load messages.
 *
 * A rank is busy when any enabled signal says so:
 *  - prefill absolute: active_prefill_tokens > active_prefill_tokens_threshold;
 *  - prefill fraction: active_prefill_tokens > (int64)(frac * M), M = max_num_batched_tokens
 *    when the worker reports it (> 0), else BUSY_DEFAULT_MAX_BATCHED_TOKENS;
 *  - decode: kv_used_blocks / kv_total_blocks or active_decode_blocks / kv_total_blocks above
 *    active_decode_blocks_threshold. This signal is latched per (worker, rank): once over, the
 *    rank stays busy until both ratios are observed at or below the threshold.
 *
 * Unknown values (ADMIT_LOAD_UNKNOWN) never make a rank busy: an unknown token count is not
 * over, and an unknown decode ratio counts as observed at or below the threshold, so it can
 * release the latch. Refusing work because a number is missing would turn a metrics hiccup into
 * an outage. When kv_total_blocks is unknown or 0 no ratio exists (Dynamo requires total > 0):
 * the decode signal says not busy and the latch is left untouched for the next message that
 * carries a capacity. */
#ifndef ADMIT_BUSY_H
#define ADMIT_BUSY_H

#include "admit/load.h"

#include <stddef.h>
#include <stdint.h>

/* Thresholds; a field that is unset disables that signal. All unset = never busy. */
struct busy_thresholds {
    double active_decode_blocks_threshold;       /* fraction 0..1; NAN = unset */
    int64_t active_prefill_tokens_threshold;     /* tokens >= 0; -1 = unset */
    double active_prefill_tokens_threshold_frac; /* >= 0 fraction of max_num_batched_tokens */
};

/* The token budget assumed for a worker that does not report max_num_batched_tokens. */
#define BUSY_DEFAULT_MAX_BATCHED_TOKENS 10000000

/* Per (worker, rank) memory: the decode latch. Zero-initialise. */
struct busy_latch {
    int decode; /* 1 while the decode signal holds the rank busy */
};

/** sets every threshold to unset (never busy) */
void busy_thresholds_unset(struct busy_thresholds *t);
/** 1 if any signal is enabled */
int busy_thresholds_any(const struct busy_thresholds *t);
/** 0 if the thresholds are acceptable, else -1 with a reason in err */
int busy_thresholds_validate(const struct busy_thresholds *t, char *err, size_t errlen);
/** one rank: updates the latch from this message and says whether the rank is busy */
int busy_rank(const struct busy_thresholds *t, const struct admit_load *m, struct busy_latch *l);
/** a worker's n rank messages: busy only when every one is busy (n == 0: not); updates latches */
int busy_worker(const struct busy_thresholds *t, const struct admit_load *ranks, size_t n,
                struct busy_latch *latches);
/** "does this worker have room?": !busy_worker(...), the one call router, admit-top, tests use */
int busy_has_room(const struct busy_thresholds *t, const struct admit_load *ranks, size_t n,
                  struct busy_latch *latches);

#endif
