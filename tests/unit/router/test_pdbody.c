/* Unit tests for the bodies of the disaggregated flow (src/router/pdbody.c): the prefill leg's
 * body (vLLM's toy proxy's changes), the decode leg's (the prefill's kv_transfer_params as
 * given), what a prefill answer is (a handoff, a finished answer, or unusable), and the SSE
 * stream of a finished answer for a streaming client. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "router/pdbody.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static json_t *parse(const struct buf *b)
{
    json_t *j = json_loadb(b->data, b->len, 0, NULL);

    assert_non_null(j);
    return j;
}

static void test_prefill_body(void **state)
{
    const char *in = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                     "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                     "\"max_tokens\":50,\"max_completion_tokens\":50,\"min_tokens\":3,"
                     "\"kv_transfer_params\":{\"x\":1},\"temperature\":0.5}";
    struct buf out;
    struct pd_facts f;
    json_t *j, *kv;

    (void) state;
    buf_init(&out);
    assert_int_equal(pd_prefill_body(in, strlen(in), &out, &f), 0);
    assert_true(f.stream);
    assert_true(f.include_usage);
    assert_false(f.one_token);
    assert_true(f.chat);
    j = parse(&out);
    assert_true(json_is_false(json_object_get(j, "stream")));
    assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "max_completion_tokens")), 1);
    assert_null(json_object_get(j, "stream_options"));
    assert_null(json_object_get(j, "min_tokens"));
    assert_true(json_object_get(j, "temperature") != NULL);
    kv = json_object_get(j, "kv_transfer_params");
    assert_true(json_is_true(json_object_get(kv, "do_remote_decode")));
    assert_true(json_is_false(json_object_get(kv, "do_remote_prefill")));
    assert_true(json_is_null(json_object_get(kv, "remote_block_ids")));
    assert_null(json_object_get(kv, "x"));
    json_decref(j);
    buf_free(&out);
    /* Not an object: refused, out untouched. */
    buf_init(&out);
    assert_int_equal(pd_prefill_body("[1]", 3, &out, &f), -1);
    assert_int_equal(pd_prefill_body("{\"a\":1,\"a\":2}", 13, &out, &f), -1);
    assert_int_equal(out.len, 0);
    /* Completions with one token: the prefill will be the answer. */
    assert_int_equal(pd_prefill_body("{\"prompt\":\"x\",\"max_tokens\":1}", 29, &out, &f), 0);
    assert_true(f.one_token);
    assert_false(f.chat);
    assert_false(f.stream);
    j = parse(&out);
    assert_null(json_object_get(j, "max_completion_tokens"));
    /* Its prefill is its answer: no transfer asked for, no KV kept for a decoder. */
    assert_null(json_object_get(j, "kv_transfer_params"));
    json_decref(j);
    buf_free(&out);
}

static void test_decode_body(void **state)
{
    const char *in = "{\"model\":\"m\",\"prompt\":\"x\",\"stream\":true,\"max_tokens\":9}";
    const char *params = "{\"do_remote_prefill\":true,\"remote_block_ids\":[1,2],\"a\":{\"b\":[]}}";
    struct buf out;
    json_t *j, *want;

    (void) state;
    buf_init(&out);
    assert_int_equal(pd_decode_body(in, strlen(in), params, strlen(params), &out), 0);
    j = parse(&out);
    want = json_loads(params, 0, NULL);
    assert_true(json_equal(json_object_get(j, "kv_transfer_params"), want));
    assert_true(json_is_true(json_object_get(j, "stream")));
    assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 9);
    json_decref(want);
    json_decref(j);
    buf_free(&out);
    assert_int_equal(pd_decode_body("x", 1, params, strlen(params), &out), -1);
    assert_int_equal(out.len, 0);
}

static void test_answer_read(void **state)
{
    const char *handoff =
        "{\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":"
        "\"length\"}],\"kv_transfer_params\":{\"remote_block_ids\":[3],"
        "\"do_remote_prefill\":true}}";
    const char *stopped =
        "{\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":"
        "\"stop\"}],\"kv_transfer_params\":null}";
    const char *lost = "{\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":"
                       "\"length\"}]}";
    struct pd_facts f = {0}, one = {.one_token = 1};
    struct buf params;
    json_t *j;

    (void) state;
    buf_init(&params);
    assert_int_equal(pd_answer_read(handoff, strlen(handoff), &f, &params), PD_HANDOFF);
    j = parse(&params);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "remote_block_ids"), 0)),
                     3);
    json_decref(j);
    assert_int_equal(pd_answer_read(handoff, strlen(handoff), &one, &params), PD_DONE);
    assert_int_equal(pd_answer_read(stopped, strlen(stopped), &f, &params), PD_DONE);
    assert_int_equal(pd_answer_read(lost, strlen(lost), &f, &params), PD_INVALID);
    assert_int_equal(pd_answer_read("{}", 2, &f, &params), PD_INVALID);
    assert_int_equal(pd_answer_read("{\"choices\":[]}", 14, &f, &params), PD_INVALID);
    assert_int_equal(pd_answer_read("nope", 4, &one, &params), PD_INVALID);
    buf_free(&params);
}

static void test_answer_sse(void **state)
{
    const char *chat =
        "{\"id\":\"c1\",\"object\":\"chat.completion\",\"created\":5,\"model\":\"m\","
        "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
        "\"Hi\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":7,"
        "\"completion_tokens\":1,\"total_tokens\":8}}";
    struct pd_facts f = {.stream = 1, .include_usage = 1, .chat = 1};
    struct buf out;
    const char *p, *e;
    json_t *j;

    (void) state;
    buf_init(&out);
    assert_int_equal(pd_answer_sse(chat, strlen(chat), &f, &out), 0);
    assert_true(strncmp(out.data, "data: ", 6) == 0);
    e = strstr(out.data, "\n\n");
    assert_non_null(e);
    j = json_loadb(out.data + 6, (size_t) (e - out.data - 6), 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion.chunk");
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta"), "content")),
        "Hi");
    json_decref(j);
    p = strstr(e, "\"usage\"");
    assert_non_null(p);
    assert_true(strlen(out.data) > 14 &&
                strcmp(out.data + strlen(out.data) - 14, "data: [DONE]\n\n") == 0);
    buf_free(&out);
    /* Without include_usage no usage event; a completion's text event. */
    f.include_usage = 0;
    f.chat = 0;
    assert_int_equal(pd_answer_sse("{\"choices\":[{\"index\":0,\"text\":\"z\",\"finish_reason\":"
                                   "\"stop\"}],\"usage\":{}}",
                                   70, &f, &out),
                     0);
    assert_null(strstr(out.data, "usage"));
    assert_non_null(strstr(out.data, "\"text\":\"z\""));
    assert_non_null(strstr(out.data, "text_completion"));
    buf_free(&out);
    assert_int_equal(pd_answer_sse("[]", 2, &f, &out), -1);
}

/* Keys of object o in order, as one string. */
static void keys_of(json_t *o, char *out, size_t n)
{
    const char *k;
    json_t *v;

    out[0] = '\0';
    json_object_foreach(o, k, v)
    {
        strncat(out, k, n - strlen(out) - 2);
        strcat(out, ",");
    }
}

/* a and b (each emptied) hold the same JSON object, its members in the same order. */
static void same_object(struct buf *a, struct buf *b)
{
    char ka[512], kb[512];
    json_t *ja = parse(a), *jb = parse(b);

    assert_true(json_equal(ja, jb));
    keys_of(ja, ka, sizeof ka);
    keys_of(jb, kb, sizeof kb);
    assert_string_equal(ka, kb);
    json_decref(ja);
    json_decref(jb);
}

/* The splice and the tree make the same body: the same members, in the same order, the same
 * facts; of the decode leg too. Returns the prefill body's verdict. */
static int same(const char *in)
{
    struct buf a, b;
    struct pd_facts fa, fb;
    int ra, rb, rv;

    buf_init(&a);
    buf_init(&b);
    ra = pd_prefill_body(in, strlen(in), &a, &fa);
    rb = pd_prefill_body_tree(in, strlen(in), &b, &fb);
    assert_int_equal(ra, rb);
    if (ra == 0) {
        same_object(&a, &b);
        assert_memory_equal(&fa, &fb, sizeof fa);
    }
    buf_free(&a);
    buf_free(&b);
    rv = ra;
    ra = pd_decode_body(in, strlen(in), "{\"x\":[1]}", 9, &a);
    rb = pd_decode_body_tree(in, strlen(in), "{\"x\":[1]}", 9, &b);
    assert_int_equal(ra, rb);
    if (ra == 0)
        same_object(&a, &b);
    buf_free(&a);
    buf_free(&b);
    return rv;
}

static void test_splice_matches_tree(void **state)
{
    static const char *const bodies[] = {
        "{}",
        " { \"model\" : \"m\" , \"prompt\" :\"x\"\n}\t",
        "{\"\\u0073tream\":true,\"max_tokens\":1,\"stream_options\":{\"include_usage\":true}}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"h\\u00e9\\n\"}],\"max_completion_tokens\""
        ":1.0,\"min_tokens\":2,\"stream\":false,\"kv_transfer_params\":{\"a\":null},\"n\":-1e3}",
        "{\"stream_options\":null,\"max_tokens\":-1,\"stream\":\"true\",\"x\":{\"stream\":true}}",
        "{\"a\":1,\"a\":2}",
        "{\"a\":1,}",
        "{\"a\":1} x",
        "[]",
        "",
        "{\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\":1}",
    };
    char *big;
    size_t n = 70000;

    (void) state;
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++)
        (void) same(bodies[i]);
    assert_int_equal(same(bodies[2]), 0);
    /* Past the scanner's limit: the tree's path. */
    big = malloc(n + 64);
    assert_non_null(big);
    strcpy(big, "{\"stream\":true,\"prompt\":\"");
    memset(big + 25, 'x', n);
    strcpy(big + 25 + n, "\"}");
    assert_int_equal(same(big), 0);
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_body),        cmocka_unit_test(test_decode_body),
        cmocka_unit_test(test_answer_read),         cmocka_unit_test(test_answer_sse),
        cmocka_unit_test(test_splice_matches_tree),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
