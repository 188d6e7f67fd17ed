/* Unit tests for usage: cached_tokens from an answer's last bytes, as vLLM, SGLang and the
 * mock end their answers, split anywhere; what is not a usage's cached_tokens is never read
 * as one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/usage.h"

#include <string.h>

static int64_t of(const char *s)
{
    return usage_cached_tokens(s, strlen(s));
}

/* A JSON answer's end, a stream's final usage chunk, and vLLM's and SGLang's answers when
 * nothing was cached (details null or absent). */
static void test_answers(void **state)
{
    (void) state;
    assert_int_equal(of("\"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":8,"
                        "\"prompt_tokens_details\":{\"cached_tokens\":1024}}}"),
                     1024);
    assert_int_equal(of("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,"
                        "\"prompt_tokens_details\": {\"cached_tokens\" : 0}}}\n\n"
                        "data: [DONE]\n\n"),
                     0);
    assert_int_equal(of("\"usage\":{\"prompt_tokens\":9,\"total_tokens\":10,"
                        "\"prompt_tokens_details\":null}}"),
                     USAGE_CACHED_UNSAID);
    assert_int_equal(of("data: {\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1}}\n\n"
                        "data: [DONE]\n\n"),
                     USAGE_CACHED_UNSAID);
    /* a stream without include_usage: no usage at all */
    assert_int_equal(of("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
                        "data: [DONE]\n\n"),
                     USAGE_CACHED_NONE);
    assert_int_equal(of(""), USAGE_CACHED_NONE);
}

/* The last one counts; one that is no number is none; a key escaped inside a string (the
 * model's own text) is no key; digits saturate. */
static void test_hostile(void **state)
{
    (void) state;
    assert_int_equal(of("{\"cached_tokens\":5} {\"cached_tokens\":7}"), 7);
    assert_int_equal(of("{\"prompt_tokens\":3,\"cached_tokens\":\"5\"}"), USAGE_CACHED_NONE);
    assert_int_equal(of("{\"prompt_tokens\":3,\"cached_tokens\":-5}"), USAGE_CACHED_NONE);
    assert_int_equal(of("{\"prompt_tokens\":3,\"cached_tokens\":"), USAGE_CACHED_NONE);
    assert_int_equal(of("{\"content\":\"say \\\"cached_tokens\\\": 99\"}"), USAGE_CACHED_NONE);
    assert_int_equal(of("\"prompt_tokens\":1,\"content\":\"\\\"cached_tokens\\\": 99\""),
                     USAGE_CACHED_UNSAID);
    assert_true(of("{\"cached_tokens\":99999999999999999999999999999}") > 0);
    assert_true(of("{\"cached_tokens\":99999999999999999999999999999}") <= INT64_MAX);
    assert_int_equal(of("\"cached_tokens\""), USAGE_CACHED_NONE);
}

/* The tail keeps the last USAGE_TAIL bytes of all it was given, however the answer was
 * split, and a usage cut at its front by the window is still read from what is left. */
static void test_tail_any_split(void **state)
{
    char answer[2048];
    const char *end = "data: {\"usage\":{\"prompt_tokens\":4096,\"prompt_tokens_details\":"
                      "{\"cached_tokens\":3072}}}\n\ndata: [DONE]\n\n";
    size_t n;

    (void) state;
    memset(answer, 'x', sizeof answer);
    n = sizeof answer - strlen(end);
    memcpy(answer + n, end, strlen(end));
    for (size_t step = 1; step <= 700; step += 37) {
        struct usage_tail t;

        usage_tail_reset(&t);
        for (size_t at = 0; at < sizeof answer; at += step)
            usage_tail_add(&t, answer + at, at + step <= sizeof answer ? step : sizeof answer - at);
        assert_int_equal(t.len, USAGE_TAIL);
        assert_memory_equal(t.b, answer + sizeof answer - USAGE_TAIL, USAGE_TAIL);
        assert_int_equal(usage_cached_tokens(t.b, t.len), 3072);
    }
    {
        struct usage_tail t;

        usage_tail_reset(&t);
        usage_tail_add(&t, "ab", 2);
        usage_tail_add(&t, "cd", 2);
        assert_int_equal(t.len, 4);
        assert_memory_equal(t.b, "abcd", 4);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answers),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_tail_any_split),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
