/* Unit tests for the router's selection and booking (src/router/select.h): the lowest projected
 * cost wins and ties go round, what is booked and when it is released, the projection judged
 * against the reject thresholds, liveness, the monitor on published load, per-worker block
 * sizes, gauges that return to 0, and several sets of thresholds at once (each answering as
 * if it were the only one, through bookings, messages, restarts, growth and eviction). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "router/select.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* An idle, serving rank: 100 KV blocks of 16 tokens, a step budget of 100 tokens. */
static struct admit_load load(int w, int64_t rank)
{
    struct admit_load m;

    admit_load_init(&m);
    snprintf(m.worker_id, sizeof m.worker_id, "w%d", w);
    m.dp_rank = rank;
    m.heartbeat_ms = 1000;
    m.kv_total_blocks = 100;
    m.kv_block_size = 16;
    m.kv_used_blocks = 0;
    m.active_decode_blocks = 0;
    m.active_prefill_tokens = 0;
    m.max_num_batched_tokens = 100;
    return m;
}

static void message(struct sel *s, int w, int64_t rank, int64_t now)
{
    struct admit_load m = load(w, rank);

    sel_message(s, w, &m, now);
}

static struct busy_thresholds unset(void)
{
    struct busy_thresholds t;

    busy_thresholds_unset(&t);
    return t;
}

/* A view with n workers of ranks ranks each, all heard from at time 0. */
static struct sel *view(int n, unsigned ranks)
{
    struct sel *s = sel_new(3, 16);

    for (int w = 0; w < n; w++) {
        assert_int_equal(sel_add_worker(s), w);
        for (unsigned r = 0; r < ranks; r++)
            message(s, w, r, 0);
    }
    assert_int_equal(sel_workers(s), n);
    return s;
}

/* The booked load of (w, r), viewed under t (the view judges room under them). */
static struct busy_load booked_under(struct sel *s, int w, unsigned r,
                                     const struct busy_thresholds *t)
{
    struct sel_rank_view v;

    sel_view(s, w, r, t, &v);
    return v.booked;
}

static struct busy_load booked_of(struct sel *s, int w, unsigned r)
{
    struct busy_thresholds t = unset();

    return booked_under(s, w, r, &t);
}

/* Picks and books in one, asserting the pick is allowed; returns the worker. */
static int pick_book(struct sel *s, const struct busy_thresholds *t, int64_t prompt,
                     struct sel_booking *b)
{
    int w = -1;
    unsigned r = 0;

    assert_int_equal(sel_pick(s, 0, prompt, t, -1, -1, &w, &r), SEL_OK);
    sel_book(s, b, w, r, prompt);
    return w;
}

/* A booking moves the rank's booked load, and its release brings it back to 0. */
static void test_book_release(void **state)
{
    struct sel *s = sel_new(3, 16);
    struct busy_thresholds t = unset();
    struct sel_booking b = {0};
    struct sel_rank_view v;
    int w;
    unsigned r;

    (void) state;
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, -1, &w, &r), SEL_NO_WORKER);
    sel_add_worker(s);
    message(s, 0, 0, 0);
    assert_int_equal(sel_pick(s, 0, 33, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    assert_int_equal(r, 0);
    sel_book(s, &b, w, r, 33);
    assert_true(b.booked);
    sel_view(s, 0, 0, &t, &v);
    assert_int_equal(v.booked.prefill_tokens, 33);
    assert_int_equal(v.booked.decode_blocks, 3);
    assert_int_equal(v.booked.requests, 1);
    sel_first_token(s, &b);
    sel_view(s, 0, 0, &t, &v);
    assert_int_equal(v.booked.prefill_tokens, 0);
    assert_int_equal(v.booked.decode_blocks, 3);
    sel_release(s, &b);
    sel_release(s, &b);
    assert_false(b.booked);
    sel_view(s, 0, 0, &t, &v);
    assert_int_equal(v.booked.decode_blocks, 0);
    assert_int_equal(v.booked.requests, 0);
    sel_free(s);
}

/* Prefill is released at the first token (once), blocks at the end (once); a booking never
 * made releases nothing. */
static void test_release_points(void **state)
{
    struct sel *s = view(1, 1);
    struct busy_thresholds t = unset();
    struct sel_booking a = {0}, b = {0}, never = {0};
    struct busy_load l;

    (void) state;
    pick_book(s, &t, 40, &a); /* 40 tokens, 3 blocks */
    pick_book(s, &t, 20, &b); /* 20 tokens, 2 blocks */
    l = booked_of(s, 0, 0);
    assert_int_equal(l.prefill_tokens, 60);
    assert_int_equal(l.decode_blocks, 5);
    assert_int_equal(l.requests, 2);
    sel_first_token(s, &a);
    sel_first_token(s, &a); /* idempotent: b's prefill stays booked */
    l = booked_of(s, 0, 0);
    assert_int_equal(l.prefill_tokens, 20);
    assert_int_equal(l.decode_blocks, 5);
    sel_release(s, &never);
    sel_first_token(s, &never);
    sel_output(s, &never, 100);
    l = booked_of(s, 0, 0);
    assert_int_equal(l.prefill_tokens, 20);
    assert_int_equal(l.decode_blocks, 5);
    assert_int_equal(l.requests, 2);
    sel_release(s, &a);
    sel_release(s, &a); /* idempotent: b's blocks stay booked */
    l = booked_of(s, 0, 0);
    assert_int_equal(l.prefill_tokens, 20);
    assert_int_equal(l.decode_blocks, 2);
    assert_int_equal(l.requests, 1);
    sel_release(s, &b); /* before its first token: its prefill goes too */
    l = booked_of(s, 0, 0);
    assert_int_equal(l.prefill_tokens, 0);
    assert_int_equal(l.decode_blocks, 0);
    assert_int_equal(l.requests, 0);
    sel_free(s);
}

/* The rank of lowest projected cost (prefill tokens + decode blocks x block size) wins. */
static void test_lowest_cost(void **state)
{
    struct sel *s = view(2, 1);
    struct busy_thresholds t = unset();
    struct sel_booking a = {0}, b = {0}, c = {0};
    int w;
    unsigned r;

    (void) state;
    /* w0: 160 tokens, past their first token (10 blocks, no prefill); w1: 100 tokens of
     * prefill and 7 blocks. A prompt of 16 costs 16 + 11 x 16 = 192 on w0 and
     * 116 + 8 x 16 = 244 on w1, though w0 holds more blocks. */
    sel_book(s, &a, 0, 0, 160);
    sel_first_token(s, &a);
    sel_book(s, &b, 1, 0, 100);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 0);
    }
    /* With w1's prefill gone it holds 7 blocks against w0's 10. */
    sel_first_token(s, &b);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 1);
    }
    /* Booking moves the choice: w1 now holds 7 + 5 blocks and 80 prefill tokens. */
    sel_book(s, &c, 1, 0, 80);
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    sel_release(s, &a);
    sel_release(s, &b);
    sel_release(s, &c);
    sel_free(s);
}

/* Within a worker the least loaded rank is booked; ranks tied go to the lowest. */
static void test_lowest_cost_rank(void **state)
{
    struct sel *s = view(1, 4);
    struct busy_thresholds t = unset();
    struct sel_booking b[4];
    int w;
    unsigned r;

    (void) state;
    memset(b, 0, sizeof b);
    assert_int_equal(sel_ranks(s, 0), 4);
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(sel_pick(s, 0, 50, &t, -1, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 0);
        assert_int_equal(r, i); /* each booking fills one rank, the next goes to another */
        sel_book(s, &b[i], w, r, 50);
    }
    sel_first_token(s, &b[2]); /* rank 2 now costs least */
    assert_int_equal(sel_pick(s, 0, 50, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(r, 2);
    sel_release(s, &b[1]); /* rank 1 is empty: cheaper still */
    assert_int_equal(sel_pick(s, 0, 50, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(r, 1);
    for (unsigned i = 0; i < 4; i++)
        sel_release(s, &b[i]);
    sel_free(s);
}

/* When the cheapest rank has no room for the request, the next cheapest that has is chosen;
 * when it has, it is. */
static void test_cheapest_rank_without_room(void **state)
{
    struct sel *s = view(1, 4);
    struct busy_thresholds t = unset();
    struct sel_booking b[4];
    int w;
    unsigned r;

    (void) state;
    memset(b, 0, sizeof b);
    t.active_prefill_tokens_threshold = 100;
    t.active_decode_blocks_threshold = 0.5; /* 50 of 100 blocks */
    sel_book(s, &b[0], 0, 0, 49 * 16);      /* 49 blocks: room for 1 more, 16 tokens */
    sel_first_token(s, &b[0]);              /* cost 784 */
    sel_book(s, &b[1], 0, 1, 90);           /* room 10 prefill tokens; cost 90 + 6 x 16 */
    sel_book(s, &b[2], 0, 2, 20 * 16);      /* room 100 (prefill); cost 320 */
    sel_first_token(s, &b[2]);
    sel_book(s, &b[3], 0, 3, 50); /* room 50; cost 50 + 4 x 16 = 114, the cheapest */
    assert_int_equal(sel_pick(s, 0, 40, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(r, 3);
    assert_int_equal(sel_pick(s, 0, 50, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(r, 3);
    assert_int_equal(sel_pick(s, 0, 51, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(r, 2); /* 3, 1 and 0 lack room; 2 costs most but has it */
    assert_int_equal(sel_pick(s, 0, 100, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(r, 2);
    assert_int_equal(sel_pick(s, 0, 101, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    sel_release(s, &b[3]); /* rank 3 idle: the cheapest, and room for 100 */
    assert_int_equal(sel_pick(s, 0, 100, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(r, 3);
    for (int i = 0; i < 3; i++)
        sel_release(s, &b[i]);
    sel_free(s);
}

/* Equal costs are taken in turn across workers, not always by the first. */
static void test_ties_rotate(void **state)
{
    struct sel *s = view(3, 1);
    struct busy_thresholds t = unset();
    struct sel_booking b = {0}, hold = {0};
    int seen[3] = {0}, first = -1, prev = -1, w;
    unsigned r;

    (void) state;
    for (int i = 0; i < 9; i++) {
        w = pick_book(s, &t, 32, &b);
        sel_first_token(s, &b);
        sel_release(s, &b); /* every worker idle again: a three-way tie each time */
        assert_int_not_equal(w, prev);
        if (i == 0)
            first = w;
        if (i % 3 == 0)
            assert_int_equal(w, first);
        seen[w]++;
        prev = w;
    }
    assert_int_equal(seen[0], 3);
    assert_int_equal(seen[1], 3);
    assert_int_equal(seen[2], 3);
    /* With w1 loaded, the turn goes between w0 and w2 only. */
    sel_book(s, &hold, 1, 0, 64);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(sel_pick(s, 0, 32, &t, -1, -1, &w, &r), SEL_OK);
        seen[w]++;
    }
    assert_int_equal(seen[1], 0);
    assert_int_equal(seen[0], 3);
    assert_int_equal(seen[2], 3);
    sel_release(s, &hold);
    sel_free(s);
}

/* Output blocks are booked only with tracking on, and only when prompt + output cross a
 * block boundary. */
static void test_output_blocks(void **state)
{
    struct sel *s = view(1, 1);
    struct busy_thresholds t = unset();
    struct sel_booking b = {0};

    (void) state;
    pick_book(s, &t, 33, &b); /* 33 tokens in 16-token blocks: 3 blocks, room up to 48 */
    sel_first_token(s, &b);
    sel_output(s, &b, 100); /* tracking off: nothing */
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 3);
    sel_release(s, &b);
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 0);

    sel_track_output(s, 1);
    pick_book(s, &t, 33, &b);
    sel_first_token(s, &b);
    sel_output(s, &b, 0);
    sel_output(s, &b, 15); /* 48: the third block is full, no new one */
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 3);
    sel_output(s, &b, 1); /* 49: crosses into a fourth */
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 4);
    assert_int_equal(b.blocks, 4);
    for (int i = 0; i < 15; i++) /* 64: still four */
        sel_output(s, &b, 1);
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 4);
    sel_output(s, &b, 33); /* 97: ceil(97 / 16) = 7 */
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 7);
    assert_int_equal(booked_of(s, 0, 0).prefill_tokens, 0);
    sel_release(s, &b); /* the output blocks go with the request */
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 0);
    assert_int_equal(booked_of(s, 0, 0).requests, 0);

    sel_track_output(s, 0); /* off again: a running request's output books nothing */
    pick_book(s, &t, 16, &b);
    sel_output(s, &b, 64);
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 1);
    sel_release(s, &b);
    sel_free(s);
}

/* The projection (booked + this request) is judged: with an absolute prefill threshold of 100
 * and prompts of 40, one worker takes 40 and 80, and 120 is over. */
static void test_projection_reject(void **state)
{
    struct sel *s = view(1, 1);
    struct busy_thresholds t = unset();
    struct sel_booking b[3];
    int w;
    unsigned r;

    (void) state;
    memset(b, 0, sizeof b);
    t.active_prefill_tokens_threshold = 100;
    pick_book(s, &t, 40, &b[0]);
    pick_book(s, &t, 40, &b[1]);
    assert_int_equal(booked_of(s, 0, 0).prefill_tokens, 80);
    assert_int_equal(sel_pick(s, 0, 40, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 0, 20, &t, -1, -1, &w, &r), SEL_OK); /* 100: at, not over */
    assert_int_equal(sel_pick(s, 0, 21, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    sel_first_token(s, &b[0]); /* 40 tokens leave prefill: room for one more */
    pick_book(s, &t, 40, &b[2]);
    assert_int_equal(sel_pick(s, 0, 40, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    for (int i = 0; i < 3; i++)
        sel_release(s, &b[i]);
    assert_int_equal(booked_of(s, 0, 0).prefill_tokens, 0);

    /* The decode projection: 0.5 of 100 blocks is 50; prompts of 25 blocks fit twice. */
    t = unset();
    t.active_decode_blocks_threshold = 0.5;
    pick_book(s, &t, 400, &b[0]);
    sel_first_token(s, &b[0]);
    pick_book(s, &t, 400, &b[1]);
    sel_first_token(s, &b[1]);
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 50);
    assert_int_equal(sel_pick(s, 0, 1, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 0, 0, &t, -1, -1, &w, &r), SEL_OK); /* adds no block */
    sel_release(s, &b[0]);
    sel_release(s, &b[1]);

    /* The fraction: 0.5 of the reported budget of 100 is 50 tokens. A rank with nothing
     * booked takes any one request, larger than the limit included (else it would be refused
     * everywhere, for ever); with one booked the projection decides. */
    t = unset();
    t.active_prefill_tokens_threshold_frac = 0.5;
    assert_int_equal(sel_pick(s, 0, 51, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(sel_pick(s, 0, 5000, &t, -1, -1, &w, &r), SEL_OK);
    pick_book(s, &t, 10, &b[0]);
    assert_int_equal(sel_pick(s, 0, 40, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(sel_pick(s, 0, 41, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    sel_release(s, &b[0]);
    assert_int_equal(sel_pick(s, 0, 41, &t, -1, -1, &w, &r), SEL_OK);
    sel_free(s);
}

/* The pass's verdict on a projection is has_room()'s, the one rule, on booked + the request:
 * over a grid of block sizes, capacities, thresholds, booked load and prompts. */
static void test_projection_is_has_room(void **state)
{
    static const int64_t sizes[] = {1, 3, 16};
    static const int64_t totals[] = {2, 10, 31, -1};
    static const int64_t absolute[] = {-1, 0, 5, 40};
    static const double fracs[] = {NAN, 0.0, 0.5, 1.0};
    int checked = 0, refused = 0;

    (void) state;
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t c = 0; c < 4; c++)
                for (size_t d = 0; d < 4; d++)
                    for (int64_t held = 0; held <= 20; held += 10) {
                        struct sel *s = view(1, 1);
                        struct busy_thresholds t = unset();
                        struct admit_load m = load(0, 0);
                        struct busy_capacity cap;
                        struct sel_booking bk = {0};
                        int w;
                        unsigned r;

                        m.kv_block_size = sizes[a];
                        m.kv_total_blocks = totals[b];
                        sel_message(s, 0, &m, 0);
                        busy_capacity_of(&m, &cap);
                        t.active_prefill_tokens_threshold = absolute[c];
                        t.active_decode_blocks_threshold = fracs[d];
                        t.active_prefill_tokens_threshold_frac = 0.3; /* of 100: 30 */
                        sel_book(s, &bk, 0, 0, held);
                        if (held == 10)
                            sel_first_token(s, &bk); /* blocks held, no prefill */
                        for (int64_t prompt = 0; prompt <= 60; prompt++) {
                            struct busy_load l = booked_of(s, 0, 0);
                            int room;

                            l.prefill_tokens += prompt;
                            l.decode_blocks += (prompt + sizes[a] - 1) / sizes[a];
                            room = has_room(&l, &cap, &t);
                            assert_int_equal(sel_pick(s, 0, prompt, &t, -1, -1, &w, &r),
                                             room ? SEL_OK : SEL_ALL_BUSY);
                            checked++;
                            refused += !room;
                        }
                        sel_release(s, &bk);
                        sel_free(s);
                    }
    assert_true(refused > 0 && refused < checked); /* both verdicts were met */
}

/* A projection over on one worker sends the request to the next, not to the overload answer. */
static void test_projection_spills(void **state)
{
    struct sel *s = view(2, 1);
    struct busy_thresholds t = unset();
    struct sel_booking b[4];
    int w, count[2] = {0};
    unsigned r;

    (void) state;
    memset(b, 0, sizeof b);
    t.active_prefill_tokens_threshold = 100;
    for (int i = 0; i < 4; i++)
        count[pick_book(s, &t, 40, &b[i])]++;
    assert_int_equal(count[0], 2);
    assert_int_equal(count[1], 2);
    assert_int_equal(sel_pick(s, 0, 40, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    for (int i = 0; i < 4; i++)
        sel_release(s, &b[i]);
    sel_free(s);
}

/* No worker alive: never heard from, silent for longer than its missed heartbeats, draining. */
static void test_no_worker(void **state)
{
    struct sel *s = sel_new(3, 16);
    struct busy_thresholds t = unset();
    struct admit_load m;
    int w;
    unsigned r;

    (void) state;
    sel_add_worker(s);
    sel_add_worker(s);
    assert_int_equal(sel_ranks(s, 0), 1);
    assert_false(sel_alive(s, 0, 0));
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, -1, &w, &r), SEL_NO_WORKER);
    message(s, 1, 0, 1000); /* alive until 1000 + 3 x 1000 */
    assert_int_equal(sel_pick(s, 4000, 10, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 1);
    assert_true(sel_alive(s, 1, 4000));
    assert_false(sel_alive(s, 1, 4001));
    assert_int_equal(sel_pick(s, 4001, 10, &t, -1, -1, &w, &r), SEL_NO_WORKER);
    /* Its own heartbeat counts: 200 ms x 3. */
    m = load(1, 0);
    m.heartbeat_ms = 200;
    sel_message(s, 1, &m, 5000);
    assert_int_equal(sel_pick(s, 5600, 10, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(sel_pick(s, 5601, 10, &t, -1, -1, &w, &r), SEL_NO_WORKER);
    /* Draining: heard from, but not alive, until it says it serves again. */
    m.state = ADMIT_LOAD_DRAINING;
    sel_message(s, 1, &m, 6000);
    assert_false(sel_alive(s, 1, 6000));
    assert_int_equal(sel_pick(s, 6000, 10, &t, -1, -1, &w, &r), SEL_NO_WORKER);
    m.state = ADMIT_LOAD_SERVING;
    sel_message(s, 1, &m, 6000);
    assert_int_equal(sel_pick(s, 6000, 10, &t, -1, -1, &w, &r), SEL_OK);
    /* One rank draining makes its worker draining; the other worker then takes it all. */
    message(s, 0, 0, 6000);
    m.dp_rank = 1;
    m.state = ADMIT_LOAD_DRAINING;
    sel_message(s, 1, &m, 6000);
    assert_false(sel_alive(s, 1, 6000));
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sel_pick(s, 6000, 10, &t, -1, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 0);
    }
    sel_free(s);
}

/* A huge heartbeat and missed count saturate instead of overflowing. */
static void test_liveness_saturates(void **state)
{
    struct sel *s = sel_new(UINT_MAX, 16);
    struct busy_thresholds t = unset();
    struct admit_load m = load(0, 0);
    int w;
    unsigned r;

    (void) state;
    sel_add_worker(s);
    sel_max_heartbeat(s, ADMIT_LOAD_INT_MAX); /* no bound of its own */
    m.heartbeat_ms = ADMIT_LOAD_INT_MAX;
    sel_message(s, 0, &m, INT64_MAX - 10);
    assert_true(sel_alive(s, 0, INT64_MAX));
    sel_message(s, 0, &m, 0);
    assert_true(sel_alive(s, 0, INT64_MAX));
    assert_int_equal(sel_pick(s, INT64_MAX, 1, &t, -1, -1, &w, &r), SEL_OK);
    sel_free(s);
    /* At the earliest time, a worker never heard from reads as alive; it has no rank to
     * book, so it is never chosen. */
    s = sel_new(3, 16);
    sel_add_worker(s);
    assert_int_equal(sel_pick(s, INT64_MIN, 1, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    sel_free(s);
}

/* A heartbeat counts for at most the longest one (SEL_MAX_HEARTBEAT_MS unless set): one
 * message that claims 2^53 - 1 ms, then silence, does not keep a worker alive for ever. */
static void test_heartbeat_bounded(void **state)
{
    struct sel *s = sel_new(3, 16);
    struct busy_thresholds t = unset();
    struct admit_load m = load(0, 0);
    int w;
    unsigned r;

    (void) state;
    sel_add_worker(s);
    m.heartbeat_ms = ADMIT_LOAD_INT_MAX;
    sel_message(s, 0, &m, 1000);
    assert_true(sel_alive(s, 0, 1000 + 3 * SEL_MAX_HEARTBEAT_MS));
    assert_false(sel_alive(s, 0, 1001 + 3 * SEL_MAX_HEARTBEAT_MS));
    assert_false(sel_heard(s, 0, 1001 + 3 * SEL_MAX_HEARTBEAT_MS));
    assert_int_equal(sel_pick(s, 1001 + 3 * SEL_MAX_HEARTBEAT_MS, 1, &t, -1, -1, &w, &r),
                     SEL_NO_WORKER);
    /* A bound set: from the next message on. */
    sel_max_heartbeat(s, 500);
    sel_message(s, 0, &m, 2000);
    assert_true(sel_alive(s, 0, 3500));
    assert_false(sel_alive(s, 0, 3501));
    /* A heartbeat under the bound is its own. */
    m.heartbeat_ms = 100;
    sel_message(s, 0, &m, 4000);
    assert_true(sel_alive(s, 0, 4300));
    assert_false(sel_alive(s, 0, 4301));
    sel_max_heartbeat(s, 0); /* the default again */
    m.heartbeat_ms = ADMIT_LOAD_INT_MAX;
    sel_message(s, 0, &m, 5000);
    assert_false(sel_alive(s, 0, 5001 + 3 * SEL_MAX_HEARTBEAT_MS));
    sel_free(s);
}

/* Liveness is per rank: a rank silent past its window is dropped at the next message of
 * another, and its last numbers (idle) no longer keep the worker open. */
static void test_silent_rank_dropped(void **state)
{
    struct sel *s = sel_new(3, 16);
    struct busy_thresholds t = unset(), full;
    struct admit_load m;
    struct sel_rank_view v;
    int w;
    unsigned r;

    (void) state;
    busy_thresholds_unset(&full);
    full.active_decode_blocks_threshold = 0.9;
    sel_add_worker(s);
    for (int rank = 0; rank < 4; rank++)
        message(s, 0, rank, 0); /* idle, heartbeat 1000: each live until 3000 */
    assert_false(sel_published_full(s, 0, &full));
    /* Rank 0 alone speaks on, 99 % full. */
    m = load(0, 0);
    m.kv_used_blocks = 99;
    m.active_decode_blocks = 99; /* what admitd books, which the cost counts */
    sel_message(s, 0, &m, 2000);
    assert_false(sel_published_full(s, 0, &full)); /* ranks 1-3 are within their window */
    assert_int_equal(sel_pick(s, 2000, 10, &full, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(r, 1); /* the first of the idle ones */
    sel_view(s, 0, 1, &full, &v);
    assert_true(v.live);
    sel_message(s, 0, &m, 3001); /* now they are not */
    sel_view(s, 0, 1, &full, &v);
    assert_false(v.live);
    sel_view(s, 0, 0, &full, &v);
    assert_true(v.live);
    assert_true(sel_published_full(s, 0, &full));
    assert_true(sel_alive(s, 0, 3001));
    assert_int_equal(sel_pick(s, 3001, 10, &full, -1, -1, &w, &r), SEL_ALL_BUSY);
    /* Without thresholds any live rank takes it, and only a live one: rank 0. */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sel_pick(s, 3001, 10, &t, -1, -1, &w, &r), SEL_OK);
        assert_int_equal(r, 0);
    }
    assert_int_equal(sel_pick(s, 3001, 10, NULL, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(r, 0);
    /* A live rank without room for the request is not replaced by a dropped one that would
     * have it: under a prefill threshold of 100, with 90 booked on rank 0, a prompt of 50
     * finds no rank. */
    {
        struct busy_thresholds tok;
        struct sel_booking b = {0};

        busy_thresholds_unset(&tok);
        tok.active_prefill_tokens_threshold = 100;
        sel_book(s, &b, 0, 0, 90);
        assert_int_equal(sel_pick(s, 3001, 50, &tok, -1, -1, &w, &r), SEL_ALL_BUSY);
        assert_int_equal(sel_pick(s, 3001, 10, &tok, -1, -1, &w, &r), SEL_OK);
        assert_int_equal(r, 0);
        sel_release(s, &b);
    }
    /* A dropped rank that speaks again is back. */
    message(s, 0, 2, 3500);
    assert_false(sel_published_full(s, 0, &full));
    assert_int_equal(sel_pick(s, 3500, 10, &full, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(r, 2);
    /* Rank 0 silent, rank 2 speaks: the worker lives on rank 2 alone. */
    message(s, 0, 2, 6002); /* rank 0's window ended at 6001 */
    sel_view(s, 0, 0, &t, &v);
    assert_false(v.live);
    assert_true(sel_alive(s, 0, 9002));
    assert_false(sel_alive(s, 0, 9003));
    sel_free(s);
}

/* A lost worker (its publisher's connection ended, or it refused a connection) is out at
 * once, every rank of it, until each speaks again; its bookings stay, and it is still
 * heard (its worker_id its own) until its window ends. */
static void test_lost_until_it_speaks(void **state)
{
    struct sel *s = view(2, 2);
    struct busy_thresholds t = unset();
    struct sel_booking b = {0};
    struct sel_rank_view v;
    int w;
    unsigned r;

    (void) state;
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, 0, &w, &r), SEL_OK);
    sel_book(s, &b, w, r, 10);
    sel_lost(s, 0);
    assert_false(sel_alive(s, 0, 0));
    assert_false(sel_routable(s, 0, 0));
    assert_true(sel_heard(s, 0, 3000));
    assert_false(sel_heard(s, 0, 3001));
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, 0, &w, &r), SEL_NO_WORKER);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sel_pick(s, 0, 10, NULL, -1, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 1);
    }
    sel_view(s, 0, 0, &t, &v);
    assert_false(v.live);
    assert_int_equal(v.booked.requests, 1);
    /* Both lost: none alive, 503. */
    sel_lost(s, 1);
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, -1, &w, &r), SEL_NO_WORKER);
    /* Rank 1 of worker 0 speaks: that rank alone is back. */
    message(s, 0, 1, 100);
    assert_true(sel_alive(s, 0, 100));
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sel_pick(s, 100, 10, NULL, -1, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 0);
        assert_int_equal(r, 1);
    }
    sel_release(s, &b);
    sel_view(s, 0, 0, &t, &v);
    assert_int_equal(v.booked.requests, 0);
    sel_free(s);
}

/* Alive but not a candidate (overloaded, excluded) is "all busy", never "no worker". */
static void test_all_busy_not_no_worker(void **state)
{
    struct sel *s = view(1, 1);
    struct busy_thresholds t = unset();
    int w;
    unsigned r;

    (void) state;
    sel_mark_overloaded(s, 0, 500);
    assert_false(sel_routable(s, 0, 100));
    assert_true(sel_alive(s, 0, 100));
    assert_int_equal(sel_pick(s, 100, 10, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 499, 10, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 500, 10, &t, -1, -1, &w, &r), SEL_OK); /* the skip is over */
    assert_true(sel_routable(s, 0, 500));
    sel_mark_overloaded(s, 0, 2000);
    message(s, 0, 0, 100); /* its own word replaces the guess */
    assert_int_equal(sel_pick(s, 100, 10, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(sel_pick(s, 100, 10, &t, 0, -1, &w, &r), SEL_ALL_BUSY); /* excluded */
    sel_add_worker(s);
    message(s, 1, 0, 100);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sel_pick(s, 100, 10, &t, 0, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 1);
    }
    sel_mark_overloaded(s, 1, 1000);
    assert_int_equal(sel_pick(s, 100, 10, &t, 0, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 100, 10, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    sel_free(s);
}

/* A pinned worker is judged alone: its lack of room is the answer, whoever else has room. */
static void test_pinned(void **state)
{
    struct sel *s = view(2, 1);
    struct busy_thresholds t = unset();
    struct sel_booking b = {0};
    int w;
    unsigned r;

    (void) state;
    t.active_prefill_tokens_threshold = 100;
    sel_book(s, &b, 0, 0, 80);
    assert_int_equal(sel_pick(s, 0, 40, &t, -1, 0, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 0, 20, &t, -1, 0, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sel_pick(s, 0, 40, &t, -1, 1, &w, &r), SEL_OK);
        assert_int_equal(w, 1);
    }
    /* Pinned, the worker is taken though another costs less: pinning is not a hint. */
    sel_first_token(s, &b);
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, 0, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    sel_mark_overloaded(s, 0, 100);
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, 0, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 1);
    /* Pinned and dead, or no such worker: no worker. */
    assert_int_equal(sel_pick(s, 10000, 10, &t, -1, 1, &w, &r), SEL_NO_WORKER);
    sel_add_worker(s);
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, 2, &w, &r), SEL_NO_WORKER);
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, 3, &w, &r), SEL_NO_WORKER);
    sel_release(s, &b);
    sel_free(s);
}

/* A retired worker is never chosen, pinned or not, and its messages are ignored; what it has
 * booked stays, and is released as ever. Revived, it is chosen again once it speaks. */
static void test_retire_revive(void **state)
{
    struct sel *s = view(2, 1);
    struct busy_thresholds t = unset();
    struct sel_booking b = {0};
    struct busy_load l;
    int w;
    unsigned r;

    (void) state;
    sel_book(s, &b, 0, 0, 64);
    sel_retire(s, 0);
    assert_false(sel_alive(s, 0, 0));
    assert_false(sel_routable(s, 0, 0));
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sel_pick(s, 0, 10, &t, -1, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 1);
        assert_int_equal(sel_pick(s, 0, 10, NULL, -1, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 1);
    }
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, 0, &w, &r), SEL_NO_WORKER);
    message(s, 0, 0, 0); /* a message in flight when it was retired */
    assert_false(sel_alive(s, 0, 0));
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, 0, &w, &r), SEL_NO_WORKER);
    /* Its booking is still there, and goes as ever. */
    l = booked_of(s, 0, 0);
    assert_int_equal(l.prefill_tokens, 64);
    assert_int_equal(l.requests, 1);
    sel_first_token(s, &b);
    assert_int_equal(booked_of(s, 0, 0).prefill_tokens, 0);
    /* The only worker left retired: none alive, 503 rather than 529. */
    sel_retire(s, 1);
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, -1, &w, &r), SEL_NO_WORKER);
    /* Revived: not alive until it speaks, its booking kept. */
    sel_revive(s, 0);
    assert_false(sel_alive(s, 0, 0));
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, -1, &w, &r), SEL_NO_WORKER);
    message(s, 0, 0, 5);
    assert_true(sel_alive(s, 0, 5));
    assert_int_equal(sel_pick(s, 5, 10, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    assert_int_equal(booked_of(s, 0, 0).requests, 1);
    sel_release(s, &b);
    assert_int_equal(booked_of(s, 0, 0).requests, 0);
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 0);
    sel_free(s);
}

/* A retired worker reset is a new one in the same index: no rank, nothing booked, not alive;
 * it grows again from its first message, and the runs of shots left behind are dropped. */
static void test_reset_reuses_index(void **state)
{
    struct sel *s = view(3, 4);
    struct busy_thresholds t = unset();
    struct sel_booking b = {0};
    int w;
    unsigned r;

    (void) state;
    t.active_prefill_tokens_threshold = 100;
    for (int cycle = 0; cycle < 200; cycle++) {
        sel_retire(s, 1);
        sel_reset(s, 1);
        assert_int_equal(sel_workers(s), 3);
        assert_int_equal(sel_ranks(s, 1), 1);
        assert_false(sel_alive(s, 1, 0));
        for (int i = 0; i < 3; i++) {
            assert_int_equal(sel_pick(s, 0, 10, &t, -1, -1, &w, &r), SEL_OK);
            assert_true(w != 1);
        }
        /* Back with two ranks (another worker in its place). */
        message(s, 1, 0, 0);
        message(s, 1, 1, 0);
        assert_int_equal(sel_ranks(s, 1), 2);
        assert_int_equal(booked_of(s, 1, 0).requests, 0);
        assert_int_equal(booked_of(s, 1, 1).requests, 0);
        assert_int_equal(sel_pick(s, 0, 10, &t, -1, 1, &w, &r), SEL_OK);
        assert_int_equal(w, 1);
        sel_book(s, &b, w, r, 10);
        assert_int_equal(booked_of(s, 1, r).prefill_tokens, 10);
        sel_release(s, &b);
    }
    /* The others kept their ranks through it all. */
    assert_int_equal(sel_ranks(s, 0), 4);
    assert_int_equal(sel_ranks(s, 2), 4);
    assert_true(sel_alive(s, 2, 0));
    sel_free(s);
}

/* The monitor: a worker whose every rank is full by what it publishes is skipped; one free
 * rank keeps it a candidate. */
static void test_monitor_published(void **state)
{
    struct sel *s = view(2, 1);
    struct busy_thresholds t = unset();
    struct sel_booking b = {0};
    struct admit_load m;
    int w;
    unsigned r;

    (void) state;
    t.active_decode_blocks_threshold = 0.5;
    t.active_prefill_tokens_threshold = 1000;
    t.active_prefill_tokens_threshold_frac = 0.9; /* 90 of the budget of 100 */
    sel_book(s, &b, 1, 0, 48); /* w1 costs more by its booking, so w0 would win */
    for (int signal = 0; signal < 4; signal++) {
        m = load(0, 0);
        if (signal == 0)
            m.kv_used_blocks = 51;
        else if (signal == 1)
            m.active_decode_blocks = 51;
        else if (signal == 2)
            m.active_prefill_tokens = 91; /* the fraction */
        else {
            m.max_num_batched_tokens = 10000; /* a fraction of 9000: the absolute decides */
            m.active_prefill_tokens = 1001;
        }
        sel_message(s, 0, &m, 0);
        assert_true(sel_published_full(s, 0, &t));
        for (int i = 0; i < 3; i++) {
            assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
            assert_int_equal(w, 1);
        }
        assert_int_equal(sel_pick(s, 0, 16, &t, 1, -1, &w, &r), SEL_ALL_BUSY);
        /* At the threshold is not over. */
        m = load(0, 0);
        m.kv_used_blocks = 50;
        m.active_decode_blocks = 50;
        m.active_prefill_tokens = 90;
        sel_message(s, 0, &m, 0);
        assert_false(sel_published_full(s, 0, &t));
        /* A candidate again (its published load makes it the dearer, so w1 is left out). */
        assert_int_equal(sel_pick(s, 0, 16, &t, 1, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 0);
    }
    sel_release(s, &b);
    sel_free(s);
}

/* A multi-rank worker is skipped only when every rank is full by what it publishes. */
static void test_monitor_ranks(void **state)
{
    struct sel *s = view(1, 4);
    struct busy_thresholds t = unset();
    struct sel_rank_view v;
    struct admit_load m;
    int w;
    unsigned r;

    (void) state;
    t.active_decode_blocks_threshold = 0.5;
    for (unsigned i = 0; i < 3; i++) {
        m = load(0, i);
        m.kv_used_blocks = 60;
        sel_message(s, 0, &m, 0);
        assert_false(sel_published_full(s, 0, &t));
        assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    }
    sel_view(s, 0, 0, &t, &v);
    assert_true(v.published);
    assert_false(v.published_room);
    assert_true(v.booked_room);
    assert_int_equal(v.pub_kv_used_blocks, 60);
    sel_view(s, 0, 3, &t, &v);
    assert_true(v.published_room);
    m = load(0, 3);
    m.active_decode_blocks = 60;
    sel_message(s, 0, &m, 0);
    assert_true(sel_published_full(s, 0, &t));
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    m.active_decode_blocks = ADMIT_LOAD_UNKNOWN; /* unknown is not under: still full */
    sel_message(s, 0, &m, 0);
    assert_true(sel_published_full(s, 0, &t));
    m.active_decode_blocks = 50; /* known and at the threshold: room */
    sel_message(s, 0, &m, 0);
    assert_false(sel_published_full(s, 0, &t));
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    sel_free(s);
}

/* The monitor's latch (issue 23 item 11, seed 000): a worker marked busy by a signal stays
 * busy until a message in which that signal is known and under. A failed engine scrape
 * (kv_used_blocks, kv_total_blocks and max_num_batched_tokens null) with admitd's own bookings
 * under does not release a worker the engine reported full, nor one full by the prefill
 * fraction of its budget; nor does a message without capacity. Selection, /load's
 * published_room and the monitor's verdict agree throughout. */
static void test_monitor_latch(void **state)
{
    static const char *const names[] = {"kv_used_blocks", "active_decode_blocks",
                                        "active_prefill_tokens (fraction)"};
    struct busy_thresholds t = unset();

    (void) state;
    t.active_decode_blocks_threshold = 0.5;       /* 50 of 100 blocks */
    t.active_prefill_tokens_threshold_frac = 0.9; /* 90 of the budget of 100 */
    for (int sig = 0; sig < 3; sig++)
        for (int how = 0; how < 2; how++) {
            struct sel *s = view(2, 1);
            struct admit_load m = load(0, 0), later;
            struct sel_rank_view v;
            int w;
            unsigned r;

            if (sig == 0)
                m.kv_used_blocks = 60;
            else if (sig == 1)
                m.active_decode_blocks = 60;
            else
                m.active_prefill_tokens = 91;
            sel_message(s, 0, &m, 0);
            assert_true(sel_published_full(s, 0, &t));
            later = m;
            if (how == 0) { /* a failed engine scrape */
                later.kv_used_blocks = ADMIT_LOAD_UNKNOWN;
                later.kv_total_blocks = ADMIT_LOAD_UNKNOWN;
                later.max_num_batched_tokens = ADMIT_LOAD_UNKNOWN;
                if (sig != 1) /* admitd's own bookings under */
                    later.active_decode_blocks = 10;
            } else { /* no capacity in the message */
                later.kv_total_blocks = 0;
                later.max_num_batched_tokens = 0;
            }
            sel_message(s, 0, &later, 0);
            if (!sel_published_full(s, 0, &t))
                fail_msg("busy by %s, released by %s", names[sig],
                         how == 0 ? "a failed engine scrape" : "a message without capacity");
            sel_view(s, 0, 0, &t, &v);
            assert_false(v.published_room);
            for (int i = 0; i < 3; i++) { /* w0 is skipped, w1 chosen */
                assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
                assert_int_equal(w, 1);
            }
            assert_int_equal(sel_pick(s, 0, 16, &t, -1, 0, &w, &r), SEL_ALL_BUSY);
            /* The newest message is what /load reports; the latch is what is judged. */
            assert_int_equal(v.pub_kv_used_blocks, later.kv_used_blocks);
            /* Known and under: released. */
            later = load(0, 0);
            sel_message(s, 0, &later, 0);
            assert_false(sel_published_full(s, 0, &t));
            sel_view(s, 0, 0, &t, &v);
            assert_true(v.published_room);
            assert_int_equal(sel_pick(s, 0, 16, &t, -1, 0, &w, &r), SEL_OK);
            sel_free(s);
        }
}

/* New thresholds are in force from the next pick: for the monitor and for the projection. */
static void test_thresholds_change(void **state)
{
    struct sel *s = view(1, 1);
    struct busy_thresholds t = unset();
    struct sel_booking b[2];
    struct admit_load m = load(0, 0);
    int w;
    unsigned r;

    (void) state;
    memset(b, 0, sizeof b);
    m.kv_used_blocks = 70;
    sel_message(s, 0, &m, 0);
    t.active_decode_blocks_threshold = 0.5;
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    t.active_decode_blocks_threshold = 0.8;
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    t.active_decode_blocks_threshold = 0.6;
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    t.active_decode_blocks_threshold = NAN;
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    t.active_prefill_tokens_threshold = 100;
    pick_book(s, &t, 40, &b[0]);
    pick_book(s, &t, 40, &b[1]);
    assert_int_equal(sel_pick(s, 0, 40, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    t.active_prefill_tokens_threshold = 120;
    assert_int_equal(sel_pick(s, 0, 40, &t, -1, -1, &w, &r), SEL_OK);
    t.active_prefill_tokens_threshold_frac = 0.5; /* 50 of 100, the tighter */
    assert_int_equal(sel_pick(s, 0, 40, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    assert_true(sel_published_full(s, 0, &t) == 0); /* the monitor: 70 blocks, no signal */
    for (int i = 0; i < 2; i++)
        sel_release(s, &b[i]);
    sel_free(s);
}

/* Bookings use the worker's own block size, or the default when it does not say. */
static void test_block_size(void **state)
{
    struct sel *s = sel_new(3, 8);
    struct busy_thresholds t = unset();
    struct sel_booking b = {0};
    struct sel_rank_view v;
    struct admit_load m;

    (void) state;
    sel_add_worker(s);
    sel_add_worker(s);
    m = load(0, 0);
    m.kv_block_size = 32;
    sel_message(s, 0, &m, 0);
    m = load(1, 0);
    m.kv_block_size = ADMIT_LOAD_UNKNOWN;
    sel_message(s, 1, &m, 0);
    sel_view(s, 0, 0, &t, &v);
    assert_int_equal(v.block_size, 32);
    assert_int_equal(v.capacity.kv_block_size, 32);
    sel_view(s, 1, 0, &t, &v);
    assert_int_equal(v.block_size, 8);
    sel_book(s, &b, 0, 0, 33); /* ceil(33 / 32) */
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 2);
    sel_release(s, &b);
    sel_book(s, &b, 1, 0, 33); /* ceil(33 / 8) */
    assert_int_equal(booked_of(s, 1, 0).decode_blocks, 5);
    sel_release(s, &b);
    sel_book(s, &b, 0, 0, 32); /* exactly one block */
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 1);
    sel_release(s, &b);
    sel_book(s, &b, 0, 0, 0); /* an empty prompt books nothing but the request */
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 0);
    assert_int_equal(booked_of(s, 0, 0).requests, 1);
    sel_release(s, &b);
    /* A restart with another block size books with the new one. */
    m = load(0, 0);
    m.kv_block_size = 64;
    sel_message(s, 0, &m, 0);
    sel_book(s, &b, 0, 0, 65);
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 2);
    sel_release(s, &b);
    /* The decode projection counts blocks of each worker's size: 0.5 of 100 is 50 blocks;
     * with one block booked on each, 49 more are 3136 tokens of 64 on w0 but 392 of 8 on w1. */
    t.active_decode_blocks_threshold = 0.5;
    {
        struct sel_booking one[2] = {{0}, {0}};
        int w;
        unsigned r;

        sel_book(s, &one[0], 0, 0, 1);
        sel_book(s, &one[1], 1, 0, 1);
        assert_int_equal(sel_pick(s, 0, 3136, &t, -1, 0, &w, &r), SEL_OK);
        assert_int_equal(sel_pick(s, 0, 3137, &t, -1, 0, &w, &r), SEL_ALL_BUSY);
        assert_int_equal(sel_pick(s, 0, 392, &t, -1, 1, &w, &r), SEL_OK);
        assert_int_equal(sel_pick(s, 0, 393, &t, -1, 1, &w, &r), SEL_ALL_BUSY);
        sel_release(s, &one[0]);
        sel_release(s, &one[1]);
    }
    sel_free(s);
}

/* Restarts with ever new block sizes: each booking and each pass use the size the rank has
 * now, and the other ranks keep theirs. */
static void test_block_size_restarts(void **state)
{
    struct sel *s = view(3, 2);
    struct busy_thresholds t = unset();
    struct sel_booking b = {0}, keep = {0};
    struct admit_load m;
    int w;
    unsigned r;

    (void) state;
    sel_book(s, &keep, 2, 1, 100); /* held across every restart: 7 blocks of 16 */
    for (int64_t bs = 1; bs <= 200; bs++) {
        int64_t blocks = (1000 + bs - 1) / bs;

        m = load(0, 1);
        m.kv_block_size = bs;
        sel_message(s, 0, &m, 0);
        sel_book(s, &b, 0, 1, 1000);
        assert_int_equal(booked_of(s, 0, 1).decode_blocks, blocks);
        sel_release(s, &b);
        sel_book(s, &b, 1, 0, 1000); /* another worker, 16 all along: ceil(1000 / 16) */
        assert_int_equal(booked_of(s, 1, 0).decode_blocks, 63);
        sel_release(s, &b);
        /* Both ranks of w0 idle: rank 0 costs 1000 / 16 + 63 = 125.5 blocks, rank 1
         * 1000 / bs + blocks, the lower winning and rank 0 a tie (bs 16 alone). */
        assert_int_equal(sel_pick(s, 0, 1000, &t, -1, 0, &w, &r), SEL_OK);
        assert_int_equal(r, 1000.0 / (double) bs + (double) blocks < 125.5 ? 1 : 0);
    }
    assert_int_equal(booked_of(s, 2, 1).decode_blocks, 7);
    sel_release(s, &keep);
    /* Two sizes side by side after all those: the lower cost in blocks wins. w0 has blocks of
     * 64 on both ranks: a prompt of 16 adds 16 / 64 + 1 = 1.25 blocks. */
    m = load(0, 0);
    m.kv_block_size = 64;
    sel_message(s, 0, &m, 0);
    m = load(0, 1);
    m.kv_block_size = 64;
    sel_message(s, 0, &m, 0);
    sel_book(s, &b, 1, 0, 16); /* w1 rank 0 holds 1 + 1 blocks: rank 1 is its cheaper */
    assert_int_equal(sel_pick(s, 0, 16, &t, 1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0); /* 1.25 blocks, against 2 on idle w2 */
    assert_int_equal(r, 0);
    assert_int_equal(sel_pick(s, 0, 16, &t, 0, -1, &w, &r), SEL_OK);
    /* 2 blocks on w1's rank 1 or on w2's rank 0, 4 on w1's rank 0 */
    assert_true((w == 1 && r == 1) || (w == 2 && r == 0));
    sel_release(s, &b);
    sel_free(s);
}

/* Cost in blocks, as Dynamo's: prefill tokens / block size + decode blocks, so a block of 64
 * tokens weighs as one of 16. */
static void test_cost_in_blocks(void **state)
{
    struct sel *s = view(2, 1);
    struct busy_thresholds t = unset();
    struct sel_booking a = {0}, b = {0};
    struct admit_load m = load(0, 0);
    int w;
    unsigned r;

    (void) state;
    m.kv_block_size = 64;
    sel_message(s, 0, &m, 0);
    sel_book(s, &a, 0, 0, 64); /* 1 block of 64 tokens */
    sel_first_token(s, &a);
    sel_book(s, &b, 1, 0, 48); /* 3 blocks of 16 tokens: 48 < 64 */
    sel_first_token(s, &b);
    /* w0: 1 + 1 blocks of 64, plus 16 / 64 of prefill = 2.25; w1: 3 + 1 + 1 = 5. */
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    sel_release(s, &a);
    sel_release(s, &b);
    sel_free(s);
}

/* No threshold set: no load, booked or published, refuses a request. */
static void test_unset_admits(void **state)
{
    struct sel *s = view(1, 1);
    struct busy_thresholds t = unset();
    struct sel_booking b[64];
    struct admit_load m = load(0, 0);
    int w;
    unsigned r;

    (void) state;
    memset(b, 0, sizeof b);
    m.kv_used_blocks = 100;
    m.active_decode_blocks = 1000;
    m.active_prefill_tokens = 1000000;
    sel_message(s, 0, &m, 0);
    assert_false(sel_published_full(s, 0, &t));
    for (int i = 0; i < 64; i++)
        pick_book(s, &t, 100000, &b[i]);
    assert_int_equal(booked_of(s, 0, 0).prefill_tokens, 6400000);
    assert_int_equal(sel_pick(s, 0, INT64_C(1) << 40, &t, -1, -1, &w, &r), SEL_OK);
    t.active_prefill_tokens_threshold = 1000000000; /* a set one would refuse */
    assert_int_equal(sel_pick(s, 0, INT64_C(1) << 40, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    for (int i = 0; i < 64; i++)
        sel_release(s, &b[i]);
    sel_free(s);
}

/* Ranks 0..SEL_MAX_RANKS-1 are kept; a message of any other rank is ignored whole. */
static void test_rank_limit(void **state)
{
    struct sel *s = sel_new(3, 16);
    struct busy_thresholds t = unset();
    struct admit_load m = load(0, SEL_MAX_RANKS);
    int w;
    unsigned r;

    (void) state;
    sel_add_worker(s);
    sel_message(s, 0, &m, 0);
    assert_int_equal(sel_ranks(s, 0), 1);
    assert_false(sel_alive(s, 0, 0)); /* not even a heartbeat */
    m.dp_rank = -1;
    sel_message(s, 0, &m, 0);
    assert_false(sel_alive(s, 0, 0));
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, -1, &w, &r), SEL_NO_WORKER);
    m.dp_rank = SEL_MAX_RANKS - 1;
    sel_message(s, 0, &m, 0);
    assert_int_equal(sel_ranks(s, 0), SEL_MAX_RANKS);
    assert_true(sel_alive(s, 0, 0));
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, -1, &w, &r), SEL_OK);
    m.dp_rank = SEL_MAX_RANKS + 1;
    m.state = ADMIT_LOAD_DRAINING; /* ignored: the worker stays serving */
    sel_message(s, 0, &m, 0);
    assert_int_equal(sel_ranks(s, 0), SEL_MAX_RANKS);
    assert_true(sel_alive(s, 0, 0));
    sel_free(s);
}

/* A rank the worker has not reported is shown unknown and free. */
static void test_view_unknown_rank(void **state)
{
    struct sel *s = view(1, 1);
    struct busy_thresholds t = unset();
    struct sel_rank_view v;

    (void) state;
    sel_view(s, 0, 5, &t, &v);
    assert_false(v.published);
    assert_int_equal(v.capacity.kv_total_blocks, -1);
    assert_int_equal(v.pub_decode_blocks, -1);
    assert_int_equal(v.block_size, 16);
    assert_true(v.booked_room);
    assert_true(v.published_room);
    sel_view(s, 0, 0, &t, &v);
    assert_true(v.published);
    assert_int_equal(v.capacity.kv_total_blocks, 100);
    assert_int_equal(v.capacity.max_num_batched_tokens, 100);
    sel_free(s);
}

/* Workers that grow rank by rank, interleaved as their messages arrive, keep each rank's
 * load and cost where the pass finds it (the shots move as workers grow, and are laid out
 * again when enough have moved). */
static void test_workers_grow(void **state)
{
    enum { WORKERS = 40, RANKS = 4 };
    struct sel *s = sel_new(3, 16);
    struct busy_thresholds t = unset();
    struct sel_booking b[WORKERS][RANKS];
    int w;
    unsigned r;

    (void) state;
    memset(b, 0, sizeof b);
    for (int k = 0; k < WORKERS; k++)
        sel_add_worker(s);
    for (unsigned j = 0; j < RANKS; j++)
        for (int k = 0; k < WORKERS; k++) {
            struct admit_load m = load(k, j);

            m.kv_block_size = k % 3 ? 16 : 32;
            sel_message(s, k, &m, 0);
            /* Booked as it grows: rank (RANKS - k % RANKS) % RANKS ends up the cheapest. */
            sel_book(s, &b[k][j], k, j, 100 + (int64_t) ((j + (unsigned) k) % RANKS) * 10);
        }
    for (int k = 0; k < WORKERS; k++) {
        assert_int_equal(sel_ranks(s, k), RANKS);
        for (unsigned j = 0; j < RANKS; j++)
            assert_int_equal(booked_of(s, k, j).prefill_tokens,
                             100 + (int64_t) ((j + (unsigned) k) % RANKS) * 10);
        assert_int_equal(sel_pick(s, 0, 1, &t, -1, k, &w, &r), SEL_OK);
        assert_int_equal(w, k);
        assert_int_equal(r, (RANKS - (unsigned) k % RANKS) % RANKS);
    }
    for (int k = 0; k < WORKERS; k++)
        for (unsigned j = 0; j < RANKS; j++) {
            sel_release(s, &b[k][j]);
            assert_int_equal(booked_of(s, k, j).prefill_tokens, 0);
            assert_int_equal(booked_of(s, k, j).decode_blocks, 0);
        }
    sel_free(s);
}

/* Many overlapping bookings, with every release path, leave every gauge at 0. */
static void test_many_cycles(void **state)
{
    enum { WORKERS = 5, RANKS = 3, LIVE = 37 };
    struct sel *s = view(WORKERS, RANKS);
    struct busy_thresholds t = unset();
    struct sel_booking live[LIVE];
    uint32_t x = 12345;
    int64_t peak = 0;

    (void) state;
    memset(live, 0, sizeof live);
    t.active_decode_blocks_threshold = 0.95;
    sel_track_output(s, 1);
    for (int i = 0; i < 20000; i++) {
        struct sel_booking *b = &live[i % LIVE];
        int w;
        unsigned r;
        int64_t prompt;

        x = x * 1103515245u + 12345u;
        prompt = (int64_t) (x >> 16) % 300;
        sel_release(s, b); /* the oldest of the ring ends */
        if (sel_pick(s, 0, prompt, &t, (int) (x % (WORKERS + 1)) - 1, -1, &w, &r) == SEL_OK)
            sel_book(s, b, w, r, prompt);
        if (x & 1)
            sel_first_token(s, b);
        if (x & 2)
            sel_output(s, b, (x >> 8) % 40);
        for (int k = 0; k < WORKERS; k++)
            for (unsigned j = 0; j < RANKS; j++) {
                struct busy_load l = booked_under(s, k, j, &t);

                assert_true(l.prefill_tokens >= 0);
                assert_true(l.decode_blocks >= 0);
                assert_true(l.requests >= 0);
                if (l.decode_blocks > peak)
                    peak = l.decode_blocks;
            }
    }
    assert_true(peak > 0); /* something was booked */
    for (int i = 0; i < LIVE; i++)
        sel_release(s, &live[i]);
    for (int k = 0; k < WORKERS; k++)
        for (unsigned j = 0; j < RANKS; j++) {
            struct busy_load l = booked_of(s, k, j);

            assert_int_equal(l.prefill_tokens, 0);
            assert_int_equal(l.decode_blocks, 0);
            assert_int_equal(l.requests, 0);
        }
    sel_free(s);
}

/* The cost starts from the larger of booked and published load: a worker that publishes
 * what another router sent it is dearer, though this router booked nothing there; and our
 * own booking counts before the worker publishes it. */
static void test_cost_counts_published(void **state)
{
    struct sel *s = view(2, 1);
    struct busy_thresholds t = unset();
    struct sel_booking b = {0};
    struct admit_load m = load(0, 0);
    int w;
    unsigned r;

    (void) state;
    /* The engine's scraped KV usage is not in the cost (it lags: it still counts a request
     * that has just finished); the monitor judges it. */
    m.kv_used_blocks = 500;
    sel_message(s, 1, &m, 0);
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 1);
    m = load(1, 0);
    sel_message(s, 1, &m, 0);
    m = load(0, 0);
    m.active_decode_blocks = 30; /* another router's traffic, as admitd publishes it */
    sel_message(s, 0, &m, 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 1);
    }
    sel_book(s, &b, 1, 0, 640); /* 40 blocks + 40 of prefill, not yet published by w1 */
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    m = load(1, 0);
    m.active_decode_blocks = 10; /* w1 publishes less than we booked: the booking counts */
    sel_message(s, 1, &m, 0);
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    sel_first_token(s, &b); /* 40 blocks left on w1, 30 published on w0 */
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    sel_release(s, &b);
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 1);
    sel_free(s);
}

/* What the index predicts a rank caches counts once: not as prefill (the engine does not
 * compute it) and not again as blocks (the rank holds them already), neither in what this
 * router booked nor in what admitd publishes of the same request (it books whole prompts). */
static void test_cost_counts_cached_once(void **state)
{
    struct sel *s = view(2, 1);
    struct busy_thresholds t = unset();
    struct sel_booking a = {0}, b = {0};
    struct admit_load m;
    int w;
    unsigned r;

    (void) state;
    /* w0: 640 tokens, 576 of them cached: 4 blocks of prefill, 4 new blocks (8). w1: 160
     * tokens, none cached: 10 + 10 (20). Whole, w0 would cost 40 + 40. */
    sel_book_cached(s, &a, 0, 0, 640, 576);
    sel_book_cached(s, &b, 1, 0, 160, 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 0);
    }
    /* admitd publishes w0's request whole: the cached part is still taken off. */
    m = load(0, 0);
    m.active_prefill_tokens = 640;
    m.active_decode_blocks = 40;
    sel_message(s, 0, &m, 0);
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    /* Another router's 320 prefill tokens on w0, published beside ours: they count. */
    m.active_prefill_tokens = 640 + 320;
    sel_message(s, 0, &m, 0);
    assert_int_equal(sel_pick(s, 0, 16, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 1);
    /* The thresholds judge the whole prompt's blocks: the booking holds all 40. */
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 40);
    assert_int_equal(booked_of(s, 0, 0).prefill_tokens, 64);
    sel_first_token(s, &a);
    sel_release(s, &a);
    sel_release(s, &b);
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 0);
    assert_int_equal(booked_of(s, 1, 0).prefill_tokens, 0);
    sel_free(s);
}

/* No thresholds (NULL, a GET): any live worker, whatever its booked or published load, and
 * the limits kept for the thresholds last used stay as they were. */
static void test_no_thresholds_null(void **state)
{
    struct sel *s = view(1, 1);
    struct busy_thresholds t = unset();
    struct sel_booking b = {0};
    struct admit_load m = load(0, 0);
    int w;
    unsigned r;

    (void) state;
    t.active_prefill_tokens_threshold = 10;
    sel_book(s, &b, 0, 0, 100);
    assert_int_equal(sel_pick(s, 0, 1, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 0, 0, NULL, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(sel_pick(s, 0, 1, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    sel_release(s, &b);
    m.active_prefill_tokens = 1000; /* full by what it publishes */
    sel_message(s, 0, &m, 0);
    assert_int_equal(sel_pick(s, 0, 1, &t, -1, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 0, 0, NULL, -1, -1, &w, &r), SEL_OK);
    /* Draining, or silent too long, is out whatever the thresholds. */
    m.state = ADMIT_LOAD_DRAINING;
    sel_message(s, 0, &m, 0);
    assert_int_equal(sel_pick(s, 0, 0, NULL, -1, -1, &w, &r), SEL_NO_WORKER);
    m.state = ADMIT_LOAD_SERVING;
    sel_message(s, 0, &m, 0);
    assert_int_equal(sel_pick(s, 100000, 0, NULL, -1, -1, &w, &r), SEL_NO_WORKER);
    sel_free(s);
}

/* ---- several sets of thresholds at once (the view's slots) -------------------------------- */

/* Set i of distinct sets: each signal looser as i grows, the fraction unset in every third. */
static struct busy_thresholds tset(int i)
{
    struct busy_thresholds t = unset();

    t.active_decode_blocks_threshold = 0.25 + 0.05 * i;
    t.active_prefill_tokens_threshold = 60 + 15 * i;
    if (i % 3 != 2) /* unset, which the slots must tell apart too */
        t.active_prefill_tokens_threshold_frac = 0.4 + 0.1 * i;
    return t;
}

static uint32_t next_rand(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

/* Everything the view says of worker k under t, in s and in a reference view ref that has
 * been fed the same events and only ever asked under t: the pinned pick (which takes no
 * turn), the monitor, and every rank's two rooms. */
static void same_answers(struct sel *s, struct sel *ref, const struct busy_thresholds *t, int k,
                         int64_t prompt)
{
    int w1 = -1, w2 = -1;
    unsigned r1 = 0, r2 = 0;
    enum sel_result a = sel_pick(s, 0, prompt, t, -1, k, &w1, &r1);

    assert_int_equal(a, sel_pick(ref, 0, prompt, t, -1, k, &w2, &r2));
    if (a == SEL_OK) {
        assert_int_equal(w1, w2);
        assert_int_equal(r1, r2);
    }
    assert_int_equal(sel_published_full(s, k, t), sel_published_full(ref, k, t));
    assert_int_equal(sel_ranks(s, k), sel_ranks(ref, k));
    for (unsigned i = 0; i < sel_ranks(s, k); i++) {
        struct sel_rank_view v1, v2;

        sel_view(s, k, i, t, &v1);
        sel_view(ref, k, i, t, &v2);
        assert_int_equal(v1.booked_room, v2.booked_room);
        assert_int_equal(v1.published_room, v2.published_room);
        assert_int_equal(v1.booked.prefill_tokens, v2.booked.prefill_tokens);
        assert_int_equal(v1.booked.decode_blocks, v2.booked.decode_blocks);
    }
}

/* A random load message for (w, rank): now and then a restart (new capacity and block size)
 * or a drain, else load around every set's thresholds. */
static struct admit_load random_message(uint32_t *x, int w, int64_t rank)
{
    struct admit_load m = load(w, rank);
    uint32_t v = next_rand(x);

    if (v % 8 == 0) {
        m.kv_total_blocks = 50 + (int64_t) (v >> 8) % 150;
        m.kv_block_size = (v >> 4) % 2 ? 16 : 32;
        m.max_num_batched_tokens = 100 + (int64_t) (v >> 12) % 200;
    }
    m.kv_used_blocks = (int64_t) next_rand(x) % 110;
    m.active_decode_blocks = (int64_t) next_rand(x) % 110;
    m.active_prefill_tokens = (int64_t) next_rand(x) % 300;
    if (next_rand(x) % 4 == 0) /* most of the fleet publishes little */
        m.kv_used_blocks = m.active_decode_blocks = m.active_prefill_tokens = 0;
    if (next_rand(x) % 25 == 0)
        m.state = ADMIT_LOAD_DRAINING;
    return m;
}

/* One view asked under nsets sets in a random order gives, at every step, the answers of
 * views asked under one set each, fed the same bookings and messages: through bookings,
 * first tokens, output, releases, messages, restarts, new ranks and drains, and (with more
 * sets than slots) evictions. The reference views' turns of ties differ (each picks on its
 * own), so unpinned picks are compared by their outcome, and by the pinned pick of the
 * worker chosen, which must be the same rank. */
static void alternate_sets(int nsets, uint32_t seed)
{
    enum { WORKERS = 6, RANKS = 2, LIVE = 24, STEPS = 3000, MAX_SETS = 16 };
    struct busy_thresholds t[MAX_SETS];
    struct sel *s = view(WORKERS, RANKS), *ref[MAX_SETS];
    struct sel_booking live[LIVE], mirror[MAX_SETS][LIVE];
    uint32_t x = seed;
    int booked = 0, busy = 0;

    assert_true(nsets <= MAX_SETS);
    memset(live, 0, sizeof live);
    memset(mirror, 0, sizeof mirror);
    sel_track_output(s, 1);
    for (int i = 0; i < nsets; i++) {
        t[i] = tset(i);
        ref[i] = view(WORKERS, RANKS);
        sel_track_output(ref[i], 1);
    }
    for (int step = 0; step < STEPS; step++) {
        uint32_t op = next_rand(&x) % 16, slot = next_rand(&x) % LIVE;
        int set = (int) (next_rand(&x) % (uint32_t) nsets);
        int64_t prompt = (int64_t) (next_rand(&x) % 200);

        if (op < 3) { /* a message, now and then for a rank the worker did not have */
            int w = (int) (next_rand(&x) % WORKERS);
            int64_t rank = (int64_t) (next_rand(&x) % (RANKS + 2));
            struct admit_load m = random_message(&x, w, rank);

            sel_message(s, w, &m, 0);
            for (int i = 0; i < nsets; i++)
                sel_message(ref[i], w, &m, 0);
        } else if (op < 8) { /* a request: picked under one set, then booked everywhere */
            int w = -1, w2 = -1;
            unsigned r = 0, r2 = 0;
            enum sel_result a;

            sel_release(s, &live[slot]);
            for (int i = 0; i < nsets; i++)
                sel_release(ref[i], &mirror[i][slot]);
            a = sel_pick(s, 0, prompt, &t[set], -1, -1, &w, &r);
            assert_int_equal(a, sel_pick(ref[set], 0, prompt, &t[set], -1, -1, &w2, &r2));
            if (a != SEL_OK) {
                busy++;
                continue;
            }
            assert_int_equal(sel_pick(ref[set], 0, prompt, &t[set], -1, w, &w2, &r2), SEL_OK);
            assert_int_equal(r, r2);
            sel_book(s, &live[slot], w, r, prompt);
            for (int i = 0; i < nsets; i++)
                sel_book(ref[i], &mirror[i][slot], w, r, prompt);
            booked++;
        } else if (op < 10) {
            sel_first_token(s, &live[slot]);
            for (int i = 0; i < nsets; i++)
                sel_first_token(ref[i], &mirror[i][slot]);
        } else if (op < 11) {
            unsigned n = next_rand(&x) % 40;

            sel_output(s, &live[slot], n);
            for (int i = 0; i < nsets; i++)
                sel_output(ref[i], &mirror[i][slot], n);
        } else if (op < 13) {
            sel_release(s, &live[slot]);
            for (int i = 0; i < nsets; i++)
                sel_release(ref[i], &mirror[i][slot]);
        } else if (op < 14) { /* no thresholds, in whichever slot: nothing judged */
            int w = -1, w2 = -1;
            unsigned r = 0, r2 = 0;

            assert_int_equal(sel_pick(s, 0, prompt, NULL, -1, -1, &w, &r),
                             sel_pick(ref[set], 0, prompt, NULL, -1, -1, &w2, &r2));
        } else { /* the class gate's question, and everything else, worker by worker */
            assert_int_equal(sel_room(s, 0, prompt, &t[set]),
                             sel_room(ref[set], 0, prompt, &t[set]));
            for (int k = 0; k < WORKERS; k++)
                same_answers(s, ref[set], &t[set], k, prompt);
        }
    }
    for (int set = 0; set < nsets; set++)
        for (int k = 0; k < WORKERS; k++)
            same_answers(s, ref[set], &t[set], k, 50);
    /* Both outcomes were met, so the sets judged something. */
    assert_true(booked > 100);
    assert_true(busy > 10);
    for (int i = 0; i < LIVE; i++)
        sel_release(s, &live[i]);
    sel_free(s);
    for (int i = 0; i < nsets; i++) {
        for (int j = 0; j < LIVE; j++)
            sel_release(ref[i], &mirror[i][j]);
        sel_free(ref[i]);
    }
}

/* Two sets alternating (the class gate's and the reject thresholds) answer as each alone. */
static void test_slots_two_sets(void **state)
{
    (void) state;
    alternate_sets(2, 2463534242u);
    alternate_sets(2, 88172645u);
}

/* More sets than slots: evicted ones come back with the limits of the load as it is then. */
static void test_slots_more_sets_than_slots(void **state)
{
    (void) state;
    assert_true(SEL_MAX_TSETS + 1 <= 16);
    alternate_sets(SEL_MAX_TSETS + 1, 123456789u);
    alternate_sets(SEL_MAX_TSETS + 4, 362436069u);
}

/* Workers that grow rank by rank, with several sets held, move their rooms with their shots
 * (and the runs left behind are dropped, every room with its shot): every set answers as a
 * view asked under it alone. */
static void test_slots_grow(void **state)
{
    enum { WORKERS = 40, RANKS = 8, SETS = 3 };
    struct sel *s = sel_new(3, 16), *ref[SETS];
    struct busy_thresholds t[SETS];
    static struct sel_booking b[WORKERS][RANKS], mb[SETS][WORKERS][RANKS];

    (void) state;
    memset(b, 0, sizeof b);
    memset(mb, 0, sizeof mb);
    for (int i = 0; i < SETS; i++) {
        t[i] = tset(i);
        ref[i] = sel_new(3, 16);
    }
    for (int k = 0; k < WORKERS; k++) {
        sel_add_worker(s);
        for (int i = 0; i < SETS; i++)
            sel_add_worker(ref[i]);
    }
    for (unsigned j = 0; j < RANKS; j++)
        for (int k = 0; k < WORKERS; k++) {
            struct admit_load m = load(k, j);
            int64_t prompt = 20 + (int64_t) ((j * 7 + (unsigned) k * 3) % 11) * 9;

            m.kv_block_size = k % 3 ? 16 : 32;
            m.kv_used_blocks = (int64_t) ((j + (unsigned) k) % 9) * 8;
            sel_message(s, k, &m, 0);
            sel_book(s, &b[k][j], k, j, prompt);
            for (int i = 0; i < SETS; i++) {
                sel_message(ref[i], k, &m, 0);
                sel_book(ref[i], &mb[i][k][j], k, j, prompt);
            }
            if ((k + (int) j) % 5 == 0) /* now and then asked in between */
                for (int i = 0; i < SETS; i++)
                    same_answers(s, ref[i], &t[i], k, 30);
        }
    for (int i = 0; i < SETS; i++)
        for (int k = 0; k < WORKERS; k++) {
            assert_int_equal(sel_ranks(s, k), RANKS);
            for (int64_t prompt = 0; prompt < 200; prompt += 40)
                same_answers(s, ref[i], &t[i], k, prompt);
        }
    for (int k = 0; k < WORKERS; k++)
        for (unsigned j = 0; j < RANKS; j++) {
            sel_release(s, &b[k][j]);
            for (int i = 0; i < SETS; i++)
                sel_release(ref[i], &mb[i][k][j]);
        }
    for (int i = 0; i < SETS; i++) {
        for (int k = 0; k < WORKERS; k++)
            same_answers(s, ref[i], &t[i], k, 100);
        sel_free(ref[i]);
    }
    sel_free(s);
}

/* Set i lets a rank hold 10 (i + 1) prefill tokens. */
static struct busy_thresholds prefill_set(int i)
{
    struct busy_thresholds t = unset();

    t.active_prefill_tokens_threshold = 10 * (i + 1);
    return t;
}

/* What fits on the one rank under set i when held tokens are booked (and 0 < held): held +
 * prompt within 10 (i + 1). */
static void expect_prefill_sets(struct sel *s, int nsets, int64_t held, int64_t prompt)
{
    for (int i = nsets - 1; i >= 0; i--) {
        struct busy_thresholds t = prefill_set(i);
        struct sel_rank_view v;
        int w;
        unsigned r;

        assert_int_equal(sel_pick(s, 0, prompt, &t, -1, -1, &w, &r),
                         held + prompt <= 10 * (i + 1) ? SEL_OK : SEL_ALL_BUSY);
        assert_int_equal(sel_room(s, 0, prompt, &t), held + prompt <= 10 * (i + 1));
        sel_view(s, 0, 0, &t, &v);
        assert_int_equal(v.booked_room, held <= 10 * (i + 1));
    }
}

/* Eviction: with one set more than there are slots, asked round and round (each in turn
 * the least recently used, so each ask evicts the next one asked), every answer is its
 * own set's; so are they after a booking moves, when every set is evicted and taken again. */
static void test_slots_eviction(void **state)
{
    enum { SETS = SEL_MAX_TSETS + 1 };
    struct sel *s = view(1, 1);
    struct sel_booking b = {0}, c = {0};

    (void) state;
    sel_book(s, &b, 0, 0, 35);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < SETS; i++) {
            struct busy_thresholds t = prefill_set(i);
            int w;
            unsigned r;

            /* 35 + 10 fits from set 4 (50) up. */
            assert_int_equal(sel_pick(s, 0, 10, &t, -1, -1, &w, &r),
                             i >= 4 ? SEL_OK : SEL_ALL_BUSY);
        }
        expect_prefill_sets(s, SETS, 35, 10);
    }
    /* The most recent SEL_MAX_TSETS sets held, a booking moves: the one evicted comes back
     * with the new load, the held ones follow it. */
    expect_prefill_sets(s, SEL_MAX_TSETS, 35, 10);
    sel_book(s, &c, 0, 0, 20);
    expect_prefill_sets(s, SETS, 55, 10);
    expect_prefill_sets(s, SETS, 55, 25);
    sel_release(s, &b);
    expect_prefill_sets(s, SETS, 20, 5);
    sel_release(s, &c); /* idle: any one request fits under every set */
    for (int i = 0; i < SETS; i++) {
        struct busy_thresholds t = prefill_set(i);

        assert_true(sel_room(s, 0, 1000, &t));
    }
    sel_free(s);
}

/* A booking, its first token and its release are seen under every set held, not only the
 * one it was picked under; and so is a message's published load, by the monitor. */
static void test_slots_booking_every_slot(void **state)
{
    enum { SETS = 4 };
    struct sel *s = view(2, 1);
    struct busy_thresholds t[SETS];
    struct sel_booking b = {0}, hold = {0};
    int w;
    unsigned r;

    (void) state;
    for (int i = 0; i < SETS; i++) {
        t[i] = unset();
        t[i].active_prefill_tokens_threshold = 100 + 50 * i; /* 100, 150, 200, 250 */
        assert_true(sel_room(s, 0, 10, &t[i]));
    }
    /* w1 holds 90 (its 40 blocks of 16 within every decode limit: none set); w0 160. */
    sel_book(s, &hold, 1, 0, 90);
    sel_book(s, &b, 0, 0, 160);
    for (int i = 0; i < SETS; i++) {
        /* 60 more: w0 fits from 250 up (160 + 60 = 220 > 200), w1 from 150 (150). */
        assert_int_equal(sel_pick(s, 0, 60, &t[i], -1, 0, &w, &r), i >= 3 ? SEL_OK : SEL_ALL_BUSY);
        assert_int_equal(sel_pick(s, 0, 60, &t[i], -1, 1, &w, &r), i >= 1 ? SEL_OK : SEL_ALL_BUSY);
        assert_int_equal(sel_room(s, 0, 60, &t[i]), i >= 1);
    }
    sel_first_token(s, &b); /* w0's prefill is gone: under every set it has room */
    for (int i = SETS - 1; i >= 0; i--) {
        assert_int_equal(sel_pick(s, 0, 60, &t[i], -1, 0, &w, &r), SEL_OK);
        assert_int_equal(sel_room(s, 0, 60, &t[i]), 1);
    }
    sel_release(s, &b);
    sel_release(s, &hold);
    sel_book(s, &hold, 1, 0, 120); /* w1 120: 60 more only from 200 up; w0 idle */
    for (int i = 0; i < SETS; i++)
        assert_int_equal(sel_pick(s, 0, 60, &t[i], -1, 1, &w, &r), i >= 2 ? SEL_OK : SEL_ALL_BUSY);
    sel_release(s, &hold);
    sel_free(s);
}

/* A restart's new capacity moves every set's limits: the decode limits are fractions of
 * kv_total_blocks, the prefill fractions of the step budget. */
static void test_slots_capacity_restart(void **state)
{
    struct sel *s = view(1, 1);
    struct busy_thresholds half = unset(), most = unset(), frac = unset();
    struct sel_booking b = {0}, small = {0};
    struct admit_load m;
    int w;
    unsigned r;

    (void) state;
    half.active_decode_blocks_threshold = 0.5;
    most.active_decode_blocks_threshold = 0.8;
    frac.active_prefill_tokens_threshold_frac = 0.5;
    sel_book(s, &small, 0, 0, 16);  /* 1 block, 16 prefill tokens: the rank is not idle */
    sel_first_token(s, &small);     /* and holds no prefill */
    sel_book(s, &b, 0, 0, 60 * 16); /* 61 blocks of 100 */
    sel_first_token(s, &b);
    assert_int_equal(sel_pick(s, 0, 16, &half, -1, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 0, 16, &most, -1, -1, &w, &r), SEL_OK); /* 62 of 80 */
    assert_int_equal(sel_pick(s, 0, 40, &frac, -1, -1, &w, &r), SEL_OK); /* 40 of 50 */
    /* Restarted with 120 blocks and a step budget of 60: 62 is over half (60), a prompt of
     * 40 over half the budget (30). */
    m = load(0, 0);
    m.kv_total_blocks = 120;
    m.max_num_batched_tokens = 60;
    sel_message(s, 0, &m, 0);
    assert_int_equal(sel_pick(s, 0, 40, &frac, -1, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 0, 16, &half, -1, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 0, 16, &most, -1, -1, &w, &r), SEL_OK);
    m.kv_total_blocks = 400; /* 62 of 400 */
    m.max_num_batched_tokens = 100;
    sel_message(s, 0, &m, 0);
    assert_int_equal(sel_pick(s, 0, 16, &half, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(sel_pick(s, 0, 16, &most, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(sel_pick(s, 0, 40, &frac, -1, -1, &w, &r), SEL_OK);
    m.kv_total_blocks = 70; /* 62 of 35 and of 56: over both */
    sel_message(s, 0, &m, 0);
    assert_int_equal(sel_pick(s, 0, 16, &most, -1, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 0, 16, &half, -1, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 0, 40, &frac, -1, -1, &w, &r), SEL_OK);
    sel_release(s, &b);
    sel_release(s, &small);
    sel_free(s);
}

/* The monitor's verdict is kept per set: 60 of 100 blocks published is full under 0.5, not
 * under 0.7, asked in any order; each follows the next message. NULL judges nothing. */
static void test_slots_published_full(void **state)
{
    struct sel *s = view(2, 1);
    struct busy_thresholds half = unset(), most = unset();
    struct sel_rank_view v;
    struct admit_load m = load(0, 0);
    int w;
    unsigned r;

    (void) state;
    half.active_decode_blocks_threshold = 0.5;
    most.active_decode_blocks_threshold = 0.7;
    m.kv_used_blocks = 60;
    sel_message(s, 0, &m, 0);
    for (int i = 0; i < 3; i++) {
        assert_true(sel_published_full(s, 0, &half));
        assert_false(sel_published_full(s, 0, &most));
        assert_false(sel_published_full(s, 0, NULL));
        assert_false(sel_published_full(s, 1, &half));
        assert_int_equal(sel_pick(s, 0, 16, &half, 1, -1, &w, &r), SEL_ALL_BUSY);
        assert_int_equal(sel_pick(s, 0, 16, &most, 1, -1, &w, &r), SEL_OK);
        assert_int_equal(w, 0);
        assert_int_equal(sel_pick(s, 0, 16, NULL, 1, -1, &w, &r), SEL_OK);
        sel_view(s, 0, 0, &half, &v);
        assert_false(v.published_room);
        sel_view(s, 0, 0, &most, &v);
        assert_true(v.published_room);
        sel_view(s, 0, 0, NULL, &v);
        assert_true(v.published_room);
        assert_true(v.booked_room);
    }
    m.kv_used_blocks = 80; /* over both */
    sel_message(s, 0, &m, 0);
    assert_true(sel_published_full(s, 0, &most));
    assert_true(sel_published_full(s, 0, &half));
    assert_int_equal(sel_pick(s, 0, 16, &most, 1, -1, &w, &r), SEL_ALL_BUSY);
    assert_int_equal(sel_pick(s, 0, 16, NULL, 1, -1, &w, &r), SEL_OK);
    m.kv_used_blocks = 40; /* within both */
    sel_message(s, 0, &m, 0);
    assert_false(sel_published_full(s, 0, &half));
    assert_false(sel_published_full(s, 0, &most));
    assert_int_equal(sel_pick(s, 0, 16, &half, 1, -1, &w, &r), SEL_OK);
    sel_free(s);
}

/* Sets that differ in one field only are told apart, and so is a set from itself with a
 * field unset: each keeps its own slot, asked in any order. */
static void test_slots_told_apart(void **state)
{
    enum { SETS = 6 };
    static const int order[][SETS] = {
        {0, 1, 2, 3, 4, 5}, {5, 4, 3, 2, 1, 0}, {1, 0, 4, 0, 3, 5}, {2, 2, 0, 3, 1, 4}};
    struct sel *s = view(1, 1);
    struct busy_thresholds t[SETS];
    struct sel_booking b = {0};
    int w;
    unsigned r;

    (void) state;
    t[0] = unset();
    t[0].active_decode_blocks_threshold = 0.5;       /* 50 blocks */
    t[0].active_prefill_tokens_threshold = 1000;     /* tokens */
    t[0].active_prefill_tokens_threshold_frac = 0.9; /* 90 of the budget of 100 */
    for (int i = 1; i < SETS; i++)
        t[i] = t[0];
    t[1].active_prefill_tokens_threshold_frac = 0.7; /* the fraction alone: 70 */
    t[2].active_prefill_tokens_threshold = 75;       /* the absolute alone */
    t[3].active_decode_blocks_threshold = 0.05;      /* the decode alone: 5 blocks */
    t[4].active_prefill_tokens_threshold_frac = NAN; /* t[1] with the fraction unset */
    t[5].active_decode_blocks_threshold = NAN;       /* t[3] with the decode unset */
    sel_book(s, &b, 0, 0, 50); /* 50 tokens, 4 blocks; 30 more: 80 tokens, 6 blocks */
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++)
        for (int n = 0; n < SETS; n++) {
            int i = order[k][n];

            assert_int_equal(sel_pick(s, 0, 30, &t[i], -1, -1, &w, &r),
                             i >= 1 && i <= 3 ? SEL_ALL_BUSY : SEL_OK);
        }
    sel_release(s, &b);
    sel_free(s);
}

/* Asking under other sets in between (the class gate) moves no turn: ties still go round. */
static void test_slots_room_keeps_turn(void **state)
{
    struct sel *s = view(3, 1);
    struct busy_thresholds reject = unset(), cls = unset();
    int seen[3] = {0}, prev = -1, w;
    unsigned r;

    (void) state;
    reject.active_decode_blocks_threshold = 0.9;
    cls.active_prefill_tokens_threshold_frac = 1.0;
    for (int i = 0; i < 9; i++) {
        assert_true(sel_room(s, 0, 32, &cls));
        assert_int_equal(sel_pick(s, 0, 32, &reject, -1, -1, &w, &r), SEL_OK);
        assert_true(sel_room(s, 0, 32, &cls));
        assert_true(sel_room(s, 0, 32, NULL));
        assert_int_not_equal(w, prev);
        seen[w]++;
        prev = w;
    }
    assert_int_equal(seen[0], 3);
    assert_int_equal(seen[1], 3);
    assert_int_equal(seen[2], 3);
    sel_free(s);
}

/* A rank that holds part of the prompt adds, as blocks, only those it does not hold: with
 * 40 blocks of others' load against none, it still wins a 40-block prompt it holds 32 of
 * (40 + 8 prefill + 8 new, against 40 + 40), as it would not if the whole prompt's blocks
 * counted as new there (40 + 8 + 40). */
static void test_prefix_hit_adds_its_new_blocks(void **state)
{
    struct sel *s = view(2, 1);
    struct busy_thresholds t = unset();
    struct admit_load m = load(0, 0);
    struct sel_hit hit = {.worker = 0, .rank = 0, .cached = 512};
    int64_t cached;
    int w;
    unsigned r;

    (void) state;
    m.active_decode_blocks = 40;
    sel_message(s, 0, &m, 0);
    assert_int_equal(sel_pick_kv(s, 0, 640, &t, -1, -1, NULL, NULL, 0, &w, &r, &cached), SEL_OK);
    assert_int_equal(w, 1);
    assert_int_equal(sel_pick_kv(s, 0, 640, &t, -1, -1, NULL, &hit, 1, &w, &r, &cached), SEL_OK);
    assert_int_equal(w, 0);
    assert_int_equal(cached, 512);
    sel_free(s);
}

/* Prefix hits (sel_pick_kv): a rank that holds part of the prompt needs room for, and pays
 * for, only its uncached part; its booking books that part as prefill and the whole prompt's
 * blocks; a rank whose room the uncached part exceeds is out, whatever it holds. */
static void test_prefix_hits(void **state)
{
    struct sel *s = view(2, 1);
    struct busy_thresholds t = unset();
    struct sel_hit hit = {.worker = 1, .rank = 0, .cached = 48};
    struct sel_booking b[2];
    int64_t cached = -1;
    int w = -1;
    unsigned r = 9;

    (void) state;
    memset(b, 0, sizeof b);
    t.active_prefill_tokens_threshold = 100;
    /* Both idle: without the hit the first worker, with it the one that holds 48 tokens. */
    assert_int_equal(sel_pick_kv(s, 0, 64, &t, -1, -1, NULL, NULL, 0, &w, &r, &cached), SEL_OK);
    assert_int_equal(w, 0);
    assert_int_equal(cached, 0);
    assert_int_equal(sel_pick_kv(s, 0, 64, &t, -1, -1, NULL, &hit, 1, &w, &r, &cached), SEL_OK);
    assert_int_equal(w, 1);
    assert_int_equal(r, 0);
    assert_int_equal(cached, 48);
    /* Excluded, or not eligible: the hit is not a candidate. */
    assert_int_equal(sel_pick_kv(s, 0, 64, &t, 1, -1, NULL, &hit, 1, &w, &r, &cached), SEL_OK);
    assert_int_equal(w, 0);
    assert_int_equal(cached, 0);
    sel_free(s);

    /* One worker with 90 tokens in prefill, a limit of 100: a prompt of 64 fits only where
     * 60 of it are cached (4 more), not 48 (16 more). */
    s = view(1, 1);
    sel_book(s, &b[0], 0, 0, 90);
    hit.worker = 0;
    assert_int_equal(sel_pick_kv(s, 0, 64, &t, -1, -1, NULL, NULL, 0, &w, &r, &cached),
                     SEL_ALL_BUSY);
    assert_int_equal(sel_pick_kv(s, 0, 64, &t, -1, -1, NULL, &hit, 1, &w, &r, &cached),
                     SEL_ALL_BUSY);
    hit.cached = 60;
    assert_int_equal(sel_pick_kv(s, 0, 64, &t, -1, -1, NULL, &hit, 1, &w, &r, &cached), SEL_OK);
    assert_int_equal(cached, 60);
    sel_book_cached(s, &b[1], w, r, 64, cached);
    assert_int_equal(booked_of(s, 0, 0).prefill_tokens, 94);
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 6 + 4);
    sel_first_token(s, &b[1]);
    assert_int_equal(booked_of(s, 0, 0).prefill_tokens, 90);
    sel_release(s, &b[1]);
    sel_release(s, &b[0]);
    assert_int_equal(booked_of(s, 0, 0).prefill_tokens, 0);
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 0);
    sel_free(s);
}

/* The class queue's gate with prefix hits (sel_gate_kv): a prompt over the class's threshold
 * whole but under it uncached is let through where a rank holds the cached part, judged by the
 * same rule as sel_pick_kv(); without hits it is sel_gate_in(); asking moves no turn. */
static void test_gate_hits(void **state)
{
    struct sel *s = view(1, 1);
    struct busy_thresholds cls = unset();
    struct sel_hit hit = {.worker = 0, .rank = 0, .cached = 48};
    struct sel_booking b;
    int w = -1;
    unsigned r;

    (void) state;
    memset(&b, 0, sizeof b);
    cls.active_prefill_tokens_threshold = 100;
    sel_book(s, &b, 0, 0, 90); /* 90 in prefill: a prompt of 64 is over, its last 4 are not */
    assert_int_equal(sel_gate_in(s, 0, 64, &cls, -1, NULL), SEL_ALL_BUSY);
    assert_int_equal(sel_gate_kv(s, 0, 64, &cls, -1, NULL, NULL, 0), SEL_ALL_BUSY);
    assert_int_equal(sel_gate_kv(s, 0, 64, &cls, -1, NULL, &hit, 1), SEL_ALL_BUSY); /* 16 more */
    hit.cached = 60;
    assert_int_equal(sel_gate_kv(s, 0, 64, &cls, -1, NULL, &hit, 1), SEL_OK); /* 4 more */
    assert_int_equal(sel_gate_kv(s, 0, 64, &cls, 0, NULL, &hit, 1), SEL_OK);  /* pinned there */
    /* A hit of a worker the request may not go to counts for nothing. */
    {
        uint64_t none = 0;

        assert_int_equal(sel_gate_kv(s, 0, 64, &cls, -1, &none, &hit, 1), SEL_NO_WORKER);
    }
    /* The pick it stands for books nothing and keeps the turn. */
    assert_int_equal(booked_of(s, 0, 0).prefill_tokens, 90);
    sel_release(s, &b);
    sel_free(s);

    /* Two idle workers, the hit on the first: asking does not make the second next. */
    s = view(2, 1);
    hit.cached = 48;
    assert_int_equal(sel_gate_kv(s, 0, 64, &cls, -1, NULL, &hit, 1), SEL_OK);
    assert_int_equal(sel_pick(s, 0, 64, &cls, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    sel_free(s);
}

/* A rank that holds most of a prompt is judged on its uncached part as prefill, but on the
 * whole prompt's blocks against the decode limit: it holds them all while the request runs. */
static void test_prefix_hits_decode_room(void **state)
{
    struct sel *s = view(1, 1);
    struct busy_thresholds t = unset();
    struct sel_hit hit = {.worker = 0, .rank = 0, .cached = 304};
    struct sel_booking b[2];
    int64_t cached = -1;
    int w = -1;
    unsigned r = 9;

    (void) state;
    memset(b, 0, sizeof b);
    t.active_decode_blocks_threshold = 0.5; /* 50 of the 100 blocks */
    sel_book(s, &b[0], 0, 0, 640);          /* 40 blocks */
    sel_first_token(s, &b[0]);
    /* 20 blocks, 19 of them cached: 60 blocks would be held, over the 50 */
    assert_int_equal(sel_pick_kv(s, 0, 320, &t, -1, -1, NULL, &hit, 1, &w, &r, &cached),
                     SEL_ALL_BUSY);
    /* 10 blocks, 9 cached: 50, within */
    hit.cached = 144;
    assert_int_equal(sel_pick_kv(s, 0, 160, &t, -1, -1, NULL, &hit, 1, &w, &r, &cached), SEL_OK);
    assert_int_equal(cached, 144);
    sel_book_cached(s, &b[1], w, r, 160, cached);
    assert_int_equal(booked_of(s, 0, 0).decode_blocks, 50);
    sel_release(s, &b[1]);
    sel_release(s, &b[0]);
    sel_free(s);
}

/* The weight of prefill in the cost: W x prefill blocks + decode blocks; 0 is 1's cost. */
static void test_prefill_weight(void **state)
{
    struct sel *s = view(2, 1);
    struct sel_booking b[2];
    int w = -1;
    unsigned r;

    (void) state;
    memset(b, 0, sizeof b);
    sel_book(s, &b[0], 0, 0, 160); /* decode 10 blocks once its prefill is over */
    sel_first_token(s, &b[0]);
    sel_book(s, &b[1], 1, 0, 64); /* prefill 4 blocks, decode 4 */
    /* A request of one block: worker 0 costs 10 + 2, worker 1 8 + 2 at weight 1; at 3,
     * 10 + 3 + 1 against 12 + 4 + 3 + 1. */
    assert_int_equal(sel_pick(s, 0, 16, NULL, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 1);
    sel_prefill_weight(s, 3);
    assert_int_equal(sel_pick(s, 0, 16, NULL, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    sel_prefill_weight(s, 0);
    assert_int_equal(sel_pick(s, 0, 16, NULL, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 1);
    sel_release(s, &b[0]);
    sel_release(s, &b[1]);
    sel_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_book_release),
        cmocka_unit_test(test_prefix_hits),
        cmocka_unit_test(test_prefix_hit_adds_its_new_blocks),
        cmocka_unit_test(test_gate_hits),
        cmocka_unit_test(test_prefix_hits_decode_room),
        cmocka_unit_test(test_prefill_weight),
        cmocka_unit_test(test_release_points),
        cmocka_unit_test(test_lowest_cost),
        cmocka_unit_test(test_lowest_cost_rank),
        cmocka_unit_test(test_cheapest_rank_without_room),
        cmocka_unit_test(test_ties_rotate),
        cmocka_unit_test(test_output_blocks),
        cmocka_unit_test(test_projection_reject),
        cmocka_unit_test(test_projection_is_has_room),
        cmocka_unit_test(test_projection_spills),
        cmocka_unit_test(test_no_worker),
        cmocka_unit_test(test_liveness_saturates),
        cmocka_unit_test(test_heartbeat_bounded),
        cmocka_unit_test(test_silent_rank_dropped),
        cmocka_unit_test(test_lost_until_it_speaks),
        cmocka_unit_test(test_all_busy_not_no_worker),
        cmocka_unit_test(test_pinned),
        cmocka_unit_test(test_retire_revive),
        cmocka_unit_test(test_reset_reuses_index),
        cmocka_unit_test(test_monitor_published),
        cmocka_unit_test(test_monitor_ranks),
        cmocka_unit_test(test_monitor_latch),
        cmocka_unit_test(test_thresholds_change),
        cmocka_unit_test(test_block_size),
        cmocka_unit_test(test_block_size_restarts),
        cmocka_unit_test(test_cost_in_blocks),
        cmocka_unit_test(test_cost_counts_published),
        cmocka_unit_test(test_cost_counts_cached_once),
        cmocka_unit_test(test_no_thresholds_null),
        cmocka_unit_test(test_unset_admits),
        cmocka_unit_test(test_rank_limit),
        cmocka_unit_test(test_view_unknown_rank),
        cmocka_unit_test(test_workers_grow),
        cmocka_unit_test(test_many_cycles),
        cmocka_unit_test(test_slots_two_sets),
        cmocka_unit_test(test_slots_more_sets_than_slots),
        cmocka_unit_test(test_slots_grow),
        cmocka_unit_test(test_slots_eviction),
        cmocka_unit_test(test_slots_booking_every_slot),
        cmocka_unit_test(test_slots_capacity_restart),
        cmocka_unit_test(test_slots_published_full),
        cmocka_unit_test(test_slots_told_apart),
        cmocka_unit_test(test_slots_room_keeps_turn),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
