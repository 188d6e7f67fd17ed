/* Unit tests for the JSON scanner: its limits, which no load message reaches (test_load.c
 * checks the decoder built on it), and the pieces decoders call directly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/jscan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Skips text as one value; 0, or -1 with *why. */
static int skip_all(const char *text, size_t len, const char **why)
{
    static struct jscan s;

    *why = NULL;
    if (jscan_init(&s, text, len) != 0 || jscan_skip(&s) != 0 || jscan_peek(&s) != -1) {
        *why = s.why ? s.why : "trailing bytes";
        return -1;
    }
    return 0;
}

/* JSCAN_DEPTH_MAX containers nest; one more does not. */
static void test_depth_limit(void **state)
{
    char *t = malloc(2 * JSCAN_DEPTH_MAX + 2);
    const char *why;

    (void) state;
    memset(t, '[', JSCAN_DEPTH_MAX);
    memset(t + JSCAN_DEPTH_MAX, ']', JSCAN_DEPTH_MAX);
    assert_int_equal(skip_all(t, 2 * JSCAN_DEPTH_MAX, &why), 0);
    memset(t, '[', JSCAN_DEPTH_MAX + 1);
    memset(t + JSCAN_DEPTH_MAX + 1, ']', JSCAN_DEPTH_MAX + 1);
    assert_int_equal(skip_all(t, 2 * JSCAN_DEPTH_MAX + 2, &why), -1);
    assert_string_equal(why, "too deeply nested");
    free(t);
}

/* JSCAN_KEYS_MAX keys in the objects open at once; one more is refused, but a closed object
 * gives its room back. */
static void test_key_limit(void **state)
{
    char *t = malloc(3 * 12 * (JSCAN_KEYS_MAX + 2));
    const char *why;
    size_t n;

    (void) state;
    n = 0;
    t[n++] = '[';
    for (int o = 0; o < 3; o++) { /* three objects one after the other: room each time */
        t[n++] = o ? ',' : '{';
        if (o)
            t[n++] = '{';
        for (int i = 0; i < JSCAN_KEYS_MAX; i++)
            n += (size_t) sprintf(t + n, "%s\"%d\":0", i ? "," : "", i);
        t[n++] = '}';
    }
    t[n++] = ']';
    assert_int_equal(skip_all(t, n, &why), 0);
    n = 0;
    t[n++] = '{';
    for (int i = 0; i <= JSCAN_KEYS_MAX; i++)
        n += (size_t) sprintf(t + n, "%s\"%d\":0", i ? "," : "", i);
    t[n++] = '}';
    assert_int_equal(skip_all(t, n, &why), -1);
    assert_string_equal(why, "too many keys");
    free(t);
}

/* Keys are compared decoded and per object; the duplicate is found among many. */
static void test_duplicates(void **state)
{
    static const char *const ok[] = {"{\"a\":{\"a\":1},\"b\":[{\"a\":1,\"b\":2},{\"a\":1}]}",
                                     "{\"\\u00e9\":1,\"\\u00c9\":2,\"e\":3}"};
    static const char *const dup[] = {"{\"a\":1,\"b\":2,\"a\":3}", "{\"\\u00e9\":1,\"\xc3\xa9\":2}",
                                      "{\"x\":[{\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}]}",
                                      "{\"\\/\":1,\"/\":2}"};
    char big[8192];
    const char *why;
    size_t n = 0;

    (void) state;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        assert_int_equal(skip_all(ok[i], strlen(ok[i]), &why), 0);
    for (size_t i = 0; i < sizeof dup / sizeof dup[0]; i++) {
        assert_int_equal(skip_all(dup[i], strlen(dup[i]), &why), -1);
        assert_string_equal(why, "duplicate object key");
    }
    big[n++] = '{';
    for (int i = 0; i < 400; i++)
        n += (size_t) sprintf(big + n, "\"k%d\":%d,", i, i);
    n += (size_t) sprintf(big + n, "\"k17\":0}");
    assert_int_equal(skip_all(big, n, &why), -1);
    assert_string_equal(why, "duplicate object key");
}

/* Decoding a string: escapes, surrogate pairs, and what does not fit. */
static void test_str_copy(void **state)
{
    static const char text[] = "\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\\u20AC\"";
    struct jscan s;
    struct jscan_str str;
    char buf[32];

    (void) state;
    assert_int_equal(jscan_init(&s, text, sizeof text - 1), 0);
    assert_int_equal(jscan_string(&s, &str), 0);
    assert_true(str.esc);
    assert_int_equal(jscan_str_copy(&str, buf, sizeof buf), 18);
    assert_string_equal(buf, "a\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80\xe2\x82\xac");
    assert_int_equal(jscan_str_copy(&str, buf, 18), 18); /* fits, without its NUL */
    assert_int_equal(jscan_str_copy(&str, buf, 17), 18); /* over: cap + 1 */
    assert_int_equal(s.p - (const unsigned char *) text, (long) sizeof text - 1);
}

/* UTF-8 as jansson checks it: shortest forms, no surrogates, at most U+10FFFF. */
static void test_utf8(void **state)
{
    static const struct {
        const char *s;
        size_t len;
    } cases[] = {{"\xc2\x80", 2},
                 {"\xdf\xbf", 2},
                 {"\xe0\xa0\x80", 3},
                 {"\xed\x9f\xbf", 3},
                 {"\xee\x80\x80", 3},
                 {"\xef\xbf\xbf", 3},
                 {"\xf0\x90\x80\x80", 4},
                 {"\xf4\x8f\xbf\xbf", 4},
                 {"\xc0\x80", 0},
                 {"\xc1\xbf", 0},
                 {"\xe0\x9f\xbf", 0},
                 {"\xed\xa0\x80", 0},
                 {"\xed\xbf\xbf", 0},
                 {"\xf0\x8f\xbf\xbf", 0},
                 {"\xf4\x90\x80\x80", 0},
                 {"\xf5\x80\x80\x80", 0},
                 {"\x80", 0},
                 {"\xc3\x28", 0}};

    (void) state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const unsigned char *p = (const unsigned char *) cases[i].s;
        assert_int_equal(jscan_utf8_char(p, strlen(cases[i].s)), cases[i].len);
        if (cases[i].len > 1) /* cut short */
            assert_int_equal(jscan_utf8_char(p, cases[i].len - 1), 0);
    }
}

/* Numbers: the integers' values, and reals told apart. */
static void test_numbers(void **state)
{
    static const struct {
        const char *text;
        int integer;
        int64_t i;
    } ok[] = {{"0", 1, 0},
              {"-0", 1, 0},
              {"123456789012345678", 1, 123456789012345678},
              {"1234567890123456789", 1, 1234567890123456789},
              {"9223372036854775807", 1, INT64_MAX},
              {"-9223372036854775808", 1, INT64_MIN},
              {"-17", 1, -17},
              {"1.0", 0, 0},
              {"1e2", 0, 0},
              {"-0.5E-3", 0, 0}};
    struct jscan s;
    struct jscan_num num;

    (void) state;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_int_equal(jscan_init(&s, ok[i].text, strlen(ok[i].text)), 0);
        assert_int_equal(jscan_number(&s, &num), 0);
        assert_int_equal(num.integer, ok[i].integer);
        if (num.integer)
            assert_true(num.i == ok[i].i);
        assert_int_equal(jscan_peek(&s), -1);
    }
}

/* The byte a string's scan stops at, at every place in the first 48 bytes of a 64-byte string:
 * the run of plain bytes before it is scanned 16, 8 or 1 at a time, and each must stop there. */
static void test_stop_anywhere(void **state)
{
    static const struct {
        const char *bytes;
        int ok;
        size_t len; /* the string's raw length past the offset, when ok */
    } cases[] = {
        {"\"", 1, 0},        /* the closing quote, early */
        {"\\n", 1, 63},      /* an escape: the scan goes on to the end */
        {"\xc3\xa9", 1, 63}, /* UTF-8: likewise */
        {"\x1f", 0, 0},      /* a control byte */
        {"\x7f", 1, 63},     /* DEL is plain in JSON */
        {"\xff", 0, 0},      /* no UTF-8 */
    };
    char text[80];
    struct jscan s;
    struct jscan_str str;
    size_t i, at, n;

    (void) state;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (at = 0; at < 48; at++) {
            n = strlen(cases[i].bytes);
            memset(text, 'a', sizeof text);
            text[0] = '"';
            memcpy(text + 1 + at, cases[i].bytes, n);
            text[64] = '"';
            assert_int_equal(jscan_init(&s, text, 65), 0);
            assert_int_equal(jscan_string(&s, &str) == 0, cases[i].ok);
            if (cases[i].ok)
                assert_int_equal(str.len, cases[i].len ? cases[i].len : at);
            else
                assert_int_equal(s.p - (const unsigned char *) text, (long) (1 + at));
        }
    /* a control byte, then the closing quote in the same word: short strings and the ends of
     * long ones go 8 bytes a step, or one */
    for (at = 0; at < 40; at++) {
        memset(text, 'a', sizeof text);
        text[0] = '"';
        text[1 + at] = '\x01';
        text[2 + at] = '"';
        assert_int_equal(jscan_init(&s, text, 3 + at), 0);
        assert_int_equal(jscan_string(&s, &str), -1);
        assert_int_equal(s.p - (const unsigned char *) text, (long) (1 + at));
    }
}

/* A text over JSCAN_TEXT_MAX is refused at the start. */
static void test_text_limit(void **state)
{
    struct jscan s;

    (void) state;
    assert_int_equal(jscan_init(&s, "[]", (size_t) JSCAN_TEXT_MAX + 1), -1);
    assert_string_equal(s.why, "text too long");
    assert_int_equal(jscan_peek(&s), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_depth_limit), cmocka_unit_test(test_key_limit),
        cmocka_unit_test(test_duplicates),  cmocka_unit_test(test_str_copy),
        cmocka_unit_test(test_utf8),        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_text_limit),  cmocka_unit_test(test_stop_anywhere),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
