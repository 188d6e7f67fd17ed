/* Unit tests for the mock engine's tokenizer: pieces, the chat template, generated text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mock/mock_tok.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static json_t *J(const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &err);

    if (j == NULL)
        fail_msg("bad test JSON: %s", err.text);
    return j;
}

static void toks_of(const char *body, enum mock_api api, struct mock_toks *t)
{
    json_t *j = J(body);

    memset(t, 0, sizeof *t);
    mock_tok_body(t, j, api);
    json_decref(j);
}

static void test_text_pieces(void **state)
{
    struct mock_toks t = {0};

    (void) state;
    mock_tok_text(&t, "abcdefghi", 9);
    assert_int_equal(t.n, 3); /* ceil(9 / 4) */
    assert_int_equal(t.ids[0], mock_tok_piece_id("abcd", 4));
    assert_int_equal(t.ids[1], mock_tok_piece_id("efgh", 4));
    assert_int_equal(t.ids[2], mock_tok_piece_id("i", 1));
    /* Stable, in range, and not the special ids. */
    for (size_t i = 0; i < t.n; i++)
        assert_true(t.ids[i] >= MOCK_TOK_FIRST_TEXT && t.ids[i] < MOCK_TOK_VOCAB);
    assert_int_not_equal(t.ids[0], t.ids[1]);
    /* Bytes matter, embedded NULs included. */
    assert_int_not_equal(mock_tok_piece_id("ab\0d", 4), mock_tok_piece_id("ab\0e", 4));
    mock_toks_free(&t);
    assert_null(t.ids);
    mock_tok_text(&t, "", 0);
    assert_int_equal(t.n, 0);
    mock_toks_free(&t);
}

static void test_chat_template(void **state)
{
    struct mock_toks t;

    (void) state;
    toks_of("{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}", MOCK_API_CHAT, &t);
    /* <|im_start|> user <nl> "hell" "o" <|im_end|>, then <|im_start|> assistant <nl> */
    assert_int_equal(t.n, 4 + 2 + 3);
    assert_int_equal(t.ids[0], MOCK_TOK_IM_START);
    assert_int_equal(t.ids[2], MOCK_TOK_NL);
    assert_int_equal(t.ids[3], mock_tok_piece_id("hell", 4));
    assert_int_equal(t.ids[4], mock_tok_piece_id("o", 1));
    assert_int_equal(t.ids[5], MOCK_TOK_IM_END);
    assert_int_equal(t.ids[6], MOCK_TOK_IM_START);
    /* The role is a token of its own, not its text's piece. */
    assert_int_not_equal(t.ids[1], t.ids[7]);
    assert_int_not_equal(t.ids[1], mock_tok_piece_id("user", 4));
    mock_toks_free(&t);
    /* Text parts each start a piece; other parts add nothing; non-objects are no messages. */
    toks_of(
        "{\"messages\":[1,{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"abcde\"},"
        "{\"type\":\"image_url\",\"text\":\"zz\"},{\"text\":\"f\"}]}]}",
        MOCK_API_CHAT, &t);
    assert_int_equal(t.n, 4 + 2 + 1 + 3);
    assert_int_equal(t.ids[5], mock_tok_piece_id("f", 1));
    mock_toks_free(&t);
    /* The chat tokenizer ignores a prompt and the completions one ignores messages. */
    toks_of("{\"prompt\":\"abcdefgh\"}", MOCK_API_CHAT, &t);
    assert_int_equal(t.n, 0);
    mock_toks_free(&t);
    toks_of("{\"messages\":[{\"content\":\"hello\"}]}", MOCK_API_COMPLETIONS, &t);
    assert_int_equal(t.n, 0);
    mock_toks_free(&t);
}

static void test_prompt_ids(void **state)
{
    struct mock_toks t;

    (void) state;
    toks_of("{\"prompt\":[\"abcd\",7,[8,9],\"xy\"]}", MOCK_API_COMPLETIONS, &t);
    assert_int_equal(t.n, 5);
    assert_int_equal(t.ids[0], mock_tok_piece_id("abcd", 4));
    assert_int_equal(t.ids[1], 7);
    assert_int_equal(t.ids[2], 8);
    assert_int_equal(t.ids[3], 9);
    assert_int_equal(t.ids[4], mock_tok_piece_id("xy", 2));
    mock_toks_free(&t);
}

/* Generated pieces are 4 bytes, start with "tok", and tokenize back to the generated ids. */
static void test_generated_text(void **state)
{
    char p[MOCK_TOK_PIECE];
    struct mock_toks t = {0};
    char text[MOCK_TOK_PIECE * 100];

    (void) state;
    mock_tok_gen_text(0, p);
    assert_memory_equal(p, "tok0", 4);
    mock_tok_gen_text(10, p);
    assert_memory_equal(p, "toka", 4);
    for (unsigned i = 0; i < 100; i++)
        mock_tok_gen_text(i, text + i * MOCK_TOK_PIECE);
    mock_tok_text(&t, text, sizeof text);
    assert_int_equal(t.n, 100);
    for (unsigned i = 0; i < 100; i++)
        assert_int_equal(t.ids[i], mock_tok_gen_id(i));
    mock_toks_free(&t);
}

/* Turn k+1 (the conversation so far, the answer, a new message) begins with exactly turn k's
 * prompt ids followed by its answer's ids. */
static void test_next_turn_extends(void **state)
{
    enum { ANSWER = 37 };
    json_t *turn1 = J("{\"messages\":[{\"role\":\"system\",\"content\":\"You are terse.\"},"
                      "{\"role\":\"user\",\"content\":\"What is a KV cache, in short?\"}]}");
    json_t *turn2 = json_deep_copy(turn1);
    json_t *msgs = json_object_get(turn2, "messages");
    struct mock_toks p1 = {0}, p2 = {0};
    char answer[ANSWER * MOCK_TOK_PIECE];

    (void) state;
    for (unsigned i = 0; i < ANSWER; i++)
        mock_tok_gen_text(i, answer + i * MOCK_TOK_PIECE);
    json_array_append_new(
        msgs, json_pack("{s:s, s:s%}", "role", "assistant", "content", answer, sizeof answer));
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", "And then?"));
    mock_tok_body(&p1, turn1, MOCK_API_CHAT);
    mock_tok_body(&p2, turn2, MOCK_API_CHAT);
    assert_true(p2.n > p1.n + ANSWER);
    assert_memory_equal(p2.ids, p1.ids, p1.n * sizeof *p1.ids);
    for (unsigned i = 0; i < ANSWER; i++)
        assert_int_equal(p2.ids[p1.n + i], mock_tok_gen_id(i));
    assert_int_equal(p2.ids[p1.n + ANSWER], MOCK_TOK_IM_END);
    mock_toks_free(&p1);
    mock_toks_free(&p2);
    json_decref(turn1);
    json_decref(turn2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_pieces),       cmocka_unit_test(test_chat_template),
        cmocka_unit_test(test_prompt_ids),        cmocka_unit_test(test_generated_text),
        cmocka_unit_test(test_next_turn_extends),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
