/* Unit tests for util/log: log_esc, the escaping of untrusted text in log lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/log.h"

#include <string.h>

/* Printable ASCII stays; every other byte is \xNN and the backslash is doubled, so that
 * nothing a peer sends can end a line or pass for an escape. */
static void test_escaped(void **state)
{
    char out[64];

    (void) state;
    assert_string_equal(log_esc("gpu-7:8080 \"ok\"", out, sizeof out), "gpu-7:8080 \"ok\"");
    assert_string_equal(log_esc("a\nb\rc\td", out, sizeof out), "a\\x0ab\\x0dc\\x09d");
    assert_string_equal(log_esc("x\\x0ay", out, sizeof out), "x\\\\x0ay");
    assert_string_equal(log_esc("\x7f\xc3\xa9\x1b[2J", out, sizeof out), "\\x7f\\xc3\\xa9\\x1b[2J");
    assert_string_equal(log_esc("", out, sizeof out), "");
    assert_null(strchr(LOG_ESC("forged\n2026-01-01T00:00:00.000Z admit-router warn: x"), '\n'));
}

/* What does not fit is cut, and "..." says so; the result always fits its buffer. */
static void test_cut(void **state)
{
    char out[12], big[LOG_ESC_MAX * 2];

    (void) state;
    assert_string_equal(log_esc("12345678", out, sizeof out), "12345678");
    assert_string_equal(log_esc("123456789", out, sizeof out), "12345678...");
    assert_string_equal(log_esc("1234567\n", out, sizeof out), "1234567...");
    assert_string_equal(log_esc("abc", out, 3), "");
    memset(big, '\n', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_true(strlen(LOG_ESC(big)) < LOG_ESC_MAX);
    assert_string_equal(LOG_ESC(big) + strlen(LOG_ESC(big)) - 3, "...");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escaped),
        cmocka_unit_test(test_cut),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
