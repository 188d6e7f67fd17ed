/* select: the router's booked load and the one-pass choice of a worker (see select.h). */
#include "select.h"
#include "core/xmalloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Heartbeat assumed for a worker whose messages do not say (they always do). */
#define SEL_DEFAULT_HEARTBEAT_MS 1000

struct srank {
    struct busy_capacity cap;
    struct busy_limits lim; /* for sel.t: the thresholds last used */
    int64_t bs;             /* block size bookings use */
    int64_t booked_prefill, booked_decode, booked_requests;
    int64_t pub_prefill, pub_decode, pub_kv_used, pub_requests;
    int have_pub;
    int draining;
};

struct sworker {
    int64_t alive_until; /* newest message + missed heartbeats; INT64_MIN until the first */
    int64_t skip_until;  /* skipped for an overload answer until then */
    int draining;        /* a rank said so in its newest message */
    int pub_full;        /* every rank lacks room by its published load, under sel.t */
    unsigned nranks;
    struct srank *ranks;
};

struct sel {
    struct sworker *w;
    int n, cap;
    unsigned missed;
    int64_t default_bs;
    int track_output;
    struct busy_thresholds t; /* what every rank's limits were computed for */
    int rr;                   /* where the next pass starts: after the last one chosen */
};

static int same_frac(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

static int same_thresholds(const struct busy_thresholds *a, const struct busy_thresholds *b)
{
    return same_frac(a->active_decode_blocks_threshold, b->active_decode_blocks_threshold) &&
           a->active_prefill_tokens_threshold == b->active_prefill_tokens_threshold &&
           same_frac(a->active_prefill_tokens_threshold_frac,
                     b->active_prefill_tokens_threshold_frac);
}

/* The published load row: prefill tokens, and the larger of the two decode signals. */
static struct busy_load published(const struct srank *r)
{
    struct busy_load l = {r->pub_prefill,
                          r->pub_kv_used > r->pub_decode ? r->pub_kv_used : r->pub_decode,
                          r->pub_requests, 1};
    return l;
}

static struct busy_load booked(const struct srank *r)
{
    struct busy_load l = {r->booked_prefill, r->booked_decode, r->booked_requests, r->have_pub};
    return l;
}

/* The monitor's verdict on a worker, under sel.t: full when every rank it published lacks
 * room (a rank never heard from is free). */
static void judge_published(struct sworker *w)
{
    int full = w->nranks > 0;

    for (unsigned i = 0; i < w->nranks && full; i++) {
        struct busy_load l = published(&w->ranks[i]);
        if (!w->ranks[i].have_pub || busy_within(&l, &w->ranks[i].lim))
            full = 0;
    }
    w->pub_full = full;
}

/* Makes every rank's limits those of t; a change of thresholds costs one pass. */
static void use_thresholds(struct sel *s, const struct busy_thresholds *t)
{
    if (same_thresholds(&s->t, t))
        return;
    s->t = *t;
    for (int k = 0; k < s->n; k++) {
        struct sworker *w = &s->w[k];

        for (unsigned i = 0; i < w->nranks; i++)
            busy_limits(&w->ranks[i].cap, t, &w->ranks[i].lim);
        judge_published(w);
    }
}

struct sel *sel_new(unsigned missed_heartbeats, int64_t default_block_size)
{
    struct sel *s = xcalloc(1, sizeof *s);

    s->missed = missed_heartbeats ? missed_heartbeats : 3;
    s->default_bs = default_block_size > 0 ? default_block_size : 16;
    busy_thresholds_unset(&s->t);
    return s;
}

void sel_free(struct sel *s)
{
    if (s == NULL)
        return;
    for (int k = 0; k < s->n; k++)
        free(s->w[k].ranks);
    free(s->w);
    free(s);
}

int sel_add_worker(struct sel *s)
{
    struct sworker *w;

    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->w = xrealloc(s->w, (size_t) s->cap * sizeof *s->w);
    }
    w = &s->w[s->n];
    memset(w, 0, sizeof *w);
    w->alive_until = INT64_MIN;
    return s->n++;
}

int sel_workers(const struct sel *s)
{
    return s->n;
}

/* Grows worker w to n ranks; new ranks are unknown (capacity and load) and free. */
static void grow(struct sel *s, struct sworker *w, unsigned n)
{
    w->ranks = xrealloc(w->ranks, n * sizeof *w->ranks);
    for (unsigned i = w->nranks; i < n; i++) {
        struct srank *r = &w->ranks[i];

        memset(r, 0, sizeof *r);
        r->cap.max_num_batched_tokens = r->cap.kv_total_blocks = r->cap.kv_block_size = -1;
        r->pub_prefill = r->pub_decode = r->pub_kv_used = r->pub_requests = -1;
        r->bs = s->default_bs;
        busy_limits(&r->cap, &s->t, &r->lim);
    }
    w->nranks = n;
}

void sel_message(struct sel *s, int wi, const struct admit_load *m, int64_t now_ms)
{
    struct sworker *w = &s->w[wi];
    struct busy_capacity cap;
    struct srank *r;
    int64_t hb = m->heartbeat_ms > 0 ? m->heartbeat_ms : SEL_DEFAULT_HEARTBEAT_MS, span;

    if (m->dp_rank < 0 || m->dp_rank >= SEL_MAX_RANKS)
        return;
    if ((unsigned) m->dp_rank >= w->nranks)
        grow(s, w, (unsigned) m->dp_rank + 1);
    r = &w->ranks[m->dp_rank];
    busy_capacity_of(m, &cap);
    if (memcmp(&cap, &r->cap, sizeof cap) != 0) {
        /* Capacity changes only when a worker restarts or re-registers. */
        r->cap = cap;
        r->bs = cap.kv_block_size > 0 ? cap.kv_block_size : s->default_bs;
        busy_limits(&r->cap, &s->t, &r->lim);
    }
    r->pub_prefill = m->active_prefill_tokens;
    r->pub_decode = m->active_decode_blocks;
    r->pub_kv_used = m->kv_used_blocks;
    r->pub_requests = m->engine_requests;
    r->have_pub = 1;
    r->draining = m->state == ADMIT_LOAD_DRAINING;
    w->draining = 0;
    for (unsigned i = 0; i < w->nranks; i++)
        w->draining |= w->ranks[i].draining;
    /* Saturating: heartbeat_ms may be up to 2^53 and missed any unsigned, and a product
     * out of int64 would be undefined. */
    span = hb > INT64_MAX / (int64_t) s->missed ? INT64_MAX : hb * (int64_t) s->missed;
    w->alive_until = now_ms > INT64_MAX - span ? INT64_MAX : now_ms + span;
    w->skip_until = 0; /* its own word replaces our guess */
    judge_published(w);
}

void sel_mark_overloaded(struct sel *s, int w, int64_t until_ms)
{
    s->w[w].skip_until = until_ms;
}

void sel_track_output(struct sel *s, int on)
{
    s->track_output = on;
}

static int64_t blocks_for(int64_t tokens, int64_t bs)
{
    return tokens > 0 ? (tokens + bs - 1) / bs : 0;
}

enum sel_result sel_pick(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                         const struct busy_thresholds *t, int exclude, int pinned, int *worker,
                         unsigned *rank)
{
    int64_t best_cost = INT64_MAX, last_bs = 0, blocks = 0;
    int best = -1, nalive = 0, check, from, to;
    unsigned best_rank = 0;

    if (pinned >= s->n)
        return SEL_NO_WORKER; /* no such worker, so none alive; never read past the array */
    if (prompt_tokens < 0)
        prompt_tokens = 0;
    use_thresholds(s, t);
    check = busy_thresholds_any(t);
    if (pinned >= 0) {
        from = pinned;
        to = pinned + 1;
    } else {
        from = 0;
        to = s->n;
    }
    /* Two runs, start..to then from..start, so that ties go round without a division. The
     * pass starts just after the worker chosen last, so equal candidates are taken in turn
     * even with others between them: a start that merely advanced by one each pick would
     * hand the worker after a busy one the turns of both. */
    int start = (pinned >= 0 || s->rr >= s->n) ? from : s->rr;
    for (int run = 0; run < 2; run++) {
        int lo = run == 0 ? start : from, hi = run == 0 ? to : start;

        for (int k = lo; k < hi; k++) {
            const struct sworker *w = &s->w[k];
            int64_t wcost = INT64_MAX;
            unsigned wrank = 0;

            if (w->alive_until < now_ms || w->draining)
                continue;
            nalive++;
            /* Alive but not a candidate: skipped for its own 529, just left, or full by what
             * it publishes. These make the answer "all busy", not "no worker". */
            if (w->skip_until > now_ms || k == exclude || (check && w->pub_full))
                continue;
            for (unsigned i = 0; i < w->nranks; i++) {
                const struct srank *r = &w->ranks[i];
                int64_t pp, pd, cost;

                if (r->bs != last_bs) {
                    last_bs = r->bs;
                    blocks = blocks_for(prompt_tokens, last_bs);
                }
                pp = r->booked_prefill + prompt_tokens;
                pd = r->booked_decode + blocks;
                if (check && (pp > r->lim.prefill_tokens || pd > r->lim.decode_blocks))
                    continue; /* the projection has no room on this rank */
                cost = pp + pd * r->bs;
                if (cost < wcost) {
                    wcost = cost;
                    wrank = i;
                }
            }
            if (wcost < best_cost) {
                best_cost = wcost;
                best = k;
                best_rank = wrank;
            }
        }
    }
    if (best >= 0) {
        if (pinned < 0)
            s->rr = best + 1;
        *worker = best;
        *rank = best_rank;
        return SEL_OK;
    }
    return nalive > 0 ? SEL_ALL_BUSY : SEL_NO_WORKER;
}

void sel_book(struct sel *s, struct sel_booking *b, int worker, unsigned rank,
              int64_t prompt_tokens)
{
    struct srank *r = &s->w[worker].ranks[rank];

    if (prompt_tokens < 0)
        prompt_tokens = 0;
    b->booked = 1;
    b->worker = worker;
    b->rank = rank;
    b->prefill = prompt_tokens;
    b->tokens = prompt_tokens;
    b->blocks = blocks_for(prompt_tokens, r->bs);
    r->booked_prefill += b->prefill;
    r->booked_decode += b->blocks;
    r->booked_requests++;
}

void sel_first_token(struct sel *s, struct sel_booking *b)
{
    if (!b->booked || b->prefill == 0)
        return;
    s->w[b->worker].ranks[b->rank].booked_prefill -= b->prefill;
    b->prefill = 0;
}

void sel_output(struct sel *s, struct sel_booking *b, unsigned n)
{
    struct srank *r;
    int64_t want;

    if (!b->booked || !s->track_output || n == 0)
        return;
    r = &s->w[b->worker].ranks[b->rank];
    b->tokens += n;
    want = blocks_for(b->tokens, r->bs);
    if (want > b->blocks) {
        r->booked_decode += want - b->blocks;
        b->blocks = want;
    }
}

void sel_release(struct sel *s, struct sel_booking *b)
{
    struct srank *r;

    if (!b->booked)
        return;
    r = &s->w[b->worker].ranks[b->rank];
    r->booked_prefill -= b->prefill;
    r->booked_decode -= b->blocks;
    r->booked_requests--;
    memset(b, 0, sizeof *b);
}

int sel_alive(const struct sel *s, int w, int64_t now_ms)
{
    return s->w[w].alive_until >= now_ms && !s->w[w].draining;
}

int sel_routable(const struct sel *s, int w, int64_t now_ms)
{
    return sel_alive(s, w, now_ms) && s->w[w].skip_until <= now_ms;
}

int sel_published_full(struct sel *s, int w, const struct busy_thresholds *t)
{
    use_thresholds(s, t);
    return s->w[w].pub_full;
}

unsigned sel_ranks(const struct sel *s, int w)
{
    return s->w[w].nranks ? s->w[w].nranks : 1;
}

void sel_view(struct sel *s, int wi, unsigned ri, const struct busy_thresholds *t,
              struct sel_rank_view *out)
{
    const struct sworker *w = &s->w[wi];
    struct busy_load pl;

    memset(out, 0, sizeof *out);
    use_thresholds(s, t);
    if (ri >= w->nranks) {
        out->capacity.max_num_batched_tokens = out->capacity.kv_total_blocks =
            out->capacity.kv_block_size = -1;
        out->pub_prefill_tokens = out->pub_decode_blocks = out->pub_kv_used_blocks = -1;
        out->block_size = s->default_bs;
        out->booked_room = out->published_room = 1;
        return;
    }
    const struct srank *r = &w->ranks[ri];
    out->booked = booked(r);
    out->published = r->have_pub;
    out->pub_prefill_tokens = r->pub_prefill;
    out->pub_decode_blocks = r->pub_decode;
    out->pub_kv_used_blocks = r->pub_kv_used;
    out->capacity = r->cap;
    out->block_size = r->bs;
    out->booked_room = busy_within(&out->booked, &r->lim);
    pl = published(r);
    out->published_room = !r->have_pub || busy_within(&pl, &r->lim);
}
