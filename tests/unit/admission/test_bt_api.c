/* Unit tests for the /busy_threshold endpoint: Dynamo's test_busy_threshold_endpoint sequence,
 * then every error status and hostile bodies. Responses are parsed back with jansson. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/bt_api.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CT "application/json"

static struct bt_registry *new_registry(void)
{
    struct busy_thresholds d;
    struct bt_registry *r;

    busy_thresholds_unset(&d);
    d.active_decode_blocks_threshold = 0.9;
    d.active_prefill_tokens_threshold = 1000;
    r = bt_registry_new(&d);
    bt_registry_add_model(r, "m");
    return r;
}

/* Sends one request and parses the response, which must always be a JSON object. */
static json_t *call(struct bt_registry *r, const char *method, const char *ct, const char *body,
                    size_t len, int want_status)
{
    struct buf out;
    json_error_t je;
    json_t *j;
    int status;

    buf_init(&out);
    status = bt_api_handle(r, method, ct, body, len, &out);
    assert_int_equal(status, want_status);
    assert_non_null(out.data);
    j = json_loadb(out.data, out.len, JSON_ALLOW_NUL, &je);
    assert_non_null(j);
    assert_true(json_is_object(j));
    if (want_status != 200)
        assert_true(json_is_string(json_object_get(j, "error")));
    buf_free(&out);
    return j;
}

static json_t *post(struct bt_registry *r, const char *body, int want_status)
{
    return call(r, "POST", CT, body, strlen(body), want_status);
}

static void expect_post(struct bt_registry *r, const char *body, int want_status)
{
    json_decref(post(r, body, want_status));
}

static double num(const json_t *j, const char *key)
{
    const json_t *v = json_object_get(j, key);

    assert_true(json_is_number(v));
    return json_number_value(v);
}

static int is_null(const json_t *j, const char *key)
{
    return json_is_null(json_object_get(j, key));
}

/* The thresholds entry for model m in a GET response. */
static const json_t *listed(const json_t *j, const char *m)
{
    const json_t *arr = json_object_get(j, "thresholds"), *e;
    size_t i;

    assert_true(json_is_array(arr));
    json_array_foreach(arr, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "model")), m) == 0)
            return e;
    }
    fail_msg("model %s not listed", m);
    return NULL;
}

static void test_dynamo_sequence(void **state)
{
    struct bt_registry *r = new_registry();
    json_t *j;

    (void) state;
    j = call(r, "GET", NULL, NULL, 0, 200); /* 1 */
    assert_true(json_is_array(json_object_get(j, "thresholds")));
    json_decref(j);
    j = post(r, "{\"model\":\"m\"}", 200); /* 2 */
    assert_string_equal(json_string_value(json_object_get(j, "model")), "m");
    assert_true(num(j, "active_decode_blocks_threshold") == 0.9);
    assert_int_equal(json_integer_value(json_object_get(j, "active_prefill_tokens_threshold")),
                     1000);
    assert_true(is_null(j, "active_prefill_tokens_threshold_frac"));
    json_decref(j);
    j = post(r, "{\"model\":\"m\",\"active_decode_blocks_threshold\":0.75}", 200); /* 3 */
    assert_string_equal(json_string_value(json_object_get(j, "model")), "m");
    assert_true(num(j, "active_decode_blocks_threshold") == 0.75);
    assert_true(num(j, "active_prefill_tokens_threshold") == 1000);
    json_decref(j);
    j = post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold\":2000}", 200); /* 4 */
    assert_true(num(j, "active_prefill_tokens_threshold") == 2000);
    assert_true(num(j, "active_decode_blocks_threshold") == 0.75);
    json_decref(j);
    j = post(r,
             "{\"model\":\"m\",\"active_decode_blocks_threshold\":0.5,"
             "\"active_prefill_tokens_threshold\":1200}",
             200); /* 5 */
    assert_true(num(j, "active_decode_blocks_threshold") == 0.5);
    assert_true(num(j, "active_prefill_tokens_threshold") == 1200);
    json_decref(j);
    j = call(r, "GET", NULL, NULL, 0, 200); /* 6 */
    assert_true(num(listed(j, "m"), "active_decode_blocks_threshold") == 0.5);
    assert_true(num(listed(j, "m"), "active_prefill_tokens_threshold") == 1200);
    json_decref(j);
    j = post(r, "{\"model\":\"m\",\"active_decode_blocks_threshold\":1.5}", 400); /* 7 */
    assert_string_equal(json_string_value(json_object_get(j, "error")),
                        "active_decode_blocks_threshold must be between 0.0 and 1.0, got 1.5");
    json_decref(j);
    expect_post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold\":5000}", 200);  /* 8 */
    expect_post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold\":-1.0}", 422);  /* 9 */
    j = post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold_frac\":0.8}", 200); /* 10 */
    assert_true(num(j, "active_prefill_tokens_threshold_frac") == 0.8);
    json_decref(j);
    j = call(r, "GET", NULL, NULL, 0, 200); /* 11 */
    assert_true(num(listed(j, "m"), "active_prefill_tokens_threshold_frac") == 0.8);
    assert_true(num(listed(j, "m"), "active_prefill_tokens_threshold") == 5000);
    assert_true(num(listed(j, "m"), "active_decode_blocks_threshold") == 0.5);
    json_decref(j);
    bt_registry_free(r);
}

static void test_registry(void **state)
{
    struct bt_registry *r = new_registry();
    struct busy_thresholds t;
    json_t *j;

    (void) state;
    bt_registry_add_model(r, "b");
    bt_registry_add_model(r, "m");    /* twice is once */
    bt_registry_add_model(r, "\xff"); /* not UTF-8: ignored */
    j = call(r, "GET", NULL, NULL, 0, 200);
    assert_int_equal(json_array_size(json_object_get(j, "thresholds")), 2);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(j, "thresholds"), 1), "model")),
                        "b");
    json_decref(j);
    expect_post(r, "{\"model\":\"b\",\"active_decode_blocks_threshold\":0.25}", 200);
    bt_registry_get(r, "b", &t);
    assert_true(t.active_decode_blocks_threshold == 0.25);
    assert_int_equal(t.active_prefill_tokens_threshold, 1000);
    assert_true(isnan(t.active_prefill_tokens_threshold_frac));
    bt_registry_get(r, "unknown", &t); /* defaults */
    assert_true(t.active_decode_blocks_threshold == 0.9);
    bt_registry_free(r);
    bt_registry_free(NULL);
}

/* A reload's new defaults reach every model, except the fields a POST set for it; models
 * registered afterwards start at the new defaults. */
static void test_new_defaults(void **state)
{
    struct bt_registry *r = new_registry();
    struct busy_thresholds d, t;

    (void) state;
    bt_registry_add_model(r, "b");
    expect_post(r, "{\"model\":\"b\",\"active_prefill_tokens_threshold\":7}", 200);
    expect_post(r, "{\"model\":\"m\",\"active_decode_blocks_threshold\":null}", 200);
    busy_thresholds_unset(&d);
    d.active_decode_blocks_threshold = 0.5;
    d.active_prefill_tokens_threshold_frac = 2;
    bt_registry_set_defaults(r, &d);
    bt_registry_get(r, "m", &t); /* nothing set by a POST (null is "not given") */
    assert_true(t.active_decode_blocks_threshold == 0.5);
    assert_int_equal(t.active_prefill_tokens_threshold, -1);
    assert_true(t.active_prefill_tokens_threshold_frac == 2);
    bt_registry_get(r, "b", &t); /* its token threshold was set: it stays */
    assert_true(t.active_decode_blocks_threshold == 0.5);
    assert_int_equal(t.active_prefill_tokens_threshold, 7);
    assert_true(t.active_prefill_tokens_threshold_frac == 2);
    bt_registry_get(r, "unknown", &t);
    assert_true(t.active_decode_blocks_threshold == 0.5);
    assert_int_equal(t.active_prefill_tokens_threshold, -1);
    bt_registry_add_model(r, "c");
    bt_registry_get(r, "c", &t);
    assert_true(t.active_decode_blocks_threshold == 0.5);
    /* Once more: the set field still stays, the others follow again. */
    d.active_prefill_tokens_threshold = 100;
    bt_registry_set_defaults(r, &d);
    bt_registry_get(r, "b", &t);
    assert_int_equal(t.active_prefill_tokens_threshold, 7);
    bt_registry_get(r, "m", &t);
    assert_int_equal(t.active_prefill_tokens_threshold, 100);
    bt_registry_free(r);
}

/* The models learned from the workers' lists go when no worker lists them; the config's,
 * and those a POST set, stay. A full registry takes no more, until one goes. */
static void test_learned_models(void **state)
{
    struct bt_registry *r = new_registry(); /* "m", declared */
    char name[32];
    json_t *j;

    (void) state;
    assert_int_equal(bt_registry_learn(r, "a"), 0);
    assert_int_equal(bt_registry_learn(r, "b"), 0);
    assert_int_equal(bt_registry_learn(r, "m"), 0); /* declared already: stays declared */
    assert_int_equal(bt_registry_learn(r, "\xff"), -1);
    bt_registry_forget(r, "a");
    bt_registry_forget(r, "m");
    bt_registry_forget(r, "nobody");
    j = call(r, "GET", NULL, NULL, 0, 200);
    assert_int_equal(json_array_size(json_object_get(j, "thresholds")), 2); /* m, b */
    assert_non_null(listed(j, "m"));
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(j, "thresholds"), 1), "model")),
                        "b"); /* the order stays */
    json_decref(j);
    expect_post(r, "{\"model\":\"a\",\"active_decode_blocks_threshold\":0.5}", 404);
    /* Declared after it was learned: it stays. */
    bt_registry_add_model(r, "b");
    bt_registry_forget(r, "b");
    /* Set by a POST: it stays too. */
    assert_int_equal(bt_registry_learn(r, "c"), 0);
    expect_post(r, "{\"model\":\"c\",\"active_decode_blocks_threshold\":0.5}", 200);
    bt_registry_forget(r, "c");
    j = call(r, "GET", NULL, NULL, 0, 200);
    assert_int_equal(json_array_size(json_object_get(j, "thresholds")), 3);
    assert_non_null(listed(j, "b"));
    assert_non_null(listed(j, "c"));
    json_decref(j);
    /* Full: a learned name more is refused, until one goes. */
    for (int i = 3; i < BT_API_MODELS_MAX; i++) {
        snprintf(name, sizeof name, "x%d", i);
        assert_int_equal(bt_registry_learn(r, name), 0);
    }
    assert_int_equal(bt_registry_learn(r, "late"), -1);
    assert_int_equal(bt_registry_learn(r, "x3"), 0); /* one there already */
    bt_registry_forget(r, "x3");
    assert_int_equal(bt_registry_learn(r, "late"), 0);
    expect_post(r, "{\"model\":\"late\",\"active_decode_blocks_threshold\":0.5}", 200);
    bt_registry_free(r);
}

static void test_unknown_model(void **state)
{
    struct bt_registry *r = new_registry();
    json_t *j;

    (void) state;
    j = post(r, "{\"model\":\"x\",\"active_decode_blocks_threshold\":0.5}", 404);
    assert_string_equal(json_string_value(json_object_get(j, "error")),
                        "Model 'x' not found. Thresholds can only be set for discovered models.");
    json_decref(j);
    j = post(r, "{\"model\":\"x\"}", 200);
    assert_string_equal(json_string_value(json_object_get(j, "model")), "x");
    assert_true(is_null(j, "active_decode_blocks_threshold"));
    assert_true(is_null(j, "active_prefill_tokens_threshold"));
    assert_true(is_null(j, "active_prefill_tokens_threshold_frac"));
    json_decref(j);
    bt_registry_free(r);
}

static void test_nulls_ignored(void **state)
{
    struct bt_registry *r = new_registry();
    json_t *j;

    (void) state;
    j = post(r,
             "{\"model\":\"m\",\"active_decode_blocks_threshold\":null,"
             "\"active_prefill_tokens_threshold\":null,\"extra\":[1,2]}",
             200); /* a get: nothing unset */
    assert_true(num(j, "active_decode_blocks_threshold") == 0.9);
    assert_true(num(j, "active_prefill_tokens_threshold") == 1000);
    json_decref(j);
    j = post(r,
             "{\"model\":\"m\",\"active_decode_blocks_threshold\":null,"
             "\"active_prefill_tokens_threshold_frac\":0}",
             200);
    assert_true(num(j, "active_decode_blocks_threshold") == 0.9);
    assert_true(num(j, "active_prefill_tokens_threshold_frac") == 0.0);
    json_decref(j);
    j = post(r, "{\"model\":\"m\",\"active_decode_blocks_threshold\":1}", 200); /* int is fine */
    assert_true(num(j, "active_decode_blocks_threshold") == 1.0);
    json_decref(j);
    bt_registry_free(r);
}

static void test_schema_errors(void **state)
{
    struct bt_registry *r = new_registry();

    (void) state;
    expect_post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold\":5.0}", 422);
    expect_post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold\":-1}", 422);
    expect_post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold\":9007199254740992}", 422);
    expect_post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold\":9007199254740991}", 200);
    expect_post(r, "{\"model\":\"m\",\"active_decode_blocks_threshold\":\"0.5\"}", 422);
    expect_post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold_frac\":true}", 422);
    expect_post(r, "{\"active_decode_blocks_threshold\":0.5}", 422);
    expect_post(r, "{\"model\":7}", 422);
    expect_post(r, "{\"model\":null}", 422);
    expect_post(r, "[\"m\"]", 422);
    expect_post(r, "42", 422);
    expect_post(r, "{\"model\":\"m\",\"model\":\"m\"}", 422);
    expect_post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold\":1e400}", 422);
    expect_post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold\":99999999999999999999}",
                422);
    expect_post(r, "{\"model\":\"m\",\"active_decode_blocks_threshold\":-0.01}", 400);
    expect_post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold_frac\":-0.5}", 400);
    expect_post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold_frac\":3.5}", 200);
    bt_registry_free(r);
}

static void test_http_errors(void **state)
{
    struct bt_registry *r = new_registry();
    const char *ok = "{\"model\":\"m\"}";
    char *big;
    json_t *j;

    (void) state;
    json_decref(call(r, "POST", NULL, ok, strlen(ok), 415));
    json_decref(call(r, "POST", "text/plain", ok, strlen(ok), 415));
    json_decref(call(r, "POST", "application/jsonx", ok, strlen(ok), 415));
    json_decref(call(r, "POST", "application/jsonp", ok, strlen(ok), 415));
    json_decref(call(r, "POST", "application/json-seq", ok, strlen(ok), 415));
    json_decref(call(r, "POST", "text/json", ok, strlen(ok), 415));
    json_decref(call(r, "POST", "Application/JSON; charset=utf-8", ok, strlen(ok), 200));
    json_decref(call(r, "POST", " application/json ;charset=utf-8", ok, strlen(ok), 200));
    json_decref(call(r, "PUT", CT, ok, strlen(ok), 405));
    json_decref(call(r, "DELETE", CT, ok, strlen(ok), 405));
    json_decref(call(r, "get", CT, ok, strlen(ok), 405));
    json_decref(call(r, NULL, CT, ok, strlen(ok), 405));
    expect_post(r, "{\"model\":", 400);
    expect_post(r, "", 400);
    expect_post(r, "{\"model\":\"m\"} x", 400);
    expect_post(r, "{'model':'m'}", 400);
    json_decref(call(r, "POST", CT, NULL, 0, 400));
    big = malloc(BT_API_BODY_MAX + 2);
    assert_non_null(big);
    memset(big, ' ', BT_API_BODY_MAX + 1);
    memcpy(big, ok, strlen(ok));
    json_decref(call(r, "POST", CT, big, BT_API_BODY_MAX, 200)); /* exactly 64 KiB is fine */
    j = call(r, "POST", CT, big, BT_API_BODY_MAX + 1, 413);
    json_decref(j);
    free(big);
    bt_registry_free(r);
}

static void test_hostile(void **state)
{
    struct bt_registry *r = new_registry();
    static const char nul_body[] = "{\"model\":\"m\"\0}";
    char *deep;
    json_t *j;
    size_t n = 20000;

    (void) state;
    deep = malloc(2 * n + 1);
    assert_non_null(deep);
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    deep[2 * n] = '\0';
    expect_post(r, deep, 400); /* beyond jansson's depth limit: a syntax error, no crash */
    free(deep);
    json_decref(call(r, "POST", CT, nul_body, sizeof nul_body - 1, 400));
    j = post(r, "{\"model\":\"m\\u0000x\",\"active_decode_blocks_threshold\":0.5}", 404);
    json_decref(j);
    j = post(r, "{\"model\":\"m\\u0000x\"}", 200); /* echoed with its NUL */
    assert_int_equal(json_string_length(json_object_get(j, "model")), 3);
    json_decref(j);
    j = post(r, "{\"model\":\"q\\\"\\\\\\n\\u00e9\",\"active_decode_blocks_threshold\":0.5}", 404);
    assert_non_null(strstr(json_string_value(json_object_get(j, "error")), "q\"\\\n\xc3\xa9"));
    json_decref(j);
    expect_post(r, "{\"model\":\"m\",\"active_decode_blocks_threshold\":1e308}", 400);
    expect_post(r, "{\"model\":\"m\",\"active_decode_blocks_threshold\":1e-320}", 200);
    expect_post(r, "{\"model\":\"m\",\"active_prefill_tokens_threshold_frac\":1e308}", 200);
    expect_post(r, "{\"model\":\"m\",\"active_decode_blocks_threshold\":-0.0}", 200);
    expect_post(r, "{\"model\":\"\xff\"}", 400); /* not UTF-8 */
    j = call(r, "GET", NULL, NULL, 0, 200);      /* still well-formed after all that */
    assert_true(num(listed(j, "m"), "active_prefill_tokens_threshold_frac") == 1e308);
    json_decref(j);
    bt_registry_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dynamo_sequence), cmocka_unit_test(test_registry),
        cmocka_unit_test(test_unknown_model),   cmocka_unit_test(test_nulls_ignored),
        cmocka_unit_test(test_schema_errors),   cmocka_unit_test(test_http_errors),
        cmocka_unit_test(test_hostile),         cmocka_unit_test(test_new_defaults),
        cmocka_unit_test(test_learned_models),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
