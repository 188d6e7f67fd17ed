/* admit/gate.h: the admission gate, an exact N+Q cap as a pure data structure.
 *
 * The gate models NVIDIA Dynamo's worker admission: N engine slots, an overflow channel of
 * Q-1 places, and one dispatcher that holds the request it will hand to the next free slot.
 * So at most N requests run and at most Q wait (the held one included); request N+Q+1 is
 * rejected at once.
 *
 * Rules (the invariants every caller may rely on):
 *  - a request takes a slot directly only when nothing is waiting, so nobody overtakes;
 *  - waiters are served strictly first in, first out;
 *  - a rejection consumes no queue space;
 *  - a waiter that leaves frees its place at once;
 *  - when a slot frees, the held waiter (then the channel's head) is moved into it and the
 *    dispatch callback runs before gate_leave returns: no event-loop turn is lost.
 *
 * The gate knows nothing of sockets or time and never allocates per request: callers embed
 * a struct gate_ticket in their own request state. It is not thread-safe; admitd drives it
 * from its one event-loop thread. */
#ifndef ADMIT_GATE_H
#define ADMIT_GATE_H

struct gate;

/* Where a ticket stands. Read it with gate_ticket_state(); never write it. */
enum gate_state {
    GATE_IDLE = 0, /* not in the gate (new, rejected, or left) */
    GATE_SLOT,     /* holds an engine slot */
    GATE_HELD,     /* waiting, held by the dispatcher for the next slot */
    GATE_CHANNEL   /* waiting in the channel */
};

/* The result of gate_enter. */
enum gate_result {
    GATE_ADMITTED = 0, /* got a slot now */
    GATE_QUEUED,       /* waits; the dispatch callback fires when it gets a slot */
    GATE_REJECTED      /* engine slots and queue are full; nothing was taken */
};

/* A caller-embedded queue entry; members starting with '_' are private to the gate. */
struct gate_ticket {
    struct gate_ticket *_prev, *_next;
    enum gate_state _state;
};

/* Current occupancy; queued == held + channel. */
struct gate_stats {
    unsigned slots_used;  /* requests holding an engine slot (may exceed limit after lowering) */
    unsigned queued;      /* everything waiting, the held request included */
    unsigned held;        /* 0 or 1 */
    unsigned channel;     /* waiting in the channel */
    unsigned limit;       /* N */
    unsigned queue_limit; /* Q */
};

/** called when a waiting ticket is moved into a slot; may re-enter the gate */
typedef void (*gate_dispatch_cb)(struct gate_ticket *t, void *arg);

/** creates a gate with n >= 1 slots and a queue of q >= 1 (channel q-1 plus the held one) */
struct gate *gate_new(unsigned n, unsigned q, gate_dispatch_cb cb, void *arg);
/** frees the gate; tickets still inside are simply forgotten (their owners are gone) */
void gate_free(struct gate *g);
/** initialises a ticket before its first gate_enter */
void gate_ticket_init(struct gate_ticket *t);
/** the ticket's state */
enum gate_state gate_ticket_state(const struct gate_ticket *t);
/** asks for a slot for an idle ticket: admitted, queued or rejected */
enum gate_result gate_enter(struct gate *g, struct gate_ticket *t);
/** releases whatever the ticket holds (slot or queue place); an idle ticket is a no-op */
void gate_leave(struct gate *g, struct gate_ticket *t);
/** changes N and Q live: raising N dispatches waiters now; lowering keeps who is inside */
void gate_set_limits(struct gate *g, unsigned n, unsigned q);
/** fills in the current occupancy */
void gate_get_stats(const struct gate *g, struct gate_stats *st);

#endif
