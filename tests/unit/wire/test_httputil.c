/* Unit tests for header rules, reason phrases and the OpenAI-shaped error body. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/httputil.h"

#include <jansson.h>
#include <stdlib.h>
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
    assert_false(httpu_connection_lists("close,", "")); /* a trailing comma is no member */
    assert_false(httpu_connection_lists(" , ,\t", ""));
}

static void test_reasons(void **state)
{
    (void) state;
    assert_string_equal(httpu_reason(529), "Site is overloaded");
    assert_string_equal(httpu_reason(503), "Service Unavailable");
    assert_string_equal(httpu_reason(200), "OK");
    assert_string_equal(httpu_reason(777), "Unknown");
    /* every status the HTTP/1.1 parser refuses with has its phrase */
    for (int i = 0; i < 8; i++) {
        static const int refusals[] = {400, 405, 413, 414, 417, 431, 501, 505};
        assert_string_not_equal(httpu_reason(refusals[i]), "Unknown");
    }
}

/* The error body is written by hand: byte for byte what jansson's compact dump of the same
 * object writes, for escapes, UTF-8 and the fallback for invalid UTF-8 alike. */
static void test_error_json_matches_jansson(void **state)
{
    static const char *const fixed[] = {"plain",
                                        "q\"uo\\te",
                                        "ctl\x01\x1f\n\t\r\b\f/\x7f",
                                        "utf8 \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                                        "cut \xc3",
                                        "surrogate \xed\xa0\x80",
                                        "overlong \xc0\xaf",
                                        "past \xf4\x90\x80\x80",
                                        ""};
    unsigned seed = 1;

    (void) state;
    for (size_t i = 0; i < 20000 + sizeof fixed / sizeof fixed[0]; i++) {
        char rnd[16];
        const char *msg = rnd;
        struct buf ours;
        json_t *j;
        char *theirs;

        if (i < sizeof fixed / sizeof fixed[0]) {
            msg = fixed[i];
        } else {
            size_t n = (seed = seed * 1103515245u + 12345u) % 15;
            for (size_t k = 0; k < n; k++)
                rnd[k] = (char) (1 + (seed = seed * 1103515245u + 12345u) / 65536 % 255);
            rnd[n] = '\0';
        }
        j = json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", msg, "type", "t\"y", "param",
                      "code", 529);
        theirs = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
        buf_init(&ours);
        httpu_error_json(&ours, 529, "t\"y", msg);
        assert_string_equal(
            ours.data, theirs != NULL ? theirs : "{\"error\":{\"message\":\"internal error\"}}");
        buf_free(&ours);
        free(theirs);
        json_decref(j);
    }
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

/* A string with NULs and every escape reads back as itself, the bytes jansson writes. */
static void test_json_string_with_nul(void **state)
{
    static const char in[] = "a\0b\"\\\n\t\x01\xc3\xa9";
    json_t *j = json_stringn(in, sizeof in - 1);
    char *want = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    struct buf b;

    (void) state;
    buf_init(&b);
    httpu_json_string(&b, in, sizeof in - 1);
    assert_string_equal(b.data, want);
    buf_free(&b);
    free(want);
    json_decref(j);
}

static void test_bearer_token(void **state)
{
    const char *tok = "s3cret-token-0123456789";

    (void) state;
    assert_true(httpu_bearer_ok("Bearer s3cret-token-0123456789", tok));
    assert_false(httpu_bearer_ok(NULL, tok));
    assert_false(httpu_bearer_ok("", tok));
    assert_false(httpu_bearer_ok("s3cret-token-0123456789", tok));         /* no scheme */
    assert_false(httpu_bearer_ok("Basic s3cret-token-0123456789", tok));   /* other scheme */
    assert_false(httpu_bearer_ok("Bearer s3cret-token-012345678", tok));   /* a prefix */
    assert_false(httpu_bearer_ok("Bearer s3cret-token-01234567890", tok)); /* longer */
    assert_false(httpu_bearer_ok("Bearer s3cret-token-0123456788", tok));  /* last differs */
    assert_false(httpu_bearer_ok("Bearer ", tok));
}

/* The media type is application/json exactly: any case, blanks around it, parameters after
 * ';'. Types that merely start with it are other types. */
static void test_is_json(void **state)
{
    static const char *const yes[] = {
        "application/json",
        "APPLICATION/JSON",
        "Application/Json",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        " application/json ;charset=utf-8",
        "\tapplication/json\t",
        "application/json;",
    };
    static const char *const no[] = {
        "application/jsonp",
        "application/json-seq",
        "application/jsonp; charset=utf-8",
        "application/json+ld",
        "application/json5",
        "application/json charset=utf-8",
        "application/json,text/plain",
        "text/json",
        "application/jso",
        "application/",
        "json",
        "xapplication/json",
        "",
        " ",
    };

    (void) state;
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        if (!httpu_is_json(yes[i]))
            fail_msg("refused as JSON: \"%s\"", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        if (httpu_is_json(no[i]))
            fail_msg("taken as JSON: \"%s\"", no[i]);
    assert_false(httpu_is_json(NULL));
}

static void test_http_date(void **state)
{
    char d[HTTPU_DATE_LEN];

    (void) state;
    httpu_date(0, d);
    assert_string_equal(d, "Thu, 01 Jan 1970 00:00:00 GMT");
    httpu_date(784111777, d); /* RFC 9110's example */
    assert_string_equal(d, "Sun, 06 Nov 1994 08:49:37 GMT");
    httpu_date(1795996799, d);
    assert_string_equal(d, "Sun, 29 Nov 2026 23:59:59 GMT");
    httpu_date(951782400, d); /* a leap day */
    assert_string_equal(d, "Tue, 29 Feb 2000 00:00:00 GMT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hop_by_hop),       cmocka_unit_test(test_reasons),
        cmocka_unit_test(test_error_json_shape), cmocka_unit_test(test_error_json_matches_jansson),
        cmocka_unit_test(test_bearer_token),     cmocka_unit_test(test_http_date),
        cmocka_unit_test(test_is_json),          cmocka_unit_test(test_json_string_with_nul),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
