/* select: admit-router's view of its workers' ranks, the load it books, and the choice of a
 * worker for each request.
 *
 * Published load lags behind the router's own decisions: a burst that arrives between two load
 * messages would all go to the same worker. So the router books what it sends, at the moment
 * it sends it, on the worker's rank with the lowest projected cost: the prompt's tokens as
 * prefill (released at the first output token) and ceil(prompt / block size) decode blocks
 * (released when the request ends, and moved when it migrates).
 *
 * One pass per request over the candidate workers projects each rank (booked load plus this
 * request), judges the router-wide reject thresholds on that projection, and prices what has
 * room. A rank this router has booked nothing on passes the projection check whatever the
 * request's size (else a prompt above a threshold would be refused everywhere, for ever); what
 * the worker publishes still judges it. The price is Dynamo's default with no cache overlap,
 * cost = prefill tokens / block size + decode blocks, each the larger of booked and published
 * load plus this request, so that other routers' traffic counts as soon as it is published
 * and our own burst before it is. The lowest cost wins; ties are taken in turn. A worker
 * is a candidate when it is alive (a rank heard from within its missed heartbeats, not
 * draining, not lost since), not
 * skipped for a recent overload answer, not the one the request just left, and not busy by
 * what it publishes (the monitor: the same thresholds on worker-published load, which covers
 * other routers' traffic and generated tokens that this router cannot book); of a candidate,
 * only the ranks heard within their own window are chosen and judged. The room rule is
 * admission/busy.h's, applied through limits kept per rank for each of the last few sets of
 * thresholds used (SEL_MAX_TSETS): the router alternates between its reject thresholds, a
 * model's and a policy class's, and a set it used lately costs no pass to compute them.
 *
 * Pure: no sockets, no clock (callers pass the time), no allocation per selection. */
#ifndef ADMIT_SELECT_H
#define ADMIT_SELECT_H

#include "admit/load.h"
#include "admission/busy.h"

#include <stddef.h>
#include <stdint.h>

/* Most data-parallel ranks a worker may have (dp_rank 0..SEL_MAX_RANKS-1). */
#define SEL_MAX_RANKS 64

/* The longest heartbeat a message counts for, unless sel_max_heartbeat() says otherwise: one
 * claiming more (up to 2^53 - 1 ms) is judged as if it said this. */
#define SEL_MAX_HEARTBEAT_MS 60000

/* Most sets of thresholds whose limits the view keeps at once; one more evicts the least
 * recently used, which then costs a pass over the fleet when it is used again. */
#define SEL_MAX_TSETS 8

/* One request's booking, embedded by the caller; zero-initialised means nothing booked. */
struct sel_booking {
    int booked;
    int worker;             /* index, valid while booked */
    unsigned rank;          /* rank of that worker */
    int64_t prefill;        /* prefill tokens still booked: the prompt, 0 after the first token */
    int64_t blocks;         /* decode blocks booked */
    int64_t tokens;         /* prompt + output tokens so far (for output block tracking) */
    int64_t cached_prefill; /* prompt tokens predicted cached, 0 after the first token */
    int64_t cached_blocks;  /* blocks predicted cached (whole blocks of the cached prefix) */
};

/* What selection found for a request. */
enum sel_result {
    SEL_OK,       /* *worker and *rank are the choice */
    SEL_ALL_BUSY, /* workers are alive, none has room: the overload answer */
    SEL_NO_WORKER /* no worker is alive (or the pinned one is not): 503 */
};

/* One rank as reported: what the router booked, what the worker published, its capacity and
 * whether each check finds room under the thresholds sel_view() was given. */
struct sel_rank_view {
    struct busy_load booked;
    int live;                      /* heard within its window: a candidate, and judged */
    int published;                 /* a message for this rank has arrived */
    int64_t pub_prefill_tokens;    /* active_prefill_tokens of the newest message */
    int64_t pub_decode_blocks;     /* active_decode_blocks of the newest message */
    int64_t pub_kv_used_blocks;    /* kv_used_blocks of the newest message */
    struct busy_capacity capacity; /* as published; unknown <= 0 */
    int64_t block_size;            /* the one bookings use (the default when unknown) */
    int booked_room;               /* the booked load (with no request added) has room */
    int published_room;            /* the published load has room (the monitor) */
};

struct sel;

/** creates an empty view: a worker is alive for missed_heartbeats of its heartbeat after a
 *  message; default_block_size (>= 1) books for workers that do not report theirs */
struct sel *sel_new(unsigned missed_heartbeats, int64_t default_block_size);
/** frees the view */
void sel_free(struct sel *s);
/** adds a worker, not yet heard from (not alive); returns its index */
int sel_add_worker(struct sel *s);
/** number of workers added */
int sel_workers(const struct sel *s);
/** retires worker w: never alive (so never a candidate, pinned or not) and its messages
 *  ignored, until sel_revive(); its index and bookings stay valid, and releasing them works
 *  as ever (a request in flight there ends as it would) */
void sel_retire(struct sel *s, int w);
/** undoes sel_retire(): its bookings kept, not alive until its next message */
void sel_revive(struct sel *s, int w);
/** makes retired worker w, which holds no booking any more, as sel_add_worker() makes a new
 *  one (not heard from, no rank, not retired): its index is free for another worker */
void sel_reset(struct sel *s, int w);
/** a load message of worker w arrived at now_ms: its rank's capacity, published load and
 *  liveness (live for missed heartbeats of its heartbeat, counted at most as the longest
 *  heartbeat), the worker's state; each other rank silent past its window is dropped (out of
 *  selection and of the monitor until it speaks again), and the worker is alive while a rank
 *  is; a rank past SEL_MAX_RANKS is ignored */
void sel_message(struct sel *s, int w, const struct admit_load *m, int64_t now_ms);
/** the longest heartbeat a message counts for, from the next message on (<= 0: the default,
 *  SEL_MAX_HEARTBEAT_MS) */
void sel_max_heartbeat(struct sel *s, int64_t ms);
/** worker w is lost (its publisher's connection closed, or it refused a connection): no rank
 *  of it is live, and it is not alive, until each rank's next message; its bookings stay */
void sel_lost(struct sel *s, int w);
/** skips worker w until until_ms (it answered with its overload status); a message clears it */
void sel_mark_overloaded(struct sel *s, int w, int64_t until_ms);
/** books output blocks too: one more block each time prompt + output cross a block boundary */
void sel_track_output(struct sel *s, int on);

/** prefill's weight W in the cost, W x prefill blocks + decode blocks (Dynamo's
 *  --kv-overlap-score-weight); 0 keeps today's load-only cost, as 1 does */
void sel_prefill_weight(struct sel *s, double w);

/* What the prefix index predicts a rank holds of a request's prompt: its leading tokens
 * cached there (the router's block keys, admission/kvindex.h, times their block tokens). */
struct sel_hit {
    uint32_t worker, rank;
    int64_t cached; /* tokens, <= the prompt */
};

/** 1 when worker k's bit is set in the bitset e of eligible workers (bit k % 64 of word
 *  k / 64, as sel_pick_in() takes it; NULL: every worker's is) */
static inline int sel_eligible(const uint64_t *e, size_t k)
{
    return e == NULL || ((e[k >> 6] >> (k & 63)) & 1) != 0;
}

/** chooses a worker and rank for a request of prompt_tokens under the reject thresholds t;
 *  (NULL: none, any live worker will do); exclude (or -1) is a worker the request may not go
 *  back to, pinned (or -1) the only one judged; one pass, no allocation */
enum sel_result sel_pick(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                         const struct busy_thresholds *t, int exclude, int pinned, int *worker,
                         unsigned *rank);
/** sel_pick() among the workers whose bit is set in eligible (bit k % 64 of word k / 64 for
 *  worker k; it covers every worker added), e.g. those that serve the request's model; NULL:
 *  every worker, the same pass as sel_pick(). A live worker outside it counts as none: when
 *  no eligible worker is alive the answer is SEL_NO_WORKER */
enum sel_result sel_pick_in(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                            const struct busy_thresholds *t, int exclude, int pinned,
                            const uint64_t *eligible, int *worker, unsigned *rank);
/** sel_pick_in() where the ranks of hits[0 .. nhits) hold part of the prompt: such a rank
 *  needs room for, and costs W x, only the uncached tokens (its decode blocks are the whole
 *  prompt's); *cached (never NULL) is the chosen rank's cached tokens, 0 when it has none */
enum sel_result sel_pick_kv(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                            const struct busy_thresholds *t, int exclude, int pinned,
                            const uint64_t *eligible, const struct sel_hit *hits, size_t nhits,
                            int *worker, unsigned *rank, int64_t *cached);
/** books a request of prompt_tokens on (worker, rank), cached of them in its prefix cache:
 *  the rest as prefill, the whole prompt's blocks as decode; b must not be booked */
void sel_book_cached(struct sel *s, struct sel_booking *b, int worker, unsigned rank,
                     int64_t prompt_tokens, int64_t cached);
/** books a request of prompt_tokens on (worker, rank); b must not be booked */
void sel_book(struct sel *s, struct sel_booking *b, int worker, unsigned rank,
              int64_t prompt_tokens);
/** the first output token arrived: the prompt is no longer prefill (idempotent) */
void sel_first_token(struct sel *s, struct sel_booking *b);
/** n more output tokens (books blocks only when output tracking is on) */
void sel_output(struct sel *s, struct sel_booking *b, unsigned n);
/** ends the booking (idempotent; a booking never made is a no-op) */
void sel_release(struct sel *s, struct sel_booking *b);

/** 1 when worker w is alive at now_ms: heard from within its missed heartbeats, not draining */
int sel_alive(const struct sel *s, int w, int64_t now_ms);
/** 1 when alive and not skipped for an overload answer */
int sel_routable(const struct sel *s, int w, int64_t now_ms);
/** how many workers are routable at now_ms */
unsigned sel_routable_n(const struct sel *s, int64_t now_ms);
/** 1 when a rank of worker w was heard within its window at now_ms, lost, draining or not */
int sel_heard(const struct sel *s, int w, int64_t now_ms);
/** 1 when every rank of worker w lacks room by its published load under t (the monitor);
 *  NULL judges nothing: 0 */
int sel_published_full(struct sel *s, int w, const struct busy_thresholds *t);
/** ranks of worker w known so far (1 + the highest dp_rank heard, at least 1) */
unsigned sel_ranks(const struct sel *s, int w);
/** fills out for rank r of worker w, judged under t (NULL judges nothing: both rooms 1) */
void sel_view(struct sel *s, int w, unsigned r, const struct busy_thresholds *t,
              struct sel_rank_view *out);
/** the load this router booked on rank r of worker w and the rank's capacity; a rank not
 *  heard from yet has nothing booked and unknown capacity */
void sel_booked(const struct sel *s, int w, unsigned r, struct busy_load *booked,
                struct busy_capacity *cap);
/** 1 when sel_pick(s, now_ms, prompt_tokens, t, -1, -1, ...) would find a worker, without
 *  choosing one: the turn of ties stays where it was (a classifier's "room anywhere?", the
 *  class gate's); like any call with thresholds not among the SEL_MAX_TSETS last used, it
 *  computes the limits kept per rank for them first, a pass over every rank */
int sel_room(struct sel *s, int64_t now_ms, int64_t prompt_tokens, const struct busy_thresholds *t);
/** what sel_pick(s, now_ms, prompt_tokens, t, -1, pinned, ...) would find, without choosing:
 *  the policy-class queue's gate (SEL_ALL_BUSY: wait) */
enum sel_result sel_gate(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                         const struct busy_thresholds *t, int pinned);
/** sel_gate() among the eligible workers, as sel_pick_in() (NULL: every worker) */
enum sel_result sel_gate_in(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                            const struct busy_thresholds *t, int pinned, const uint64_t *eligible);
/** sel_gate_in() where the ranks of hits[0 .. nhits) hold part of the prompt, as sel_pick_kv()
 *  judges them: such a rank needs room for only the uncached tokens (nhits 0: sel_gate_in()) */
enum sel_result sel_gate_kv(struct sel *s, int64_t now_ms, int64_t prompt_tokens,
                            const struct busy_thresholds *t, int pinned, const uint64_t *eligible,
                            const struct sel_hit *hits, size_t nhits);

#endif
