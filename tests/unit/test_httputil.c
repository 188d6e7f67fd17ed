/* Unit tests for header rules, reason phrases and the OpenAI-shaped error body. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "httputil.h"

#include <jansson.h>
#include <string.h>

static void test_hop_by_hop(void **state)
{
    (void) state;
    assert_true(httpu_is_hop_by_hop("Connection"));
    assert_true(httpu_is_hop_by_hop("TRANSFER-ENCODING"));
    assert_true(httpu_is_hop_by_hop("keep-alive"));
    assert_true(httpu_is_hop_by_hop("Upgrade"));
    assert_false(httpu_is_hop_by_hop("Content-Type"));
    assert_false(httpu_is_hop_by_hop("Authorization"));
    assert_false(httpu_is_hop_by_hop("Connections"));
    assert_true(httpu_connection_lists("close, X-Secret", "x-secret"));
    assert_true(httpu_connection_lists(" X-A ,X-B ", "X-B"));
    assert_false(httpu_connection_lists("close, X-Secrets", "x-secret"));
    assert_false(httpu_connection_lists("", "close"));
    assert_false(httpu_connection_lists(NULL, "close"));
}

static void test_reasons(void **state)
{
    (void) state;
    assert_string_equal(httpu_reason(529), "Site is overloaded");
    assert_string_equal(httpu_reason(503), "Service Unavailable");
    assert_string_equal(httpu_reason(200), "OK");
    assert_string_equal(httpu_reason(777), "Unknown");
}

static void test_error_json_shape(void **state)
{
    struct buf b;
    json_error_t je;
    json_t *root;

    (void) state;
    buf_init(&b);
    httpu_error_json(&b, 529, "overloaded_error", HTTPU_OVERLOAD_MESSAGE " \"quoted\"");
    root = json_loads(b.data, 0, &je);
    assert_non_null(root);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(root, "error"), "message")),
        "Server overloaded: worker at capacity \"quoted\"");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(root, "error"), "code")),
                     529);
    assert_true(json_is_null(json_object_get(json_object_get(root, "error"), "param")));
    json_decref(root);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hop_by_hop),
        cmocka_unit_test(test_reasons),
        cmocka_unit_test(test_error_json_shape),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
