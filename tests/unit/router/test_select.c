/* Unit tests for the router's selection and booking (src/router/select.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "router/select.h"

#include <string.h>

static void message(struct sel *s, int w, int64_t rank, int64_t now)
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
    sel_message(s, w, &m, now);
}

/* A booking moves the rank's booked load, and its release brings it back to 0. */
static void test_book_release(void **state)
{
    struct sel *s = sel_new(3, 16);
    struct busy_thresholds t;
    struct sel_booking b = {0};
    struct sel_rank_view v;
    int w;
    unsigned r;

    (void) state;
    busy_thresholds_unset(&t);
    assert_int_equal(sel_pick(s, 0, 10, &t, -1, -1, &w, &r), SEL_NO_WORKER);
    sel_add_worker(s);
    message(s, 0, 0, 0);
    assert_int_equal(sel_pick(s, 0, 33, &t, -1, -1, &w, &r), SEL_OK);
    assert_int_equal(w, 0);
    sel_book(s, &b, w, r, 33);
    sel_view(s, 0, 0, &t, &v);
    assert_int_equal(v.booked.prefill_tokens, 33);
    assert_int_equal(v.booked.decode_blocks, 3);
    sel_first_token(s, &b);
    sel_view(s, 0, 0, &t, &v);
    assert_int_equal(v.booked.prefill_tokens, 0);
    assert_int_equal(v.booked.decode_blocks, 3);
    sel_release(s, &b);
    sel_release(s, &b);
    sel_view(s, 0, 0, &t, &v);
    assert_int_equal(v.booked.decode_blocks, 0);
    assert_int_equal(v.booked.requests, 0);
    sel_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_book_release),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
