/* Unit tests for the HTTP seam's request type. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "http/httpreq.h"

static void test_path_matches_whole_segments(void **state)
{
    struct http_req r = {.target = "/busy_threshold"};

    (void) state;
    assert_true(http_req_path_is(&r, "/busy_threshold"));
    r.target = "/busy_threshold?model=x";
    assert_true(http_req_path_is(&r, "/busy_threshold"));
    r.target = "/busy_thresholds";
    assert_false(http_req_path_is(&r, "/busy_threshold"));
    r.target = "/busy";
    assert_false(http_req_path_is(&r, "/busy_threshold"));
    r.target = "";
    assert_false(http_req_path_is(&r, "/metrics"));
}

static void test_method_names_and_safety(void **state)
{
    (void) state;
    assert_string_equal(http_method_name(HTTP_GET), "GET");
    assert_string_equal(http_method_name(HTTP_PATCH), "PATCH");
    assert_string_equal(http_method_name(HTTP_OTHER), "OTHER");
    assert_string_equal(http_method_name((enum http_method) 99), "OTHER");
    assert_true(http_method_is_safe(HTTP_GET));
    assert_true(http_method_is_safe(HTTP_HEAD));
    assert_true(http_method_is_safe(HTTP_OPTIONS));
    assert_false(http_method_is_safe(HTTP_POST));
    assert_false(http_method_is_safe(HTTP_DELETE));
    assert_false(http_method_is_safe(HTTP_OTHER));
}

/* A request without an engine behind it has no headers at all. */
static void test_tokenizer_is_post_to_its_two_paths(void **state)
{
    struct http_req r = {.method = HTTP_POST, .target = "/tokenize"};

    (void) state;
    assert_true(http_req_is_tokenizer(&r));
    r.target = "/detokenize?x=1";
    assert_true(http_req_is_tokenizer(&r));
    r.target = "/tokenizer";
    assert_false(http_req_is_tokenizer(&r));
    r.target = "/v1/tokenize";
    assert_false(http_req_is_tokenizer(&r));
    r.target = "/v1/completions";
    assert_false(http_req_is_tokenizer(&r));
    r.target = "/tokenize";
    r.method = HTTP_PUT;
    assert_false(http_req_is_tokenizer(&r));
    r.method = HTTP_GET;
    assert_false(http_req_is_tokenizer(&r));
}

static void test_header_lookup_without_engine(void **state)
{
    struct http_req r = {.target = "/"};

    (void) state;
    assert_null(http_req_header(&r, "Host"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_matches_whole_segments),
        cmocka_unit_test(test_method_names_and_safety),
        cmocka_unit_test(test_tokenizer_is_post_to_its_two_paths),
        cmocka_unit_test(test_header_lookup_without_engine),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
