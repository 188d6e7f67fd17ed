/* select_slots: the sets of thresholds the selection view keeps limits for (select_impl.h).
 *
 * Whether a rank has room depends on the thresholds it is judged under, and the router judges
 * under several, alternating request by request: the router-wide reject thresholds when it
 * selects, a model's own (bt_registry), and a policy class's queue thresholds when the class
 * gate asks whether any worker has room (sel_room()). Limits kept for one set only would be
 * recomputed for every rank of every worker at each change of set: a pass over the fleet per
 * admission, some 40 times the cost of the selection itself at 4,096 workers.
 *
 * So the view keeps them for up to SEL_MAX_TSETS sets at once, each in a slot (struct sslot).
 * A call finds its slot by comparing thresholds (slot_use(): a handful of compares, and no
 * allocation once the slot exists); a set that no slot holds takes a free one, or the least
 * recently used, and that call alone pays the pass that computes its limits (fill_slot()).
 * More sets than slots in rotation pay it at every change of set, as one slot did.
 *
 * Kept per slot is what depends on the thresholds: each rank's limits (srank.lim[j]), its room
 * in prompt tokens (slot.room, an array beside the shots, laid out as they are), each worker's
 * gate (slot.gate: its cheapest rank's room, or why it is out) and the monitor's verdict (bit
 * j of sworker.full, from worker_is_full(), the one rule). The cost depends on none of them
 * and is kept once, in the shots. So a pass under a slot reads the workers and the slot's
 * gates, and for the few workers whose cheapest rank has no room their shots and the slot's
 * rooms: a stream each. Every change that moves a room (a booking, a message, a restart, a
 * new rank) updates every live slot, which stays cheap: a booking touches one rank, so one
 * room and one gate a slot. */
#include "select_impl.h"
#include "util/xmalloc.h"

#include <math.h>
#include <stddef.h>

/* Room under a limit when booked is held: limit - booked, or -1 (none) when the limit itself
 * is below 0, where the subtraction could overflow. booked >= 0 always. */
static int64_t room(int64_t limit, int64_t booked)
{
    return limit >= 0 ? limit - booked : -1;
}

/* The most prompt tokens rank r takes under limits l; -1: none (any shortfall is -1, so that
 * every room is above the gates' two values); SEL_ROOM_DEAD when it is not live (its shot's
 * live), whatever its load. most is INT64_MAX / r->bs, the same under every slot's limits: a
 * division that a booking makes once, not once a slot.
 *
 * The projection's two limits are one number of prompt tokens. booked + prompt > limit is
 * prompt > limit - booked; and for the decode limit, with D = limit - booked blocks left,
 * ceil(prompt / bs) > D is exactly prompt > D x bs (D >= 0, bs >= 1). The prompt fits when
 * it is within both, so within the smaller. */
static int64_t rank_room(const struct srank *r, uint32_t live, const struct busy_limits *l,
                         int64_t most)
{
    int64_t prefill = room(l->prefill_tokens, r->booked_prefill);
    int64_t blocks = room(l->decode_blocks, r->booked_decode), decode, fit;

    if (!live)
        return SEL_ROOM_DEAD;
    if (blocks < 0)
        decode = -1;
    else /* saturating: beyond INT64_MAX tokens every prompt fits */
        decode = blocks > most ? INT64_MAX : blocks * r->bs;
    fit = prefill < decode ? prefill : decode;
    /* A rank this router has booked nothing on takes any one request (see select.h). */
    return r->booked_requests == 0 ? INT64_MAX : fit < -1 ? -1 : fit;
}

int slot_decode_fits(const struct sel *s, const struct sworker *w, unsigned i, unsigned j,
                     int64_t prompt)
{
    const struct srank *r = &cold(s, w)[i];
    int64_t blocks = room(r->lim[j].decode_blocks, r->booked_decode);

    /* rank_room's decode term, alone: a rank that holds part of a prompt is judged on the
     * uncached part as prefill, but holds the whole prompt's blocks while it runs */
    if (r->booked_requests == 0)
        return 1;
    return blocks >= 0 && (blocks > INT64_MAX / r->bs || prompt <= blocks * r->bs);
}

/* Worker w's gate under slot j (see SEL_GATE_FULL). */
static int64_t gate_of(const struct sel *s, const struct sworker *w, unsigned j)
{
    if (w->full >> j & 1)
        return SEL_GATE_FULL;
    if (!w->uniform || w->nranks == 0)
        return SEL_GATE_MIXED;
    return s->slot[j].room[w->first + w->min_rank];
}

void slot_gates(struct sel *s, const struct sworker *w)
{
    size_t k = (size_t) (w - s->w);

    for (unsigned j = 0; j < s->nslots; j++)
        s->slot[j].gate[k] = gate_of(s, w, j);
}

void slot_rooms(struct sel *s, const struct sworker *w, unsigned i)
{
    const struct srank *r = &cold(s, w)[i];
    int64_t most = INT64_MAX / r->bs;

    for (unsigned j = 0; j < s->nslots; j++)
        s->slot[j].room[w->first + i] = rank_room(r, hot(s, w)[i].live, &r->lim[j], most);
}

void slot_rank_limits(struct sel *s, struct srank *r)
{
    for (unsigned j = 0; j < s->nslots; j++)
        busy_limits(&r->cap, &s->slot[j].t, &r->lim[j]);
}

/* Two sets are the same when every field is; an unset fraction (NAN) matches only another. */
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

/* The monitor's verdict on worker w under slots from .. to - 1: full when every live rank
 * lacks room by what it published. A rank silent past its window is no longer judged: its
 * last numbers (idle, perhaps) must not keep its worker open. The caller sets its gates. */
static void judge(struct sel *s, struct sworker *w, unsigned from, unsigned to)
{
    const struct srank *ranks = cold(s, w);
    struct busy_load rows[SEL_MAX_RANKS];
    struct busy_capacity caps[SEL_MAX_RANKS];
    size_t n = 0;

    for (unsigned i = 0; i < w->nranks; i++)
        if (hot(s, w)[i].live) { /* heard, then: it published */
            published(&ranks[i], &rows[n], &caps[n]);
            n++;
        }
    for (unsigned j = from; j < to; j++) {
        uint8_t bit = (uint8_t) (1u << j);

        if (worker_is_full(rows, caps, n, &s->slot[j].t)) /* the one rule, admission/busy.h */
            w->full |= bit;
        else
            w->full &= (uint8_t) ~bit;
    }
}

void slot_judge(struct sel *s, struct sworker *w)
{
    judge(s, w, 0, s->nslots);
    slot_gates(s, w);
}

/* Makes slot j's limits, rooms, verdicts and gates those of its thresholds: the one pass over
 * the fleet that a set of thresholds costs when it takes a slot. */
static void fill_slot(struct sel *s, unsigned j)
{
    struct sslot *sl = &s->slot[j];

    for (int k = 0; k < s->n; k++) {
        struct sworker *w = &s->w[k];
        struct srank *ranks = cold(s, w);

        for (unsigned i = 0; i < w->nranks; i++) {
            busy_limits(&ranks[i].cap, &sl->t, &ranks[i].lim[j]);
            sl->room[w->first + i] =
                rank_room(&ranks[i], hot(s, w)[i].live, &ranks[i].lim[j], INT64_MAX / ranks[i].bs);
        }
        judge(s, w, j, j + 1);
        sl->gate[k] = gate_of(s, w, j);
    }
}

/* A slot for thresholds t that no slot holds: a new one while there are fewer than
 * SEL_MAX_TSETS (its arrays are the only allocation a slot makes), else the least recently
 * used one; filled for t. */
static unsigned take_slot(struct sel *s, const struct busy_thresholds *t)
{
    unsigned j = 0;

    if (s->nslots < SEL_MAX_TSETS) {
        j = s->nslots++;
        s->slot[j].room = xmalloc((size_t) s->capshots * sizeof *s->slot[j].room);
        s->slot[j].gate = xmalloc((size_t) s->cap * sizeof *s->slot[j].gate);
    } else {
        for (unsigned i = 1; i < s->nslots; i++)
            if (s->slot[i].used < s->slot[j].used)
                j = i;
    }
    s->slot[j].t = *t;
    fill_slot(s, j);
    return j;
}

/* The one asked for last is compared first; the slot found is marked as used now. */
unsigned slot_use(struct sel *s, const struct busy_thresholds *t)
{
    unsigned j = s->last;

    if (j >= s->nslots || !same_thresholds(&s->slot[j].t, t)) {
        for (j = 0; j < s->nslots && !same_thresholds(&s->slot[j].t, t); j++)
            ;
        if (j == s->nslots)
            j = take_slot(s, t);
    }
    s->slot[j].used = ++s->tick;
    s->last = j;
    return j;
}

/* Any slot will do: the last one asked for, or one for no thresholds while there is none. */
unsigned slot_any(struct sel *s)
{
    struct busy_thresholds none;

    if (s->nslots > 0)
        return s->last;
    busy_thresholds_unset(&none);
    return slot_use(s, &none);
}
