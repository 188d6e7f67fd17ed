/* Unit tests for the --version text (util/buildinfo.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/buildinfo.h"

#include <stdio.h>
#include <string.h>

static void test_three_lines(void **state)
{
    const struct buildinfo_lib libs[] = {{"libevent", "2.1.12-stable"}, {"nng", NULL}};
    char buf[1024], want[256];
    int len;

    (void) state;
    len = buildinfo_format(buf, sizeof buf, "admitd", libs, 2);
    assert_int_equal(len, (int) strlen(buf));
    /* The first line is the program and the project's version, as before, then the commit. */
    snprintf(want, sizeof want, "admitd %s (commit %s)\n", ADMIT_VERSION, buildinfo.commit);
    assert_memory_equal(buf, want, strlen(want));
    assert_non_null(strstr(buf, "\nbuilt with "));
    assert_non_null(strstr(buf, ", buildtype "));
    assert_non_null(strstr(buf, ", sanitizers "));
    /* The libraries given, in order, an unknown one said so, then the two every program has. */
    assert_non_null(strstr(buf, "\nlibraries: libevent 2.1.12-stable, nng unknown, jansson 2."));
    assert_non_null(strstr(buf, ", libyaml 0."));
    assert_int_equal(buf[len - 1], '\n');
}

static void test_build_facts(void **state)
{
    (void) state;
    assert_string_equal(buildinfo.version, ADMIT_VERSION);
    assert_true(strlen(buildinfo.commit) > 0);
    assert_true(strlen(buildinfo.meson) > 0 && strlen(buildinfo.buildtype) > 0);
    assert_true(strchr(buildinfo.compiler, ' ') != NULL); /* "gcc 12.2.0" */
    assert_true(strlen(buildinfo.sanitizers) > 0);
}

static void test_too_small(void **state)
{
    char buf[1024];
    int full = buildinfo_format(buf, sizeof buf, "admit-top", NULL, 0);

    (void) state;
    assert_true(full > 0);
    /* One byte short of the text and its NUL: refused, and still a terminated string. */
    memset(buf, 'x', sizeof buf);
    assert_int_equal(buildinfo_format(buf, (size_t) full, "admit-top", NULL, 0), -1);
    assert_int_equal(buf[full - 1], '\0');
    assert_int_equal(buildinfo_format(buf, (size_t) full + 1, "admit-top", NULL, 0), full);
    assert_int_equal(buildinfo_format(buf, 0, "admit-top", NULL, 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_lines),
        cmocka_unit_test(test_build_facts),
        cmocka_unit_test(test_too_small),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
