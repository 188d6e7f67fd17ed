/* Unit tests for settings compared across a reload: what differs is counted, a setting that
 * needs a restart gets the running value back, a live one keeps the new value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "config/optdiff.h"

#include <math.h>
#include <string.h>

struct settings {
    unsigned port;
    char path[16];
    double frac; /* NAN = None */
    struct {
        int a, b;
    } pair;
};

static const struct opt_field restart[] = {
    OPT_FIELD(struct settings, port),
    OPT_FIELD(struct settings, path),
};
static const struct opt_field live[] = {
    OPT_FIELD(struct settings, frac),
    OPT_FIELD_AS("pair_b", struct settings, pair.b),
};

static void fill(struct settings *s, unsigned port, const char *path, double frac, int b)
{
    memset(s, 0, sizeof *s);
    s->port = port;
    strcpy(s->path, path);
    s->frac = frac;
    s->pair.b = b;
}

static void test_nothing_changed(void **state)
{
    struct settings cur, next;

    (void) state;
    fill(&cur, 80, "/a", NAN, 1); /* the same None twice is no change */
    fill(&next, 80, "/a", NAN, 1);
    assert_int_equal(opt_fields_diff(restart, 2, &cur, &next, OPT_DIFF_RESTART), 0);
    assert_int_equal(opt_fields_diff(live, 2, &cur, &next, OPT_DIFF_LIVE), 0);
    assert_memory_equal(&cur, &next, sizeof cur);
}

static void test_restart_keeps_running_values(void **state)
{
    struct settings cur, next;

    (void) state;
    fill(&cur, 80, "/a", 0.5, 1);
    fill(&next, 81, "/b", 0.25, 2);
    next.pair.a = 9; /* not in any table: left as read */
    assert_int_equal(opt_fields_diff(restart, 2, &cur, &next, OPT_DIFF_RESTART), 2);
    assert_int_equal(next.port, 80);
    assert_string_equal(next.path, "/a");
    assert_true(next.frac == 0.25);
    assert_int_equal(next.pair.a, 9);
    /* Compared again, with what now runs: nothing differs any more. */
    assert_int_equal(opt_fields_diff(restart, 2, &cur, &next, OPT_DIFF_RESTART), 0);
}

static void test_live_keeps_new_values(void **state)
{
    struct settings cur, next;

    (void) state;
    fill(&cur, 80, "/a", NAN, 1);
    fill(&next, 80, "/a", 0.75, 3);
    assert_int_equal(opt_fields_diff(live, 2, &cur, &next, OPT_DIFF_LIVE), 2);
    assert_true(next.frac == 0.75);
    assert_int_equal(next.pair.b, 3);
    assert_true(isnan(cur.frac));
    assert_int_equal(opt_fields_diff(live, 1, &cur, &next, OPT_DIFF_LIVE), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing_changed),
        cmocka_unit_test(test_restart_keeps_running_values),
        cmocka_unit_test(test_live_keeps_new_values),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
