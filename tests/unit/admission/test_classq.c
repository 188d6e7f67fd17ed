/* Unit tests for the policy-class queues: the DRR shares, order within a class, the limit,
 * removal, credit while blocked or empty, virtual rounds, the callbacks' contract, and a
 * random run against a model made of arrays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/classq.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 4096
#define MAXC 4

/* A request as the router holds one: the queue entry is embedded. */
struct req {
    struct classq_entry qe;
    int id;
    int pending; /* pushed and not yet dispatched: go() must see 1 */
};

static struct req *req_of(const struct classq_entry *e)
{
    return (struct req *) ((const char *) e - offsetof(struct req, qe));
}

/* What the callbacks answer and record. */
struct ctx {
    struct classq *q;
    int allow[MAXC]; /* ready() says yes for this class */
    long room;       /* dispatches left before ready() says no to all; -1 = no end */
    unsigned ready_calls;
    int n;
    int cls[MAXR], id[MAXR];
    int64_t deficit_of[MAXR]; /* classq_deficit(watch) at each go() */
    int watch;
    void (*hook)(struct ctx *c, struct req *r); /* more work inside go() */
    struct req *reqs;
};

static int ready(void *arg, int cls, const struct classq_entry *head)
{
    struct ctx *c = arg;

    c->ready_calls++;
    /* ready() is asked about the current head of a non-empty class only */
    assert_non_null(head);
    assert_ptr_equal(classq_head(c->q, cls), head);
    assert_true(classq_queued(head));
    assert_int_equal(classq_class_of(head), cls);
    return c->allow[cls] && c->room != 0;
}

static void go(void *arg, struct classq_entry *e)
{
    struct ctx *c = arg;
    struct req *r = req_of(e);

    /* taken out before go() runs, exactly once per push */
    assert_false(classq_queued(e));
    assert_int_equal(r->pending, 1);
    r->pending = 0;
    assert_true(c->n < MAXR);
    c->cls[c->n] = classq_class_of(e);
    c->id[c->n] = r->id;
    c->deficit_of[c->n] = classq_deficit(c->q, c->watch);
    c->n++;
    if (c->room > 0)
        c->room--;
    if (c->hook != NULL)
        c->hook(c, r);
}

static struct classq *mk(struct ctx *c, struct req *reqs, size_t nreqs,
                         const struct classq_def *defs, size_t nclasses)
{
    memset(c, 0, sizeof *c);
    memset(reqs, 0, nreqs * sizeof *reqs);
    for (size_t i = 0; i < nreqs; i++)
        reqs[i].id = (int) i;
    for (int k = 0; k < MAXC; k++)
        c->allow[k] = 1;
    c->room = -1;
    c->reqs = reqs;
    c->q = classq_new(defs, nclasses);
    assert_non_null(c->q);
    return c->q;
}

static void push_ok(struct classq *q, int cls, struct req *r, int64_t prompt)
{
    assert_int_equal(classq_push(q, cls, &r->qe, prompt, 1), 0);
    r->pending = 1;
}

static unsigned dispatch(struct ctx *c)
{
    return classq_dispatch(c->q, ready, go, c);
}

/* How many of the first n dispatches went to class cls. */
static int count_in(const struct ctx *c, int n, int cls)
{
    int k = 0;

    for (int i = 0; i < n && i < c->n; i++)
        k += c->cls[i] == cls;
    return k;
}

static struct req reqs[MAXR];

/* ---- shares --------------------------------------------------------------------------- */

/* Both classes backlogged with 1000 each, quanta in 4:1, ready always: the first dispatches
 * go 4:1. With cost == 1 the rounds are exact (4 of A, then 1 of B); with prompts of 1000
 * tokens and quanta 4096:1024 the remainders carry over, and the share stays within 10 %. */
static void test_shares_follow_quanta(void **state)
{
    static const struct {
        int64_t qa, qb, prompt;
    } cases[] = {{4, 1, 1}, {4, 1, 0}, {4096, 1024, 1000}, {400, 100, 37}};
    struct ctx c;

    (void) state;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct classq_def defs[2] = {{cases[k].qa, CLASSQ_FCFS, 0}, {cases[k].qb, CLASSQ_FCFS, 0}};
        struct classq *q = mk(&c, reqs, 2000, defs, 2);

        for (int i = 0; i < 1000; i++) {
            push_ok(q, 0, &reqs[i], cases[k].prompt);
            push_ok(q, 1, &reqs[1000 + i], cases[k].prompt);
        }
        assert_int_equal(dispatch(&c), 2000);
        assert_int_equal(c.n, 2000);
        assert_int_equal(classq_total(q), 0);
        for (int n = 250; n <= 1000; n += 250) {
            int a = count_in(&c, n, 0), b = n - a;

            assert_true(b > 0);
            assert_true(a * 10 >= b * 4 * 9 && a * 10 <= b * 4 * 11); /* a/b within 4 +- 10 % */
            if (cases[k].prompt <= 1) {
                assert_int_equal(a, n * 4 / 5); /* exact rounds */
                assert_int_equal(b, n / 5);
            }
        }
        if (cases[k].prompt <= 1) /* the first round: A A A A B */
            for (int i = 0; i < 5; i++)
                assert_int_equal(c.cls[i], i < 4 ? 0 : 1);
        classq_free(q);
    }
}

/* Quanta are tokens, not requests: equal quanta with prompts of 1000 and 250 tokens send
 * four small requests for each large one. Three classes 3:2:1 of equal prompts share 3:2:1. */
static void test_shares_are_in_tokens(void **state)
{
    struct classq_def two[2] = {{1000, CLASSQ_FCFS, 0}, {1000, CLASSQ_FCFS, 0}};
    struct classq_def three[3] = {
        {300, CLASSQ_FCFS, 0}, {200, CLASSQ_WSPT, 0}, {100, CLASSQ_FCFS, 0}};
    struct ctx c;
    struct classq *q = mk(&c, reqs, 2000, two, 2);

    (void) state;
    for (int i = 0; i < 1000; i++) {
        push_ok(q, 0, &reqs[i], 1000);
        push_ok(q, 1, &reqs[1000 + i], 250);
    }
    assert_int_equal(dispatch(&c), 2000);
    assert_int_equal(count_in(&c, 500, 0), 100);
    assert_int_equal(count_in(&c, 500, 1), 400);
    classq_free(q);

    q = mk(&c, reqs, 3000, three, 3);
    for (int i = 0; i < 1000; i++)
        for (int k = 0; k < 3; k++)
            push_ok(q, k, &reqs[k * 1000 + i], 100);
    assert_int_equal(dispatch(&c), 3000);
    assert_int_equal(count_in(&c, 600, 0), 300);
    assert_int_equal(count_in(&c, 600, 1), 200);
    assert_int_equal(count_in(&c, 600, 2), 100);
    classq_free(q);
}

/* Equal quanta, one request a quantum: the classes alternate, so the ring's order is no
 * lasting preference. */
static void test_equal_quanta_alternate(void **state)
{
    struct classq_def defs[2] = {{10, CLASSQ_FCFS, 0}, {10, CLASSQ_FCFS, 0}};
    struct ctx c;
    struct classq *q = mk(&c, reqs, 20, defs, 2);

    (void) state;
    for (int i = 0; i < 10; i++) {
        push_ok(q, 1, &reqs[i], 10);
        push_ok(q, 0, &reqs[10 + i], 10);
    }
    assert_int_equal(dispatch(&c), 20);
    for (int i = 0; i < 20; i++)
        assert_int_equal(c.cls[i], i % 2);
    classq_free(q);
}

/* Shares under tight capacity: a fleet that runs cap requests at once (ready() says yes
 * while fewer run), two classes always backlogged, requests ending one at a time and each end
 * followed by a dispatch call, as the router's gate and rq_kick() are. Over 400 dispatches,
 * counted at every 100, class 0's share is its quantum's, within one round of the ring (the
 * requests one pair of quanta buys), at every capacity from one request at a time to more
 * than a round. With the turn lost each time the gate closed behind a dispatch, a capacity
 * of one or two alternated the classes 1:1, whatever the quanta. */
static void test_shares_hold_at_every_capacity(void **state)
{
    static const struct {
        int64_t qa, qb, prompt;
        enum classq_policy policy;
    } cases[] = {
        {3, 1, 1, CLASSQ_FCFS},         {4, 1, 1, CLASSQ_FCFS},
        {1, 1, 1, CLASSQ_FCFS},         {300, 100, 100, CLASSQ_FCFS},
        {400, 100, 100, CLASSQ_WSPT},   {900, 300, 100, CLASSQ_FCFS},
        {1000, 1000, 100, CLASSQ_WSPT}, {3072, 1024, 1000, CLASSQ_FCFS},
    };
    enum { TOTAL = 400, STEP = 100 };
    struct ctx c;

    (void) state;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct classq_def defs[2] = {{cases[k].qa, cases[k].policy, 0},
                                     {cases[k].qb, cases[k].policy, 0}};
        int64_t round = (cases[k].qa + cases[k].qb) / cases[k].prompt; /* requests a round */

        for (int64_t cap = 1; cap <= round + 2; cap++) {
            struct classq *q = mk(&c, reqs, 2 * (TOTAL + (size_t) cap), defs, 2);

            for (int i = 0; i < TOTAL + cap; i++) {
                push_ok(q, 0, &reqs[2 * i], cases[k].prompt);
                push_ok(q, 1, &reqs[2 * i + 1], cases[k].prompt);
            }
            c.room = cap; /* the gate: dispatches it takes before it closes */
            assert_int_equal(dispatch(&c), cap);
            while (c.n < TOTAL) {
                c.room++; /* one request ends: room for one */
                assert_int_equal(dispatch(&c), 1);
            }
            for (int n = STEP; n <= TOTAL; n += STEP) {
                int a = count_in(&c, n, 0);
                int64_t want = n * cases[k].qa / (cases[k].qa + cases[k].qb);

                if (a < want - round || a > want + round)
                    fail_msg("quanta %lld:%lld, prompt %lld, capacity %lld: class 0 had %d of "
                             "the first %d dispatches, want %lld +- %lld",
                             (long long) cases[k].qa, (long long) cases[k].qb,
                             (long long) cases[k].prompt, (long long) cap, a, n, (long long) want,
                             (long long) round);
            }
            classq_free(q);
        }
    }
}

/* ---- order within a class -------------------------------------------------------------- */

static void test_fcfs_nobody_overtakes(void **state)
{
    static const int64_t prompts[] = {5000, 1, 300, 0, 7, 7, 100000, 2};
    struct classq_def defs[1] = {{1, CLASSQ_FCFS, 0}};
    struct ctx c;
    struct classq *q = mk(&c, reqs, 8, defs, 1);

    (void) state;
    for (int i = 0; i < 8; i++)
        push_ok(q, 0, &reqs[i], prompts[i]);
    assert_ptr_equal(classq_head(q, 0), &reqs[0].qe);
    assert_int_equal(dispatch(&c), 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(c.id[i], i);
    classq_free(q);
}

static void test_wspt_cost_then_arrival(void **state)
{
    /* costs after max(1, .): 5 3 9 3 1 5 1 1 */
    static const int64_t prompts[] = {5, 3, 9, 3, 1, 5, 0, -4};
    static const int order[] = {4, 6, 7, 1, 3, 0, 5, 2};
    struct classq_def defs[1] = {{1, CLASSQ_WSPT, 0}};
    struct ctx c;
    struct classq *q = mk(&c, reqs, 8, defs, 1);

    (void) state;
    for (int i = 0; i < 8; i++)
        push_ok(q, 0, &reqs[i], prompts[i]);
    assert_ptr_equal(classq_head(q, 0), &reqs[4].qe);
    assert_int_equal(dispatch(&c), 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(c.id[i], order[i]);
    classq_free(q);
}

/* ---- a reload: the entries moved into a queue of other classes ------------------------- */

/* Drained oldest first across classes and policies, each keeping its class and cost; the
 * old queue is left empty and usable. Requeued into new classes (two merged into one, one
 * kept, one split off) past a limit that would refuse a push, they keep their arrival order
 * and costs: an FCFS class serves the merged entries oldest first, a WSPT class by cost. */
static void test_drain_and_requeue(void **state)
{
    static const int64_t prompts[] = {50, 10, 40, 0, 30, 20, 60, 5};
    static const int cls_of[] = {0, 1, 2, 1, 0, 2, 1, 0};
    struct classq_def old[3] = {{1, CLASSQ_FCFS, 0}, {1, CLASSQ_WSPT, 0}, {1, CLASSQ_FCFS, 0}};
    struct classq_def next[2] = {{1, CLASSQ_FCFS, 1}, {1, CLASSQ_WSPT, 0}};
    struct classq_entry *out[8];
    struct ctx c;
    struct classq *q = mk(&c, reqs, 8, old, 3), *nq;

    (void) state;
    for (int i = 0; i < 8; i++)
        push_ok(q, cls_of[i], &reqs[i], prompts[i]);
    assert_int_equal(classq_drain(q, out), 8);
    assert_int_equal(classq_total(q), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(classq_depth(q, i), 0);
        assert_int_equal(classq_deficit(q, i), 0);
    }
    for (int i = 0; i < 8; i++) {
        assert_ptr_equal(out[i], &reqs[i].qe);
        assert_false(classq_queued(out[i]));
        assert_int_equal(classq_class_of(out[i]), cls_of[i]);
        assert_int_equal(classq_cost_of(out[i]), prompts[i] > 1 ? prompts[i] : 1);
    }
    /* The old classes 0 and 2 go to the new FCFS class 0 (limit 1 x 1 worker: already full
     * after one), the old WSPT class 1 to the new class 1. */
    nq = classq_new(next, 2);
    assert_non_null(nq);
    for (int i = 0; i < 8; i++)
        assert_int_equal(classq_requeue(nq, cls_of[i] == 1 ? 1 : 0, out[i]), 0);
    assert_int_equal(classq_depth(nq, 0), 5);
    assert_int_equal(classq_depth(nq, 1), 3);
    assert_int_equal(classq_requeue(nq, 0, out[0]), -1); /* queued already */
    assert_int_equal(classq_requeue(nq, 2, &reqs[8].qe), -1);
    memset(&reqs[8], 0, sizeof reqs[8]);
    assert_int_equal(classq_requeue(nq, 0, &reqs[8].qe), -1);    /* never pushed */
    assert_int_equal(classq_push(nq, 0, &reqs[8].qe, 1, 1), -1); /* full for newcomers */
    classq_free(q);
    c.q = nq;
    c.allow[1] = 0;
    assert_int_equal(dispatch(&c), 5);
    for (int i = 0, want[] = {0, 2, 4, 5, 7}; i < 5; i++)
        assert_int_equal(c.id[i], want[i]);
    c.allow[0] = 0;
    c.allow[1] = 1;
    c.n = 0;
    assert_int_equal(dispatch(&c), 3);
    for (int i = 0, want[] = {3, 1, 6}; i < 3; i++) /* costs 1, 10, 60 */
        assert_int_equal(c.id[i], want[i]);
    classq_free(nq);
}

/* ---- the limit ------------------------------------------------------------------------ */

static void test_limit_boundary(void **state)
{
    struct classq_def defs[2] = {{1, CLASSQ_FCFS, 3}, {1, CLASSQ_WSPT, 0}};
    struct classq_entry zero;
    struct ctx c;
    struct classq *q = mk(&c, reqs, 2000, defs, 2);

    (void) state;
    memset(&zero, 0, sizeof zero);
    assert_int_equal(classq_limit(q, 0, 2), 6);
    assert_int_equal(classq_limit(q, 0, 0), 3); /* no routable worker: one worker's worth */
    assert_int_equal(classq_limit(q, 1, 5), 0); /* no limit */
    assert_int_equal(classq_limit(q, 2, 5), 0); /* no such class */
    /* 3 per worker x 2 workers: the sixth is accepted (5 < 6), the seventh refused */
    for (int i = 0; i < 6; i++)
        assert_int_equal(classq_push(q, 0, &reqs[i].qe, 10, 2), 0);
    assert_int_equal(classq_push(q, 0, &reqs[6].qe, 10, 2), -1);
    assert_memory_equal(&reqs[6].qe, &zero, sizeof zero); /* untouched */
    assert_false(classq_queued(&reqs[6].qe));
    assert_int_equal(classq_depth(q, 0), 6);
    /* the same depth with fewer workers, or none, is full too; with more it is not */
    assert_int_equal(classq_push(q, 0, &reqs[6].qe, 10, 1), -1);
    assert_int_equal(classq_push(q, 0, &reqs[6].qe, 10, 0), -1);
    assert_int_equal(classq_push(q, 0, &reqs[6].qe, 10, 3), 0);
    assert_int_equal(classq_depth(q, 0), 7);
    /* a removal makes room again */
    assert_int_equal(classq_push(q, 0, &reqs[7].qe, 10, 2), -1);
    classq_remove(q, &reqs[0].qe);
    classq_remove(q, &reqs[1].qe);
    assert_int_equal(classq_push(q, 0, &reqs[7].qe, 10, 2), 0);
    assert_int_equal(classq_push(q, 0, &reqs[8].qe, 10, 2), -1);
    assert_int_equal(classq_depth(q, 0), 6);
    /* limit 0: no limit, whatever the workers */
    for (int i = 100; i < 2000; i++)
        assert_int_equal(classq_push(q, 1, &reqs[i].qe, i, 0), 0);
    assert_int_equal(classq_depth(q, 1), 1900);
    assert_int_equal(classq_total(q), 1906);
    classq_free(q);

    /* a limit as large as the types allow neither wraps nor refuses */
    defs[0].limit_per_worker = UINT_MAX;
    q = mk(&c, reqs, 1, defs, 1);
    assert_true(classq_limit(q, 0, UINT_MAX) >= (size_t) UINT_MAX);
    assert_int_equal(classq_push(q, 0, &reqs[0].qe, 1, UINT_MAX), 0);
    classq_free(q);

    /* the first one with a limit of 1 is accepted (0 < 1) */
    defs[0].limit_per_worker = 1;
    q = mk(&c, reqs, 2, defs, 1);
    assert_int_equal(classq_push(q, 0, &reqs[0].qe, 1, 0), 0);
    assert_int_equal(classq_push(q, 0, &reqs[1].qe, 1, 0), -1);
    classq_free(q);
}

/* Caller bugs are refused, not turned into a corrupt queue. */
static void test_bad_arguments(void **state)
{
    struct classq_def defs[2] = {{1, CLASSQ_FCFS, 0}, {1, CLASSQ_WSPT, 0}};
    struct classq_def bad_quantum[1] = {{0, CLASSQ_FCFS, 0}};
    struct classq_def bad_policy[1] = {{1, (enum classq_policy) 7, 0}};
    struct ctx c;
    struct classq *q;

    (void) state;
    assert_null(classq_new(defs, 0));
    assert_null(classq_new(bad_quantum, 1));
    assert_null(classq_new(bad_policy, 1));
    classq_free(NULL);
    q = mk(&c, reqs, 2, defs, 2);
    assert_int_equal(classq_nclasses(q), 2);
    assert_int_equal(classq_push(q, 2, &reqs[0].qe, 1, 1), -1);
    assert_int_equal(classq_push(q, -1, &reqs[0].qe, 1, 1), -1);
    assert_false(classq_queued(&reqs[0].qe));
    assert_int_equal(classq_push(q, 1, &reqs[0].qe, 1, 1), 0);
    assert_int_equal(classq_push(q, 0, &reqs[0].qe, 1, 1), -1); /* already queued */
    assert_int_equal(classq_push(q, 1, &reqs[0].qe, 1, 1), -1);
    assert_int_equal(classq_total(q), 1);
    assert_int_equal(classq_class_of(&reqs[0].qe), 1);
    assert_null(classq_head(q, 0));
    assert_null(classq_head(q, 5));
    assert_int_equal(classq_depth(q, 5), 0);
    classq_free(q);
}

/* ---- removal -------------------------------------------------------------------------- */

static void test_remove_anywhere(void **state)
{
    struct classq_def defs[2] = {{1, CLASSQ_FCFS, 0}, {1, CLASSQ_WSPT, 0}};
    struct req never = {0};
    struct ctx c;

    (void) state;
    for (int cls = 0; cls < 2; cls++) {
        struct classq *q = mk(&c, reqs, 7, defs, 2);

        for (int i = 0; i < 7; i++)
            push_ok(q, cls, &reqs[i], 10 + i); /* costs rise with arrival: both orders agree */
        classq_remove(q, &reqs[3].qe);         /* middle */
        assert_int_equal(classq_depth(q, cls), 6);
        classq_remove(q, &reqs[0].qe); /* head */
        assert_ptr_equal(classq_head(q, cls), &reqs[1].qe);
        classq_remove(q, &reqs[6].qe); /* tail */
        assert_int_equal(classq_depth(q, cls), 4);
        for (int i = 0; i < 3; i++) { /* idempotent */
            classq_remove(q, &reqs[3].qe);
            classq_remove(q, &reqs[0].qe);
            classq_remove(q, &reqs[6].qe);
            classq_remove(q, &never.qe);
        }
        assert_int_equal(classq_depth(q, cls), 4);
        assert_int_equal(classq_depth(q, 1 - cls), 0);
        assert_int_equal(classq_total(q), 4);
        assert_false(classq_queued(&reqs[3].qe));
        assert_int_equal(dispatch(&c), 4);
        assert_int_equal(c.id[0], 1);
        assert_int_equal(c.id[1], 2);
        assert_int_equal(c.id[2], 4);
        assert_int_equal(c.id[3], 5);
        /* the only one left, removed: the class is empty and a new one is the head */
        push_ok(q, cls, &reqs[0], 1);
        classq_remove(q, &reqs[0].qe);
        assert_null(classq_head(q, cls));
        push_ok(q, cls, &reqs[3], 1);
        assert_ptr_equal(classq_head(q, cls), &reqs[3].qe);
        classq_free(q);
    }
}

/* WSPT removal in a larger heap: whatever is taken out, the rest still come by cost. */
static void test_wspt_remove_keeps_order(void **state)
{
    struct classq_def defs[1] = {{1000000, CLASSQ_WSPT, 0}};
    struct ctx c;
    struct classq *q = mk(&c, reqs, 500, defs, 1);
    uint32_t x = 12345;

    (void) state;
    for (int i = 0; i < 500; i++) {
        x = x * 1103515245u + 12345u;
        push_ok(q, 0, &reqs[i], (x >> 16) % 50);
    }
    for (int i = 0; i < 500; i += 3) {
        classq_remove(q, &reqs[i].qe);
        reqs[i].pending = 0;
    }
    assert_int_equal(dispatch(&c), 500 - 167);
    for (int i = 1; i < c.n; i++) {
        const struct req *a = &reqs[c.id[i - 1]], *b = &reqs[c.id[i]];

        assert_true(classq_cost_of(&a->qe) < classq_cost_of(&b->qe) ||
                    (classq_cost_of(&a->qe) == classq_cost_of(&b->qe) && a->id < b->id));
    }
    classq_free(q);
}

/* ---- credit --------------------------------------------------------------------------- */

/* A is ready for one dispatch and then blocked: it keeps the 7 tokens of credit it had
 * (10 - 3) through all of B's dispatches, earning none. Unblocked, it spends those 7 on two
 * requests (7 -> 4 -> 1) and then waits for its turn like anyone: A A, then B's quantum
 * (3 of B), then A's next quantum (1 + 10 = 11: 3 of A). Had it earned a quantum at each of
 * its blocked visits it would have had over 100 tokens and sent all 20 at once. */
static void test_blocked_class_keeps_credit_earns_none(void **state)
{
    struct classq_def defs[2] = {{10, CLASSQ_FCFS, 0}, {10, CLASSQ_FCFS, 0}};
    static const int expect[] = {0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0};
    struct ctx c;
    struct classq *q = mk(&c, reqs, 100, defs, 2);

    (void) state;
    for (int i = 0; i < 20; i++)
        push_ok(q, 0, &reqs[i], 3);
    for (int i = 20; i < 50; i++)
        push_ok(q, 1, &reqs[i], 3);
    /* one dispatch for A, then A is blocked */
    c.allow[1] = 0;
    c.room = 1;
    assert_int_equal(dispatch(&c), 1);
    assert_int_equal(classq_deficit(q, 0), 7);
    c.room = -1;
    c.allow[0] = 0;
    c.allow[1] = 1;
    c.watch = 0;
    c.n = 0;
    assert_int_equal(dispatch(&c), 30);
    for (int i = 0; i < 30; i++) {
        assert_int_equal(c.cls[i], 1);
        assert_int_equal(c.deficit_of[i], 7); /* at every one of B's dispatches */
    }
    assert_int_equal(classq_deficit(q, 0), 7);
    assert_int_equal(classq_deficit(q, 1), 0); /* B ran empty */
    assert_int_equal(classq_depth(q, 0), 19);
    /* B backlogged again, A unblocked */
    for (int i = 50; i < 100; i++)
        push_ok(q, 1, &reqs[i], 3);
    c.allow[0] = 1;
    c.n = 0;
    assert_int_equal(dispatch(&c), 69);
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        assert_int_equal(c.cls[i], expect[i]);
    assert_int_equal(c.deficit_of[0], 4);
    assert_int_equal(c.deficit_of[1], 1);
    classq_free(q);
}

/* A class that runs empty, by dispatch or by removal, starts again from 0. */
static void test_empty_class_resets_deficit(void **state)
{
    struct classq_def defs[2] = {{10, CLASSQ_FCFS, 0}, {10, CLASSQ_WSPT, 0}};
    struct ctx c;
    struct classq *q = mk(&c, reqs, 10, defs, 2);

    (void) state;
    push_ok(q, 0, &reqs[0], 3);
    assert_int_equal(dispatch(&c), 1);
    assert_int_equal(classq_deficit(q, 0), 0); /* 10 - 3 would be 7 */
    /* by removal: one dispatch leaves 7 with two queued; removing both clears it */
    for (int cls = 0; cls < 2; cls++) {
        push_ok(q, cls, &reqs[1], 3);
        push_ok(q, cls, &reqs[2], 3);
        push_ok(q, cls, &reqs[3], 3);
        c.room = 1;
        assert_int_equal(dispatch(&c), 1);
        c.room = -1;
        assert_int_equal(classq_deficit(q, cls), 7);
        classq_remove(q, &reqs[2].qe);
        assert_int_equal(classq_deficit(q, cls), 7);
        classq_remove(q, &reqs[3].qe);
        assert_int_equal(classq_deficit(q, cls), 0);
        /* and a new arrival earns from 0: cost 3 with quantum 10 leaves 7, not 14 */
        push_ok(q, cls, &reqs[4], 3);
        push_ok(q, cls, &reqs[5], 100);
        c.room = 1;
        assert_int_equal(dispatch(&c), 1);
        c.room = -1;
        assert_int_equal(classq_deficit(q, cls), 7);
        classq_remove(q, &reqs[5].qe);
        reqs[2].pending = reqs[3].pending = reqs[5].pending = 0;
    }
    classq_free(q);
}

/* The cost is max(1, prompt tokens) as pushed; DRR charges exactly that. */
static void test_cost_frozen_at_push(void **state)
{
    static const int64_t prompts[] = {0, -5, 1, 777, INT64_MAX};
    static const int64_t costs[] = {1, 1, 1, 777, INT64_MAX};
    struct classq_def defs[2] = {{1000, CLASSQ_FCFS, 0}, {1, CLASSQ_WSPT, 0}};
    struct req never = {0};
    struct ctx c;
    struct classq *q = mk(&c, reqs, 10, defs, 2);

    (void) state;
    assert_int_equal(classq_class_of(&never.qe), -1);
    assert_int_equal(classq_cost_of(&never.qe), 0);
    assert_false(classq_queued(&never.qe));
    for (int i = 0; i < 5; i++) {
        push_ok(q, 1, &reqs[i], prompts[i]);
        assert_int_equal(classq_cost_of(&reqs[i].qe), costs[i]);
        assert_int_equal(classq_class_of(&reqs[i].qe), 1);
    }
    /* a refused push changes nothing, a new push freezes a new cost */
    classq_remove(q, &reqs[3].qe);
    assert_int_equal(classq_cost_of(&reqs[3].qe), 777); /* kept after it leaves */
    push_ok(q, 0, &reqs[3], 600);
    assert_int_equal(classq_cost_of(&reqs[3].qe), 600);
    assert_int_equal(classq_class_of(&reqs[3].qe), 0);
    assert_int_equal(classq_push(q, 1, &reqs[3].qe, 5, 1), -1);
    assert_int_equal(classq_cost_of(&reqs[3].qe), 600);
    assert_int_equal(classq_class_of(&reqs[3].qe), 0);
    push_ok(q, 0, &reqs[5], 50);
    /* class 0 is charged 600: 1000 - 600 = 400 left, its other entry still queued */
    c.allow[1] = 0;
    c.room = 1;
    c.watch = 0;
    assert_int_equal(dispatch(&c), 1);
    assert_int_equal(c.id[0], 3);
    assert_int_equal(c.deficit_of[0], 400);
    assert_int_equal(classq_cost_of(&reqs[3].qe), 600);
    assert_int_equal(classq_class_of(&reqs[3].qe), 0);
    classq_free(q);
}

/* ---- virtual rounds ------------------------------------------------------------------- */

/* A head of 10^9 tokens with a quantum of 1 goes in one step, not 10^9 ring walks. */
static void test_virtual_rounds(void **state)
{
    struct classq_def one[1] = {{1, CLASSQ_FCFS, 0}};
    struct classq_def two[2] = {{1, CLASSQ_FCFS, 0}, {2, CLASSQ_FCFS, 0}};
    struct ctx c;
    struct classq *q = mk(&c, reqs, 4, one, 1);

    (void) state;
    push_ok(q, 0, &reqs[0], 1000000000);
    push_ok(q, 0, &reqs[1], 1000000000);
    assert_int_equal(dispatch(&c), 2);
    assert_true(c.ready_calls <= 4);
    classq_free(q);

    /* Two classes: both earn the same count of rounds, the fewest that let one go. B (quantum
     * 2) needs 5e8 - 1 more rounds after its visit, A (quantum 1) 1e9 - 1: B goes first and A
     * is left with 1 + (5e8 - 1) = 5e8 tokens; then both need 5e8 - 1 more and A, first in
     * the ring, goes. */
    q = mk(&c, reqs, 4, two, 2);
    c.watch = 0;
    push_ok(q, 0, &reqs[0], 1000000000);
    push_ok(q, 0, &reqs[1], 1000000000);
    push_ok(q, 1, &reqs[2], 1000000000);
    push_ok(q, 1, &reqs[3], 1000000000);
    assert_int_equal(dispatch(&c), 4);
    assert_true(c.ready_calls <= 16);
    assert_int_equal(c.cls[0], 1);
    assert_int_equal(c.deficit_of[0], 500000000);
    assert_int_equal(c.cls[1], 0);
    classq_free(q);

    /* the largest costs and quanta saturate rather than overflow (UBSan would say) */
    two[0].quantum = INT64_MAX;
    two[1].quantum = INT64_MAX / 3;
    q = mk(&c, reqs, 4, two, 2);
    push_ok(q, 1, &reqs[0], INT64_MAX);
    push_ok(q, 1, &reqs[1], INT64_MAX - 1);
    push_ok(q, 0, &reqs[2], INT64_MAX);
    push_ok(q, 0, &reqs[3], INT64_MAX);
    assert_int_equal(dispatch(&c), 4);
    assert_true(c.ready_calls <= 16);
    classq_free(q);
}

/* ---- the callbacks -------------------------------------------------------------------- */

static void test_dispatch_stops_when_nothing_ready(void **state)
{
    struct classq_def defs[3] = {{5, CLASSQ_FCFS, 0}, {5, CLASSQ_WSPT, 0}, {5, CLASSQ_FCFS, 0}};
    struct ctx c;
    struct classq *q = mk(&c, reqs, 30, defs, 3);

    (void) state;
    /* an empty queue asks nothing */
    assert_int_equal(dispatch(&c), 0);
    assert_int_equal(c.ready_calls, 0);
    for (int i = 0; i < 10; i++) {
        push_ok(q, 0, &reqs[i], 4);
        push_ok(q, 1, &reqs[10 + i], 4);
    }
    /* nobody ready: nothing goes, and each non-empty class is asked once (class 2 never) */
    c.allow[0] = c.allow[1] = 0;
    assert_int_equal(dispatch(&c), 0);
    assert_int_equal(c.n, 0);
    assert_int_equal(c.ready_calls, 2);
    assert_int_equal(classq_total(q), 20);
    /* class 1 only: all of it goes, class 0 stays */
    c.allow[1] = 1;
    assert_int_equal(dispatch(&c), 10);
    assert_int_equal(count_in(&c, 10, 1), 10);
    assert_int_equal(classq_depth(q, 0), 10);
    assert_int_equal(classq_depth(q, 1), 0);
    /* room for 3: the booking each go() makes is seen by the next ready() */
    c.allow[0] = 1;
    c.room = 3;
    c.n = 0;
    assert_int_equal(dispatch(&c), 3);
    assert_int_equal(classq_depth(q, 0), 7);
    c.room = -1;
    assert_int_equal(dispatch(&c), 7);
    assert_int_equal(classq_total(q), 0);
    for (int i = 0; i < 20; i++)
        assert_int_equal(reqs[i].pending, 0); /* each went exactly once (go() checks twice) */
    classq_free(q);
}

/* go() may push and remove other entries, push its own entry again, and call dispatch (which
 * returns 0 at once); the running call picks all of it up. */
static void reentrant_hook(struct ctx *c, struct req *r)
{
    assert_int_equal(classq_dispatch(c->q, ready, go, c), 0);
    if (r->id == 0) {
        /* the one after it in class 0 leaves, a new one joins class 1 */
        classq_remove(c->q, &c->reqs[1].qe);
        c->reqs[1].pending = 0;
        push_ok(c->q, 1, &c->reqs[10], 5);
    } else if (r->id == 2) {
        classq_remove(c->q, &c->reqs[3].qe); /* the rest of class 0: it runs empty */
        c->reqs[3].pending = 0;
        assert_int_equal(classq_deficit(c->q, 0), 0);
    } else if (r->id == 10 && classq_class_of(&r->qe) == 1) {
        push_ok(c->q, 0, r, 5); /* its dispatch failed: queued again, a new arrival */
    }
}

static void test_go_may_change_the_queue(void **state)
{
    struct classq_def defs[2] = {{100, CLASSQ_FCFS, 0}, {100, CLASSQ_WSPT, 0}};
    struct ctx c;
    struct classq *q = mk(&c, reqs, 20, defs, 2);

    (void) state;
    for (int i = 0; i < 4; i++)
        push_ok(q, 0, &reqs[i], 5);
    push_ok(q, 1, &reqs[4], 5);
    c.hook = reentrant_hook;
    /* 0, 2 from class 0 (1 and 3 removed), 4 and the new 10 from class 1, then 10 again
     * from class 0 */
    assert_int_equal(dispatch(&c), 5);
    assert_int_equal(c.id[0], 0);
    assert_int_equal(c.id[1], 2);
    assert_int_equal(c.id[2], 4);
    assert_int_equal(c.id[3], 10);
    assert_int_equal(c.cls[3], 1);
    assert_int_equal(c.id[4], 10);
    assert_int_equal(c.cls[4], 0);
    assert_int_equal(classq_total(q), 0);
    assert_false(classq_queued(&reqs[1].qe));
    assert_false(classq_queued(&reqs[3].qe));
    classq_free(q);
}

/* ---- a random run against a model ----------------------------------------------------- */

#define MODEL_CLASSES 3
#define MODEL_REQS    300

/* The model: each class's queue as an array of request ids, in arrival order. */
struct model {
    struct ctx c;
    int ids[MODEL_CLASSES][MODEL_REQS];
    int len[MODEL_CLASSES];
    uint64_t seq[MODEL_REQS]; /* the model's own arrival count at each push */
    uint64_t next_seq;
    enum classq_policy policy[MODEL_CLASSES];
    unsigned limit[MODEL_CLASSES];
};

/* The model's head: the oldest (FCFS) or the cheapest, then oldest (WSPT). */
static int model_head(const struct model *m, int cls)
{
    int best = -1;

    for (int k = 0; k < m->len[cls]; k++) {
        int id = m->ids[cls][k];
        const struct req *r = &m->c.reqs[id];

        if (best < 0)
            best = id;
        else if (m->policy[cls] == CLASSQ_WSPT &&
                 (classq_cost_of(&r->qe) < classq_cost_of(&m->c.reqs[best].qe) ||
                  (classq_cost_of(&r->qe) == classq_cost_of(&m->c.reqs[best].qe) &&
                   m->seq[id] < m->seq[best])))
            best = id;
    }
    return best;
}

static void model_drop(struct model *m, int cls, int id)
{
    for (int k = 0; k < m->len[cls]; k++)
        if (m->ids[cls][k] == id) {
            memmove(&m->ids[cls][k], &m->ids[cls][k + 1],
                    (size_t) (m->len[cls] - k - 1) * sizeof m->ids[cls][0]);
            m->len[cls]--;
            return;
        }
    fail_msg("request %d is not in the model's class %d", id, cls);
}

/* Every dispatch must be the model's head of its class. */
static void model_hook(struct ctx *c, struct req *r)
{
    struct model *m = (struct model *) c;
    int cls = classq_class_of(&r->qe);

    assert_int_equal(model_head(m, cls), r->id);
    model_drop(m, cls, r->id);
}

static void model_check(const struct model *m)
{
    size_t total = 0;

    for (int k = 0; k < MODEL_CLASSES; k++) {
        int h = model_head(m, k);

        assert_int_equal(classq_depth(m->c.q, k), m->len[k]);
        total += (size_t) m->len[k];
        if (h < 0)
            assert_null(classq_head(m->c.q, k));
        else
            assert_ptr_equal(classq_head(m->c.q, k), &m->c.reqs[h].qe);
        assert_true(classq_deficit(m->c.q, k) >= 0);
        if (m->len[k] == 0)
            assert_int_equal(classq_deficit(m->c.q, k), 0);
    }
    assert_int_equal(classq_total(m->c.q), total);
}

static void test_random_against_model(void **state)
{
    static struct model m;
    static struct req pool[MODEL_REQS];
    struct classq_def defs[MODEL_CLASSES] = {
        {700, CLASSQ_FCFS, 20}, {300, CLASSQ_WSPT, 0}, {1, CLASSQ_FCFS, 0}};
    uint32_t x = 2463534242u;
    unsigned dispatched = 0, refused = 0;

    (void) state;
    memset(&m, 0, sizeof m);
    mk(&m.c, pool, MODEL_REQS, defs, MODEL_CLASSES);
    m.c.hook = model_hook;
    for (int k = 0; k < MODEL_CLASSES; k++) {
        m.policy[k] = defs[k].policy;
        m.limit[k] = defs[k].limit_per_worker;
    }
    for (int op = 0; op < 60000; op++) {
        unsigned r;

        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        r = x % 100;
        if (r < 50) { /* push a random request, queued or not, into a random class */
            int id = (int) (x >> 8) % MODEL_REQS, cls = (int) (x >> 20) % MODEL_CLASSES;
            unsigned workers = (x >> 24) % 4;
            int64_t prompt = (int64_t) ((x >> 4) % 3000) - 5;
            struct req *rq = &pool[id];
            size_t lim = m.limit[cls] ? (size_t) m.limit[cls] * (workers ? workers : 1) : 0;
            int want = !rq->pending && (lim == 0 || (size_t) m.len[cls] < lim);
            int got = classq_push(m.c.q, cls, &rq->qe, prompt, workers);

            assert_int_equal(got, want ? 0 : -1);
            if (want) {
                rq->pending = 1;
                m.ids[cls][m.len[cls]++] = id;
                m.seq[id] = m.next_seq++;
            } else {
                refused++;
            }
        } else if (r < 75) { /* remove a random request, queued or not */
            struct req *rq = &pool[(x >> 8) % MODEL_REQS];

            if (rq->pending)
                model_drop(&m, classq_class_of(&rq->qe), rq->id);
            classq_remove(m.c.q, &rq->qe);
            rq->pending = 0;
        } else { /* dispatch, some classes ready, for a few or for all */
            unsigned n;

            for (int k = 0; k < MODEL_CLASSES; k++)
                m.c.allow[k] = (x >> (8 + k)) & 1;
            m.c.room = ((x >> 12) & 3) ? (long) ((x >> 16) % 8) : -1;
            n = classq_dispatch(m.c.q, ready, go, &m.c);
            dispatched += n;
            /* it stopped only because no non-empty class was ready */
            for (int k = 0; k < MODEL_CLASSES; k++)
                assert_true(m.len[k] == 0 || !m.c.allow[k] || m.c.room == 0);
            m.c.n = 0;
        }
        model_check(&m);
    }
    /* nothing lost: everything still queued comes out, each once */
    for (int k = 0; k < MODEL_CLASSES; k++)
        m.c.allow[k] = 1;
    m.c.room = -1;
    dispatched += classq_dispatch(m.c.q, ready, go, &m.c);
    model_check(&m);
    assert_int_equal(classq_total(m.c.q), 0);
    for (int i = 0; i < MODEL_REQS; i++)
        assert_int_equal(pool[i].pending, 0);
    assert_true(dispatched > 1000); /* the run did exercise the dispatch */
    assert_true(refused > 100);     /* and the limit, and the already-queued refusal */
    classq_free(m.c.q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shares_follow_quanta),
        cmocka_unit_test(test_shares_are_in_tokens),
        cmocka_unit_test(test_equal_quanta_alternate),
        cmocka_unit_test(test_shares_hold_at_every_capacity),
        cmocka_unit_test(test_fcfs_nobody_overtakes),
        cmocka_unit_test(test_wspt_cost_then_arrival),
        cmocka_unit_test(test_limit_boundary),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_remove_anywhere),
        cmocka_unit_test(test_wspt_remove_keeps_order),
        cmocka_unit_test(test_blocked_class_keeps_credit_earns_none),
        cmocka_unit_test(test_empty_class_resets_deficit),
        cmocka_unit_test(test_cost_frozen_at_push),
        cmocka_unit_test(test_virtual_rounds),
        cmocka_unit_test(test_dispatch_stops_when_nothing_ready),
        cmocka_unit_test(test_go_may_change_the_queue),
        cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_drain_and_requeue),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
