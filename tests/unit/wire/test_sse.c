/* Unit tests for the SSE event counter: any split, any line ending, [DONE] not counted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/sse.h"

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

/* A reference for the garbage tests, written the other way round: split the whole stream into
 * lines first (CR, LF or CRLF), then read them. The counter's rule: a blank line ends an event,
 * which counts when it has a data line ("data", or "data:" and a value after one optional
 * space) and not every data line's value is exactly [DONE]. */
static uint64_t reference_count(const char *s, size_t n)
{
    uint64_t events = 0;
    int has_data = 0, all_done = 1;
    size_t i = 0;

    while (i < n) {
        size_t start = i, len;

        while (i < n && s[i] != '\r' && s[i] != '\n')
            i++;
        if (i == n)
            break; /* a line without its end yet ends nothing */
        len = i - start;
        i += s[i] == '\r' && i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
        if (len == 0) {
            if (has_data && !all_done)
                events++;
            has_data = 0;
            all_done = 1;
        } else if (len >= 4 && memcmp(s + start, "data", 4) == 0 &&
                   (len == 4 || s[start + 4] == ':')) {
            size_t v = len > 5 && s[start + 5] == ' ' ? 6 : 5;
            int done = len == v + 6 && memcmp(s + start + v, "[DONE]", 6) == 0;

            has_data = 1;
            all_done = all_done && done;
        }
    }
    return events;
}

/* A CR at the very end may still be followed by the LF of a CRLF: the reference cannot tell
 * from a prefix, the counter must not care. Garbage therefore ends in a blank LF line. */
static size_t make_garbage(char *out, size_t cap, unsigned *seed, int sse_alphabet)
{
    /* Pieces an SSE stream is made of, so that events, [DONE] and every line ending turn up. */
    static const char *pieces[] = {"data", "data:", "data: ",   "[DONE]", "\r",
                                   "\n",   "\r\n",  "\n\n",     ":",      " ",
                                   "x",    "dat",   "event: e", "[DONE",  "DONE]"};
    size_t n = 0;

    while (n + 16 < cap) {
        *seed = *seed * 1103515245u + 12345u;
        if (sse_alphabet) {
            const char *p = pieces[(*seed >> 16) % (sizeof pieces / sizeof pieces[0])];
            size_t len = strlen(p);

            memcpy(out + n, p, len);
            n += len;
        } else {
            out[n++] = (char) (*seed >> 16);
        }
    }
    out[n++] = '\n';
    out[n++] = '\n';
    return n;
}

/* Feeds s in chunks of pseudo-random sizes (0 included); returns what the calls reported. */
static uint64_t feed_in_chunks(struct sse_counter *c, const char *s, size_t n, unsigned *seed)
{
    uint64_t reported = 0;
    size_t i = 0;

    while (i < n) {
        size_t k;

        *seed = *seed * 1103515245u + 12345u;
        k = (*seed >> 16) % 40;
        if (k > n - i)
            k = n - i;
        reported += sse_feed(c, s + i, k);
        i += k;
    }
    return reported;
}

/* Random streams, whole and in random chunks, count what the reference counts. The reference
 * must see events at all, or the comparison proves nothing. */
static void test_garbage(void **state)
{
    static char buf[8192];
    unsigned seed = 7;
    uint64_t total = 0;

    (void) state;
    for (int round = 0; round < 400; round++) {
        int sse_alphabet = round % 4 != 3; /* one round in four: any bytes at all */
        size_t n = make_garbage(buf, sizeof buf, &seed, sse_alphabet);
        uint64_t want = reference_count(buf, n);
        struct sse_counter whole, split;

        sse_init(&whole);
        assert_int_equal(sse_feed(&whole, buf, n), want);
        assert_int_equal(whole.events, want);
        sse_init(&split);
        assert_int_equal(feed_in_chunks(&split, buf, n, &seed), want);
        assert_int_equal(split.events, want);
        if (sse_alphabet)
            total += want;
    }
    assert_true(total > 1000);
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
