/* Unit tests for the clocks: monotonic, consistent across units, and the differences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/clock.h"

#include <time.h>

static void test_monotonic_units_agree(void **state)
{
    int64_t ms0, us, ms1, ms2;
    double s;

    (void) state;
    ms0 = clock_mono_ms();
    us = clock_mono_us();
    ms1 = clock_mono_ms();
    s = clock_mono_s();
    ms2 = clock_mono_ms();
    assert_true(ms0 <= ms1);
    assert_true(us / 1000 >= ms0 && us / 1000 <= ms1);
    assert_true(s * 1000 >= (double) ms1 - 1 && s * 1000 <= (double) ms2 + 1);
}

static void test_seconds_between_and_since(void **state)
{
    struct timespec a = {.tv_sec = 10, .tv_nsec = 900000000},
                    b = {.tv_sec = 12, .tv_nsec = 100000000};
    struct timespec t0;
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 20000000};

    (void) state;
    assert_true(clock_seconds_between(&a, &b) > 1.1999 && clock_seconds_between(&a, &b) < 1.2001);
    assert_true(clock_seconds_between(&b, &a) < -1.1999);
    clock_mono(&t0);
    nanosleep(&pause, NULL);
    assert_true(clock_seconds_since(&t0) >= 0.019);
}

static void test_wall_clock_is_unix_time(void **state)
{
    (void) state;
    /* After 2020-01-01 and within a second of time(). */
    assert_true(clock_wall_ms() > INT64_C(1577836800000));
    assert_true(clock_wall_ms() / 1000 - (int64_t) time(NULL) <= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_monotonic_units_agree),
        cmocka_unit_test(test_seconds_between_and_since),
        cmocka_unit_test(test_wall_clock_is_unix_time),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
