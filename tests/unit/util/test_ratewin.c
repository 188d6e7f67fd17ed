/* Unit tests for the slot-release rate window and the Retry-After estimate. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/ratewin.h"

static void test_rate_over_the_window(void **state)
{
    struct ratewin w;

    (void) state;
    ratewin_init(&w);
    assert_true(ratewin_rate(&w, 0) == 0);
    for (int i = 0; i < 20; i++)
        ratewin_add(&w, 100000 + i * 100); /* 20 releases over 2 s */
    assert_true(ratewin_rate(&w, 102000) == 2.0);
    /* Ten seconds later they have left the window, one bucket at a time. */
    assert_true(ratewin_rate(&w, 110500) > 0);
    assert_true(ratewin_rate(&w, 112000) == 0);
    /* A bucket reused for a later second starts from zero. */
    ratewin_add(&w, 120000);
    assert_true(ratewin_rate(&w, 120000) == 0.1);
}

static void test_estimate_is_clamped(void **state)
{
    (void) state;
    assert_int_equal(retry_after_estimate(0, 0), RATEWIN_SECONDS);
    assert_int_equal(retry_after_estimate(5, 0.0), RATEWIN_SECONDS);
    assert_int_equal(retry_after_estimate(0, 100), RETRY_AFTER_MIN);
    assert_int_equal(retry_after_estimate(3, 2.0), 2); /* (3+1)/2 */
    assert_int_equal(retry_after_estimate(4, 2.0), 3); /* ceil(5/2) */
    assert_int_equal(retry_after_estimate(1000, 0.1), RETRY_AFTER_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rate_over_the_window),
        cmocka_unit_test(test_estimate_is_clamped),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
