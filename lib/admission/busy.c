/* busy: the room rule, as limits and a comparison, and the monitor's view of messages. */
#include "admission/busy.h"

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

int64_t busy_prefill_budget(const struct busy_capacity *c)
{
    return c->max_num_batched_tokens > 0 ? c->max_num_batched_tokens
                                         : BUSY_DEFAULT_MAX_BATCHED_TOKENS;
}

/* The fraction signal's token limit, (int64)(frac * budget): busy above it. A limit beyond
 * int64 can never be exceeded and is "no limit", rather than a conversion out of range,
 * which is undefined. */
static int64_t frac_limit(double frac, int64_t budget)
{
    double lim = frac * (double) budget;

    if (isnan(lim) || lim >= BUSY_INT64_LIMIT)
        return INT64_MAX;
    return lim <= -BUSY_INT64_LIMIT ? INT64_MIN : (int64_t) lim;
}

/* The most blocks b with b / total <= frac, the comparison done in doubles exactly as the
 * ratio would be: floor(frac * total) can be one off when the product rounds. */
static int64_t decode_limit(double frac, int64_t total)
{
    double t = (double) total;
    int64_t b;

    b = (int64_t) floor(frac * t);
    if (b < 0)
        b = 0;
    while ((double) (b + 1) / t <= frac)
        b++;
    while (b > 0 && (double) b / t > frac)
        b--;
    if ((double) b / t > frac)
        return -1; /* even an empty rank is over: frac < 0 (refused by validate) */
    return b;
}

void busy_limits(const struct busy_capacity *c, const struct busy_thresholds *t,
                 struct busy_limits *out)
{
    out->prefill_tokens = INT64_MAX;
    out->decode_blocks = INT64_MAX;
    if (t->active_prefill_tokens_threshold >= 0)
        out->prefill_tokens = t->active_prefill_tokens_threshold;
    if (!isnan(t->active_prefill_tokens_threshold_frac)) {
        int64_t f = frac_limit(t->active_prefill_tokens_threshold_frac, busy_prefill_budget(c));
        if (f < out->prefill_tokens)
            out->prefill_tokens = f;
    }
    if (!isnan(t->active_decode_blocks_threshold) && c->kv_total_blocks > 0)
        out->decode_blocks = decode_limit(t->active_decode_blocks_threshold, c->kv_total_blocks);
}

int has_room(const struct busy_load *l, const struct busy_capacity *c,
             const struct busy_thresholds *t)
{
    struct busy_limits lim;

    busy_limits(c, t, &lim);
    return busy_within(l, &lim);
}

int worker_is_full(const struct busy_load *l, const struct busy_capacity *c, size_t n,
                   const struct busy_thresholds *t)
{
    for (size_t i = 0; i < n; i++)
        if (has_room(&l[i], &c[i], t))
            return 0;
    return n > 0;
}

/* ---- worker-published load ---------------------------------------------------------- */

void busy_capacity_of(const struct admit_load *m, struct busy_capacity *out)
{
    out->max_num_batched_tokens = m->max_num_batched_tokens;
    out->kv_total_blocks = m->kv_total_blocks;
    out->kv_block_size = m->kv_block_size;
}

void busy_load_of(const struct admit_load *m, struct busy_load *out)
{
    out->prefill_tokens = m->active_prefill_tokens;
    out->decode_blocks =
        m->kv_used_blocks > m->active_decode_blocks ? m->kv_used_blocks : m->active_decode_blocks;
    out->requests = m->engine_requests;
    out->observed = 1;
}

/* The newest known value of one number: v when known (>= least), else what was kept. */
static void keep_known(int64_t *kept, int64_t v, int64_t least)
{
    if (v >= least)
        *kept = v;
}

void busy_latch_note(struct busy_latch *l, const struct admit_load *m)
{
    keep_known(&l->prefill_tokens, m->active_prefill_tokens, 0);
    keep_known(&l->kv_used_blocks, m->kv_used_blocks, 0);
    keep_known(&l->active_decode_blocks, m->active_decode_blocks, 0);
    keep_known(&l->kv_total_blocks, m->kv_total_blocks, 1);
    keep_known(&l->max_num_batched_tokens, m->max_num_batched_tokens, 1);
}

void busy_latch_row(const struct busy_latch *l, struct busy_load *load, struct busy_capacity *cap)
{
    load->prefill_tokens = l->prefill_tokens;
    load->decode_blocks =
        l->kv_used_blocks > l->active_decode_blocks ? l->kv_used_blocks : l->active_decode_blocks;
    load->requests = -1;
    load->observed = 1;
    cap->max_num_batched_tokens = l->max_num_batched_tokens;
    cap->kv_total_blocks = l->kv_total_blocks;
    cap->kv_block_size = -1;
}

int busy_rank(const struct busy_thresholds *t, const struct admit_load *m, struct busy_latch *l)
{
    struct busy_capacity c;
    struct busy_load row;

    busy_latch_note(l, m);
    busy_latch_row(l, &row, &c);
    return !has_room(&row, &c, t);
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
