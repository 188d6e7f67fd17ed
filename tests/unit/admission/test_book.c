/* Unit tests for the book of admitted load, and for composing load messages from it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/book.h"
#include "admission/loadsrc.h"

#include <math.h>
#include <string.h>

static void test_prefill_then_decode(void **state)
{
    struct book *b = book_new(1, 16);
    struct book_req r1 = {0}, r2 = {0};
    const struct book_rank *k = book_rank(b, 0);

    (void) state;
    book_admit(b, &r1, 100);
    book_admit(b, &r2, 20);
    assert_int_equal(k->prefill_tokens, 120);
    assert_int_equal(k->decode_blocks, 7 + 2); /* ceil(100/16) + ceil(20/16) */
    book_first_byte(b, &r1);
    book_first_byte(b, &r1); /* twice is once */
    assert_int_equal(k->prefill_tokens, 20);
    book_output(b, &r1, 12); /* 112 tokens: still 7 blocks */
    assert_int_equal(k->decode_blocks, 9);
    book_output(b, &r1, 1); /* 113: 8 blocks */
    assert_int_equal(k->decode_blocks, 10);
    book_release(b, &r2);
    assert_int_equal(k->prefill_tokens, 0);
    assert_int_equal(k->decode_blocks, 8);
    book_release(b, &r2); /* idempotent */
    book_release(b, &r1);
    assert_int_equal(k->requests, 0);
    assert_int_equal(k->decode_blocks, 0);
    assert_int_equal(k->tokens, 0);
    book_free(b);
}

static void test_least_loaded_rank_and_reconfigure(void **state)
{
    struct book *b = book_new(2, 16);
    struct book_req r[4];

    (void) state;
    memset(r, 0, sizeof r);
    assert_int_equal(book_admit(b, &r[0], 1000), 0);
    assert_int_equal(book_admit(b, &r[1], 10), 1);
    assert_int_equal(book_admit(b, &r[2], 10), 1); /* rank 1 still has fewer tokens */
    assert_int_equal(book_rank(b, 1)->prefill_tokens, 20);
    /* A new block size recomputes every booking; fewer ranks fold onto the last one. */
    book_configure(b, 2, 4);
    assert_int_equal(book_rank(b, 0)->decode_blocks, 250);
    assert_int_equal(book_rank(b, 1)->decode_blocks, 6);
    book_configure(b, 1, 4);
    assert_int_equal(book_ranks(b), 1);
    assert_int_equal(book_rank(b, 0)->decode_blocks, 256);
    assert_int_equal(book_rank(b, 0)->prefill_tokens, 1020);
    for (int i = 0; i < 3; i++)
        book_release(b, &r[i]);
    assert_int_equal(book_rank(b, 0)->decode_blocks, 0);
    book_free(b);
}

static void test_loadsrc_composes_and_nulls(void **state)
{
    struct book *b = book_new(2, 16);
    struct book_req r = {0};
    struct gate_stats st = {.slots_used = 3, .queued = 2, .limit = 4, .queue_limit = 8};
    struct engine_snapshot e;
    struct admit_load msgs[8];
    struct loadsrc_in in = {&st, 0, b, &e, 0, ADMIT_LOAD_SERVING, NULL, ADMIT_LOAD_ROLE_BOTH};
    unsigned n;

    (void) state;
    memset(&e, 0, sizeof e);
    e.nranks = 2;
    for (int i = 0; i < 2; i++) {
        e.ranks[i].present = 1;
        e.ranks[i].kv_usage = i ? NAN : 0.25;
        e.ranks[i].num_gpu_blocks = 1000;
        e.ranks[i].block_size = 16;
        e.ranks[i].max_num_batched_tokens = ENGINE_UNKNOWN;
        e.ranks[i].running = e.ranks[i].waiting = ENGINE_UNKNOWN;
    }
    book_admit(b, &r, 33);
    loadsrc_fill(&in, msgs, 8, &n);
    assert_int_equal(n, 2);
    assert_int_equal(msgs[0].kv_used_blocks, 250);
    assert_int_equal(msgs[0].kv_total_blocks, 1000);
    assert_int_equal(msgs[1].kv_used_blocks, ADMIT_LOAD_UNKNOWN); /* usage unknown */
    assert_int_equal(msgs[0].active_prefill_tokens, 33);
    assert_int_equal(msgs[0].active_decode_blocks, 3);
    assert_int_equal(msgs[1].active_prefill_tokens, 0);
    assert_int_equal(msgs[0].engine_requests, 3);
    assert_int_equal(msgs[1].queued_requests, 2);
    assert_int_equal(msgs[1].request_queue_limit, 8);
    assert_int_equal(msgs[0].max_num_batched_tokens, ADMIT_LOAD_UNKNOWN);
    assert_int_equal(msgs[0].kv_block_size, 16);
    assert_int_equal(msgs[1].kv_block_size, 16);
    assert_int_equal(msgs[0].role, ADMIT_LOAD_ROLE_BOTH);
    /* The worker's role goes into every rank's message. */
    in.role = ADMIT_LOAD_ROLE_DECODE;
    loadsrc_fill(&in, msgs, 8, &n);
    assert_int_equal(msgs[0].role, ADMIT_LOAD_ROLE_DECODE);
    assert_int_equal(msgs[1].role, ADMIT_LOAD_ROLE_DECODE);
    /* The block size is the book's (which worker.c sets from the engine's, else from
     * --block-size), not a copy of the scrape's: a scrape saying 16 does not override 32. */
    book_configure(b, 2, 32);
    loadsrc_fill(&in, msgs, 8, &n);
    assert_int_equal(msgs[0].kv_block_size, 32);
    assert_int_equal(msgs[1].kv_block_size, 32);
    assert_int_equal(msgs[0].active_decode_blocks, 2); /* ceil(33 / 32): counted in it */
    /* Without a fresh scrape every engine field is unknown; a fallback budget is used. */
    in.engine = NULL;
    in.fallback_max_batched_tokens = 4096;
    in.gate = NULL;
    in.inflight_nocap = 5;
    in.state = ADMIT_LOAD_DRAINING;
    loadsrc_fill(&in, msgs, 8, &n);
    assert_int_equal(msgs[0].kv_used_blocks, ADMIT_LOAD_UNKNOWN);
    assert_int_equal(msgs[0].kv_total_blocks, ADMIT_LOAD_UNKNOWN);
    assert_int_equal(msgs[0].max_num_batched_tokens, 4096);
    assert_int_equal(msgs[0].engine_requests, 5);
    assert_int_equal(msgs[0].engine_request_limit, ADMIT_LOAD_UNKNOWN);
    assert_int_equal(msgs[0].queued_requests, 0);
    assert_int_equal(msgs[0].state, ADMIT_LOAD_DRAINING);
    assert_int_equal(msgs[0].kv_block_size, 32); /* still what the booking is counted in */
    /* Never more messages than room. */
    loadsrc_fill(&in, msgs, 1, &n);
    assert_int_equal(n, 1);
    /* The model list: unknown without one, else the same in every rank's message. */
    assert_int_equal(msgs[0].models.n, ADMIT_LOAD_UNKNOWN);
    {
        struct admit_load_models l;
        admit_load_models_clear(&l);
        assert_int_equal(admit_load_models_add(&l, "m1", 2), 0);
        in.models = &l;
        loadsrc_fill(&in, msgs, 8, &n);
        for (unsigned i = 0; i < n; i++) {
            assert_int_equal(msgs[i].models.n, 1);
            assert_string_equal(msgs[i].models.names, "m1");
        }
    }
    book_release(b, &r);
    book_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_then_decode),
        cmocka_unit_test(test_least_loaded_rank_and_reconfigure),
        cmocka_unit_test(test_loadsrc_composes_and_nulls),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
