/* Unit tests for the mock engine's timing model and prompt token counting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mock/mock_model.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-9

static void assert_close(double got, double want)
{
    if (fabs(got - want) > EPS * (fabs(want) > 1 ? fabs(want) : 1))
        fail_msg("got %.12f, want %.12f", got, want);
}

/* Parses a JSON text the test knows to be valid. */
static json_t *J(const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &err);

    if (j == NULL)
        fail_msg("bad test JSON: %s", err.text);
    return j;
}

static unsigned count(const char *text, enum mock_api api)
{
    json_t *j = J(text);
    unsigned n = mock_prompt_tokens(j, api);

    json_decref(j);
    return n;
}

static void test_prefill_formula(void **state)
{
    (void) state;
    assert_close(mock_prefill_ms(0, 1), 0);
    assert_close(mock_prefill_ms(1, 1), 16.5166038609989);
    assert_close(mock_prefill_ms(100, 1), 18.023973988999998);
    assert_close(mock_prefill_ms(1000, 1), 32.1058589);
    assert_close(mock_prefill_ms(8192, 1), 169.1369184042496);
    assert_close(mock_prefill_ms(100000, 1), 5744.83442);
    /* Grows with the prompt. */
    assert_true(mock_prefill_ms(2000, 1) > mock_prefill_ms(1999, 1));
}

static void test_prefill_speedup(void **state)
{
    (void) state;
    assert_close(mock_prefill_ms(1000, 2), 32.1058589 / 2);
    assert_close(mock_prefill_ms(1000, 0.5), 32.1058589 * 2);
    assert_close(mock_prefill_ms(1000, 0), 0);
    assert_close(mock_prefill_ms(1000, -3), 0);
    assert_close(mock_prefill_ms(1000, NAN), 0);
    assert_close(mock_prefill_ms(0, 0.001), 0);
    assert_true(isfinite(mock_prefill_ms(UINT_MAX, 1)));
}

static void test_decode_formula(void **state)
{
    (void) state;
    assert_close(mock_decode_ms(0, 1), 5.74);
    assert_close(mock_decode_ms(0.25, 1), 17.63375);
    assert_close(mock_decode_ms(0.5, 1), 26.310000000000002);
    assert_close(mock_decode_ms(1, 1), 34.01);
    assert_close(mock_decode_ms(0.5, 4), 26.310000000000002 / 4);
}

static void test_decode_clamps(void **state)
{
    (void) state;
    /* u outside [0,1] (or NaN) is clamped. */
    assert_close(mock_decode_ms(-0.5, 1), 5.74);
    assert_close(mock_decode_ms(-INFINITY, 1), 5.74);
    assert_close(mock_decode_ms(NAN, 1), 5.74);
    assert_close(mock_decode_ms(1.5, 1), 34.01);
    assert_close(mock_decode_ms(INFINITY, 1), 34.01);
    /* Never under 1 ms before the speedup, whatever u. */
    for (int i = 0; i <= 100; i++)
        assert_true(mock_decode_ms(i / 100.0, 1) >= 1.0);
    /* Speedup 0 (or nonsense) means no delay at all. */
    assert_close(mock_decode_ms(0.5, 0), 0);
    assert_close(mock_decode_ms(0.5, -1), 0);
    assert_close(mock_decode_ms(0.5, NAN), 0);
}

static void test_text_and_blocks(void **state)
{
    (void) state;
    assert_int_equal(mock_text_tokens(0), 0);
    assert_int_equal(mock_text_tokens(1), 1);
    assert_int_equal(mock_text_tokens(4), 1);
    assert_int_equal(mock_text_tokens(5), 2);
    assert_int_equal(mock_text_tokens(8), 2);
    assert_int_equal(mock_text_tokens(SIZE_MAX), UINT_MAX);

    assert_int_equal(mock_blocks_for(0, 16), 0);
    assert_int_equal(mock_blocks_for(1, 16), 1);
    assert_int_equal(mock_blocks_for(16, 16), 1);
    assert_int_equal(mock_blocks_for(17, 16), 2);
    assert_int_equal(mock_blocks_for(5, 0), 5);
    assert_int_equal(mock_blocks_for(UINT_MAX, 1), UINT_MAX);
    assert_int_equal(mock_blocks_for(UINT_MAX, 16), UINT_MAX / 16 + 1);
    assert_int_equal(mock_blocks_for(UINT_MAX, UINT_MAX), 1);
}

static void test_chat_messages(void **state)
{
    (void) state;
    /* 4 per message, plus ceil(bytes / 4) of each text, plus 3 for the generation prompt. */
    assert_int_equal(
        count("{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}", MOCK_API_CHAT),
        4 + 2 + 3);
    assert_int_equal(count("{\"messages\":[{\"role\":\"system\",\"content\":\"abcd\"},"
                           "{\"role\":\"user\",\"content\":\"abcdefghi\"}]}",
                           MOCK_API_CHAT),
                     4 + 1 + 4 + 3 + 3);
    /* Empty content costs only the overhead. */
    assert_int_equal(count("{\"messages\":[{\"role\":\"user\",\"content\":\"\"}]}", MOCK_API_CHAT),
                     4 + 3);
    /* Content parts: text parts count, an untyped part with text counts, others do not. */
    assert_int_equal(count("{\"messages\":[{\"role\":\"user\",\"content\":["
                           "{\"type\":\"text\",\"text\":\"12345678\"},"
                           "{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x\"}},"
                           "{\"type\":\"image_url\",\"text\":\"ignored\"},"
                           "{\"text\":\"abc\"}]}]}",
                           MOCK_API_CHAT),
                     4 + 2 + 1 + 3);
    /* The chat counter ignores a completions prompt. */
    assert_int_equal(count("{\"prompt\":\"abcdefgh\"}", MOCK_API_CHAT), 0);
}

static void test_completions_prompt(void **state)
{
    (void) state;
    assert_int_equal(count("{\"prompt\":\"abcdefghi\"}", MOCK_API_COMPLETIONS), 3);
    assert_int_equal(count("{\"prompt\":\"\"}", MOCK_API_COMPLETIONS), 0);
    assert_int_equal(count("{\"prompt\":[\"abcd\",\"abcde\"]}", MOCK_API_COMPLETIONS), 1 + 2);
    /* Token ids are counted exactly, whatever their values. */
    assert_int_equal(count("{\"prompt\":[1,2,3,-7,99999999999]}", MOCK_API_COMPLETIONS), 5);
    assert_int_equal(count("{\"prompt\":[[1,2],[3],[]]}", MOCK_API_COMPLETIONS), 3);
    assert_int_equal(count("{\"prompt\":[]}", MOCK_API_COMPLETIONS), 0);
    /* The completions counter ignores chat messages. */
    assert_int_equal(count("{\"messages\":[{\"content\":\"hello\"}]}", MOCK_API_COMPLETIONS), 0);
}

static void test_hostile_shapes(void **state)
{
    static const char *const bodies[] = {
        "null",
        "true",
        "42",
        "\"a string\"",
        "[]",
        "[{\"messages\":[{\"content\":\"x\"}]}]",
        "{}",
        "{\"messages\":null}",
        "{\"messages\":\"hello\"}",
        "{\"messages\":{\"content\":\"hello\"}}",
        "{\"messages\":[null,1,\"x\",[],true]}",
        "{\"messages\":[{\"content\":null},{\"content\":7},{\"content\":{\"text\":\"x\"}}]}",
        ("{\"messages\":[{\"content\":[null,1,\"s\",[],{\"type\":1,\"text\":\"x\"},"
         "{\"type\":\"text\",\"text\":5},{\"type\":\"text\"}]}]}"),
        "{\"prompt\":null}",
        "{\"prompt\":5}",
        "{\"prompt\":{\"a\":1}}",
        "{\"prompt\":[null,true,1.5,{},[null,\"a\",1.5,[1],{}]]}",
        "{\"prompt\":[[[[[[1]]]]]]}",
    };

    (void) state;
    assert_int_equal(mock_prompt_tokens(NULL, MOCK_API_CHAT), 0);
    assert_int_equal(mock_prompt_tokens(NULL, MOCK_API_COMPLETIONS), 0);
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        json_t *j = J(bodies[i]);

        /* Only the shapes a real client sends count; the rest must simply not crash. */
        assert_true(mock_prompt_tokens(j, MOCK_API_CHAT) <= 19);
        assert_true(mock_prompt_tokens(j, MOCK_API_COMPLETIONS) <= 16);
        json_decref(j);
    }
    /* Exact values for the mixed ones. */
    assert_int_equal(count("{\"messages\":[null,1,{\"content\":7},{}]}", MOCK_API_CHAT), 8 + 3);
    assert_int_equal(
        count("{\"prompt\":[null,true,1.5,{},[null,\"a\",1.5,[1],{}], 3]}", MOCK_API_COMPLETIONS),
        1);
}

/* A prompt nested as deep as jansson allows is not walked recursively. */
static void test_deep_nesting(void **state)
{
    size_t depth = 2000;
    char *text = malloc(depth * 2 + 32);
    json_t *j;
    size_t n = 0;

    (void) state;
    n += (size_t) sprintf(text, "{\"prompt\":");
    for (size_t i = 0; i < depth; i++)
        text[n++] = '[';
    for (size_t i = 0; i < depth; i++)
        text[n++] = ']';
    strcpy(text + n, "}");
    j = J(text);
    assert_int_equal(mock_prompt_tokens(j, MOCK_API_COMPLETIONS), 0);
    assert_int_equal(mock_prompt_tokens(j, MOCK_API_CHAT), 0);
    json_decref(j);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_formula),    cmocka_unit_test(test_prefill_speedup),
        cmocka_unit_test(test_decode_formula),     cmocka_unit_test(test_decode_clamps),
        cmocka_unit_test(test_text_and_blocks),    cmocka_unit_test(test_chat_messages),
        cmocka_unit_test(test_completions_prompt), cmocka_unit_test(test_hostile_shapes),
        cmocka_unit_test(test_deep_nesting),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
