/* select: the selection view: the workers' ranks, what they publish, and the load the router
 * books on them (see select.h). The view's state is in select_impl.h; the one-pass choice of a
 * worker that reads it is select_pass.c's; which sets of thresholds it keeps limits for, and
 * how a call finds the one it is judged under, select_slots.c's. */
#include "select_impl.h"
#include "util/xmalloc.h"

#include <stdlib.h>
#include <string.h>

/* Heartbeat assumed for a worker whose messages do not say (they always do). */
#define SEL_DEFAULT_HEARTBEAT_MS 1000

/* Keeps worker w's cheapest live rank (the first of the cheapest) and whether its live ranks
 * share a block size, then its gates: after any change of a shot or a room. With no live
 * rank the worker is out, and rank 0 stands in. */
static void summarize(struct sel *s, struct sworker *w)
{
    const struct shot *h = hot(s, w);
    unsigned best = 0, first = w->nranks;

    w->uniform = 1;
    for (unsigned i = 0; i < w->nranks; i++) {
        if (!h[i].live)
            continue;
        if (first == w->nranks)
            first = best = i;
        if (h[i].size != h[first].size)
            w->uniform = 0;
        if (h[i].cost < h[best].cost)
            best = i;
    }
    w->min_cost = h[best].cost;
    w->min_size = h[best].size;
    w->min_rank = (uint8_t) best;
    slot_gates(s, w);
}

/* Makes rank i's cost, and its room in every slot, what its srank's booked and published load
 * and limits say: after every change of any (and of its block size, after refresh_size()). */
static void refresh_load(struct sel *s, struct sworker *w, unsigned i)
{
    const struct srank *r = &cold(s, w)[i];
    int64_t pub_prefill = r->pub_prefill - r->booked_cached_prefill;
    int64_t pub_decode = r->pub_decode - r->booked_cached_blocks;
    int64_t own_decode = r->booked_decode - r->booked_cached_blocks;
    int64_t seen_prefill = pub_prefill > r->booked_prefill ? pub_prefill : r->booked_prefill;
    int64_t seen_decode = pub_decode > own_decode ? pub_decode : own_decode;

    /* The cost starts from the larger of booked and published load: other routers' traffic
     * counts once admitd publishes it (at once: it publishes each admission), our own burst
     * before it does. What the index predicts cached is neither prefill (the engine does not
     * compute it) nor new blocks (the rank holds them already: a block counts once per rank,
     * as Dynamo's --router-assume-kv-reuse counts blocks that running requests share), so it
     * is taken off both, ours and, since admitd publishes whole prompts, what admitd
     * publishes. The engine's own KV usage (pub_kv_used) is not in the cost, as it is not in
     * Dynamo's: scraped, it lags and still counts a request that has just finished, which is
     * when a conversation's next turn comes; the monitor judges it. The thresholds judge
     * whole prompts' blocks (select_slots.c): a running request holds them all. */
    hot(s, w)[i].cost =
        cost_weigh(cost_tokens(seen_prefill, r->bs), s->weight) + cost_blocks(seen_decode);
    slot_rooms(s, w, i);
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

static struct busy_load booked(const struct srank *r)
{
    struct busy_load l = {r->booked_prefill, r->booked_decode, r->booked_requests, r->have_pub};
    return l;
}

struct sel *sel_new(unsigned missed_heartbeats, int64_t default_block_size)
{
    struct sel *s = xcalloc(1, sizeof *s);

    s->missed = missed_heartbeats ? missed_heartbeats : 3;
    s->max_hb = SEL_MAX_HEARTBEAT_MS;
    s->default_bs = default_block_size > 0 ? default_block_size : 16;
    s->sizes_prompt = -1;
    s->weight = SEL_COST_ONE;
    s->compact_at = 8;
    return s;
}

void sel_free(struct sel *s)
{
    if (s == NULL)
        return;
    for (int k = 0; k < s->n; k++)
        free(s->ranks[k]);
    for (unsigned j = 0; j < s->nslots; j++) {
        free(s->slot[j].room);
        free(s->slot[j].gate);
    }
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
        for (unsigned j = 0; j < s->nslots; j++)
            s->slot[j].gate = xrealloc(s->slot[j].gate, (size_t) s->cap * sizeof *s->slot[j].gate);
    }
    s->ranks[s->n] = NULL;
    w = &s->w[s->n];
    memset(w, 0, sizeof *w);
    w->alive_until = INT64_MIN;
    w->out = 1; /* no rank yet */
    slot_gates(s, w);
    return s->n++;
}

int sel_workers(const struct sel *s)
{
    return s->n;
}

/* Worker w's ranks are none of them live any more, until each speaks again. */
static void drop_ranks(struct sel *s, struct sworker *w)
{
    for (unsigned i = 0; i < w->nranks; i++)
        if (hot(s, w)[i].live) {
            hot(s, w)[i].live = 0;
            refresh_load(s, w, i);
        }
}

void sel_retire(struct sel *s, int wi)
{
    struct sworker *w = &s->w[wi];

    drop_ranks(s, w);
    w->retired = 1;
    w->alive_until = INT64_MIN; /* not alive: the pass skips it, pinned or not */
    w->skip_until = 0;
    w->out = 1;
}

void sel_lost(struct sel *s, int wi)
{
    struct sworker *w = &s->w[wi];

    drop_ranks(s, w); /* each rank back at its own message */
    w->alive_until = INT64_MIN;
    w->out = 1;
    slot_judge(s, w);
}

void sel_revive(struct sel *s, int wi)
{
    s->w[wi].retired = 0; /* alive again at its next message, which also sets out */
}

void sel_reset(struct sel *s, int wi)
{
    struct sworker *w = &s->w[wi];

    /* Its run of shots is left behind, as a worker's that grows: grow_shots() drops it. */
    s->dead += w->nranks;
    free(s->ranks[wi]);
    s->ranks[wi] = NULL;
    memset(w, 0, sizeof *w);
    w->alive_until = INT64_MIN;
    w->out = 1; /* no rank yet */
    slot_gates(s, w);
}

/* Moves worker w's shots, and its rooms in every slot, to a new run of n at the end of
 * s->shots (the new ones zeroed), and drops the runs left behind once they are as many as the
 * live shots, by laying every worker's run out again in worker order: the order the pass
 * reads them. Workers grow only when they first report a higher rank, so this is start-up
 * work. */
static void grow_shots(struct sel *s, struct sworker *w, unsigned n)
{
    uint32_t live = s->nshots - s->dead;

    if (s->dead > live && s->dead > 64) {
        struct shot *fresh = xmalloc((size_t) (live + n) * sizeof *fresh);
        int64_t *rooms[SEL_MAX_TSETS];
        uint32_t at = 0;

        for (unsigned j = 0; j < s->nslots; j++)
            rooms[j] = xmalloc((size_t) (live + n) * sizeof *rooms[j]);
        for (int k = 0; k < s->n; k++) {
            struct sworker *o = &s->w[k];

            memcpy(&fresh[at], hot(s, o), o->nranks * sizeof *fresh);
            for (unsigned j = 0; j < s->nslots; j++)
                memcpy(&rooms[j][at], &s->slot[j].room[o->first], o->nranks * sizeof *rooms[j]);
            o->first = at;
            at += o->nranks;
        }
        free(s->shots);
        s->shots = fresh;
        for (unsigned j = 0; j < s->nslots; j++) {
            free(s->slot[j].room);
            s->slot[j].room = rooms[j];
        }
        s->nshots = at;
        s->capshots = live + n;
        s->dead = 0;
    }
    if (s->nshots + n > s->capshots) {
        s->capshots = s->capshots * 2 > s->nshots + n ? s->capshots * 2 : s->nshots + n;
        s->shots = xrealloc(s->shots, (size_t) s->capshots * sizeof *s->shots);
        for (unsigned j = 0; j < s->nslots; j++)
            s->slot[j].room =
                xrealloc(s->slot[j].room, (size_t) s->capshots * sizeof *s->slot[j].room);
    }
    memcpy(&s->shots[s->nshots], hot(s, w), w->nranks * sizeof *s->shots);
    memset(&s->shots[s->nshots + w->nranks], 0, (n - w->nranks) * sizeof *s->shots);
    for (unsigned j = 0; j < s->nslots; j++) {
        int64_t *room = s->slot[j].room;

        memcpy(&room[s->nshots], &room[w->first], w->nranks * sizeof *room);
        memset(&room[s->nshots + w->nranks], 0, (n - w->nranks) * sizeof *room);
    }
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
        r->alive_until = INT64_MIN; /* and its shot not live: not heard yet */
        r->bs = s->default_bs;
        slot_rank_limits(s, r);
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

    /* A message may claim a heartbeat of up to 2^53 - 1 ms: one such message and silence
     * would keep a dead rank alive for ever. */
    if (hb > s->max_hb)
        hb = s->max_hb;
    if (m->dp_rank < 0 || m->dp_rank >= SEL_MAX_RANKS || w->retired)
        return;
    if ((unsigned) m->dp_rank >= w->nranks)
        grow(s, w, (unsigned) m->dp_rank + 1);
    r = &cold(s, w)[m->dp_rank];
    busy_capacity_of(m, &cap);
    if (memcmp(&cap, &r->cap, sizeof cap) != 0) {
        /* Capacity changes only when a worker restarts or re-registers. */
        r->cap = cap;
        r->bs = cap.kv_block_size > 0 ? cap.kv_block_size : s->default_bs;
        slot_rank_limits(s, r);
        refresh_size(s, w, (unsigned) m->dp_rank);
    }
    r->pub_prefill = m->active_prefill_tokens;
    r->pub_decode = m->active_decode_blocks;
    r->pub_kv_used = m->kv_used_blocks;
    r->pub_requests = m->engine_requests;
    busy_latch_note(&r->latch, m);
    r->have_pub = 1;
    r->draining = m->state == ADMIT_LOAD_DRAINING;
    /* Saturating: max_hb may be up to 2^53 and missed any unsigned, and a product out of
     * int64 would be undefined. */
    span = hb > INT64_MAX / (int64_t) s->missed ? INT64_MAX : hb * (int64_t) s->missed;
    r->alive_until = now_ms > INT64_MAX - span ? INT64_MAX : now_ms + span;
    hot(s, w)[m->dp_rank].live = 1;
    refresh_load(s, w, (unsigned) m->dp_rank); /* the published load is in its cost */
    /* Liveness is per rank: a rank silent past its window is dropped here, at a message of
     * another, until it speaks again (a worker silent as a whole is out by its own window).
     * The worker lives as long as its last live rank, and drains if one of them does. */
    w->alive_until = INT64_MIN;
    w->draining = 0;
    for (unsigned i = 0; i < w->nranks; i++) {
        const struct srank *o = &cold(s, w)[i];

        if (hot(s, w)[i].live && o->alive_until < now_ms) {
            hot(s, w)[i].live = 0;
            refresh_load(s, w, i);
        }
        if (!hot(s, w)[i].live)
            continue;
        if (o->alive_until > w->alive_until)
            w->alive_until = o->alive_until;
        w->draining |= (uint8_t) o->draining;
    }
    w->skip_until = 0;    /* its own word replaces our guess */
    w->out = w->draining; /* it has a live rank: this one */
    slot_judge(s, w);
}

void sel_max_heartbeat(struct sel *s, int64_t ms)
{
    s->max_hb = ms > 0 ? ms : SEL_MAX_HEARTBEAT_MS;
}

void sel_mark_overloaded(struct sel *s, int w, int64_t until_ms)
{
    s->w[w].skip_until = until_ms;
}

void sel_track_output(struct sel *s, int on)
{
    s->track_output = on;
}

void sel_prefill_weight(struct sel *s, double w)
{
    int64_t q = w > 0 ? (int64_t) (w * SEL_COST_ONE + 0.5) : SEL_COST_ONE;

    if (q == s->weight)
        return;
    s->weight = q;
    s->sizes_prompt = -1; /* the adds weigh the prefill too */
    for (int k = 0; k < s->n; k++)
        for (unsigned i = 0; i < s->w[k].nranks; i++)
            refresh_load(s, &s->w[k], i);
}

int sel_alive(const struct sel *s, int w, int64_t now_ms)
{
    return s->w[w].alive_until >= now_ms && !s->w[w].draining;
}

void sel_book(struct sel *s, struct sel_booking *b, int worker, unsigned rank,
              int64_t prompt_tokens)
{
    sel_book_cached(s, b, worker, rank, prompt_tokens, 0);
}

void sel_book_cached(struct sel *s, struct sel_booking *b, int worker, unsigned rank,
                     int64_t prompt_tokens, int64_t cached)
{
    struct srank *r = &cold(s, &s->w[worker])[rank];

    if (prompt_tokens < 0)
        prompt_tokens = 0;
    if (cached < 0)
        cached = 0;
    b->booked = 1;
    b->worker = worker;
    b->rank = rank;
    /* What the engine computes is what it has not cached; the blocks it holds are all. */
    b->prefill = cached < prompt_tokens ? prompt_tokens - cached : 0;
    b->tokens = prompt_tokens;
    b->blocks = blocks_for(prompt_tokens, r->bs);
    b->cached_prefill = prompt_tokens - b->prefill;
    b->cached_blocks = b->cached_prefill / r->bs;
    r->booked_prefill += b->prefill;
    r->booked_decode += b->blocks;
    r->booked_cached_prefill += b->cached_prefill;
    r->booked_cached_blocks += b->cached_blocks;
    r->booked_requests++;
    refresh_load(s, &s->w[worker], rank);
}

void sel_first_token(struct sel *s, struct sel_booking *b)
{
    struct srank *r;

    if (!b->booked || (b->prefill == 0 && b->cached_prefill == 0))
        return;
    r = &cold(s, &s->w[b->worker])[b->rank];
    r->booked_prefill -= b->prefill;
    r->booked_cached_prefill -= b->cached_prefill;
    refresh_load(s, &s->w[b->worker], b->rank);
    b->prefill = 0;
    b->cached_prefill = 0;
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
    r->booked_cached_prefill -= b->cached_prefill;
    r->booked_cached_blocks -= b->cached_blocks;
    r->booked_requests--;
    refresh_load(s, &s->w[b->worker], b->rank);
    memset(b, 0, sizeof *b);
}

int sel_routable(const struct sel *s, int w, int64_t now_ms)
{
    return sel_alive(s, w, now_ms) && s->w[w].skip_until <= now_ms;
}

unsigned sel_routable_n(const struct sel *s, int64_t now_ms)
{
    unsigned n = 0;

    for (int k = 0; k < s->n; k++)
        n += (unsigned) sel_routable(s, k, now_ms);
    return n;
}

int sel_heard(const struct sel *s, int wi, int64_t now_ms)
{
    const struct sworker *w = &s->w[wi];

    for (unsigned i = 0; i < w->nranks; i++)
        if (cold(s, w)[i].alive_until >= now_ms)
            return 1;
    return 0;
}

int sel_published_full(struct sel *s, int w, const struct busy_thresholds *t)
{
    unsigned j;

    if (t == NULL)
        return 0;       /* nothing judged */
    j = slot_use(s, t); /* first: it may fill the slot */
    return s->w[w].full >> j & 1;
}

unsigned sel_ranks(const struct sel *s, int w)
{
    return s->w[w].nranks ? s->w[w].nranks : 1;
}

void sel_view(struct sel *s, int wi, unsigned ri, const struct busy_thresholds *t,
              struct sel_rank_view *out)
{
    const struct sworker *w = &s->w[wi];
    const struct busy_limits *lim;
    struct busy_load pl;
    struct busy_capacity pc;
    unsigned j = t != NULL ? slot_use(s, t) : 0;

    memset(out, 0, sizeof *out);
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
    out->live = (int) hot(s, w)[ri].live;
    out->published = r->have_pub;
    out->pub_prefill_tokens = r->pub_prefill;
    out->pub_decode_blocks = r->pub_decode;
    out->pub_kv_used_blocks = r->pub_kv_used;
    out->capacity = r->cap;
    out->block_size = r->bs;
    if (t == NULL) { /* nothing judged */
        out->booked_room = out->published_room = 1;
        return;
    }
    lim = &r->lim[j];
    out->booked_room = busy_within(&out->booked, lim);
    published(r, &pl, &pc);
    out->published_room = !r->have_pub || has_room(&pl, &pc, t);
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
