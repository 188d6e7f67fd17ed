/* Unit tests for the Prometheus text writer and admitd's metric families. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/metrics.h"
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

/* Returns the value of the first sample line that starts with `prefix ` exactly. */
static double sample(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);

    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, prefix, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    fail_msg("no sample %s", prefix);
    return -1;
}

static void test_metrics_render_dynamo_names(void **state)
{
    struct metrics m;
    struct gate_stats st = {
        .slots_used = 3, .queued = 5, .held = 1, .channel = 4, .limit = 3, .queue_limit = 16};
    struct metrics_view v = {&m, &st, NULL, "9.9.9"};
    struct buf b;

    (void) state;
    metrics_init(&m);
    m.outcomes[OUT_REJECTED] = 7;
    m.outcomes[OUT_OK] = 11;
    m.cancelled[STAGE_QUEUED] = 2;
    m.upstream_errors[UERR_CONNECT] = 1;
    prom_hist_observe(&m.queue_wait, 0.002);
    buf_init(&b);
    metrics_render(&v, &b);
    assert_non_null(strstr(b.data, "# TYPE dynamo_rejection_request_total counter\n"));
    assert_non_null(strstr(b.data, "# TYPE dynamo_engine_request gauge\n"));
    assert_non_null(strstr(b.data, "# TYPE dynamo_request_queue gauge\n"));
    assert_true(sample(b.data, "dynamo_rejection_request_total") == 7);
    assert_true(sample(b.data, "dynamo_engine_request") == 3);
    assert_true(sample(b.data, "dynamo_request_queue") == 5);
    assert_true(sample(b.data, "admitd_engine_request_limit") == 3);
    assert_true(sample(b.data, "admitd_request_queue_limit") == 16);
    assert_true(sample(b.data, "admitd_requests_total{outcome=\"ok\"}") == 11);
    assert_true(sample(b.data, "admitd_requests_total{outcome=\"rejected\"}") == 7);
    assert_true(sample(b.data, "admitd_client_cancellations_total{stage=\"queued\"}") == 2);
    assert_true(sample(b.data, "admitd_upstream_errors_total{kind=\"connect\"}") == 1);
    assert_true(sample(b.data, "admitd_queue_wait_seconds_count") == 1);
    assert_true(sample(b.data, "admitd_build_info{version=\"9.9.9\"}") == 1);
    /* Every sample's family has HELP and TYPE lines before it. */
    for (const char *p = b.data; *p;) {
        const char *nl = strchr(p, '\n');
        if (*p != '#') {
            char name[128];
            size_t n = strcspn(p, "{ ");
            char want[160];
            snprintf(name, sizeof name, "%.*s", (int) n, p);
            for (const char *suf = strstr(name, "_bucket"); suf && suf[7] == '\0'; suf = NULL)
                name[suf - name] = '\0';
            snprintf(want, sizeof want, "# TYPE %s ", name);
            if (strstr(b.data, want) == NULL) {
                /* _sum and _count belong to the histogram family. */
                char *u = strrchr(name, '_');
                if (u)
                    *u = '\0';
                snprintf(want, sizeof want, "# TYPE %s histogram", name);
                assert_non_null(strstr(b.data, want));
            }
        }
        p = nl + 1;
    }
    buf_free(&b);
    /* Without a cap, the gauges show in-flight work and an empty queue. */
    m.inflight_nocap = 4;
    v.gate = NULL;
    buf_init(&b);
    metrics_render(&v, &b);
    assert_true(sample(b.data, "dynamo_engine_request") == 4);
    assert_true(sample(b.data, "dynamo_request_queue") == 0);
    assert_true(sample(b.data, "admitd_engine_request_limit") == 0);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_and_samples),
        cmocka_unit_test(test_one_label_helpers),
        cmocka_unit_test(test_histogram_is_cumulative),
        cmocka_unit_test(test_metrics_render_dynamo_names),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
