/* Unit tests for the Prometheus text writer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/buf.h"
#include "wire/prom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_family_and_samples(void **state)
{
    struct buf b, l;

    (void) state;
    buf_init(&b);
    buf_init(&l);
    prom_family(&b, "x_total", "counter", "Help with \\ and\nnewline");
    prom_label(&l, "k", "a\"b\\c\nd");
    prom_label(&l, "z", "2");
    prom_sample(&b, "x_total", l.data, 3);
    prom_sample(&b, "x_total", NULL, 0.25);
    prom_sample(&b, "y", NULL, NAN);
    prom_sample(&b, "y", NULL, INFINITY);
    assert_string_equal(b.data, "# HELP x_total Help with \\\\ and\\nnewline\n"
                                "# TYPE x_total counter\n"
                                "x_total{k=\"a\\\"b\\\\c\\nd\",z=\"2\"} 3\n"
                                "x_total 0.25\n"
                                "y NaN\n"
                                "y +Inf\n");
    buf_free(&b);
    buf_free(&l);
}

/* The one-label helpers escape the value as prom_label does: a worker or reason name with a
 * quote in it cannot break the exposition. */
static void test_one_label_helpers(void **state)
{
    static const char *const names[] = {"ok", "a\"b"};
    static const uint64_t vals[] = {7, 2};
    struct buf b;

    (void) state;
    buf_init(&b);
    prom_sample1(&b, "s", "k", "x\\y\"z\n", 1.5);
    prom_labelled(&b, "t_total", "counter", "Help", "r", names, vals, 2);
    prom_counter(&b, "c_total", "C", 9);
    prom_gauge(&b, "g", "G", -1);
    assert_string_equal(b.data, "s{k=\"x\\\\y\\\"z\\n\"} 1.5\n"
                                "# HELP t_total Help\n# TYPE t_total counter\n"
                                "t_total{r=\"ok\"} 7\nt_total{r=\"a\\\"b\"} 2\n"
                                "# HELP c_total C\n# TYPE c_total counter\nc_total 9\n"
                                "# HELP g G\n# TYPE g gauge\ng -1\n");
    buf_free(&b);
}

static void test_histogram_is_cumulative(void **state)
{
    static const double bounds[] = {0.1, 1};
    struct prom_hist h;
    struct buf b;

    (void) state;
    prom_hist_init(&h, bounds, 2);
    prom_hist_observe(&h, 0.05);
    prom_hist_observe(&h, 0.1); /* on the bound: le="0.1" includes it */
    prom_hist_observe(&h, 0.5);
    prom_hist_observe(&h, 7);
    buf_init(&b);
    prom_hist_write(&b, "w_seconds", "wait", &h);
    assert_string_equal(b.data, "# HELP w_seconds wait\n"
                                "# TYPE w_seconds histogram\n"
                                "w_seconds_bucket{le=\"0.1\"} 2\n"
                                "w_seconds_bucket{le=\"1\"} 3\n"
                                "w_seconds_bucket{le=\"+Inf\"} 4\n"
                                "w_seconds_sum 7.6500000000000004\n"
                                "w_seconds_count 4\n");
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_and_samples),
        cmocka_unit_test(test_one_label_helpers),
        cmocka_unit_test(test_histogram_is_cumulative),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
