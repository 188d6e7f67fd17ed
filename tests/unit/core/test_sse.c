/* Unit tests for the SSE event counter: any split, any line ending, [DONE] not counted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/sse.h"

#include <stdlib.h>
#include <string.h>

static uint64_t count_whole(const char *s)
{
    struct sse_counter c;

    sse_init(&c);
    sse_feed(&c, s, strlen(s));
    return c.events;
}

static void test_basic_events(void **state)
{
    (void) state;
    assert_int_equal(count_whole("data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n"), 2);
    assert_int_equal(count_whole("data: x\r\n\r\ndata: y\r\r"), 2);
    assert_int_equal(count_whole("data:x\n\n"), 1);
    assert_int_equal(count_whole("data\n\n"), 1);
    /* Two data lines make one event; comments and other fields are not events. */
    assert_int_equal(count_whole("data: a\ndata: b\n\n: keep-alive\n\nevent: ping\n\n"), 1);
    assert_int_equal(count_whole("id: 1\nevent: error\ndata: {\"error\":1}\n\n"), 1);
    /* An event without its blank line yet is not counted. */
    assert_int_equal(count_whole("data: a\n"), 0);
    /* [DONE] only when it is the whole value. */
    assert_int_equal(count_whole("data: [DONE]x\n\ndata:[DONE]\n\ndata:  [DONE]\n\n"), 2);
    assert_int_equal(count_whole("datum: a\n\ndata_: b\n\n"), 0);
    /* A very long line is fine. */
    char *big = malloc(100000);
    memset(big, 'x', 100000);
    memcpy(big, "data: ", 6);
    big[99997] = '\n';
    big[99998] = '\n';
    big[99999] = '\0';
    assert_int_equal(count_whole(big), 1);
    free(big);
}

/* The same stream cut at every pair of points gives the same count. */
static void test_every_split(void **state)
{
    const char *s = "data: {\"t\":\"a\"}\r\n\r\ndata: b\n\n: c\n\ndata: [DONE]\r\n\r\n";
    size_t n = strlen(s);

    (void) state;
    for (size_t i = 0; i <= n; i++)
        for (size_t j = i; j <= n; j++) {
            struct sse_counter c;
            unsigned got = 0;

            sse_init(&c);
            got += sse_feed(&c, s, i);
            got += sse_feed(&c, s + i, j - i);
            got += sse_feed(&c, s + j, n - j);
            assert_int_equal(got, 2);
            assert_int_equal(c.events, 2);
        }
}

static void test_garbage(void **state)
{
    struct sse_counter c;
    unsigned char junk[4096];
    unsigned seed = 7;

    (void) state;
    sse_init(&c);
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < sizeof junk; i++) {
            seed = seed * 1103515245u + 12345u;
            junk[i] = (unsigned char) (seed >> 16);
        }
        sse_feed(&c, (const char *) junk, sizeof junk);
    }
    assert_true(c.events < 200 * sizeof junk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_events),
        cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_garbage),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
