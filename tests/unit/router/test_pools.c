/* Unit tests for the router's pools (src/router/pools.c): roles split a model's workers, an
 * aggregated fleet stays aggregated, and a disaggregated request needs a prefill worker and a
 * decode worker both with room, each pool judged by its own part of the thresholds (Dynamo's
 * split: prefill tokens for the prefill pool, decode blocks for the decode pool). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "router/pools.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void message(struct sel *s, int w, int64_t prefill, int64_t blocks)
{
    struct admit_load m;

    admit_load_init(&m);
    snprintf(m.worker_id, sizeof m.worker_id, "w%d", w);
    m.heartbeat_ms = 1000;
    m.kv_total_blocks = 100;
    m.kv_block_size = 16;
    m.kv_used_blocks = blocks;
    m.active_decode_blocks = blocks;
    m.active_prefill_tokens = prefill;
    m.max_num_batched_tokens = 1000;
    sel_message(s, w, &m, 10);
}

/* n workers, all heard from and idle, with the roles given. */
static struct sel *fleet(struct pools *p, const int *roles, int n)
{
    struct sel *s = sel_new(3, 16);

    for (int k = 0; k < n; k++) {
        assert_int_equal(sel_add_worker(s), k);
        message(s, k, 0, 0);
        pools_set(p, k, roles[k]);
    }
    return s;
}

static void thresholds(struct busy_thresholds *t, int64_t prefill, double blocks)
{
    busy_thresholds_unset(t);
    t->active_prefill_tokens_threshold = prefill;
    t->active_decode_blocks_threshold = blocks;
}

static void test_aggregated_fleet(void **state)
{
    struct pools *p = pools_new();
    const int roles[] = {ADMIT_LOAD_ROLE_BOTH, ADMIT_LOAD_ROLE_BOTH};
    struct sel *s = fleet(p, roles, 2);
    struct pools_req rq;

    (void) state;
    assert_false(pools_any(p));
    assert_int_equal(pools_split(p, 2, NULL, &rq), 0);
    assert_false(rq.pd);
    /* One decode worker makes the fleet disaggregated; retiring it makes it aggregated again. */
    pools_set(p, 1, ADMIT_LOAD_ROLE_DECODE);
    assert_true(pools_any(p));
    assert_int_equal(pools_split(p, 2, NULL, &rq), 1);
    assert_true(rq.agg);
    pools_set(p, 1, -1);
    assert_false(pools_any(p));
    assert_int_equal(pools_role(p, 1), -1);
    assert_int_equal(pools_role(p, 0), ADMIT_LOAD_ROLE_BOTH);
    sel_free(s);
    pools_free(p);
}

static void test_split_by_model(void **state)
{
    struct pools *p = pools_new();
    const int roles[] = {ADMIT_LOAD_ROLE_PREFILL, ADMIT_LOAD_ROLE_DECODE, ADMIT_LOAD_ROLE_BOTH,
                         ADMIT_LOAD_ROLE_PREFILL};
    struct sel *s = fleet(p, roles, 4);
    uint64_t model_b = (1u << 2); /* model B: worker 2 only (aggregated) */
    uint64_t model_a = (1u << 0) | (1u << 1);
    struct pools_req rq;

    (void) state;
    assert_int_equal(pools_split(p, 4, &model_b, &rq), 0); /* B's workers are all aggregated */
    assert_int_equal(pools_split(p, 4, &model_a, &rq), 1);
    assert_false(rq.agg);
    assert_int_equal(rq.pool[ADMIT_LOAD_ROLE_PREFILL][0], 1u);
    assert_int_equal(rq.pool[ADMIT_LOAD_ROLE_DECODE][0], 2u);
    assert_int_equal(pools_split(p, 4, NULL, &rq), 1);
    assert_true(rq.agg);
    assert_int_equal(rq.pool[ADMIT_LOAD_ROLE_PREFILL][0], 9u);
    sel_free(s);
    pools_free(p);
}

static void test_pair_and_split_thresholds(void **state)
{
    struct pools *p = pools_new();
    const int roles[] = {ADMIT_LOAD_ROLE_PREFILL, ADMIT_LOAD_ROLE_DECODE};
    struct sel *s = fleet(p, roles, 2);
    struct pools_req rq;
    struct pools_choice ch;
    struct busy_thresholds t, tp, td;

    (void) state;
    thresholds(&t, 100, 0.5);
    pools_thresholds(&t, &tp, &td);
    assert_true(isnan(tp.active_decode_blocks_threshold));
    assert_int_equal(tp.active_prefill_tokens_threshold, 100);
    assert_int_equal(td.active_prefill_tokens_threshold, -1);
    assert_true(td.active_decode_blocks_threshold == 0.5);
    assert_int_equal(pools_split(p, 2, NULL, &rq), 1);
    pools_pick(s, &rq, 10, 50, &t, NULL, 0, &ch);
    assert_int_equal(ch.res, SEL_OK);
    assert_int_equal(ch.pw, 0);
    assert_int_equal(ch.dw, 1);
    assert_int_equal(pools_gate(s, &rq, 10, 50, &t, NULL, 0), SEL_OK);
    /* The decode worker full of blocks: the prefill pool does not care, the pair is busy. */
    message(s, 1, 0, 90);
    pools_pick(s, &rq, 10, 50, &t, NULL, 0, &ch);
    assert_int_equal(ch.res, SEL_ALL_BUSY);
    assert_int_equal(ch.failed, ADMIT_LOAD_ROLE_DECODE);
    assert_int_equal(pools_gate(s, &rq, 10, 50, &t, NULL, 0), SEL_ALL_BUSY);
    /* Prefill tokens on the decode worker do not judge it; on the prefill worker they do. */
    message(s, 1, 5000, 0);
    pools_pick(s, &rq, 10, 50, &t, NULL, 0, &ch);
    assert_int_equal(ch.res, SEL_OK);
    message(s, 0, 5000, 0);
    pools_pick(s, &rq, 10, 50, &t, NULL, 0, &ch);
    assert_int_equal(ch.res, SEL_ALL_BUSY);
    assert_int_equal(ch.failed, ADMIT_LOAD_ROLE_PREFILL);
    /* Blocks on the prefill worker do not judge it. */
    message(s, 0, 0, 99);
    pools_pick(s, &rq, 10, 50, &t, NULL, 0, &ch);
    assert_int_equal(ch.res, SEL_OK);
    sel_free(s);
    pools_free(p);
}

static void test_empty_pool(void **state)
{
    struct pools *p = pools_new();
    const int roles[] = {ADMIT_LOAD_ROLE_PREFILL, ADMIT_LOAD_ROLE_BOTH};
    struct sel *s = fleet(p, roles, 2);
    struct pools_req rq;
    struct pools_choice ch;
    struct busy_thresholds t;
    int w;
    unsigned r;

    (void) state;
    thresholds(&t, 100, 0.5);
    assert_int_equal(pools_split(p, 2, NULL, &rq), 1);
    pools_pick(s, &rq, 10, 50, &t, NULL, 0, &ch);
    assert_int_equal(ch.res, SEL_NO_WORKER);
    assert_int_equal(ch.failed, ADMIT_LOAD_ROLE_DECODE);
    assert_int_equal(pools_gate(s, &rq, 10, 50, &t, NULL, 0), SEL_NO_WORKER);
    assert_int_equal(pools_pick_decode(s, &rq, 10, 50, &t, -1, &w, &r), SEL_NO_WORKER);
    sel_free(s);
    pools_free(p);
}

static void test_decode_migration(void **state)
{
    struct pools *p = pools_new();
    const int roles[] = {ADMIT_LOAD_ROLE_PREFILL, ADMIT_LOAD_ROLE_DECODE, ADMIT_LOAD_ROLE_DECODE};
    struct sel *s = fleet(p, roles, 3);
    struct pools_req rq;
    struct busy_thresholds t;
    int w;
    unsigned r;

    (void) state;
    thresholds(&t, 100, 0.5);
    assert_int_equal(pools_split(p, 3, NULL, &rq), 1);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(pools_pick_decode(s, &rq, 10, 50, &t, 1, &w, &r), SEL_OK);
        assert_int_equal(w, 2);
    }
    sel_free(s);
    pools_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aggregated_fleet),          cmocka_unit_test(test_split_by_model),
        cmocka_unit_test(test_pair_and_split_thresholds), cmocka_unit_test(test_empty_pool),
        cmocka_unit_test(test_decode_migration),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
