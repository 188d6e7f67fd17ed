/* Unit tests for the busy predicate: each signal, their combinations, multi-rank workers, the
 * decode latch, unknown values and threshold validation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/busy.h"

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
    m.active_prefill_tokens = ADMIT_LOAD_UNKNOWN;
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
    assert_true(l.decode);
    m.kv_used_blocks = 0;
    m.active_decode_blocks = 901; /* the booked signal alone */
    assert_true(busy_rank(&t, &m, &l));
    m.active_decode_blocks = ADMIT_LOAD_UNKNOWN;
    m.kv_used_blocks = ADMIT_LOAD_UNKNOWN;
    assert_false(busy_rank(&t, &m, &l));
    assert_false(l.decode);
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
    assert_true(l.decode);
    m.kv_used_blocks = 700; /* engine drops, booked now over: still held */
    m.active_decode_blocks = 810;
    assert_true(busy_rank(&t, &m, &l));
    assert_true(l.decode);
    m.active_decode_blocks = 800; /* both at or below: released */
    assert_false(busy_rank(&t, &m, &l));
    assert_false(l.decode);
    m.active_decode_blocks = 900; /* set again by the booked signal */
    assert_true(busy_rank(&t, &m, &l));
    m.active_decode_blocks = ADMIT_LOAD_UNKNOWN; /* unknown counts as below: released */
    assert_false(busy_rank(&t, &m, &l));
    assert_false(l.decode);
}

static void test_decode_total_unknown_or_zero(void **state)
{
    struct busy_thresholds t = unset();
    struct admit_load m = idle_rank();
    struct busy_latch l = {0};

    (void) state;
    t.active_decode_blocks_threshold = 0.5;
    m.kv_used_blocks = 900;
    assert_true(busy_rank(&t, &m, &l));
    m.kv_total_blocks = 0; /* no ratio: not busy, latch left as it is */
    assert_false(busy_rank(&t, &m, &l));
    assert_true(l.decode);
    m.kv_total_blocks = ADMIT_LOAD_UNKNOWN;
    assert_false(busy_rank(&t, &m, &l));
    assert_true(l.decode);
    m.kv_total_blocks = 1000;
    m.kv_used_blocks = 100;
    assert_false(busy_rank(&t, &m, &l));
    assert_false(l.decode);
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
    assert_true(l[0].decode); /* every rank's latch is updated */
    assert_true(l[1].decode);
    assert_false(l[2].decode);
    r[2].active_decode_blocks = 501;
    assert_true(busy_worker(&t, r, 3, l));
    assert_false(busy_has_room(&t, r, 3, l));
    assert_true(busy_worker(&t, r, 2, l)); /* rank 2 never heard of: not passed */
    r[1].kv_used_blocks = 10;
    assert_true(busy_has_room(&t, r, 3, l));
    assert_false(l[1].decode);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unset_disables),
        cmocka_unit_test(test_prefill_absolute),
        cmocka_unit_test(test_prefill_frac),
        cmocka_unit_test(test_prefill_frac_default_capacity),
        cmocka_unit_test(test_decode_signals),
        cmocka_unit_test(test_decode_latch),
        cmocka_unit_test(test_decode_total_unknown_or_zero),
        cmocka_unit_test(test_combinations),
        cmocka_unit_test(test_multi_rank),
        cmocka_unit_test(test_validate),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
