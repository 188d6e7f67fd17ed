/* select: the router's booked load and the one-pass choice of a worker (see select.h). */
#include "select.h"
#include "core/xmalloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Heartbeat assumed for a worker whose messages do not say (they always do). */
#define SEL_DEFAULT_HEARTBEAT_MS 1000

/* Costs are in blocks, in fixed point: SEL_COST_ONE is one block, so that prefill tokens
 * count as tokens / block size without a division in the pass. A term saturates at
 * SEL_COST_MAX, so that a cost of three terms stays below INT64_MAX (see the mask below). */
#define SEL_COST_ONE 1024
#define SEL_COST_MAX (INT64_MAX / 4)

/* The pass's best-so-far test is a branch taken a handful of times a pass. Compilers turn its
 * three assignments into conditional moves, which put a compare-and-move chain through every
 * rank (a pass over every rank of 4096 workers of 4 took half as long again); the hint and the
 * empty volatile asm, which cannot be made conditional, keep it a branch. Else: plain C. */
#if defined(__GNUC__)
#define SEL_UNLIKELY(x)   __builtin_expect(!!(x), 0)
#define SEL_KEEP_BRANCH() __asm__ volatile("")
#else
#define SEL_UNLIKELY(x)   (x)
#define SEL_KEEP_BRANCH() ((void) 0)
#endif

/* A rank, as everything but the pass reads it. */
struct srank {
    struct busy_capacity cap;
    struct busy_limits lim; /* for sel.t: the thresholds last used */
    int64_t bs;             /* block size bookings use */
    int64_t booked_prefill, booked_decode, booked_requests;
    int64_t pub_prefill, pub_decode, pub_kv_used, pub_requests;
    int have_pub;
    int draining;
};

/* A rank, as the pass reads it: derived from its srank at every change (refresh_load(),
 * refresh_size()), and kept apart and small so that a pass that reads a worker's ranks (see
 * struct sworker for when it need not) reads 24 bytes a rank, not the two cache lines an
 * srank spans.
 *
 * The projection's two limits are one number of prompt tokens. booked + prompt > limit is
 * prompt > limit - booked; and for the decode limit, with D = limit - booked blocks left,
 * ceil(prompt / bs) > D is exactly prompt > D x bs (D >= 0, bs >= 1). The prompt fits when
 * it is within both, so within the smaller. */
struct shot {
    int64_t room;  /* most prompt tokens that fit under every limit; < 0: none */
    int64_t cost;  /* prefill / bs + decode blocks, in SEL_COST_ONE: the cost before this request */
    uint32_t size; /* index of the rank's block size in sel.sizes */
    uint32_t unused;
};

/* A block size some rank has, and what the request being chosen for adds to the cost of such
 * a rank. The pass would otherwise divide (blocks = ceil(prompt / bs)) at every rank, or keep
 * a cache whose variables crowd its registers; a fleet has one or two sizes. */
struct ssize {
    int64_t bs;
    int64_t cost; /* prompt / bs + ceil(prompt / bs), in SEL_COST_ONE, for sel.sizes_prompt */
};

/* A worker, 48 bytes: what the pass reads of each, in one array.
 *
 * With it, the worker's cheapest rank (the first of the cheapest, kept by summarize()): when
 * its ranks share a block size, their costs compare as their shots' costs, so when that rank
 * has room for the request it is the worker's choice, and the pass reads none of the ranks.
 * It nearly always has room, holding the least; otherwise the pass reads them all. */
struct sworker {
    int64_t alive_until; /* newest message + missed heartbeats; INT64_MIN until the first */
    int64_t skip_until;  /* skipped for an overload answer until then */
    int64_t min_cost;    /* the cheapest rank's shot: cost, room, size */
    int64_t min_room;
    uint32_t min_size;
    uint32_t first;   /* its shots are sel.shots[first .. first + nranks) */
    uint8_t nranks;   /* <= SEL_MAX_RANKS */
    uint8_t min_rank; /* which rank is the cheapest */
    uint8_t uniform;  /* its ranks share a block size (min_* can stand for them) */
    uint8_t draining; /* a rank said so in its newest message */
    uint8_t pub_full; /* every rank lacks room by its published load, under sel.t */
    uint8_t out;      /* SEL_OUT_*: the pass tests one byte for the three reasons */
};
/* Why a worker is out: bit 0 whatever the thresholds, bit 1 only under them. */
#define SEL_OUT_ALWAYS 1 /* draining, or no rank heard yet */
#define SEL_OUT_FULL   2 /* full by what it publishes */
_Static_assert(sizeof(struct sworker) <= 48, "a worker is three quarters of a cache line");

struct sel {
    struct sworker *w;
    struct srank **ranks; /* worker k's nranks sranks: ranks[k] */
    int n, cap;
    unsigned missed;
    int64_t default_bs;
    int track_output;
    struct busy_thresholds t; /* what every rank's limits were computed for */
    int rr;                   /* where the next pass starts: after the last one chosen */
    struct ssize *sizes;      /* every block size a rank has (and perhaps a few it had) */
    uint32_t nsizes, capsizes;
    uint32_t compact_at;  /* nsizes that makes compact_sizes() worth its pass */
    int64_t sizes_prompt; /* the prompt sizes[].cost is for; -1: none */
    /* Every worker's shots, in one array, so that the pass reads them in a stream: a
     * worker that grows takes a new run at the end, and the runs left behind are dropped
     * when they are as many as the live ones (grow_shots()). */
    struct shot *shots;
    uint32_t nshots, capshots, dead;
};

/* The sranks of worker w. */
static struct srank *cold(const struct sel *s, const struct sworker *w)
{
    return s->ranks[w - s->w];
}

/* The shots of worker w. */
static struct shot *hot(const struct sel *s, const struct sworker *w)
{
    return &s->shots[w->first];
}

/* Room under a limit when booked is held: limit - booked, or -1 (none) when the limit itself
 * is below 0, where the subtraction could overflow. booked >= 0 always. */
static int64_t room(int64_t limit, int64_t booked)
{
    return limit >= 0 ? limit - booked : -1;
}

/* Makes rank i's shot what its srank's booked load and limits say: after every change of
 * either (and of its block size, after refresh_size()). */
/* Keeps worker w's cheapest rank (the first of the cheapest) and whether its ranks share a
 * block size: after any change of a shot. */
static void summarize(struct sel *s, struct sworker *w)
{
    const struct shot *h = hot(s, w);
    unsigned best = 0;

    w->uniform = 1;
    for (unsigned i = 1; i < w->nranks; i++) {
        if (h[i].size != h[0].size)
            w->uniform = 0;
        if (h[i].cost < h[best].cost)
            best = i;
    }
    w->min_cost = h[best].cost;
    w->min_room = h[best].room;
    w->min_size = h[best].size;
    w->min_rank = (uint8_t) best;
}

/* v blocks in SEL_COST_ONE, saturating; v >= 0. */
static int64_t cost_blocks(int64_t v)
{
    return v > SEL_COST_MAX / SEL_COST_ONE ? SEL_COST_MAX : v * SEL_COST_ONE;
}

/* v tokens as blocks of bs in SEL_COST_ONE (a fraction of a block counts as that fraction). */
static int64_t cost_tokens(int64_t v, int64_t bs)
{
    return v > SEL_COST_MAX / SEL_COST_ONE ? SEL_COST_MAX : v * SEL_COST_ONE / bs;
}

/* Makes rank i's shot what its srank's booked and published load and limits say: after every
 * change of any (and of its block size, after refresh_size()). */
static void refresh_load(struct sel *s, struct sworker *w, unsigned i)
{
    const struct srank *r = &cold(s, w)[i];
    struct shot *h = &hot(s, w)[i];
    int64_t prefill = room(r->lim.prefill_tokens, r->booked_prefill);
    int64_t blocks = room(r->lim.decode_blocks, r->booked_decode), decode;
    int64_t pub_decode = r->pub_kv_used > r->pub_decode ? r->pub_kv_used : r->pub_decode;
    int64_t seen_prefill = r->pub_prefill > r->booked_prefill ? r->pub_prefill : r->booked_prefill;
    int64_t seen_decode = pub_decode > r->booked_decode ? pub_decode : r->booked_decode;

    if (blocks < 0)
        decode = -1;
    else /* saturating: beyond INT64_MAX tokens every prompt fits */
        decode = blocks > INT64_MAX / r->bs ? INT64_MAX : blocks * r->bs;
    /* A rank this router has booked nothing on takes any one request (see select.h). */
    h->room = r->booked_requests == 0 ? INT64_MAX : prefill < decode ? prefill : decode;
    /* The cost starts from the larger of booked and published load: other routers' traffic
     * and generated tokens count once published, our own burst before it is. */
    h->cost = cost_tokens(seen_prefill, r->bs) + cost_blocks(seen_decode);
    summarize(s, w);
}

/* The index of block size bs in s->sizes, added if new; a rank's size changes only when its
 * worker restarts. */
static uint32_t find_size(struct sel *s, int64_t bs)
{
    for (uint32_t i = 0; i < s->nsizes; i++)
        if (s->sizes[i].bs == bs)
            return i;
    if (s->nsizes == s->capsizes) {
        s->capsizes = s->capsizes ? s->capsizes * 2 : 4;
        s->sizes = xrealloc(s->sizes, s->capsizes * sizeof *s->sizes);
    }
    s->sizes[s->nsizes].bs = bs;
    s->sizes_prompt = -1; /* the new size's adds are not computed yet */
    return s->nsizes++;
}

/* Rebuilds s->sizes from the sizes ranks have now, so that sizes no rank has any more are not
 * computed for at every pass: restarts with ever new block sizes would grow it without end.
 * The next rebuild waits until the table has doubled, so that a fleet that really has many
 * sizes does not pay a pass over every rank at each of its messages. */
static void compact_sizes(struct sel *s)
{
    s->nsizes = 0;
    for (int k = 0; k < s->n; k++)
        for (unsigned i = 0; i < s->w[k].nranks; i++)
            hot(s, &s->w[k])[i].size = find_size(s, cold(s, &s->w[k])[i].bs);
    for (int k = 0; k < s->n; k++)
        if (s->w[k].nranks > 0)
            summarize(s, &s->w[k]);
    s->compact_at = 2 * s->nsizes + 8;
}

/* Makes rank i's shot hold its srank's block size, then its load. */
static void refresh_size(struct sel *s, struct sworker *w, unsigned i)
{
    uint32_t size = find_size(s, cold(s, w)[i].bs);

    hot(s, w)[i].size = size;
    if (s->nsizes > s->compact_at)
        compact_sizes(s);
    refresh_load(s, w, i);
}

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
static void judge_published(struct sel *s, struct sworker *w)
{
    static const struct busy_load never = {-1, -1, -1, 0}; /* not heard from: room */
    const struct srank *ranks = cold(s, w);
    struct busy_load rows[SEL_MAX_RANKS];
    struct busy_capacity caps[SEL_MAX_RANKS];
    int full;

    for (unsigned i = 0; i < w->nranks; i++) {
        rows[i] = ranks[i].have_pub ? published(&ranks[i]) : never;
        caps[i] = ranks[i].cap;
    }
    full = worker_is_full(rows, caps, w->nranks, &s->t); /* the one rule, core/busy.h */
    w->pub_full = (uint8_t) full;
    w->out = (uint8_t) ((w->draining || w->nranks == 0 ? SEL_OUT_ALWAYS : 0) |
                        (full ? SEL_OUT_FULL : 0));
}

/* Makes every rank's limits those of t; a change of thresholds costs one pass. */
static void use_thresholds(struct sel *s, const struct busy_thresholds *t)
{
    if (same_thresholds(&s->t, t))
        return;
    s->t = *t;
    for (int k = 0; k < s->n; k++) {
        struct sworker *w = &s->w[k];

        for (unsigned i = 0; i < w->nranks; i++) {
            busy_limits(&cold(s, w)[i].cap, t, &cold(s, w)[i].lim);
            refresh_load(s, w, i);
        }
        judge_published(s, w);
    }
}

struct sel *sel_new(unsigned missed_heartbeats, int64_t default_block_size)
{
    struct sel *s = xcalloc(1, sizeof *s);

    s->missed = missed_heartbeats ? missed_heartbeats : 3;
    s->default_bs = default_block_size > 0 ? default_block_size : 16;
    busy_thresholds_unset(&s->t);
    s->sizes_prompt = -1;
    s->compact_at = 8;
    return s;
}

void sel_free(struct sel *s)
{
    if (s == NULL)
        return;
    for (int k = 0; k < s->n; k++)
        free(s->ranks[k]);
    free(s->ranks);
    free(s->w);
    free(s->shots);
    free(s->sizes);
    free(s);
}

int sel_add_worker(struct sel *s)
{
    struct sworker *w;

    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->w = xrealloc(s->w, (size_t) s->cap * sizeof *s->w);
        s->ranks = xrealloc(s->ranks, (size_t) s->cap * sizeof *s->ranks);
    }
    s->ranks[s->n] = NULL;
    w = &s->w[s->n];
    memset(w, 0, sizeof *w);
    w->alive_until = INT64_MIN;
    w->out = SEL_OUT_ALWAYS; /* no rank yet */
    return s->n++;
}

int sel_workers(const struct sel *s)
{
    return s->n;
}

/* Moves worker w's shots to a new run of n at the end of s->shots (the new ones zeroed), and
 * drops the runs left behind once they are as many as the live shots, by laying every
 * worker's run out again in worker order: the order the pass reads them. Workers grow only
 * when they first report a higher rank, so this is start-up work. */
static void grow_shots(struct sel *s, struct sworker *w, unsigned n)
{
    uint32_t live = s->nshots - s->dead;

    if (s->dead > live && s->dead > 64) {
        struct shot *fresh = xmalloc((size_t) (live + n) * sizeof *fresh);
        uint32_t at = 0;

        for (int k = 0; k < s->n; k++) {
            struct sworker *o = &s->w[k];

            memcpy(&fresh[at], hot(s, o), o->nranks * sizeof *fresh);
            o->first = at;
            at += o->nranks;
        }
        free(s->shots);
        s->shots = fresh;
        s->nshots = at;
        s->capshots = live + n;
        s->dead = 0;
    }
    if (s->nshots + n > s->capshots) {
        s->capshots = s->capshots * 2 > s->nshots + n ? s->capshots * 2 : s->nshots + n;
        s->shots = xrealloc(s->shots, (size_t) s->capshots * sizeof *s->shots);
    }
    memcpy(&s->shots[s->nshots], hot(s, w), w->nranks * sizeof *s->shots);
    memset(&s->shots[s->nshots + w->nranks], 0, (n - w->nranks) * sizeof *s->shots);
    s->dead += w->nranks;
    w->first = s->nshots;
    s->nshots += n;
}

/* Grows worker w to n ranks; new ranks are unknown (capacity and load) and free. */
static void grow(struct sel *s, struct sworker *w, unsigned n)
{
    unsigned old = w->nranks;
    struct srank **ranks = &s->ranks[w - s->w];

    grow_shots(s, w, n);
    *ranks = xrealloc(*ranks, n * sizeof **ranks);
    w->nranks = (uint8_t) n;
    for (unsigned i = old; i < n; i++) {
        struct srank *r = &(*ranks)[i];

        memset(r, 0, sizeof *r);
        r->cap.max_num_batched_tokens = r->cap.kv_total_blocks = r->cap.kv_block_size = -1;
        r->pub_prefill = r->pub_decode = r->pub_kv_used = r->pub_requests = -1;
        r->bs = s->default_bs;
        busy_limits(&r->cap, &s->t, &r->lim);
    }
    /* Every new srank is whole before any shot is made: compact_sizes() reads them all. */
    for (unsigned i = old; i < n; i++)
        refresh_size(s, w, i);
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
    r = &cold(s, w)[m->dp_rank];
    busy_capacity_of(m, &cap);
    if (memcmp(&cap, &r->cap, sizeof cap) != 0) {
        /* Capacity changes only when a worker restarts or re-registers. */
        r->cap = cap;
        r->bs = cap.kv_block_size > 0 ? cap.kv_block_size : s->default_bs;
        busy_limits(&r->cap, &s->t, &r->lim);
        refresh_size(s, w, (unsigned) m->dp_rank);
    }
    r->pub_prefill = m->active_prefill_tokens;
    r->pub_decode = m->active_decode_blocks;
    r->pub_kv_used = m->kv_used_blocks;
    r->pub_requests = m->engine_requests;
    r->have_pub = 1;
    r->draining = m->state == ADMIT_LOAD_DRAINING;
    refresh_load(s, w, (unsigned) m->dp_rank); /* the published load is in its cost */
    w->draining = 0;
    for (unsigned i = 0; i < w->nranks; i++)
        w->draining |= (uint8_t) cold(s, w)[i].draining;
    /* Saturating: heartbeat_ms may be up to 2^53 and missed any unsigned, and a product
     * out of int64 would be undefined. */
    span = hb > INT64_MAX / (int64_t) s->missed ? INT64_MAX : hb * (int64_t) s->missed;
    w->alive_until = now_ms > INT64_MAX - span ? INT64_MAX : now_ms + span;
    w->skip_until = 0; /* its own word replaces our guess */
    judge_published(s, w);
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

int sel_alive(const struct sel *s, int w, int64_t now_ms)
{
    return s->w[w].alive_until >= now_ms && !s->w[w].draining;
}

/* Computes what a request of prompt tokens adds on a rank of each block size. */
static void size_adds(struct sel *s, int64_t prompt)
{
    if (s->sizes_prompt == prompt)
        return;
    for (uint32_t i = 0; i < s->nsizes; i++) {
        struct ssize *z = &s->sizes[i];

        z->cost = cost_tokens(prompt, z->bs) + cost_blocks(blocks_for(prompt, z->bs));
    }
    s->sizes_prompt = prompt;
}

enum sel_result sel_pick(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                         const struct busy_thresholds *t, int exclude, int pinned, int *worker,
                         unsigned *rank)
{
    const struct sworker *ws = s->w, *w, *stop, *excl, *best = NULL;
    const struct shot *shots = s->shots;
    const struct ssize *sizes;
    int64_t best_cost = INT64_MAX, need;
    unsigned best_rank = 0;
    int from, to, start;
    uint8_t out_mask;

    if (pinned >= s->n || s->n == 0)
        return SEL_NO_WORKER; /* no such worker, so none alive; never read past the array */
    if (prompt_tokens < 0)
        prompt_tokens = 0;
    /* No thresholds (NULL): nothing is judged, and the limits kept for the thresholds last
     * used stay: a need below every room, and only the reasons that hold whatever the
     * thresholds. */
    if (t != NULL) {
        use_thresholds(s, t);
        need = prompt_tokens;
        out_mask = SEL_OUT_ALWAYS | SEL_OUT_FULL;
    } else {
        need = INT64_MIN;
        out_mask = SEL_OUT_ALWAYS;
    }
    size_adds(s, prompt_tokens);
    sizes = s->sizes;
    if (pinned >= 0) {
        from = pinned;
        to = pinned + 1;
    } else {
        from = 0;
        to = s->n;
    }
    excl = exclude >= 0 && exclude < s->n ? &ws[exclude] : NULL;
    /* One loop serves thresholds set and unset, with nothing to test for which: with none
     * set every limit is INT64_MAX, so no room is ever short (booked + prompt would have to
     * pass INT64_MAX) and no worker is full by what it publishes. It keeps few variables, so
     * that they stay in registers: workers by pointer, and whether any is alive asked again
     * only when none was chosen.
     *
     * Every rank is judged against the best so far, in order: the first lowest cost is the
     * worker whose cheapest rank is lowest, first in turn, and its first cheapest rank, as a
     * minimum per worker then across workers would find; but a new best is rare here, where
     * within a worker it is a coin toss that the branch predictor loses.
     *
     * Two runs, start..to then from..start, so that ties go round without a division. The
     * pass starts just after the worker chosen last, so equal candidates are taken in turn
     * even with others between them: a start that merely advanced by one each pick would
     * hand the worker after a busy one the turns of both. */
    start = (pinned >= 0 || s->rr >= s->n) ? from : s->rr;
    w = &ws[start];
    stop = &ws[to];
    for (int run = 0; run < 2; run++, w = &ws[from], stop = &ws[start]) {
        for (; w < stop; w++) {
            const struct shot *h, *end;

            /* Not a candidate: not alive, skipped for its own 529, just left, or full by what
             * it publishes. */
            if (w->alive_until < now_ms || w->skip_until > now_ms || (w->out & out_mask) ||
                w == excl)
                continue;
            if (w->uniform && need <= w->min_room) {
                /* Its cheapest rank has room: the worker's choice (see struct sworker). */
                int64_t cost = w->min_cost + sizes[w->min_size].cost;

                if (SEL_UNLIKELY(cost < best_cost)) {
                    SEL_KEEP_BRANCH();
                    best_cost = cost;
                    best = w;
                    best_rank = w->min_rank;
                }
                continue;
            }
            h = &shots[w->first];
            end = h + w->nranks;
            do { /* not out: it has a rank */
                /* the projected cost (booked or published, plus this request); none (INT64_MAX)
                 * when over a limit. Which ranks are over is as random as their load, so not a
                 * branch (which compilers make of a ?:) but a mask: a cost is >= 0, and cost |
                 * INT64_MAX is INT64_MAX. */
                int64_t cost = h->cost + sizes[h->size].cost;

                cost |= INT64_MAX & -(int64_t) (need > h->room);
                if (SEL_UNLIKELY(cost < best_cost)) {
                    SEL_KEEP_BRANCH();
                    best_cost = cost;
                    best = w;
                    best_rank = (unsigned) (h - &shots[w->first]);
                }
            } while (++h < end);
        }
    }
    if (best != NULL) {
        int b = (int) (best - ws);

        if (pinned < 0)
            s->rr = b + 1;
        *worker = b;
        *rank = best_rank;
        return SEL_OK;
    }
    /* Alive but no candidate (overloaded, excluded, full, no room) is "all busy", the
     * overload answer; none alive is "no worker". */
    for (int k = from; k < to; k++)
        if (sel_alive(s, k, now_ms))
            return SEL_ALL_BUSY;
    return SEL_NO_WORKER;
}

void sel_book(struct sel *s, struct sel_booking *b, int worker, unsigned rank,
              int64_t prompt_tokens)
{
    struct srank *r = &cold(s, &s->w[worker])[rank];

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
    refresh_load(s, &s->w[worker], rank);
}

void sel_first_token(struct sel *s, struct sel_booking *b)
{
    if (!b->booked || b->prefill == 0)
        return;
    cold(s, &s->w[b->worker])[b->rank].booked_prefill -= b->prefill;
    refresh_load(s, &s->w[b->worker], b->rank);
    b->prefill = 0;
}

void sel_output(struct sel *s, struct sel_booking *b, unsigned n)
{
    struct srank *r;
    int64_t want;

    if (!b->booked || !s->track_output || n == 0)
        return;
    r = &cold(s, &s->w[b->worker])[b->rank];
    b->tokens += n;
    want = blocks_for(b->tokens, r->bs);
    if (want > b->blocks) {
        r->booked_decode += want - b->blocks;
        b->blocks = want;
        refresh_load(s, &s->w[b->worker], b->rank);
    }
}

void sel_release(struct sel *s, struct sel_booking *b)
{
    struct srank *r;

    if (!b->booked)
        return;
    r = &cold(s, &s->w[b->worker])[b->rank];
    r->booked_prefill -= b->prefill;
    r->booked_decode -= b->blocks;
    r->booked_requests--;
    refresh_load(s, &s->w[b->worker], b->rank);
    memset(b, 0, sizeof *b);
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
    const struct srank *r = &cold(s, w)[ri];
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

void sel_booked(const struct sel *s, int wi, unsigned ri, struct busy_load *booked_out,
                struct busy_capacity *cap)
{
    const struct sworker *w = &s->w[wi];

    if (ri >= w->nranks) {
        static const struct busy_load none = {0, 0, 0, 0};

        *booked_out = none;
        cap->max_num_batched_tokens = cap->kv_total_blocks = cap->kv_block_size = -1;
        return;
    }
    *booked_out = booked(&cold(s, w)[ri]);
    *cap = cold(s, w)[ri].cap;
}

enum sel_result sel_gate(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                         const struct busy_thresholds *t, int pinned)
{
    int rr = s->rr, w;
    unsigned r;
    enum sel_result res = sel_pick(s, now_ms, prompt_tokens, t, -1, pinned, &w, &r);

    /* The same pass as a pick, so that the answer cannot drift from selection's; but asking
     * is not choosing, so the next pick starts where it would have. */
    s->rr = rr;
    return res;
}

int sel_room(struct sel *s, int64_t now_ms, int64_t prompt_tokens, const struct busy_thresholds *t)
{
    return sel_gate(s, now_ms, prompt_tokens, t, -1) == SEL_OK;
}
