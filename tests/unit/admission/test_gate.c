/* Unit tests for the admission gate: the exact N+Q cap, FIFO, and every release path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admit/gate.h"

#include <string.h>

#define MAXT 64

/* Records the order in which waiters were dispatched. */
struct rec {
    struct gate_ticket *base;
    int order[MAXT];
    int n;
    struct gate *g;
    int leave_on_dispatch; /* the dispatched request fails at once (e.g. engine down) */
};

static void on_dispatch(struct gate_ticket *t, void *arg)
{
    struct rec *r = arg;

    if (r->n < MAXT)
        r->order[r->n] = (int) (t - r->base);
    r->n++;
    assert_int_equal(gate_ticket_state(t), GATE_SLOT);
    if (r->leave_on_dispatch)
        gate_leave(r->g, t);
}

static struct gate *mk(struct rec *r, struct gate_ticket *t, unsigned n, unsigned q)
{
    memset(r, 0, sizeof *r);
    r->base = t;
    for (int i = 0; i < MAXT; i++)
        gate_ticket_init(&t[i]);
    r->g = gate_new(n, q, on_dispatch, r);
    return r->g;
}

static void check(struct gate *g, unsigned used, unsigned queued, unsigned held)
{
    struct gate_stats st;

    gate_get_stats(g, &st);
    assert_int_equal(st.slots_used, used);
    assert_int_equal(st.queued, queued);
    assert_int_equal(st.held, held);
    assert_int_equal(st.channel, queued - held);
}

/* Dynamo's n_direct_admissions_then_exactly_q_queue_then_reject, for several N and Q. */
static void test_n_direct_then_exactly_q_queued_then_reject(void **state)
{
    static const unsigned cases[][2] = {{2, 3}, {1, 2}, {4, 16}, {3, 2}, {8, 5}};
    struct gate_ticket t[MAXT];
    struct rec r;

    (void) state;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unsigned n = cases[c][0], q = cases[c][1], i;
        struct gate *g = mk(&r, t, n, q);

        for (i = 0; i < n; i++)
            assert_int_equal(gate_enter(g, &t[i]), GATE_ADMITTED);
        for (; i < n + q; i++)
            assert_int_equal(gate_enter(g, &t[i]), GATE_QUEUED);
        check(g, n, q, 1);
        /* Every further request is rejected, and a rejection takes no queue space. */
        for (unsigned k = 0; k < 5; k++) {
            assert_int_equal(gate_enter(g, &t[n + q + k]), GATE_REJECTED);
            assert_int_equal(gate_ticket_state(&t[n + q + k]), GATE_IDLE);
            check(g, n, q, 1);
        }
        gate_free(g);
    }
}

static void test_fifo_order(void **state)
{
    struct gate_ticket t[MAXT];
    struct rec r;
    struct gate *g = mk(&r, t, 1, 5);

    (void) state;
    for (int i = 0; i < 6; i++)
        gate_enter(g, &t[i]);
    for (int i = 0; i < 6; i++)
        gate_leave(g, &t[i]); /* each release hands the slot to the next waiter */
    assert_int_equal(r.n, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(r.order[i], i + 1);
    check(g, 0, 0, 0);
    gate_free(g);
}

/* A new request never overtakes: while anyone waits, even a free slot goes to the waiter. */
static void test_late_arrival_queues_while_waiters_remain(void **state)
{
    struct gate_ticket t[MAXT];
    struct rec r;
    struct gate *g = mk(&r, t, 2, 4);

    (void) state;
    gate_enter(g, &t[0]);
    gate_enter(g, &t[1]);
    assert_int_equal(gate_enter(g, &t[2]), GATE_QUEUED);
    assert_int_equal(gate_enter(g, &t[3]), GATE_QUEUED);
    /* Raise N behind the gate's back by one slot: the held waiter, not a newcomer, gets it. */
    gate_set_limits(g, 3, 0);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.order[0], 2);
    assert_int_equal(gate_enter(g, &t[4]), GATE_QUEUED);
    check(g, 3, 2, 1);
    gate_leave(g, &t[0]);
    assert_int_equal(r.order[1], 3);
    gate_leave(g, &t[1]);
    assert_int_equal(r.order[2], 4);
    check(g, 3, 0, 0);
    /* Nobody waits now: a newcomer takes a free slot directly. */
    gate_leave(g, &t[2]);
    assert_int_equal(gate_enter(g, &t[5]), GATE_ADMITTED);
    gate_free(g);
}

static void test_dropped_waiter_frees_its_place_at_once(void **state)
{
    struct gate_ticket t[MAXT];
    struct rec r;
    struct gate *g = mk(&r, t, 1, 3);

    (void) state;
    gate_enter(g, &t[0]); /* slot */
    gate_enter(g, &t[1]); /* held */
    gate_enter(g, &t[2]); /* channel */
    gate_enter(g, &t[3]); /* channel */
    assert_int_equal(gate_enter(g, &t[4]), GATE_REJECTED);
    /* A channel waiter leaves: its place is free for the very next arrival. */
    gate_leave(g, &t[2]);
    assert_int_equal(gate_ticket_state(&t[2]), GATE_IDLE);
    check(g, 1, 2, 1);
    assert_int_equal(gate_enter(g, &t[4]), GATE_QUEUED);
    /* The held waiter leaves: the channel's head moves up to be held. */
    gate_leave(g, &t[1]);
    assert_int_equal(gate_ticket_state(&t[3]), GATE_HELD);
    check(g, 1, 2, 1);
    assert_int_equal(gate_enter(g, &t[5]), GATE_QUEUED);
    assert_int_equal(gate_enter(g, &t[6]), GATE_REJECTED);
    gate_leave(g, &t[0]);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.order[0], 3);
    gate_free(g);
}

/* The gate does not care why a slot is released (success, error, client abort): each is a
 * gate_leave, and each must dispatch the next waiter. A dispatched request that fails at
 * once (re-entering gate_leave from the callback) must pass the slot on, not lose it. */
static void test_release_on_success_error_and_abort(void **state)
{
    struct gate_ticket t[MAXT];
    struct rec r;
    struct gate *g = mk(&r, t, 2, 4);

    (void) state;
    for (int i = 0; i < 6; i++)
        gate_enter(g, &t[i]);
    gate_leave(g, &t[0]); /* success */
    gate_leave(g, &t[1]); /* upstream error */
    assert_int_equal(r.n, 2);
    check(g, 2, 2, 1);
    r.leave_on_dispatch = 1; /* the next two fail at once inside the callback */
    gate_leave(g, &t[2]);    /* client abort */
    /* t4 and t5 were both dispatched and failed; the slot freed by t2 is free again. */
    assert_int_equal(r.n, 4);
    assert_int_equal(r.order[2], 4);
    assert_int_equal(r.order[3], 5);
    check(g, 1, 0, 0);
    r.leave_on_dispatch = 0;
    assert_int_equal(gate_enter(g, &t[6]), GATE_ADMITTED);
    check(g, 2, 0, 0);
    gate_free(g);
}

static void test_n1_q2_edges(void **state)
{
    struct gate_ticket t[MAXT];
    struct rec r;
    struct gate *g = mk(&r, t, 1, 2);

    (void) state;
    assert_int_equal(gate_enter(g, &t[0]), GATE_ADMITTED);
    assert_int_equal(gate_enter(g, &t[1]), GATE_QUEUED);
    assert_int_equal(gate_ticket_state(&t[1]), GATE_HELD);
    assert_int_equal(gate_enter(g, &t[2]), GATE_QUEUED);
    assert_int_equal(gate_ticket_state(&t[2]), GATE_CHANNEL);
    assert_int_equal(gate_enter(g, &t[3]), GATE_REJECTED);
    check(g, 1, 2, 1);
    /* Drain completely, then it behaves like new. */
    gate_leave(g, &t[0]);
    gate_leave(g, &t[1]);
    gate_leave(g, &t[2]);
    check(g, 0, 0, 0);
    assert_int_equal(gate_enter(g, &t[3]), GATE_ADMITTED);
    gate_free(g);
}

static void test_idle_ticket_leave_and_double_enter(void **state)
{
    struct gate_ticket t[MAXT];
    struct rec r;
    struct gate *g = mk(&r, t, 1, 2);

    (void) state;
    gate_leave(g, &t[0]); /* idle: nothing happens */
    check(g, 0, 0, 0);
    assert_int_equal(gate_enter(g, &t[0]), GATE_ADMITTED);
    /* Entering twice is a caller bug; the gate refuses without corrupting its counts. */
    assert_int_equal(gate_enter(g, &t[0]), GATE_REJECTED);
    check(g, 1, 0, 0);
    gate_leave(g, &t[0]);
    gate_leave(g, &t[0]);
    check(g, 0, 0, 0);
    gate_free(g);
}

/* Lowering N never evicts; slots drain down. Lowering Q keeps who waits, rejects newcomers. */
static void test_lowering_limits_keeps_everyone(void **state)
{
    struct gate_ticket t[MAXT];
    struct rec r;
    struct gate *g = mk(&r, t, 3, 4);

    (void) state;
    for (int i = 0; i < 7; i++)
        gate_enter(g, &t[i]);
    gate_set_limits(g, 1, 2);
    check(g, 3, 4, 1);
    assert_int_equal(gate_enter(g, &t[7]), GATE_REJECTED);
    gate_leave(g, &t[0]);
    gate_leave(g, &t[1]);
    assert_int_equal(r.n, 0); /* still 1 slot used of 1 allowed: nobody dispatched */
    gate_leave(g, &t[2]);
    assert_int_equal(r.n, 1);
    check(g, 1, 3, 1);
    gate_free(g);
}

/* A long randomised run against a reference model of the rules. */
static void test_random_against_model(void **state)
{
    struct gate_ticket t[MAXT];
    struct rec r;
    unsigned seed = 12345;

    (void) state;
    for (int round = 0; round < 20; round++) {
        unsigned n = 1 + round % 4, q = 2 + round % 5;
        struct gate *g = mk(&r, t, n, q);

        for (int step = 0; step < 5000; step++) {
            int i;
            struct gate_stats st;

            seed = seed * 1103515245u + 12345u;
            i = (int) ((seed >> 8) % MAXT);
            gate_get_stats(g, &st);
            if (gate_ticket_state(&t[i]) == GATE_IDLE) {
                enum gate_result res = gate_enter(g, &t[i]);
                if (st.queued == 0 && st.slots_used < n)
                    assert_int_equal(res, GATE_ADMITTED);
                else if (st.queued < q)
                    assert_int_equal(res, GATE_QUEUED);
                else
                    assert_int_equal(res, GATE_REJECTED);
            } else {
                gate_leave(g, &t[i]);
            }
            gate_get_stats(g, &st);
            assert_true(st.slots_used <= n);
            assert_true(st.queued <= q);
            assert_true(st.queued == 0 || st.slots_used == n);
            assert_true(st.held == 1 || st.channel == 0);
        }
        gate_free(g);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_n_direct_then_exactly_q_queued_then_reject),
        cmocka_unit_test(test_fifo_order),
        cmocka_unit_test(test_late_arrival_queues_while_waiters_remain),
        cmocka_unit_test(test_dropped_waiter_frees_its_place_at_once),
        cmocka_unit_test(test_release_on_success_error_and_abort),
        cmocka_unit_test(test_n1_q2_edges),
        cmocka_unit_test(test_idle_ticket_leave_and_double_enter),
        cmocka_unit_test(test_lowering_limits_keeps_everyone),
        cmocka_unit_test(test_random_against_model),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
