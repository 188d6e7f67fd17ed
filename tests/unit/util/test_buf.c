/* Unit tests for the growable byte string and the pool that lends buffers one use at a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/buf.h"

#include <string.h>

static void test_append_and_printf(void **state)
{
    struct buf b;

    (void) state;
    buf_init(&b);
    buf_puts(&b, "ab");
    buf_append(&b, "cd", 2);
    buf_printf(&b, "-%d-", 42);
    assert_string_equal(b.data, "abcd-42-");
    assert_int_equal(b.len, 8);
    buf_reset(&b);
    assert_string_equal(b.data, "");
    buf_free(&b);
    assert_null(b.data);
}

/* The rule behind admit-router's cross-talk fix: a buffer lent is never lent again until it
 * is given back, so a user that calls out (a hook that starts another exchange) keeps its
 * bytes whatever the nested user writes. */
static void test_nested_users_get_their_own(void **state)
{
    struct buf_pool p;
    struct buf *outer, *inner, *deeper;

    (void) state;
    buf_pool_init(&p);
    outer = buf_pool_take(&p);
    buf_puts(outer, "POST /a HTTP/1.1\r\nAuthorization: Bearer A\r\n");
    inner = buf_pool_take(&p);
    assert_ptr_not_equal(inner, outer);
    buf_puts(inner, "POST /b HTTP/1.1\r\nAuthorization: Bearer B\r\n");
    deeper = buf_pool_take(&p);
    assert_ptr_not_equal(deeper, outer);
    assert_ptr_not_equal(deeper, inner);
    assert_int_equal(deeper->len, 0);
    buf_pool_give(&p, deeper);
    buf_pool_give(&p, inner);
    assert_string_equal(outer->data, "POST /a HTTP/1.1\r\nAuthorization: Bearer A\r\n");
    assert_int_equal(p.lent, 1);
    buf_pool_give(&p, outer);
    assert_int_equal(p.lent, 0);
    buf_pool_free(&p);
}

/* In steady state nothing is allocated: a buffer given back is the next one lent, empty. */
static void test_reuse_is_empty(void **state)
{
    struct buf_pool p;
    struct buf *a, *b;

    (void) state;
    buf_pool_init(&p);
    a = buf_pool_take(&p);
    buf_puts(a, "secret");
    buf_pool_give(&p, a);
    b = buf_pool_take(&p);
    assert_ptr_equal(a, b);
    assert_int_equal(b->len, 0);
    assert_true(b->data == NULL || b->data[0] == '\0');
    /* Two kept buffers are lent as two, never one twice. */
    a = buf_pool_take(&p);
    assert_ptr_not_equal(a, b);
    buf_pool_give(&p, a);
    buf_pool_give(&p, b);
    a = buf_pool_take(&p);
    b = buf_pool_take(&p);
    assert_ptr_not_equal(a, b);
    assert_int_equal(p.n, 0);
    buf_pool_give(&p, a);
    buf_pool_give(&p, b);
    buf_pool_free(&p);
}

/* A buffer that grew past BUF_POOL_KEEP_BYTES gives its storage back; more buffers than the
 * pool keeps are freed (LeakSanitizer checks both). */
static void test_bounded(void **state)
{
    struct buf_pool p;
    struct buf *many[BUF_POOL_KEEP + 3];
    char big[4096];

    (void) state;
    memset(big, 'x', sizeof big);
    buf_pool_init(&p);
    for (size_t i = 0; i < BUF_POOL_KEEP + 3; i++)
        many[i] = buf_pool_take(&p);
    for (size_t i = 0; i < BUF_POOL_KEEP_BYTES / sizeof big + 1; i++)
        buf_append(many[0], big, sizeof big);
    buf_pool_give(&p, many[0]);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.spare[0]->cap, 0);
    for (size_t i = 1; i < BUF_POOL_KEEP + 3; i++)
        buf_pool_give(&p, many[i]);
    assert_int_equal(p.n, BUF_POOL_KEEP);
    assert_int_equal(p.lent, 0);
    buf_pool_free(&p);
    assert_int_equal(p.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_and_printf),
        cmocka_unit_test(test_nested_users_get_their_own),
        cmocka_unit_test(test_reuse_is_empty),
        cmocka_unit_test(test_bounded),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
