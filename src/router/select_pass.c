/* select_pass: the one-pass choice of a worker, and the gate that asks without choosing (see
 * select.h). The view it reads is select_impl.h's, kept by select.c; the rooms and gates of
 * the thresholds it is judged under are select_slots.c's. */
#include "select_impl.h"

#include <stddef.h>
#include <stdint.h>

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

/* Computes what a request of prompt tokens adds on a rank of each block size. */
static void size_adds(struct sel *s, int64_t prompt)
{
    if (s->sizes_prompt == prompt)
        return;
    for (uint32_t i = 0; i < s->nsizes; i++) {
        struct ssize *z = &s->sizes[i];

        z->cost = cost_weigh(cost_tokens(prompt, z->bs), s->weight) +
                  cost_blocks(blocks_for(prompt, z->bs));
    }
    s->sizes_prompt = prompt;
}

/* The pass of sel_pick_in(), inlined into each of its two calls there: with elig NULL (the
 * constant) the compiler drops the eligibility test, so a request with no model filter runs
 * the very pass it ran before there was one. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline enum sel_result
pick_pass(struct sel *s, int64_t now_ms, int64_t prompt_tokens, const struct busy_thresholds *t,
          int exclude, int pinned, const uint64_t *elig, const struct sel_hit *hits, size_t nhits,
          int *worker, unsigned *rank, int64_t *cached)
{
    const struct sworker *ws = s->w, *w, *stop, *excl, *best = NULL;
    const struct shot *shots;
    const struct ssize *sizes;
    const int64_t *gates, *rooms, *g;
    int64_t best_cost = INT64_MAX, best_cached = 0, need, keep;
    unsigned best_rank = 0, j;
    int from, to, start;

    if (pinned >= s->n || s->n == 0)
        return SEL_NO_WORKER; /* no such worker, so none alive; never read past the array */
    if (prompt_tokens < 0)
        prompt_tokens = 0;
    /* The slot of t, whose gates and rooms the pass reads; a gate below keep is out (full by
     * what the worker publishes). No thresholds (NULL): nothing is judged, so any slot will
     * do, with a need below every room and no gate out (see SEL_GATE_FULL). */
    if (t != NULL) {
        j = slot_use(s, t);
        need = prompt_tokens;
        keep = SEL_GATE_FULL + 1;
    } else {
        j = slot_any(s);
        need = SEL_NEED_ANY;
        keep = SEL_GATE_FULL;
    }
    gates = s->slot[j].gate;
    rooms = s->slot[j].room;
    shots = s->shots;
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
     * set every room is above the need and no gate is out. It keeps few variables, so that
     * they stay in registers: workers and their gates by pointer, and whether any is alive
     * asked again only when none was chosen.
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
    g = &gates[start];
    stop = &ws[to];
    for (int run = 0; run < 2; run++, w = &ws[from], g = &gates[from], stop = &ws[start]) {
        for (; w < stop; w++, g++) {
            const struct shot *h;
            const int64_t *r;
            unsigned i = 0;

            /* Not a candidate: not alive, skipped for its own 529, draining or never heard,
             * or just left. */
            if (w->alive_until < now_ms || w->skip_until > now_ms || w->out || w == excl)
                continue;
            /* Not one the request's model may go to (a constant pass for NULL). */
            if (!sel_eligible(elig, (size_t) (g - gates)))
                continue;
            if (need <= *g) {
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
            if (*g < keep)
                continue; /* full by what it publishes (the monitor) */
            h = &shots[w->first];
            r = &rooms[w->first];
            do { /* not out: it has a rank */
                /* the projected cost (booked or published, plus this request); none (INT64_MAX)
                 * when over a limit. Which ranks are over is as random as their load, so not a
                 * branch (which compilers make of a ?:) but a mask: a cost is >= 0, and cost |
                 * INT64_MAX is INT64_MAX. */
                int64_t cost = h[i].cost + sizes[h[i].size].cost;

                cost |= INT64_MAX & -(int64_t) (need > r[i]);
                if (SEL_UNLIKELY(cost < best_cost)) {
                    SEL_KEEP_BRANCH();
                    best_cost = cost;
                    best = w;
                    best_rank = i;
                }
            } while (++i < w->nranks);
        }
    }
    /* The ranks that hold part of the prompt, judged again on its uncached part only: the pass
     * above judged them on the whole of it, and a cached prefix only lowers a rank's cost and
     * its need, so the cheapest of the pass's choice and of these is the cheapest of all. */
    for (size_t x = 0; x < nhits; x++) {
        const struct sel_hit *hit = &hits[x];
        int64_t part, cost;
        uint32_t sh;

        if (hit->worker < (uint32_t) from || hit->worker >= (uint32_t) to || hit->cached <= 0)
            continue;
        w = &ws[hit->worker];
        if (hit->rank >= w->nranks)
            continue;
        /* Not a candidate, for the pass's reasons (the monitor's full included). */
        if (w->alive_until < now_ms || w->skip_until > now_ms || w->out || w == excl ||
            !sel_eligible(elig, hit->worker) || gates[hit->worker] < keep)
            continue;
        part = prompt_tokens - (hit->cached < prompt_tokens ? hit->cached : prompt_tokens);
        sh = w->first + hit->rank;
        /* A rank without room for its uncached part is out, whatever it holds; and without
         * room for the blocks of the whole prompt, which it holds while the request runs. */
        if ((need == SEL_NEED_ANY ? need : part) > rooms[sh])
            continue;
        if (need != SEL_NEED_ANY && !slot_decode_fits(s, w, hit->rank, j, prompt_tokens))
            continue;
        /* It adds the uncached part as prefill and, as blocks, what it does not find there
         * (a rank's blocks count once: see refresh_load()). */
        cost = shots[sh].cost + cost_weigh(cost_tokens(part, sizes[shots[sh].size].bs), s->weight) +
               cost_blocks(blocks_for(prompt_tokens, sizes[shots[sh].size].bs) -
                           (prompt_tokens - part) / sizes[shots[sh].size].bs);
        if (cost < best_cost) {
            best_cost = cost;
            best = w;
            best_rank = hit->rank;
            best_cached = prompt_tokens - part;
        }
    }
    if (best != NULL) {
        int b = (int) (best - ws);

        if (pinned < 0)
            s->rr = b + 1;
        *worker = b;
        *rank = best_rank;
        *cached = best_cached;
        return SEL_OK;
    }
    /* Alive but no candidate (overloaded, excluded, full, no room) is "all busy", the
     * overload answer; none alive is "no worker". */
    for (int k = from; k < to; k++)
        if (sel_eligible(elig, (size_t) k) && sel_alive(s, k, now_ms))
            return SEL_ALL_BUSY;
    return SEL_NO_WORKER;
}

enum sel_result sel_pick_in(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                            const struct busy_thresholds *t, int exclude, int pinned,
                            const uint64_t *eligible, int *worker, unsigned *rank)
{
    int64_t cached;

    if (eligible == NULL)
        return pick_pass(s, now_ms, prompt_tokens, t, exclude, pinned, NULL, NULL, 0, worker, rank,
                         &cached);
    return pick_pass(s, now_ms, prompt_tokens, t, exclude, pinned, eligible, NULL, 0, worker, rank,
                     &cached);
}

enum sel_result sel_pick_kv(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                            const struct busy_thresholds *t, int exclude, int pinned,
                            const uint64_t *eligible, const struct sel_hit *hits, size_t nhits,
                            int *worker, unsigned *rank, int64_t *cached)
{
    *cached = 0;
    if (nhits == 0)
        return sel_pick_in(s, now_ms, prompt_tokens, t, exclude, pinned, eligible, worker, rank);
    /* The same pass, with the hits' second look (inlined here too: the pass is hot). */
    return pick_pass(s, now_ms, prompt_tokens, t, exclude, pinned, eligible, hits, nhits, worker,
                     rank, cached);
}

enum sel_result sel_pick(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                         const struct busy_thresholds *t, int exclude, int pinned, int *worker,
                         unsigned *rank)
{
    return sel_pick_in(s, now_ms, prompt_tokens, t, exclude, pinned, NULL, worker, rank);
}

enum sel_result sel_gate_kv(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                            const struct busy_thresholds *t, int pinned, const uint64_t *eligible,
                            const struct sel_hit *hits, size_t nhits)
{
    int rr = s->rr, w;
    unsigned r;
    int64_t cached;
    enum sel_result res = sel_pick_kv(s, now_ms, prompt_tokens, t, -1, pinned, eligible, hits,
                                      nhits, &w, &r, &cached);

    /* The same pass as a pick, so that the answer cannot drift from selection's; but asking
     * is not choosing, so the next pick starts where it would have. */
    s->rr = rr;
    return res;
}

enum sel_result sel_gate_in(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                            const struct busy_thresholds *t, int pinned, const uint64_t *eligible)
{
    return sel_gate_kv(s, now_ms, prompt_tokens, t, pinned, eligible, NULL, 0);
}

enum sel_result sel_gate(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                         const struct busy_thresholds *t, int pinned)
{
    return sel_gate_in(s, now_ms, prompt_tokens, t, pinned, NULL);
}

int sel_room(struct sel *s, int64_t now_ms, int64_t prompt_tokens, const struct busy_thresholds *t)
{
    return sel_gate(s, now_ms, prompt_tokens, t, -1) == SEL_OK;
}
