/* Unit tests for the router's prefix index (src/router/kvroute.h) with the engines' KV events:
 * where decisions go (the history, or an event worker's side table for token ids), a lookup's
 * deepest of the three indexes per holder, the side table's TTL, removals and clears, a worker
 * forgotten from every index, and the events index's generation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "router/kvroute.h"

#include <string.h>

#define TTL_MS 100

static struct router_cfg cfg_of(double weight)
{
    struct router_cfg c;

    memset(&c, 0, sizeof c);
    c.kv_overlap_weight = weight;
    c.kv_block_size = 16;
    c.router_ttl_secs = 120;
    c.kv_predicted_ttl_ms = TTL_MS;
    return c;
}

static struct kvroute *new_kv(void)
{
    struct router_cfg c = cfg_of(1);

    return kvr_new(&c);
}

/* The cached tokens kvr_match gives worker's rank 0 for keys[0 .. n) at now, 0 when it is no
 * holder; each holder is reported once. */
static int64_t cached_of(struct kvroute *kv, const uint64_t *keys, size_t n, uint64_t now,
                         int worker)
{
    struct sel_hit hits[KVR_MAX_HITS];
    size_t m = kvr_match(kv, keys, n, 1 << 20, now, hits);
    int64_t c = 0;
    int found = 0;

    for (size_t i = 0; i < m; i++)
        if (hits[i].worker == (uint32_t) worker && hits[i].rank == 0) {
            c = hits[i].cached;
            found++;
        }
    assert_true(found <= 1);
    return c;
}

static const uint64_t keys[8] = {11, 12, 13, 14, 15, 16, 17, 18};

static void test_without_events_the_history(void **state)
{
    struct kvroute *kv = new_kv();
    struct kvi_stats s;
    uint64_t ev, before;

    (void) state;
    kvr_routed(kv, 0, 0, keys, 8, 1, 1000);
    assert_int_equal(cached_of(kv, keys, 8, 1000 + 10 * TTL_MS, 0), 8 * 16);
    assert_false(kvr_event_worker(kv, 0));
    kvr_stats(kv, &s, &ev);
    assert_int_equal(s.blocks, 8);
    assert_int_equal(ev, 0);
    /* the events index and side table are made at the first event worker, not before */
    before = s.bytes;
    assert_true(kvr_events_on(kv) != 0);
    kvr_stats(kv, &s, &ev);
    assert_true(s.bytes > before);
    kvr_free(kv);
}

static void test_event_worker_exact_in_side_table(void **state)
{
    struct kvroute *kv = new_kv();

    (void) state;
    assert_true(kvr_events_on(kv) != 0);
    kvr_ev_worker(kv, 1);
    assert_true(kvr_event_worker(kv, 1));
    /* its token-id decision holds for the side table's TTL only */
    kvr_routed(kv, 1, 0, keys, 8, 1, 1000);
    assert_int_equal(kvr_held(kv, 1), 8);
    assert_int_equal(cached_of(kv, keys, 8, 1000 + TTL_MS / 2, 1), 8 * 16);
    assert_int_equal(cached_of(kv, keys, 8, 1000 + 2 * TTL_MS, 1), 0);
    /* its text decision goes to the history, as every worker's */
    kvr_routed(kv, 1, 0, keys, 4, 0, 2000);
    assert_int_equal(cached_of(kv, keys, 8, 2000 + 10 * TTL_MS, 1), 4 * 16);
    /* another worker's token-id decision too, while it sends no events */
    kvr_routed(kv, 2, 0, keys, 6, 1, 2000);
    assert_int_equal(cached_of(kv, keys, 8, 2000 + 10 * TTL_MS, 2), 6 * 16);
    kvr_free(kv);
}

static void test_deepest_of_three(void **state)
{
    struct kvroute *kv = new_kv();
    struct kvi_stats s;
    uint64_t ev;

    (void) state;
    kvr_events_on(kv);
    kvr_ev_worker(kv, 2);
    kvr_ev_stored(kv, 2, 0, keys, 4, 1000);
    kvr_routed(kv, 2, 0, keys, 2, 1, 1000); /* the side table: shallower */
    kvr_routed(kv, 2, 0, keys, 3, 0, 1000); /* the history (text keys of the same numbers) */
    kvr_routed(kv, 3, 0, keys, 6, 1, 1000); /* a worker without events */
    assert_int_equal(cached_of(kv, keys, 8, 1001, 2), 4 * 16);
    assert_int_equal(cached_of(kv, keys, 8, 1001, 3), 6 * 16);
    kvr_routed(kv, 2, 0, keys, 7, 1, 1001); /* the side table now deeper */
    assert_int_equal(cached_of(kv, keys, 8, 1002, 2), 7 * 16);
    assert_int_equal(kvr_events_held(kv, 2), 4);
    kvr_stats(kv, &s, &ev);
    assert_int_equal(ev, 4);
    assert_int_equal(s.lookups, 3); /* one per kvr_match, not per index */
    assert_int_equal(s.matched_blocks, 6 + 6 + 7);
    kvr_free(kv);
}

static void test_removed_and_cleared(void **state)
{
    struct kvroute *kv = new_kv();

    (void) state;
    kvr_events_on(kv);
    kvr_ev_worker(kv, 2);
    kvr_ev_stored(kv, 2, 0, keys, 8, 1000);
    kvr_routed(kv, 2, 0, keys, 8, 1, 1000);
    /* the engine evicted the tail: from the events and from the guess */
    kvr_ev_removed(kv, 2, 0, keys + 5, 3);
    assert_int_equal(cached_of(kv, keys, 8, 1001, 2), 5 * 16);
    /* a gap: the events go, the guesses stay */
    kvr_ev_clear(kv, 2, 0, 0);
    assert_int_equal(kvr_events_held(kv, 2), 0);
    assert_int_equal(cached_of(kv, keys, 8, 1001, 2), 5 * 16);
    /* the engine cleared its cache: both */
    kvr_ev_stored(kv, 2, 0, keys, 8, 1001);
    kvr_ev_clear(kv, 2, 0, 1);
    assert_int_equal(cached_of(kv, keys, 8, 1002, 2), 0);
    assert_int_equal(kvr_held(kv, 2), 0);
    kvr_free(kv);
}

static void test_forgotten_everywhere(void **state)
{
    struct kvroute *kv = new_kv();

    (void) state;
    kvr_events_on(kv);
    kvr_ev_worker(kv, 4);
    kvr_ev_stored(kv, 4, 0, keys, 8, 1000);
    kvr_routed(kv, 4, 0, keys, 8, 1, 1000);
    kvr_routed(kv, 4, 0, keys, 8, 0, 1000);
    kvr_forget(kv, 4);
    assert_int_equal(cached_of(kv, keys, 8, 1001, 4), 0);
    assert_int_equal(kvr_held(kv, 4) + kvr_events_held(kv, 4), 0);
    assert_false(kvr_event_worker(kv, 4)); /* its index may be a new worker's next */
    kvr_free(kv);
}

/* --router-max-tree-size bounds the history and the events index, each apart: the blocks
 * past it push out the least recently used, and each index is allocated for it. */
static void test_max_tree_size(void **state)
{
    struct router_cfg c = cfg_of(1);
    struct kvroute *kv;
    struct kvi_stats s, big;
    uint64_t ev_blocks, many[600];

    (void) state;
    for (size_t i = 0; i < 600; i++)
        many[i] = 1000 + i;
    kv = kvr_new(&c);
    kvr_stats(kv, &big, &ev_blocks);
    kvr_free(kv);
    c.router_max_tree_size = 1024;
    kv = kvr_new(&c);
    for (int w = 0; w < 3; w++) /* 1,800 blocks of history into 1,024 */
        kvr_routed(kv, w, 0, many, 600, 0, 1);
    kvr_stats(kv, &s, &ev_blocks);
    assert_int_equal(s.blocks, 1024);
    assert_true(s.evicted_global >= 1800 - 1024);
    assert_true(s.bytes < big.bytes / 64); /* 1,024 blocks, not the default 262,144 */
    assert_true(kvr_events_on(kv) != 0);
    kvr_ev_worker(kv, 5);
    for (int w = 5; w < 7; w++) /* 1,200 of events into their own 1,024 */
        kvr_ev_stored(kv, w, 0, many, 600, 1);
    kvr_stats(kv, &s, &ev_blocks);
    assert_int_equal(ev_blocks, 1024);
    kvr_free(kv);
}

static void test_generation(void **state)
{
    struct kvroute *kv = new_kv();
    struct router_cfg off = cfg_of(0), on = cfg_of(1);
    struct admit_load m;
    uint32_t g;

    (void) state;
    g = kvr_events_on(kv);
    assert_int_equal(kvr_events_on(kv), g); /* made once */
    kvr_ev_stored(kv, 1, 0, keys, 8, 1000);
    /* a worker beyond the index's size: made again, empty, of another generation */
    admit_load_init(&m);
    m.dp_rank = 0;
    m.kv_total_blocks = 100;
    m.kv_block_size = 16;
    kvr_message(kv, 200, &m);
    assert_true(kvr_generation(kv) != g);
    assert_int_equal(kvr_events_held(kv, 1), 0);
    g = kvr_generation(kv);
    /* weight 0: no index, no events; back on: a new generation at the first event */
    kvr_reconfigure(kv, &off);
    assert_int_equal(kvr_events_on(kv), 0);
    assert_false(kvr_on(kv));
    kvr_reconfigure(kv, &on);
    assert_true(kvr_events_on(kv) != 0);
    assert_true(kvr_generation(kv) != g);
    kvr_free(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_events_the_history),
        cmocka_unit_test(test_event_worker_exact_in_side_table),
        cmocka_unit_test(test_deepest_of_three),
        cmocka_unit_test(test_removed_and_cleared),
        cmocka_unit_test(test_forgotten_everywhere),
        cmocka_unit_test(test_max_tree_size),
        cmocka_unit_test(test_generation),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
