/* busy: Dynamo's busy predicate over admitd load messages (see busy.h for the semantics). */
#include "core/busy.h"

#include <math.h>
#include <stdio.h>

/* Doubles at or above this do not convert to int64_t; 2^63 exactly. */
#define BUSY_INT64_LIMIT 9223372036854775808.0

void busy_thresholds_unset(struct busy_thresholds *t)
{
    t->active_decode_blocks_threshold = NAN;
    t->active_prefill_tokens_threshold = -1;
    t->active_prefill_tokens_threshold_frac = NAN;
}

int busy_thresholds_any(const struct busy_thresholds *t)
{
    return !isnan(t->active_decode_blocks_threshold) || t->active_prefill_tokens_threshold >= 0 ||
           !isnan(t->active_prefill_tokens_threshold_frac);
}

int busy_thresholds_validate(const struct busy_thresholds *t, char *err, size_t errlen)
{
    double d = t->active_decode_blocks_threshold, f = t->active_prefill_tokens_threshold_frac;

    if (!isnan(d) && (!isfinite(d) || d < 0.0 || d > 1.0)) {
        snprintf(err, errlen, "active_decode_blocks_threshold must be between 0.0 and 1.0, got %g",
                 d);
        return -1;
    }
    if (!isnan(f) && (!isfinite(f) || f < 0.0)) {
        snprintf(err, errlen, "active_prefill_tokens_threshold_frac must be >= 0, got %g", f);
        return -1;
    }
    if (t->active_prefill_tokens_threshold < -1) {
        snprintf(err, errlen, "active_prefill_tokens_threshold must be >= 0, got %lld",
                 (long long) t->active_prefill_tokens_threshold);
        return -1;
    }
    return 0;
}

/* The fraction signal's token limit; a limit beyond int64 can never be exceeded, so it is
 * reported as "no limit" (0) instead of converting out of range, which is undefined. */
static int busy_frac_limit(double frac, int64_t max_batched, int64_t *limit)
{
    double m = max_batched > 0 ? (double) max_batched : (double) BUSY_DEFAULT_MAX_BATCHED_TOKENS;
    double lim = frac * m;

    if (isnan(lim) || lim >= BUSY_INT64_LIMIT)
        return 0;
    *limit = lim <= -BUSY_INT64_LIMIT ? INT64_MIN : (int64_t) lim;
    return 1;
}

static int busy_prefill(const struct busy_thresholds *t, const struct admit_load *m)
{
    int64_t tokens = m->active_prefill_tokens, limit;

    if (tokens < 0)
        return 0;
    if (t->active_prefill_tokens_threshold >= 0 && tokens > t->active_prefill_tokens_threshold)
        return 1;
    if (!isnan(t->active_prefill_tokens_threshold_frac) &&
        busy_frac_limit(t->active_prefill_tokens_threshold_frac, m->max_num_batched_tokens,
                        &limit) &&
        tokens > limit)
        return 1;
    return 0;
}

/* One decode ratio: 1 over the threshold, 0 at or below it or unknown. */
static int busy_ratio_over(int64_t blocks, int64_t total, double threshold)
{
    return blocks >= 0 && (double) blocks / (double) total > threshold;
}

/* Latched when either ratio is over, released only when both are at or below (an unknown ratio
 * counting as below). Every admitd message carries both ratios, so "set" and "release" are
 * decided by the same message and are complements; the latch is kept so the rule stays explicit
 * and the API stays stable should a message ever carry only one of them. */
static int busy_decode(double threshold, const struct admit_load *m, struct busy_latch *l)
{
    int64_t total = m->kv_total_blocks;
    int used_over, active_over;

    if (isnan(threshold) || total <= 0)
        return 0;
    used_over = busy_ratio_over(m->kv_used_blocks, total, threshold);
    active_over = busy_ratio_over(m->active_decode_blocks, total, threshold);
    l->decode = used_over || active_over;
    return l->decode;
}

int busy_rank(const struct busy_thresholds *t, const struct admit_load *m, struct busy_latch *l)
{
    /* The decode latch is updated even when prefill already says busy, so it stays current. */
    int decode = busy_decode(t->active_decode_blocks_threshold, m, l);

    return busy_prefill(t, m) || decode;
}

int busy_worker(const struct busy_thresholds *t, const struct admit_load *ranks, size_t n,
                struct busy_latch *latches)
{
    int all = n > 0;

    /* Every rank is judged, not just up to the first free one, so every latch stays current. */
    for (size_t i = 0; i < n; i++)
        if (!busy_rank(t, &ranks[i], &latches[i]))
            all = 0;
    return all;
}

int busy_has_room(const struct busy_thresholds *t, const struct admit_load *ranks, size_t n,
                  struct busy_latch *latches)
{
    return !busy_worker(t, ranks, n, latches);
}
