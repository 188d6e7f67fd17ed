/* Unit tests for engine_models: an engine's GET /v1/models answer to the list admitd sends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/engine_models.h"

#include <stdio.h>
#include <string.h>

static enum engine_models_result parse(const char *body, struct admit_load_models *l)
{
    char err[192];

    err[0] = '\0';
    return engine_models_parse(body, strlen(body), l, err, sizeof err);
}

static void test_vllm_answer(void **state)
{
    /* vLLM 0.6+: the served model names, then LoRA adapters with their parent. */
    static const char body[] =
        "{\"object\":\"list\",\"data\":[{\"id\":\"meta-llama/Llama-3.1-8B-Instruct\","
        "\"object\":\"model\",\"created\":1733000000,\"owned_by\":\"vllm\","
        "\"root\":\"/models/llama\",\"parent\":null,\"max_model_len\":8192,"
        "\"permission\":[{\"id\":\"modelperm-1\"}]},{\"id\":\"sql-lora\",\"object\":\"model\","
        "\"parent\":\"meta-llama/Llama-3.1-8B-Instruct\"},{\"id\":\"sql-lora\"}]}";
    struct admit_load_models l;
    const char *p;

    (void) state;
    assert_int_equal(parse(body, &l), ENGINE_MODELS_OK);
    assert_int_equal(l.n, 2); /* the repeated id once */
    p = admit_load_models_next(&l, NULL);
    assert_string_equal(p, "meta-llama/Llama-3.1-8B-Instruct");
    assert_string_equal(admit_load_models_next(&l, p), "sql-lora");
    /* An empty list is a known one. */
    assert_int_equal(parse("{\"object\":\"list\",\"data\":[]}", &l), ENGINE_MODELS_OK);
    assert_int_equal(l.n, 0);
}

static void test_not_an_answer(void **state)
{
    static const char *const bad[] = {"",
                                      "not json",
                                      "[]",
                                      "{}",
                                      "{\"data\":{}}",
                                      "{\"data\":[{\"name\":\"x\"}]}",
                                      "{\"data\":[{\"id\":7}]}",
                                      "{\"data\":[\"x\"]}"};
    struct admit_load_models l;

    (void) state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        admit_load_models_clear(&l);
        admit_load_models_add(&l, "kept", 4);
        assert_int_equal(parse(bad[i], &l), ENGINE_MODELS_INVALID);
        assert_int_equal(l.n, 1); /* untouched: the caller keeps its last list */
    }
}

static void test_too_many_is_unknown(void **state)
{
    char body[16384];
    size_t k = 0;
    struct admit_load_models l;

    (void) state;
    k += (size_t) snprintf(body + k, sizeof body - k, "{\"data\":[");
    for (int i = 0; i < ADMIT_LOAD_MODELS_MAX + 1; i++)
        k += (size_t) snprintf(body + k, sizeof body - k, "%s{\"id\":\"m%d\"}", i ? "," : "", i);
    snprintf(body + k, sizeof body - k, "]}");
    assert_int_equal(parse(body, &l), ENGINE_MODELS_TOO_MANY);
    assert_int_equal(l.n, ADMIT_LOAD_UNKNOWN);
    /* One name that cannot go (too long, a control byte) makes it unknown as well: a list
     * without it would say the worker does not serve it. */
    memset(body, 0, sizeof body);
    k = (size_t) snprintf(body, sizeof body, "{\"data\":[{\"id\":\"ok\"},{\"id\":\"");
    memset(body + k, 'n', 200);
    snprintf(body + k + 200, sizeof body - k - 200, "\"}]}");
    assert_int_equal(parse(body, &l), ENGINE_MODELS_TOO_MANY);
    assert_int_equal(l.n, ADMIT_LOAD_UNKNOWN);
    assert_int_equal(parse("{\"data\":[{\"id\":\"a\\nb\"}]}", &l), ENGINE_MODELS_TOO_MANY);
    assert_int_equal(parse("{\"data\":[{\"id\":\"\"}]}", &l), ENGINE_MODELS_TOO_MANY);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_answer),
        cmocka_unit_test(test_not_an_answer),
        cmocka_unit_test(test_too_many_is_unknown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
