/* Unit tests for the mock engine's timing model and prompt token counting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mock_model.h"

#include <limits.h>
#include <math.h>

static void near(double a, double b)
{
    assert_true(fabs(a - b) < 1e-9 * (1 + fabs(b)));
}

#define NEAR(a, b) near((double) (a), (double) (b))

static void test_prefill_formula(void **state)
{
    (void) state;
    NEAR(mock_prefill_ms(1, 1), 4.209989e-7 + 0.01518344 + 16.50142);
    NEAR(mock_prefill_ms(1000, 1), 4.209989e-7 * 1e6 + 0.01518344 * 1000 + 16.50142);
    NEAR(mock_prefill_ms(8192, 1), 4.209989e-7 * 8192.0 * 8192.0 + 0.01518344 * 8192 + 16.50142);
    NEAR(mock_prefill_ms(1000, 100), mock_prefill_ms(1000, 1) / 100);
    NEAR(mock_prefill_ms(0, 1), 0);
    NEAR(mock_prefill_ms(1000, 0), 0);
    NEAR(mock_prefill_ms(1000, -1), 0);
    NEAR(mock_prefill_ms(1000, NAN), 0);
}

static void test_decode_formula(void **state)
{
    (void) state;
    NEAR(mock_decode_ms(0, 1), 5.74);
    NEAR(mock_decode_ms(0.5, 1), -25.74 * 0.25 + 54.01 * 0.5 + 5.74);
    NEAR(mock_decode_ms(1, 1), -25.74 + 54.01 + 5.74);
    /* u is clamped to [0, 1]; NaN reads as 0. */
    NEAR(mock_decode_ms(-3, 1), 5.74);
    NEAR(mock_decode_ms(7, 1), mock_decode_ms(1, 1));
    NEAR(mock_decode_ms(NAN, 1), 5.74);
    /* At least 1 ms before the speedup divides it. */
    NEAR(mock_decode_ms(0, 10), 0.574);
    NEAR(mock_decode_ms(0.5, 0), 0);
}

static void test_blocks_and_text(void **state)
{
    (void) state;
    assert_int_equal(mock_blocks_for(0, 16), 0);
    assert_int_equal(mock_blocks_for(1, 16), 1);
    assert_int_equal(mock_blocks_for(16, 16), 1);
    assert_int_equal(mock_blocks_for(17, 16), 2);
    assert_int_equal(mock_blocks_for(5, 0), 5);
    assert_int_equal(mock_blocks_for(UINT_MAX, 1), UINT_MAX);
    assert_int_equal(mock_text_tokens(0), 0);
    assert_int_equal(mock_text_tokens(1), 1);
    assert_int_equal(mock_text_tokens(4), 1);
    assert_int_equal(mock_text_tokens(5), 2);
}

static unsigned count(const char *json, enum mock_api api)
{
    json_error_t e;
    json_t *j = json_loads(json, JSON_DECODE_ANY, &e);
    unsigned n;

    assert_non_null(j);
    n = mock_prompt_tokens(j, api);
    json_decref(j);
    return n;
}

static void test_prompt_tokens_shapes(void **state)
{
    (void) state;
    /* Chat: 4 per message plus ceil(bytes/4) of its text. */
    assert_int_equal(
        count("{\"messages\":[{\"role\":\"user\",\"content\":\"12345678\"}]}", MOCK_API_CHAT),
        4 + 2);
    assert_int_equal(count("{\"messages\":[{\"content\":[{\"type\":\"text\",\"text\":\"abcd\"},"
                           "{\"type\":\"image_url\",\"text\":\"ignored\"},{\"text\":\"xy\"}]}]}",
                           MOCK_API_CHAT),
                     4 + 1 + 1);
    /* Completions: text, token ids (exact), lists of token ids. */
    assert_int_equal(count("{\"prompt\":\"abcdefgh\"}", MOCK_API_COMPLETIONS), 2);
    assert_int_equal(count("{\"prompt\":[1,2,3,4,5]}", MOCK_API_COMPLETIONS), 5);
    assert_int_equal(count("{\"prompt\":[[1,2],[3],\"abcd\"]}", MOCK_API_COMPLETIONS), 4);
}

static void test_prompt_tokens_hostile(void **state)
{
    (void) state;
    assert_int_equal(count("[1,2,3]", MOCK_API_CHAT), 0);
    assert_int_equal(count("\"text\"", MOCK_API_COMPLETIONS), 0);
    assert_int_equal(count("{\"messages\":\"nope\"}", MOCK_API_CHAT), 0);
    assert_int_equal(count("{\"messages\":[1,null,[],{\"content\":7}]}", MOCK_API_CHAT), 4);
    assert_int_equal(count("{\"prompt\":{\"a\":1}}", MOCK_API_COMPLETIONS), 0);
    assert_int_equal(count("{\"prompt\":[[[1,2]],[1.5,true]]}", MOCK_API_COMPLETIONS), 0);
    assert_int_equal(count("{\"messages\":[]}", MOCK_API_COMPLETIONS), 0);
    assert_int_equal(mock_prompt_tokens(NULL, MOCK_API_CHAT), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_formula),       cmocka_unit_test(test_decode_formula),
        cmocka_unit_test(test_blocks_and_text),       cmocka_unit_test(test_prompt_tokens_shapes),
        cmocka_unit_test(test_prompt_tokens_hostile),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
