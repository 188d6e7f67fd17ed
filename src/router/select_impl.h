/* select_impl: the selection view's state, shared by select.c (the view and its bookings),
 * select_pass.c (the pass) and select_slots.c (the sets of thresholds it keeps limits for).
 * Not for anything else: the rest of the router speaks select.h. */
#ifndef ADMIT_SELECT_IMPL_H
#define ADMIT_SELECT_IMPL_H

#include "select.h"
#include "admission/busy.h"

#include <stdint.h>

/* Costs are in blocks, in fixed point: SEL_COST_ONE is one block, so that prefill tokens
 * count as tokens / block size without a division in the pass. A term saturates at
 * SEL_COST_MAX, so that a cost of three terms stays below INT64_MAX (see the mask in
 * sel_pick()). */
#define SEL_COST_ONE 1024
#define SEL_COST_MAX (INT64_MAX / 4)

/* v blocks in SEL_COST_ONE, saturating; v >= 0. */
static inline int64_t cost_blocks(int64_t v)
{
    return v > SEL_COST_MAX / SEL_COST_ONE ? SEL_COST_MAX : v * SEL_COST_ONE;
}

/* v tokens as blocks of bs in SEL_COST_ONE (a fraction of a block counts as that fraction). */
static inline int64_t cost_tokens(int64_t v, int64_t bs)
{
    return v > SEL_COST_MAX / SEL_COST_ONE ? SEL_COST_MAX : v * SEL_COST_ONE / bs;
}

/* The blocks tokens take, at bs a block. */
static inline int64_t blocks_for(int64_t tokens, int64_t bs)
{
    return tokens > 0 ? (tokens + bs - 1) / bs : 0;
}

/* Prefill cost v weighted by w (SEL_COST_ONE is 1), saturating; v, w >= 0. */
static inline int64_t cost_weigh(int64_t v, int64_t w)
{
    if (w == SEL_COST_ONE)
        return v;
    return w != 0 && v > SEL_COST_MAX / w ? SEL_COST_MAX : v * w / SEL_COST_ONE;
}

/* A rank, as everything but the pass reads it. */
struct srank {
    struct busy_capacity cap;
    int64_t bs; /* block size bookings use */
    int64_t booked_prefill, booked_decode, booked_requests;
    /* Of this router's bookings, the prompt tokens predicted cached that are still in prefill,
     * and the blocks predicted cached: admitd publishes whole prompts as prefill and as decode
     * blocks (it cannot know what the engine caches), so the cost takes these off what it
     * publishes; and the cost counts a rank's blocks once (see refresh_load()). */
    int64_t booked_cached_prefill, booked_cached_blocks;
    int64_t pub_prefill, pub_decode, pub_kv_used, pub_requests; /* the newest message's */
    struct busy_latch latch; /* what the monitor judges: each signal as last known */
    int64_t alive_until;     /* its newest message + missed heartbeats; INT64_MIN until the first */
    int have_pub;
    int draining;
    struct busy_limits lim[SEL_MAX_TSETS]; /* lim[j]: slot j's thresholds on cap */
};

/* A rank's cost, as the pass reads it: derived from its srank at every change (refresh_load(),
 * refresh_size()), and kept apart and small so that a pass that reads a worker's ranks (see
 * struct sworker for when it need not) reads 16 bytes a rank and 8 of its slot's room, not
 * the cache lines an srank spans. */
struct shot {
    int64_t cost;  /* prefill / bs + decode blocks, in SEL_COST_ONE: the cost before this request */
    uint32_t size; /* index of the rank's block size in sel.sizes */
    uint32_t live; /* heard within its window (srank.alive_until) as of its worker's newest
                      message, and its worker not lost since: else out of the pass (its room is
                      SEL_ROOM_DEAD), of the monitor and of its worker's cheapest rank */
};

/* A block size some rank has, and what the request being chosen for adds to the cost of such
 * a rank. The pass would otherwise divide (blocks = ceil(prompt / bs)) at every rank, or keep
 * a cache whose variables crowd its registers; a fleet has one or two sizes. */
struct ssize {
    int64_t bs;
    int64_t cost; /* prompt / bs + ceil(prompt / bs), in SEL_COST_ONE, for sel.sizes_prompt */
};

/* A worker, 40 bytes: what the pass reads of each, in one array, and with it 8 more in the
 * array of the slot it is judged under: its gate (below).
 *
 * With it, the worker's cheapest rank (the first of the cheapest, kept by summarize()): when
 * its ranks share a block size, their costs compare as their shots' costs, so when that rank
 * has room for the request it is the worker's choice, and the pass reads none of the ranks.
 * It nearly always has room, holding the least; otherwise the pass reads them all. Which
 * rank is the cheapest does not depend on the thresholds; whether it has room does, and is
 * the gate's. */
struct sworker {
    int64_t alive_until; /* newest message + missed heartbeats; INT64_MIN until the first */
    int64_t skip_until;  /* skipped for an overload answer until then */
    int64_t min_cost;    /* the cheapest rank's shot: cost, size */
    uint32_t min_size;
    uint32_t first;   /* its shots are sel.shots[first .. first + nranks), its rooms alike */
    uint8_t nranks;   /* <= SEL_MAX_RANKS */
    uint8_t min_rank; /* which rank is the cheapest */
    uint8_t uniform;  /* its ranks share a block size (min_* can stand for them) */
    uint8_t draining; /* a rank said so in its newest message */
    uint8_t full;     /* bit j: every rank lacks room by its published load, under slot j */
    uint8_t out;      /* draining, or no rank heard yet: out whatever the thresholds */
    uint8_t retired;  /* sel_retire(): out, and its messages ignored, until sel_revive() */
};
_Static_assert(sizeof(struct sworker) <= 40, "a worker and its gate fit in 48 bytes");
_Static_assert(SEL_MAX_TSETS <= 8, "sworker.full has a bit for each slot");

/* A worker's gate under a slot's thresholds, the one number the pass reads of it beside its
 * sworker: its cheapest rank's room when its ranks share a block size (then the request that
 * fits there goes there, see struct sworker), else one of two values below every room (a live
 * rank's room is kept >= -1, rank_room()):
 *  - SEL_GATE_FULL: full by what it publishes, under the slot's thresholds (the monitor);
 *  - SEL_GATE_MIXED: its ranks have more than one block size, so the pass reads them all.
 * With thresholds a request needs its prompt (>= 0), and a gate below SEL_GATE_FULL + 1 is
 * out; with none (NULL) it needs SEL_NEED_ANY, within every live room, and no gate is out: a full
 * worker's ranks are read, and every live one fits. So the pass compares the gate once for the fast
 * path and once for the monitor, with thresholds or without. */
#define SEL_GATE_FULL  INT64_MIN
#define SEL_GATE_MIXED (INT64_MIN + 1)
#define SEL_NEED_ANY   (-2)
/* The room of a rank that is not live, under every slot: below every need, SEL_NEED_ANY's
 * too, so that the pass never takes it, thresholds or not. It is never a gate (a worker's
 * cheapest rank is a live one, and a worker with none is out). */
#define SEL_ROOM_DEAD (INT64_MIN + 2)

/* One set of thresholds whose limits the view keeps (see select_slots.c). */
struct sslot {
    struct busy_thresholds t;
    uint64_t used; /* sel.tick when last asked for: the least recent one is replaced */
    int64_t *room; /* room[x]: the room of shot x's rank under t, in prompt tokens */
    int64_t *gate; /* gate[k]: worker k's gate under t */
};

struct sel {
    struct sworker *w;
    struct srank **ranks; /* worker k's nranks sranks: ranks[k] */
    int n, cap;
    unsigned missed;
    int64_t max_hb; /* a heartbeat_ms above it counts as it (sel_max_heartbeat) */
    int64_t default_bs;
    int track_output;
    int64_t weight; /* prefill's weight in the cost, SEL_COST_ONE being 1 (sel_prefill_weight) */
    int rr;         /* where the next pass starts: after the last one chosen */
    /* The live slots, slot[0 .. nslots): each one's room[] holds capshots, its gate[] cap. */
    struct sslot slot[SEL_MAX_TSETS];
    unsigned nslots, last; /* last: the slot asked for last, compared first */
    uint64_t tick;
    struct ssize *sizes; /* every block size a rank has (and perhaps a few it had) */
    uint32_t nsizes, capsizes;
    uint32_t compact_at;  /* nsizes that makes compact_sizes() worth its pass */
    int64_t sizes_prompt; /* the prompt sizes[].cost is for; -1: none */
    /* Every worker's shots, in one array, so that the pass reads them in a stream: a
     * worker that grows takes a new run at the end, and the runs left behind are dropped
     * when they are as many as the live ones (grow_shots()). Every slot's rooms follow. */
    struct shot *shots;
    uint32_t nshots, capshots, dead;
};

/* The sranks of worker w. */
static inline struct srank *cold(const struct sel *s, const struct sworker *w)
{
    return s->ranks[w - s->w];
}

/* The shots of worker w. */
static inline struct shot *hot(const struct sel *s, const struct sworker *w)
{
    return &s->shots[w->first];
}

/* The published load row and capacity the monitor judges rank r by: its latch (admission/busy.h),
 * each signal as the newest message that knew it said, so that a message with a signal
 * unknown does not release a rank that signal marked busy. */
static inline void published(const struct srank *r, struct busy_load *load,
                             struct busy_capacity *cap)
{
    busy_latch_row(&r->latch, load, cap);
}

/* ---- the threshold slots (select_slots.c) ------------------------------------------------- */

/** makes rank r's limits in every slot those of its capacity: when it is new or restarted */
void slot_rank_limits(struct sel *s, struct srank *r);
/** makes rank i of worker w's room in every slot what its booked load and limits say */
void slot_rooms(struct sel *s, const struct sworker *w, unsigned i);
/** makes worker w's gate in every slot what its rooms, its cheapest rank and the monitor's
 *  verdicts say: after any change of one */
void slot_gates(struct sel *s, const struct sworker *w);
/** the monitor's verdict on worker w in every slot, from its ranks' published load, then its
 *  gates: after a message */
void slot_judge(struct sel *s, struct sworker *w);
/** the slot that holds thresholds t, taken for them (one pass over the fleet) if none does */
unsigned slot_use(struct sel *s, const struct busy_thresholds *t);
/** a slot for a pass that judges nothing (its rooms are all above SEL_NEED_ANY) */
unsigned slot_any(struct sel *s);
/** 1 when rank i of worker w has room under slot j's decode limit for the blocks of a prompt of
 *  prompt tokens (the decode half of its room, which judges the prompt whole) */
int slot_decode_fits(const struct sel *s, const struct sworker *w, unsigned i, unsigned j,
                     int64_t prompt);

#endif
