/* Unit tests for the busy predicate: each signal, their combinations, multi-rank workers, the
 * decode latch, unknown values and threshold validation; and the room rule itself (has_room,
 * worker_is_full) at each boundary, on load rows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/busy.h"

#include <math.h>
#include <string.h>

/* A rank with 1000 KV blocks, nothing in use and a 4096-token step budget. */
static struct admit_load idle_rank(void)
{
    struct admit_load m;

    admit_load_init(&m);
    m.kv_total_blocks = 1000;
    m.kv_used_blocks = 0;
    m.active_decode_blocks = 0;
    m.active_prefill_tokens = 0;
    m.max_num_batched_tokens = 4096;
    return m;
}

static struct busy_thresholds unset(void)
{
    struct busy_thresholds t;

    busy_thresholds_unset(&t);
    return t;
}

static void test_unset_disables(void **state)
{
    struct busy_thresholds t = unset();
    struct admit_load m = idle_rank();
    struct busy_latch l = {0};

    (void) state;
    assert_false(busy_thresholds_any(&t));
    m.kv_used_blocks = 1000;
    m.active_decode_blocks = 1000;
    m.active_prefill_tokens = 1000000000;
    assert_false(busy_rank(&t, &m, &l));
    assert_true(busy_has_room(&t, &m, 1, &l));
}

static void test_prefill_absolute(void **state)
{
    struct busy_thresholds t = unset();
    struct admit_load m = idle_rank();
    struct busy_latch l = {0};

    (void) state;
    t.active_prefill_tokens_threshold = 1000;
    assert_true(busy_thresholds_any(&t));
    m.active_prefill_tokens = 1000; /* at the threshold is not over */
    assert_false(busy_rank(&t, &m, &l));
    m.active_prefill_tokens = 1001;
    assert_true(busy_rank(&t, &m, &l));
    m.active_prefill_tokens = ADMIT_LOAD_UNKNOWN; /* the latch keeps 1001 */
    assert_true(busy_rank(&t, &m, &l));
    memset(&l, 0, sizeof l); /* a rank never heard from: unknown is room */
    assert_false(busy_rank(&t, &m, &l));
    t.active_prefill_tokens_threshold = 0; /* 0 is enabled: any prefill is too much */
    m.active_prefill_tokens = 1;
    assert_true(busy_rank(&t, &m, &l));
}

static void test_prefill_frac(void **state)
{
    struct busy_thresholds t = unset();
    struct admit_load m = idle_rank();
    struct busy_latch l = {0};

    (void) state;
    t.active_prefill_tokens_threshold_frac = 0.5; /* of 4096: 2048 */
    m.active_prefill_tokens = 2048;
    assert_false(busy_rank(&t, &m, &l));
    m.active_prefill_tokens = 2049;
    assert_true(busy_rank(&t, &m, &l));
    t.active_prefill_tokens_threshold_frac = 1.5; /* above the budget is allowed */
    m.active_prefill_tokens = 6144;
    assert_false(busy_rank(&t, &m, &l));
    m.active_prefill_tokens = 6145;
    assert_true(busy_rank(&t, &m, &l));
    t.active_prefill_tokens_threshold_frac = 1e300; /* beyond int64: never over, no UB */
    m.active_prefill_tokens = INT64_MAX;
    assert_false(busy_rank(&t, &m, &l));
}

static void test_prefill_frac_default_capacity(void **state)
{
    struct busy_thresholds t = unset();
    struct admit_load m = idle_rank();
    struct busy_latch l = {0};

    (void) state;
    t.active_prefill_tokens_threshold_frac = 0.1; /* of 10,000,000: 1,000,000 */
    m.max_num_batched_tokens = ADMIT_LOAD_UNKNOWN;
    m.active_prefill_tokens = 1000000;
    assert_false(busy_rank(&t, &m, &l));
    m.active_prefill_tokens = 1000001;
    assert_true(busy_rank(&t, &m, &l));
    m.max_num_batched_tokens = 0; /* a reported 0 is no capacity either */
    assert_true(busy_rank(&t, &m, &l));
    m.active_prefill_tokens = 5000;
    assert_false(busy_rank(&t, &m, &l));
}

static void test_decode_signals(void **state)
{
    struct busy_thresholds t = unset();
    struct admit_load m = idle_rank();
    struct busy_latch l = {0};

    (void) state;
    t.active_decode_blocks_threshold = 0.9;
    m.kv_used_blocks = 900; /* exactly 0.9: not over */
    assert_false(busy_rank(&t, &m, &l));
    m.kv_used_blocks = 901;
    assert_true(busy_rank(&t, &m, &l));
    m.kv_used_blocks = 0;
    m.active_decode_blocks = 901; /* the booked signal alone */
    assert_true(busy_rank(&t, &m, &l));
    m.active_decode_blocks = 900;
    assert_false(busy_rank(&t, &m, &l));
    m.active_decode_blocks = ADMIT_LOAD_UNKNOWN; /* never known: no load */
    m.kv_used_blocks = ADMIT_LOAD_UNKNOWN;
    memset(&l, 0, sizeof l);
    assert_false(busy_rank(&t, &m, &l));
}

static void test_decode_latch(void **state)
{
    struct busy_thresholds t = unset();
    struct admit_load m = idle_rank();
    struct busy_latch l = {0};

    (void) state;
    t.active_decode_blocks_threshold = 0.8;
    m.kv_used_blocks = 850; /* set by the engine's signal */
    m.active_decode_blocks = 100;
    assert_true(busy_rank(&t, &m, &l));
    m.kv_used_blocks = 700; /* engine drops, booked now over: still held */
    m.active_decode_blocks = 810;
    assert_true(busy_rank(&t, &m, &l));
    m.active_decode_blocks = 800; /* both at or below: released */
    assert_false(busy_rank(&t, &m, &l));
    m.active_decode_blocks = 900; /* set again by the booked signal */
    assert_true(busy_rank(&t, &m, &l));
    m.active_decode_blocks = ADMIT_LOAD_UNKNOWN; /* unknown is not under: still held */
    assert_true(busy_rank(&t, &m, &l));
    m.active_decode_blocks = 0; /* known and under: released */
    assert_false(busy_rank(&t, &m, &l));
}

/* A message without capacity (kv_total_blocks unknown or 0, as a failed engine scrape or a
 * restart sends) is judged against the last capacity known: it does not read as released.
 * A rank whose capacity was never known skips the decode signal (never "full"). */
static void test_decode_total_unknown_or_zero(void **state)
{
    struct busy_thresholds t = unset();
    struct admit_load m = idle_rank();
    struct busy_latch l = {0};

    (void) state;
    t.active_decode_blocks_threshold = 0.5;
    m.kv_used_blocks = 900;
    assert_true(busy_rank(&t, &m, &l));
    m.kv_total_blocks = 0; /* no ratio in this message: the last total judges it */
    assert_true(busy_rank(&t, &m, &l));
    m.kv_total_blocks = ADMIT_LOAD_UNKNOWN;
    assert_true(busy_rank(&t, &m, &l));
    m.kv_used_blocks = 100; /* known and under, against the kept total of 1000 */
    assert_false(busy_rank(&t, &m, &l));
    m.kv_used_blocks = 900;
    memset(&l, 0, sizeof l); /* capacity never known: the signal is skipped */
    assert_false(busy_rank(&t, &m, &l));
    m.kv_total_blocks = 0;
    assert_false(busy_rank(&t, &m, &l));
    m.kv_total_blocks = 1000;
    assert_true(busy_rank(&t, &m, &l));
}

/* The latch clears only once every signal it judges is known and at or below its threshold
 * (seed 000). For each signal, a rank it alone marks busy stays busy through messages that
 * do not know it: the signal unknown and every other one low; a failed engine scrape
 * (kv_used_blocks, kv_total_blocks and the engine's max_num_batched_tokens null) with
 * admitd's own bookings under; a message without capacity. A message with the signal known
 * and under releases it. */
static void test_latch_holds_until_known_and_under(void **state)
{
    enum { KV_USED, BOOKED, PREFILL };
    static const struct {
        const char *name;
        int64_t abs;
        double frac;
        int field;
        int64_t over;
    } sig[] = {
        {"kv_used_blocks", 5000, 0.9, KV_USED, 900},
        {"active_decode_blocks", 5000, 0.9, BOOKED, 900},
        {"active_prefill_tokens (absolute)", 3000, NAN, PREFILL, 3001},
        {"active_prefill_tokens (fraction)", -1, 0.5, PREFILL, 2049},
    };
    static const char *const without[] = {"the signal unknown", "a failed engine scrape",
                                          "no capacity"};

    (void) state;
    for (size_t k = 0; k < sizeof sig / sizeof *sig; k++) {
        for (int how = 0; how < 3; how++) {
            struct busy_thresholds t = unset();
            struct admit_load m = idle_rank(), later;
            struct busy_latch l = {0};
            int64_t *f[2];

            t.active_decode_blocks_threshold = 0.8; /* 800 of 1000 blocks */
            t.active_prefill_tokens_threshold = sig[k].abs;
            t.active_prefill_tokens_threshold_frac = sig[k].frac; /* of 4096 */
            m.kv_used_blocks = m.active_decode_blocks = m.active_prefill_tokens = 100;
            assert_false(busy_rank(&t, &m, &l));
            later = m;
            f[0] = sig[k].field == KV_USED  ? &m.kv_used_blocks
                   : sig[k].field == BOOKED ? &m.active_decode_blocks
                                            : &m.active_prefill_tokens;
            f[1] = sig[k].field == KV_USED  ? &later.kv_used_blocks
                   : sig[k].field == BOOKED ? &later.active_decode_blocks
                                            : &later.active_prefill_tokens;
            *f[0] = sig[k].over;
            assert_true(busy_rank(&t, &m, &l));
            if (how == 0) {
                later.kv_used_blocks = later.active_decode_blocks = 0;
                later.active_prefill_tokens = 0;
                *f[1] = ADMIT_LOAD_UNKNOWN;
            } else if (how == 1) {
                later = m;
                later.kv_used_blocks = ADMIT_LOAD_UNKNOWN;
                later.kv_total_blocks = ADMIT_LOAD_UNKNOWN;
                later.max_num_batched_tokens = ADMIT_LOAD_UNKNOWN;
                if (sig[k].field != BOOKED) /* admitd's other bookings: under */
                    later.active_decode_blocks = 0;
                if (sig[k].field != PREFILL)
                    later.active_prefill_tokens = 0;
            } else {
                later = m;
                later.kv_total_blocks = 0;
                later.max_num_batched_tokens = 0;
            }
            for (int i = 0; i < 3; i++)
                if (!busy_rank(&t, &later, &l))
                    fail_msg("busy by %s, released by %s", sig[k].name, without[how]);
            assert_false(busy_has_room(&t, &later, 1, &l));
            later = idle_rank(); /* known and under */
            assert_false(busy_rank(&t, &later, &l));
            assert_true(busy_has_room(&t, &later, 1, &l));
        }
    }
}

static void test_combinations(void **state)
{
    struct busy_thresholds t = unset();
    struct admit_load m = idle_rank();
    struct busy_latch l = {0};

    (void) state;
    t.active_decode_blocks_threshold = 0.9;
    t.active_prefill_tokens_threshold = 1000;
    t.active_prefill_tokens_threshold_frac = 0.1; /* 409 of 4096 */
    assert_false(busy_rank(&t, &m, &l));
    m.active_prefill_tokens = 410; /* only the fraction */
    assert_true(busy_rank(&t, &m, &l));
    t.active_prefill_tokens_threshold_frac = NAN;
    assert_false(busy_rank(&t, &m, &l));
    m.active_prefill_tokens = 1001; /* only the absolute */
    assert_true(busy_rank(&t, &m, &l));
    m.active_prefill_tokens = 0;
    m.kv_used_blocks = 950; /* only decode */
    assert_true(busy_rank(&t, &m, &l));
    m.active_prefill_tokens = 5000; /* decode and prefill together */
    assert_true(busy_rank(&t, &m, &l));
    m.kv_used_blocks = 0;
    m.active_prefill_tokens = 0;
    assert_false(busy_rank(&t, &m, &l));
}

static void test_multi_rank(void **state)
{
    struct busy_thresholds t = unset();
    struct admit_load r[3] = {idle_rank(), idle_rank(), idle_rank()};
    struct busy_latch l[3] = {{0}, {0}, {0}};

    (void) state;
    t.active_decode_blocks_threshold = 0.5;
    assert_true(busy_has_room(&t, r, 0, l)); /* no ranks heard from: not busy */
    r[0].kv_used_blocks = 600;
    r[1].kv_used_blocks = 600;
    assert_false(busy_worker(&t, r, 3, l));
    assert_true(busy_has_room(&t, r, 3, l));
    assert_int_equal(l[0].kv_used_blocks, 600); /* every rank's latch is updated */
    assert_int_equal(l[1].kv_used_blocks, 600);
    assert_int_equal(l[2].kv_used_blocks, 0);
    r[2].active_decode_blocks = 501;
    assert_true(busy_worker(&t, r, 3, l));
    assert_false(busy_has_room(&t, r, 3, l));
    assert_true(busy_worker(&t, r, 2, l)); /* rank 2 never heard of: not passed */
    r[1].kv_used_blocks = 10;
    assert_true(busy_has_room(&t, r, 3, l));
    assert_int_equal(l[1].kv_used_blocks, 10);
}

static void test_validate(void **state)
{
    struct busy_thresholds t = unset();
    char err[160];

    (void) state;
    assert_int_equal(busy_thresholds_validate(&t, err, sizeof err), 0);
    t.active_decode_blocks_threshold = 0.0;
    assert_int_equal(busy_thresholds_validate(&t, err, sizeof err), 0);
    t.active_decode_blocks_threshold = 1.0;
    assert_int_equal(busy_thresholds_validate(&t, err, sizeof err), 0);
    t.active_decode_blocks_threshold = 1.5;
    assert_int_equal(busy_thresholds_validate(&t, err, sizeof err), -1);
    assert_string_equal(err, "active_decode_blocks_threshold must be between 0.0 and 1.0, got 1.5");
    t.active_decode_blocks_threshold = -0.1;
    assert_int_equal(busy_thresholds_validate(&t, err, sizeof err), -1);
    t.active_decode_blocks_threshold = INFINITY;
    assert_int_equal(busy_thresholds_validate(&t, err, sizeof err), -1);
    t.active_decode_blocks_threshold = 0.5;
    t.active_prefill_tokens_threshold_frac = -0.5;
    assert_int_equal(busy_thresholds_validate(&t, err, sizeof err), -1);
    assert_non_null(strstr(err, "active_prefill_tokens_threshold_frac"));
    t.active_prefill_tokens_threshold_frac = INFINITY;
    assert_int_equal(busy_thresholds_validate(&t, err, sizeof err), -1);
    t.active_prefill_tokens_threshold_frac = 2.0;
    assert_int_equal(busy_thresholds_validate(&t, err, sizeof err), 0);
    t.active_prefill_tokens_threshold = -2;
    assert_int_equal(busy_thresholds_validate(&t, err, sizeof err), -1);
    t.active_prefill_tokens_threshold = 0;
    assert_int_equal(busy_thresholds_validate(&t, err, sizeof err), 0);
}

/* ---- the room rule on load rows: has_room() and worker_is_full() ----------------------- */

/* A row of known load, heard from. */
static struct busy_load row(int64_t prefill, int64_t blocks)
{
    struct busy_load l = {prefill, blocks, 1, 1};

    return l;
}

static struct busy_capacity capacity(int64_t max_batched, int64_t kv_total)
{
    struct busy_capacity c = {max_batched, kv_total, 16};

    return c;
}

/* 6 of 8 blocks is 0.75 > 0.5: full; 4 of 8 is exactly 0.5, and the rule is a strict `>`. */
static void test_room_decode_boundary(void **state)
{
    struct busy_thresholds t = unset();
    struct busy_capacity c = capacity(100, 8);
    struct busy_load l;

    (void) state;
    t.active_decode_blocks_threshold = 0.5;
    l = row(0, 6);
    assert_false(has_room(&l, &c, &t));
    l = row(0, 5);
    assert_false(has_room(&l, &c, &t));
    l = row(0, 4);
    assert_true(has_room(&l, &c, &t));
    l = row(0, 0);
    assert_true(has_room(&l, &c, &t));
    t.active_decode_blocks_threshold = 1.0; /* only more blocks than the rank has is over */
    l = row(0, 8);
    assert_true(has_room(&l, &c, &t));
    l = row(0, 9);
    assert_false(has_room(&l, &c, &t));
    t.active_decode_blocks_threshold = 0.0; /* any block at all is over */
    l = row(0, 1);
    assert_false(has_room(&l, &c, &t));
    l = row(0, 0);
    assert_true(has_room(&l, &c, &t));
}

/* A fraction 0.5 of a reported budget of 100 is a limit of 50: 64 is past it, 50 is not. */
static void test_room_prefill_frac_boundary(void **state)
{
    struct busy_thresholds t = unset();
    struct busy_capacity c = capacity(100, 8);
    struct busy_load l;

    (void) state;
    t.active_prefill_tokens_threshold_frac = 0.5;
    l = row(64, 0);
    assert_false(has_room(&l, &c, &t));
    l = row(51, 0);
    assert_false(has_room(&l, &c, &t));
    l = row(50, 0);
    assert_true(has_room(&l, &c, &t));
    t.active_prefill_tokens_threshold_frac = 0.555; /* (int64)(55.5) = 55: truncated */
    l = row(55, 0);
    assert_true(has_room(&l, &c, &t));
    l = row(56, 0);
    assert_false(has_room(&l, &c, &t));
}

/* The absolute threshold: at it is room, one more is not; the tighter of the two wins. */
static void test_room_prefill_absolute_boundary(void **state)
{
    struct busy_thresholds t = unset();
    struct busy_capacity c = capacity(100, 8);
    struct busy_load l;

    (void) state;
    t.active_prefill_tokens_threshold = 70;
    l = row(70, 0);
    assert_true(has_room(&l, &c, &t));
    l = row(71, 0);
    assert_false(has_room(&l, &c, &t));
    t.active_prefill_tokens_threshold_frac = 0.5; /* 50 < 70: the fraction decides */
    l = row(51, 0);
    assert_false(has_room(&l, &c, &t));
    t.active_prefill_tokens_threshold_frac = 0.9; /* 90 > 70: the absolute decides */
    l = row(71, 0);
    assert_false(has_room(&l, &c, &t));
    l = row(70, 0);
    assert_true(has_room(&l, &c, &t));
    t.active_prefill_tokens_threshold = 0;
    l = row(0, 0);
    assert_true(has_room(&l, &c, &t));
    l = row(1, 0);
    assert_false(has_room(&l, &c, &t));
}

/* An unknown (or 0) max_num_batched_tokens is a budget of 10,000,000. */
static void test_room_default_budget(void **state)
{
    struct busy_thresholds t = unset();
    struct busy_capacity c = capacity(-1, 8);
    struct busy_limits lim;
    struct busy_load l;

    (void) state;
    assert_int_equal(busy_prefill_budget(&c), 10000000);
    assert_int_equal(BUSY_DEFAULT_MAX_BATCHED_TOKENS, 10000000);
    c.max_num_batched_tokens = 0;
    assert_int_equal(busy_prefill_budget(&c), 10000000);
    c.max_num_batched_tokens = 4096;
    assert_int_equal(busy_prefill_budget(&c), 4096);
    c.max_num_batched_tokens = -1;
    t.active_prefill_tokens_threshold_frac = 0.5;
    busy_limits(&c, &t, &lim);
    assert_int_equal(lim.prefill_tokens, 5000000);
    assert_int_equal(lim.decode_blocks, INT64_MAX);
    l = row(5000000, 0);
    assert_true(has_room(&l, &c, &t));
    l = row(5000001, 0);
    assert_false(has_room(&l, &c, &t));
}

/* A rank never heard from carries no load: it has room under any thresholds. */
static void test_room_idle_rank(void **state)
{
    struct busy_thresholds t = unset();
    struct busy_capacity c = capacity(100, 8);
    struct busy_load l = {0, 0, 0, 0};

    (void) state;
    t.active_decode_blocks_threshold = 0.0;
    t.active_prefill_tokens_threshold = 0;
    t.active_prefill_tokens_threshold_frac = 0.0;
    assert_true(has_room(&l, &c, &t));
    assert_false(worker_is_full(&l, &c, 1, &t));
    l.decode_blocks = 1; /* the same thresholds do judge a loaded rank */
    assert_false(has_room(&l, &c, &t));
    assert_true(worker_is_full(&l, &c, 1, &t));
}

/* Without a KV capacity there is no ratio: no number of blocks makes the rank full. */
static void test_room_kv_total_unknown(void **state)
{
    static const int64_t totals[] = {0, -1};
    static const int64_t blocks[] = {0, 1, 9, 1000000, INT64_MAX};
    struct busy_thresholds t = unset();

    (void) state;
    t.active_decode_blocks_threshold = 0.0;
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++) {
        struct busy_capacity c = capacity(100, totals[i]);

        for (size_t j = 0; j < sizeof blocks / sizeof blocks[0]; j++) {
            struct busy_load l = row(0, blocks[j]);

            assert_true(has_room(&l, &c, &t));
            assert_false(worker_is_full(&l, &c, 1, &t));
        }
    }
    {
        struct busy_capacity c = capacity(100, 8); /* the same row, with a capacity */
        struct busy_load l = row(0, 9);

        assert_false(has_room(&l, &c, &t));
    }
}

/* Unknown (negative) load takes no room away, even under thresholds of 0. */
static void test_room_unknown_load(void **state)
{
    struct busy_thresholds t = unset();
    struct busy_capacity c = capacity(100, 8);
    struct busy_load l = row(-1, -1);

    (void) state;
    t.active_decode_blocks_threshold = 0.0;
    t.active_prefill_tokens_threshold = 0;
    assert_true(has_room(&l, &c, &t));
    l.prefill_tokens = 1;
    assert_false(has_room(&l, &c, &t));
}

/* Full only when every rank is: 1, 2 and 4 ranks, each with one free rank in every position. */
static void test_worker_full_every_rank(void **state)
{
    static const size_t sizes[] = {1, 2, 4};
    struct busy_thresholds t = unset();
    struct busy_capacity c[4];
    struct busy_load l[4];

    (void) state;
    t.active_decode_blocks_threshold = 0.5;
    for (size_t i = 0; i < 4; i++)
        c[i] = capacity(100, 8);
    assert_false(worker_is_full(l, c, 0, &t)); /* no ranks: not full */
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];

        for (size_t i = 0; i < n; i++)
            l[i] = row(0, 6);
        assert_true(worker_is_full(l, c, n, &t));
        for (size_t free_rank = 0; free_rank < n; free_rank++) {
            l[free_rank] = row(0, 4);
            assert_false(worker_is_full(l, c, n, &t));
            l[free_rank] = row(0, 6);
        }
        assert_true(worker_is_full(l, c, n, &t));
    }
    /* Each rank by its own capacity: 6 blocks fill a rank of 8, not one of 16. */
    l[0] = row(0, 6);
    l[1] = row(0, 6);
    c[1] = capacity(100, 16);
    assert_false(worker_is_full(l, c, 2, &t));
    c[1] = capacity(100, 8);
    assert_true(worker_is_full(l, c, 2, &t));
    /* Ranks full by different signals still make a full worker. */
    t.active_prefill_tokens_threshold = 10;
    l[0] = row(11, 0);
    l[1] = row(0, 6);
    assert_true(worker_is_full(l, c, 2, &t));
    l[0] = row(10, 0);
    assert_false(worker_is_full(l, c, 2, &t));
}

/* No threshold set: no load is too much. */
static void test_room_unset_never_full(void **state)
{
    struct busy_thresholds t = unset();
    struct busy_capacity c[2] = {capacity(100, 8), capacity(-1, -1)};
    struct busy_load l[2] = {row(INT64_MAX, INT64_MAX), row(1000000, 1000000)};
    struct busy_limits lim;

    (void) state;
    busy_limits(&c[0], &t, &lim);
    assert_int_equal(lim.prefill_tokens, INT64_MAX);
    assert_int_equal(lim.decode_blocks, INT64_MAX);
    assert_true(has_room(&l[0], &c[0], &t));
    assert_true(has_room(&l[1], &c[1], &t));
    assert_false(worker_is_full(l, c, 2, &t));
    t.active_decode_blocks_threshold = 0.5; /* one signal set: the same rows are full */
    assert_false(has_room(&l[0], &c[0], &t));
    assert_true(has_room(&l[1], &c[1], &t)); /* no capacity: still room */
}

/* busy_within() on kept limits is has_room(): the same verdict on a grid of rows. */
static void test_room_limits_same_rule(void **state)
{
    struct busy_thresholds t = unset();
    struct busy_capacity c = capacity(100, 8);
    struct busy_limits lim;

    (void) state;
    t.active_decode_blocks_threshold = 0.7;
    t.active_prefill_tokens_threshold = 60;
    t.active_prefill_tokens_threshold_frac = 0.5;
    busy_limits(&c, &t, &lim);
    assert_int_equal(lim.prefill_tokens, 50);
    assert_int_equal(lim.decode_blocks, 5); /* 5/8 = 0.625 <= 0.7 < 6/8 */
    for (int64_t p = -1; p <= 70; p++)
        for (int64_t b = -1; b <= 10; b++) {
            struct busy_load l = row(p, b);

            assert_int_equal(busy_within(&l, &lim), has_room(&l, &c, &t));
            assert_int_equal(has_room(&l, &c, &t), p <= 50 && b <= 5);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unset_disables),
        cmocka_unit_test(test_prefill_absolute),
        cmocka_unit_test(test_prefill_frac),
        cmocka_unit_test(test_prefill_frac_default_capacity),
        cmocka_unit_test(test_decode_signals),
        cmocka_unit_test(test_decode_latch),
        cmocka_unit_test(test_latch_holds_until_known_and_under),
        cmocka_unit_test(test_decode_total_unknown_or_zero),
        cmocka_unit_test(test_combinations),
        cmocka_unit_test(test_multi_rank),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_room_decode_boundary),
        cmocka_unit_test(test_room_prefill_frac_boundary),
        cmocka_unit_test(test_room_prefill_absolute_boundary),
        cmocka_unit_test(test_room_default_budget),
        cmocka_unit_test(test_room_idle_rank),
        cmocka_unit_test(test_room_kv_total_unknown),
        cmocka_unit_test(test_room_unknown_load),
        cmocka_unit_test(test_worker_full_every_rank),
        cmocka_unit_test(test_room_unset_never_full),
        cmocka_unit_test(test_room_limits_same_rule),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
