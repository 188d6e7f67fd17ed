/* Unit tests for the daemons' metric families (admitd_* and Dynamo's), rendered from a
 * struct metrics as /metrics serves them: pure, no event loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "daemon/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    m.px.outcomes[OUT_REJECTED] = 7;
    m.px.outcomes[OUT_OK] = 11;
    m.px.cancelled[STAGE_QUEUED] = 2;
    m.px.upstream_errors[UERR_CONNECT] = 1;
    m.listen[LISTENER_METRICS].conns = 2;
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
    assert_true(sample(b.data, "admitd_connections{listener=\"client\"}") == 0);
    assert_true(sample(b.data, "admitd_connections{listener=\"metrics\"}") == 2);
    /* Every outcome is shown, by the name the access log gives it. */
    for (int o = 0; o < OUT__COUNT; o++) {
        char name[96];

        snprintf(name, sizeof name, "admitd_requests_total{outcome=\"%s\"}",
                 proxy_outcome_name((enum outcome) o));
        assert_true(sample(b.data, name) >= 0);
    }
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
    /* admitd's role, a label of the build info (none above: NULL, as the router leaves it). */
    m.role = "prefill";
    buf_init(&b);
    metrics_render(&v, &b);
    assert_true(sample(b.data, "admitd_build_info{version=\"9.9.9\",role=\"prefill\"}") == 1);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_render_dynamo_names),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
