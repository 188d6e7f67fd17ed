/* Unit tests for the body admit-router sends to a worker's POST /tokenize (src/router/
 * tokenize.c, tokz_body): the prompt or the messages vLLM's /tokenize takes, the generation
 * prompt the engine's chat path adds, the fields that shape the chat template's text, and the
 * bodies it leaves alone. The calls themselves are tested end to end
 * (tests/integration/test_router_tokenize.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "router/tokenize.h"

#include <jansson.h>
#include <string.h>

/* tokz_body of in is 0 and gives exactly the JSON object want (keys in any order). */
static void expect_body(const char *in, const char *want)
{
    struct buf b;
    json_t *got, *exp;

    buf_init(&b);
    assert_int_equal(tokz_body(in, strlen(in), &b), 0);
    got = json_loadb(b.data, b.len, 0, NULL);
    exp = json_loads(want, 0, NULL);
    assert_non_null(got);
    assert_non_null(exp);
    if (!json_equal(got, exp))
        fail_msg("tokz_body(%s) = %.*s, not %s", in, (int) b.len, b.data, want);
    json_decref(got);
    json_decref(exp);
    buf_free(&b);
}

/* tokz_body of in is -1 and writes nothing. */
static void expect_none(const char *in)
{
    struct buf b;

    buf_init(&b);
    assert_int_equal(tokz_body(in, strlen(in), &b), -1);
    assert_int_equal(b.len, 0);
    buf_free(&b);
}

static void test_chat_adds_the_generation_prompt(void **state)
{
    (void) state;
    expect_body("{\"model\":\"m\",\"stream\":true,\"max_tokens\":9,"
                "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                "\"add_generation_prompt\":true}");
    /* the request's own choice is kept, false included */
    expect_body("{\"messages\":[],\"add_generation_prompt\":false}",
                "{\"messages\":[],\"add_generation_prompt\":false}");
    /* ... but not a value that is no boolean */
    expect_body("{\"messages\":[],\"add_generation_prompt\":\"no\"}",
                "{\"messages\":[],\"add_generation_prompt\":true}");
}

static void test_chat_keeps_what_shapes_the_template(void **state)
{
    (void) state;
    expect_body("{\"model\":\"m\",\"messages\":[],\"tools\":[{\"type\":\"function\"}],"
                "\"chat_template_kwargs\":{\"enable_thinking\":false},\"chat_template\":\"t\","
                "\"continue_final_message\":true,\"add_special_tokens\":true,"
                "\"temperature\":0.5,\"cache_salt\":\"s\"}",
                "{\"model\":\"m\",\"messages\":[],\"tools\":[{\"type\":\"function\"}],"
                "\"chat_template_kwargs\":{\"enable_thinking\":false},\"chat_template\":\"t\","
                "\"continue_final_message\":true,\"add_special_tokens\":true,"
                "\"add_generation_prompt\":true}");
}

static void test_prompt_text(void **state)
{
    (void) state;
    expect_body("{\"model\":\"m\",\"prompt\":\"Once upon\",\"max_tokens\":3}",
                "{\"model\":\"m\",\"prompt\":\"Once upon\"}");
    expect_body("{\"prompt\":\"x\",\"add_special_tokens\":false,\"tools\":[]}",
                "{\"prompt\":\"x\",\"add_special_tokens\":false}");
    /* messages win over a prompt, as the chat path reads them */
    expect_body("{\"prompt\":\"x\",\"messages\":[]}",
                "{\"messages\":[],\"add_generation_prompt\":true}");
}

static void test_what_it_leaves_alone(void **state)
{
    (void) state;
    expect_none("");
    expect_none("not json");
    expect_none("[1,2]");
    expect_none("{\"model\":\"m\"}");
    expect_none("{\"prompt\":[1,2,3]}");       /* ids: exact already */
    expect_none("{\"prompt\":[\"a\",\"b\"]}"); /* a batch */
    expect_none("{\"messages\":{\"role\":\"user\"}}");
    expect_none("{\"prompt\":\"x\""); /* cut */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_adds_the_generation_prompt),
        cmocka_unit_test(test_chat_keeps_what_shapes_the_template),
        cmocka_unit_test(test_prompt_text),
        cmocka_unit_test(test_what_it_leaves_alone),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
