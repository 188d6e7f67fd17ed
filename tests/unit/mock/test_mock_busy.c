/* Unit tests for the mock engine's per-rank prefill timeline (--prefill-interference). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mock/mock_busy.h"

#include <math.h>

/* An idle rank prefills at once; the next prefill queues behind the first; decode tokens due
 * inside the work wait for its end, those due after it do not. */
static void test_serialised(void **state)
{
    struct mock_busy b = {0};
    uint64_t start, end;

    (void) state;
    assert_int_equal(mock_busy_next(&b, 1000), 1000);
    end = mock_busy_reserve(&b, 1000, 50.0, &start);
    assert_int_equal(start, 1000);
    assert_int_equal(end, 51000);
    end = mock_busy_reserve(&b, 2000, 20.5, &start);
    assert_int_equal(start, 51000);
    assert_int_equal(end, 71500);
    assert_int_equal(mock_busy_next(&b, 1500), 71500);
    assert_int_equal(mock_busy_next(&b, 71499), 71500);
    assert_int_equal(mock_busy_next(&b, 71500), 71500);
    assert_int_equal(mock_busy_next(&b, 90000), 90000);
    /* idle again: a new prefill starts now, not at the old end */
    end = mock_busy_reserve(&b, 90000, 1.0, &start);
    assert_int_equal(start, 90000);
    assert_int_equal(end, 91000);
}

/* Nothing to compute (a decode leg with its whole prompt transferred) holds the rank for no
 * time, nor does a NaN; an absurd length is capped rather than wrapping. */
static void test_nothing_to_compute(void **state)
{
    struct mock_busy b = {0};
    uint64_t start;

    (void) state;
    assert_int_equal(mock_busy_reserve(&b, 5000, 0.0, &start), 5000);
    assert_int_equal(mock_busy_reserve(&b, 5000, -3.0, &start), 5000);
    assert_int_equal(mock_busy_reserve(&b, 5000, NAN, &start), 5000);
    assert_int_equal(mock_busy_next(&b, 5000), 5000);
    mock_busy_reserve(&b, 5000, 10.0, &start);
    /* while busy, a zero reservation still ends now and leaves the work as it was */
    assert_int_equal(mock_busy_reserve(&b, 6000, 0.0, &start), 6000);
    assert_int_equal(mock_busy_next(&b, 6000), 15000);
    b.until_us = 0;
    assert_int_equal(mock_busy_reserve(&b, 0, 1e300, &start), (uint64_t) 1e12);
}

/* A request that leaves gives its prefill back only if it was the last queued and had not
 * begun; a running one keeps the rank busy, as an engine finishes the step it started. */
static void test_cancel(void **state)
{
    struct mock_busy b = {0};
    uint64_t s1, e1, s2, e2, s3, e3;

    (void) state;
    e1 = mock_busy_reserve(&b, 0, 10.0, &s1);
    e2 = mock_busy_reserve(&b, 0, 10.0, &s2);
    e3 = mock_busy_reserve(&b, 0, 10.0, &s3);
    mock_busy_cancel(&b, 1000, s2, e2); /* not the last: nothing moves */
    assert_int_equal(mock_busy_next(&b, 1000), 30000);
    mock_busy_cancel(&b, 1000, s3, e3); /* the last, not begun */
    assert_int_equal(mock_busy_next(&b, 1000), 20000);
    mock_busy_cancel(&b, 1000, s1, e1); /* running */
    assert_int_equal(mock_busy_next(&b, 1000), 20000);
    mock_busy_cancel(&b, 12000, s2, e2); /* now the last, but already begun */
    assert_int_equal(mock_busy_next(&b, 12000), 20000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serialised),
        cmocka_unit_test(test_nothing_to_compute),
        cmocka_unit_test(test_cancel),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
