/* Unit tests for the HTTP seam's request type and its view of evhttp's requests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "http/evreq.h"
#include "http/httpreq.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
static void test_header_lookup_without_engine(void **state)
{
    struct http_req r = {.target = "/"};

    (void) state;
    assert_null(http_req_header(&r, "Host"));
}

/* evhttp's request as the seam sees it: method, target, version, a body made contiguous
 * from two chunks, case-insensitive header lookup, and no peer without a connection. */
static void test_evhttp_view(void **state)
{
    struct evhttp_request *req = evhttp_request_new(NULL, NULL);
    struct evbuffer *big = evbuffer_new();
    char *filler = malloc(5000);
    struct http_req r;

    (void) state;
    assert_non_null(req);
    req->type = EVHTTP_REQ_PATCH;
    req->uri = strdup("/v1/x?y=1");
    req->minor = 0;
    evhttp_add_header(evhttp_request_get_input_headers(req), "Content-Type", "application/json");
    evhttp_add_header(evhttp_request_get_input_headers(req), "X-Twice", "first");
    evhttp_add_header(evhttp_request_get_input_headers(req), "X-Twice", "second");
    memset(filler, 'a', 5000);
    evbuffer_add(big, filler, 5000);
    evbuffer_add(evhttp_request_get_input_buffer(req), "{\"k\":", 5);
    evbuffer_add_buffer(evhttp_request_get_input_buffer(req), big);
    evreq_view(req, &r);
    assert_int_equal(r.method, HTTP_PATCH);
    assert_string_equal(r.target, "/v1/x?y=1");
    assert_int_equal(r.http_minor, 0);
    assert_int_equal(r.body_len, 5005);
    assert_memory_equal(r.body, "{\"k\":", 5);
    assert_int_equal(r.body[5004], 'a');
    assert_string_equal(r.peer, "");
    assert_string_equal(http_req_header(&r, "content-type"), "application/json");
    assert_string_equal(http_req_header(&r, "X-TWICE"), "first");
    assert_null(http_req_header(&r, "Host"));
    evbuffer_free(big);
    free(filler);
    evhttp_request_free(req);
}

/* A method evhttp knows but the seam does not name is HTTP_OTHER; no body is "". */
static void test_evhttp_view_other_method(void **state)
{
    struct evhttp_request *req = evhttp_request_new(NULL, NULL);
    struct http_req r;

    (void) state;
    req->type = EVHTTP_REQ_TRACE;
    evreq_view(req, &r);
    assert_int_equal(r.method, HTTP_OTHER);
    assert_string_equal(r.target, "");
    assert_int_equal(r.body_len, 0);
    assert_string_equal(r.body, "");
    evhttp_request_free(req);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_matches_whole_segments),
        cmocka_unit_test(test_method_names_and_safety),
        cmocka_unit_test(test_header_lookup_without_engine),
        cmocka_unit_test(test_evhttp_view),
        cmocka_unit_test(test_evhttp_view_other_method),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
