/* Unit tests for the mock engine's kv_transfer_params: the legs it reads, the 400s, the
 * tokens a decode leg received and a prefill leg's answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mock/mock_disagg.h"
#include "util/buf.h"

#include <jansson.h>
#include <string.h>

/* Parses a JSON text the test knows to be valid. */
static json_t *J(const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);

    if (j == NULL)
        fail_msg("bad test JSON: %s", err.text);
    return j;
}

/* mock_kvx_parse over a body text; the error and its param come back through err/param. */
static int parse(const char *text, struct mock_kvx *x, const char **param, char *err, size_t errlen)
{
    json_t *j = J(text);
    int rc;

    memset(x, 0x5a, sizeof *x); /* whatever the caller left there must not show through */
    err[0] = '\0';
    rc = mock_kvx_parse(j, x, param, err, errlen);
    json_decref(j);
    return rc;
}

static void test_legs(void **state)
{
    struct mock_kvx x;
    const char *param;
    char err[256];

    (void) state;
    assert_int_equal(parse("{\"prompt\":\"a\"}", &x, &param, err, sizeof err), 0);
    assert_int_equal(x.leg, MOCK_KVX_NONE);
    assert_false(x.present);
    assert_int_equal(parse("{\"kv_transfer_params\":null}", &x, &param, err, sizeof err), 0);
    assert_int_equal(x.leg, MOCK_KVX_NONE);
    assert_false(x.present);
    /* An object with neither flag: a whole request, whose answer has the key (null). */
    assert_int_equal(parse("{\"kv_transfer_params\":{}}", &x, &param, err, sizeof err), 0);
    assert_int_equal(x.leg, MOCK_KVX_NONE);
    assert_true(x.present);
    /* The toy proxy's prefill leg: nulls beside the flag. */
    assert_int_equal(parse("{\"kv_transfer_params\":{\"do_remote_decode\":true,"
                           "\"do_remote_prefill\":false,\"remote_engine_id\":null,"
                           "\"remote_block_ids\":null,\"remote_host\":null,\"remote_port\":null}}",
                           &x, &param, err, sizeof err),
                     0);
    assert_int_equal(x.leg, MOCK_KVX_PREFILL);
    assert_true(x.present);
    /* A decode leg as a prefill's answer makes it. */
    assert_int_equal(parse("{\"kv_transfer_params\":{\"do_remote_prefill\":true,"
                           "\"do_remote_decode\":false,\"remote_block_ids\":[7,0,9],"
                           "\"remote_engine_id\":\"e\",\"remote_host\":\"h\",\"remote_port\":5600,"
                           "\"tp_size\":1}}",
                           &x, &param, err, sizeof err),
                     0);
    assert_int_equal(x.leg, MOCK_KVX_DECODE);
    assert_int_equal(x.remote_blocks, 3);
    assert_int_equal(parse("{\"kv_transfer_params\":{\"do_remote_prefill\":true,"
                           "\"remote_block_ids\":[]}}",
                           &x, &param, err, sizeof err),
                     0);
    assert_int_equal(x.leg, MOCK_KVX_DECODE);
    assert_int_equal(x.remote_blocks, 0);
    /* Block ids are only read on a decode leg. */
    assert_int_equal(parse("{\"kv_transfer_params\":{\"do_remote_prefill\":false,"
                           "\"remote_block_ids\":\"x\"}}",
                           &x, &param, err, sizeof err),
                     0);
    assert_int_equal(x.leg, MOCK_KVX_NONE);
}

static void test_malformed(void **state)
{
    static const struct {
        const char *body, *param, *in_msg;
    } bad[] = {
        {"{\"kv_transfer_params\":[]}", "kv_transfer_params", "'kv_transfer_params' must be"},
        {"{\"kv_transfer_params\":\"x\"}", "kv_transfer_params", "must be an object"},
        {"{\"kv_transfer_params\":{\"do_remote_decode\":1}}", "do_remote_decode",
         "'kv_transfer_params.do_remote_decode' must be a boolean"},
        {"{\"kv_transfer_params\":{\"do_remote_prefill\":\"yes\"}}", "do_remote_prefill",
         "'kv_transfer_params.do_remote_prefill' must be a boolean"},
        {"{\"kv_transfer_params\":{\"do_remote_decode\":true,\"do_remote_prefill\":true}}",
         "kv_transfer_params", "cannot both be true"},
        {"{\"kv_transfer_params\":{\"do_remote_prefill\":true}}", "remote_block_ids",
         "'kv_transfer_params.remote_block_ids'"},
        {"{\"kv_transfer_params\":{\"do_remote_prefill\":true,\"remote_block_ids\":null}}",
         "remote_block_ids", "remote_block_ids"},
        {"{\"kv_transfer_params\":{\"do_remote_prefill\":true,\"remote_block_ids\":{}}}",
         "remote_block_ids", "remote_block_ids"},
        {"{\"kv_transfer_params\":{\"do_remote_prefill\":true,\"remote_block_ids\":[1,-1]}}",
         "remote_block_ids", "non-negative integers"},
        {"{\"kv_transfer_params\":{\"do_remote_prefill\":true,\"remote_block_ids\":[1.5]}}",
         "remote_block_ids", "remote_block_ids"},
        {"{\"kv_transfer_params\":{\"do_remote_prefill\":true,\"remote_block_ids\":[\"1\"]}}",
         "remote_block_ids", "remote_block_ids"},
    };
    struct mock_kvx x;
    const char *param;
    char err[256];

    (void) state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        param = NULL;
        if (parse(bad[i].body, &x, &param, err, sizeof err) != -1)
            fail_msg("accepted %s", bad[i].body);
        if (param == NULL || strcmp(param, bad[i].param) != 0)
            fail_msg("%s: param %s, want %s", bad[i].body, param ? param : "(null)", bad[i].param);
        if (strstr(err, bad[i].in_msg) == NULL)
            fail_msg("%s: message '%s' lacks '%s'", bad[i].body, err, bad[i].in_msg);
    }
}

static void test_transferred(void **state)
{
    (void) state;
    assert_int_equal(mock_kvx_transferred(0, 16, 100), 0);
    assert_int_equal(mock_kvx_transferred(3, 16, 100), 48);
    assert_int_equal(mock_kvx_transferred(6, 16, 100), 96);
    /* The partial last block covers the rest of the prompt, and no more. */
    assert_int_equal(mock_kvx_transferred(7, 16, 100), 100);
    assert_int_equal(mock_kvx_transferred(1000000, 16, 100), 100);
    assert_int_equal(mock_kvx_transferred((size_t) -1, 16, 100), 100);
    assert_int_equal(mock_kvx_transferred(5, 16, 0), 0);
}

static void test_block_ids(void **state)
{
    uint32_t held[] = {40, 41, 7, 99};
    uint32_t out[8], next = 0;

    (void) state;
    /* 50 tokens of 16: 3 full blocks, the cache's, and a partial one from the counter. */
    assert_int_equal(mock_kvx_block_ids(held, 4, 50, 16, 1000, &next, out), 4);
    assert_int_equal(out[0], 40);
    assert_int_equal(out[1], 41);
    assert_int_equal(out[2], 7);
    assert_int_equal(out[3], 1000);
    assert_int_equal(next, 1001);
    /* A held block past the prompt's full ones (its answer's) is not the prompt's. */
    assert_int_equal(mock_kvx_block_ids(held, 4, 32, 16, 1000, &next, out), 2);
    assert_int_equal(out[1], 41);
    /* Fewer held than full blocks (no room, or no cache): the rest from the counter. */
    assert_int_equal(mock_kvx_block_ids(held, 1, 48, 16, 1000, &next, out), 3);
    assert_int_equal(out[0], 40);
    assert_int_equal(out[1], 1001);
    assert_int_equal(out[2], 1002);
    assert_int_equal(mock_kvx_block_ids(NULL, 0, 0, 16, 1000, &next, out), 0);
    /* The counter never hands out a pool index, even wrapped. */
    next = UINT32_MAX;
    assert_int_equal(mock_kvx_block_ids(NULL, 0, 2, 1, 1000, &next, out), 2);
    assert_int_equal(out[0], 1000);
    assert_int_equal(out[1], 1001);
}

static void test_metrics(void **state)
{
    struct mock_kvx_counts c = {{0, 3, 5}, {0, 300, 480}, 1234};
    struct buf b;

    (void) state;
    buf_init(&b);
    mock_kvx_metrics(&b, "decode", &c);
    buf_append(&b, "", 1);
    assert_non_null(strstr(b.data, "admit_mock_role_info{role=\"decode\"} 1\n"));
    assert_non_null(strstr(b.data, "admit_mock_kv_transfers_total{side=\"prefill\"} 3\n"));
    assert_non_null(strstr(b.data, "admit_mock_kv_transfers_total{side=\"decode\"} 5\n"));
    assert_non_null(strstr(b.data, "admit_mock_kv_transfer_tokens_total{side=\"prefill\"} 300\n"));
    assert_non_null(strstr(b.data, "admit_mock_kv_transfer_tokens_total{side=\"decode\"} 480\n"));
    assert_non_null(strstr(b.data, "admit_mock_prompt_tokens_computed_total 1234\n"));
    buf_free(&b);
}

static void test_answer(void **state)
{
    struct mock_kvx_site s = {"mock-127.0.0.1:8000", "127.0.0.1", 2};
    uint32_t ids[] = {4, 17, 16384};
    json_t *j = mock_kvx_answer(&s, ids, 3, "req-1"), *b;
    const char *keys[] = {
        "do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id",
        "remote_request_id", "remote_host",      "remote_port",      "tp_size"};

    (void) state;
    assert_non_null(j);
    assert_int_equal(json_object_size(j), sizeof keys / sizeof keys[0]);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        assert_non_null(json_object_get(j, keys[i]));
    assert_true(json_is_true(json_object_get(j, "do_remote_prefill")));
    assert_true(json_is_false(json_object_get(j, "do_remote_decode")));
    b = json_object_get(j, "remote_block_ids");
    assert_int_equal(json_array_size(b), 3);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(json_integer_value(json_array_get(b, i)), ids[i]);
    assert_string_equal(json_string_value(json_object_get(j, "remote_engine_id")),
                        "mock-127.0.0.1:8000");
    assert_string_equal(json_string_value(json_object_get(j, "remote_host")), "127.0.0.1");
    assert_string_equal(json_string_value(json_object_get(j, "remote_request_id")), "req-1");
    assert_int_equal(json_integer_value(json_object_get(j, "remote_port")), 5602);
    assert_int_equal(json_integer_value(json_object_get(j, "tp_size")), 1);
    json_decref(j);
    /* The answer a decode leg reads back: the same leg, as many blocks. */
    {
        struct mock_kvx x;
        const char *param;
        char err[128];
        json_t *body = json_pack("{s:o}", "kv_transfer_params", mock_kvx_answer(&s, ids, 3, "r"));

        assert_int_equal(mock_kvx_parse(body, &x, &param, err, sizeof err), 0);
        assert_int_equal(x.leg, MOCK_KVX_DECODE);
        assert_int_equal(x.remote_blocks, 3);
        json_decref(body);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_legs),        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_transferred), cmocka_unit_test(test_block_ids),
        cmocka_unit_test(test_metrics),     cmocka_unit_test(test_answer),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
