/* gate: N slots + a channel of Q-1 + one dispatcher-held request.
 *
 * Invariants, checked by the unit tests:
 *   held == NULL  implies  the channel is empty (the dispatcher pulls at once);
 *   held != NULL  implies  slots_used >= limit (otherwise it would have been dispatched),
 *                          except while a dispatch loop is running;
 *   channel_len <= queue_limit - 1 whenever a ticket is added (lowering Q may leave more).
 */
#include "admit/gate.h"
#include "util/xmalloc.h"

#include <stddef.h>
#include <stdlib.h>

struct gate {
    unsigned limit, queue_limit;
    unsigned slots_used;
    unsigned channel_len;
    struct gate_ticket *held;
    struct gate_ticket *head, *tail; /* the channel, oldest first */
    int dispatching;                 /* guards against re-entry from the callback */
    gate_dispatch_cb cb;
    void *cb_arg;
};

struct gate *gate_new(unsigned n, unsigned q, gate_dispatch_cb cb, void *arg)
{
    struct gate *g = xcalloc(1, sizeof *g);

    g->limit = n ? n : 1;
    g->queue_limit = q ? q : 1;
    g->cb = cb;
    g->cb_arg = arg;
    return g;
}

void gate_free(struct gate *g)
{
    free(g);
}

void gate_ticket_init(struct gate_ticket *t)
{
    t->_prev = t->_next = NULL;
    t->_state = GATE_IDLE;
}

enum gate_state gate_ticket_state(const struct gate_ticket *t)
{
    return t->_state;
}

static void channel_push(struct gate *g, struct gate_ticket *t)
{
    t->_next = NULL;
    t->_prev = g->tail;
    if (g->tail != NULL)
        g->tail->_next = t;
    else
        g->head = t;
    g->tail = t;
    g->channel_len++;
    t->_state = GATE_CHANNEL;
}

static void channel_remove(struct gate *g, struct gate_ticket *t)
{
    if (t->_prev != NULL)
        t->_prev->_next = t->_next;
    else
        g->head = t->_next;
    if (t->_next != NULL)
        t->_next->_prev = t->_prev;
    else
        g->tail = t->_prev;
    t->_prev = t->_next = NULL;
    g->channel_len--;
}

/* The dispatcher takes the channel's head as soon as it holds nothing. */
static void refill_held(struct gate *g)
{
    struct gate_ticket *t = g->head;

    if (g->held != NULL || t == NULL)
        return;
    channel_remove(g, t);
    g->held = t;
    t->_state = GATE_HELD;
}

/* Moves waiters into free slots, oldest first. The callback may re-enter gate_leave or
 * gate_enter; the flag makes those calls update counts only, and this loop picks up any
 * slot they free. */
static void dispatch(struct gate *g)
{
    if (g->dispatching)
        return;
    g->dispatching = 1;
    while (g->held != NULL && g->slots_used < g->limit) {
        struct gate_ticket *t = g->held;

        g->held = NULL;
        refill_held(g);
        t->_state = GATE_SLOT;
        g->slots_used++;
        if (g->cb != NULL)
            g->cb(t, g->cb_arg);
    }
    g->dispatching = 0;
}

enum gate_result gate_enter(struct gate *g, struct gate_ticket *t)
{
    if (t->_state != GATE_IDLE)
        return GATE_REJECTED; /* a caller bug; refuse rather than corrupt the queue */
    if (g->held == NULL && g->slots_used < g->limit) {
        g->slots_used++;
        t->_state = GATE_SLOT;
        return GATE_ADMITTED;
    }
    if (g->held == NULL) {
        /* Every slot is busy and nobody waits: the dispatcher takes this one and holds it. */
        g->held = t;
        t->_state = GATE_HELD;
        return GATE_QUEUED;
    }
    if (g->channel_len + 1 < g->queue_limit) {
        channel_push(g, t);
        return GATE_QUEUED;
    }
    return GATE_REJECTED;
}

void gate_leave(struct gate *g, struct gate_ticket *t)
{
    switch (t->_state) {
    case GATE_IDLE:
        return;
    case GATE_SLOT:
        t->_state = GATE_IDLE;
        g->slots_used--;
        dispatch(g);
        return;
    case GATE_HELD:
        t->_state = GATE_IDLE;
        g->held = NULL;
        refill_held(g);
        return;
    case GATE_CHANNEL:
        channel_remove(g, t);
        t->_state = GATE_IDLE;
        return;
    }
}

void gate_set_limits(struct gate *g, unsigned n, unsigned q)
{
    if (n > 0)
        g->limit = n;
    if (q > 0)
        g->queue_limit = q;
    dispatch(g);
}

void gate_get_stats(const struct gate *g, struct gate_stats *st)
{
    st->slots_used = g->slots_used;
    st->held = g->held != NULL;
    st->channel = g->channel_len;
    st->queued = st->held + st->channel;
    st->limit = g->limit;
    st->queue_limit = g->queue_limit;
}
