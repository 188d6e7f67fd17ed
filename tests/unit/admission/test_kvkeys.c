/* Unit tests for the prefix block keys: the chain, the seed, ids against text, the cut. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/kvkeys.h"
#include "admission/tokcount.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAP 256

static struct kvk_params params(unsigned block, unsigned piece)
{
    struct kvk_params p = {kvk_seed("m", 1, "", 0), block, piece};

    return p;
}

/* The keys of a body, which must be the same with a larger or an exact cap. */
static size_t body_keys(const struct kvk_params *p, const char *body, uint64_t *keys, int *exact)
{
    uint64_t again[CAP + 1];
    size_t n = kvk_body(p, body, strlen(body), keys, CAP, exact);
    struct tokcount want, got;

    assert_true(n <= CAP);
    /* the counted walk: the same keys, and tokcount_body's counts */
    tokcount_body(body, strlen(body), 3.0, &want);
    assert_int_equal(kvk_body_counted(p, body, strlen(body), again, CAP, NULL, 3.0, &got), n);
    assert_memory_equal(again, keys, n * sizeof *keys);
    assert_int_equal(got.tokens, want.tokens);
    assert_int_equal(got.id_tokens, want.id_tokens);
    assert_int_equal(got.text_bytes, want.text_bytes);
    assert_int_equal(got.exact, want.exact);
    assert_int_equal(got.complete, want.complete);
    if (n > 0) {
        assert_int_equal(kvk_body(p, body, strlen(body), again, n, NULL), n);
        assert_memory_equal(again, keys, n * sizeof *keys);
    }
    return n;
}

static void test_ids_chain_and_cut(void **state)
{
    struct kvk_params p = params(4, 0);
    uint64_t ids[12], a[CAP], b[CAP];
    size_t i, n;

    (void) state;
    for (i = 0; i < 12; i++)
        ids[i] = 100 + i;
    /* only full blocks: 11 ids of blocks of 4 are 2 keys, 12 are 3, 3 are none */
    assert_int_equal(kvk_ids(&p, ids, 11, a, CAP), 2);
    assert_int_equal(kvk_ids(&p, ids, 3, a, CAP), 0);
    n = kvk_ids(&p, ids, 12, a, CAP);
    assert_int_equal(n, 3);
    assert_true(a[0] != a[1] && a[1] != a[2] && a[0] != a[2]);
    /* chained: a prompt that extends another begins with its keys */
    assert_int_equal(kvk_ids(&p, ids, 8, b, CAP), 2);
    assert_memory_equal(a, b, 2 * sizeof *a);
    /* ... and a change in block 0 changes every later key, not only the first */
    ids[0] = 7;
    assert_int_equal(kvk_ids(&p, ids, 12, b, CAP), 3);
    for (i = 0; i < 3; i++)
        assert_true(a[i] != b[i]);
    /* a change in block 1 leaves block 0's key */
    ids[0] = 100;
    ids[5] = 7;
    assert_int_equal(kvk_ids(&p, ids, 12, b, CAP), 3);
    assert_true(a[0] == b[0] && a[1] != b[1] && a[2] != b[2]);
    /* the same block at another position has another key (it follows another chain) */
    for (i = 0; i < 8; i++)
        ids[i] = 5;
    assert_int_equal(kvk_ids(&p, ids, 8, b, CAP), 2);
    assert_true(b[0] != b[1]);
    /* the cap */
    assert_int_equal(kvk_ids(&p, ids, 8, b, 1), 1);
    assert_int_equal(kvk_ids(&p, ids, 8, b, 0), 0);
}

static void test_seed_separates(void **state)
{
    struct kvk_params p = params(4, 0), q = p;
    uint64_t ids[4] = {1, 2, 3, 4}, a[1], b[1];

    (void) state;
    assert_true(kvk_seed("m", 1, "", 0) != kvk_seed("n", 1, "", 0));
    assert_true(kvk_seed("m", 1, "", 0) != kvk_seed("m", 1, "s", 1));
    assert_true(kvk_seed("ab", 2, "c", 1) != kvk_seed("a", 1, "bc", 2));
    assert_true(kvk_seed("m", 1, "", 0) == kvk_seed("m", 1, NULL, 0));
    assert_int_equal(kvk_ids(&p, ids, 4, a, 1), 1);
    q.seed = kvk_seed("other", 5, "", 0);
    assert_int_equal(kvk_ids(&q, ids, 4, b, 1), 1);
    assert_true(a[0] != b[0]);
    q.seed = kvk_seed("m", 1, "salt", 4);
    assert_int_equal(kvk_ids(&q, ids, 4, b, 1), 1);
    assert_true(a[0] != b[0]);
}

static void test_text_pieces(void **state)
{
    struct kvk_params p = params(4, 0); /* pieces of 16 bytes */
    const char *t = "0123456789abcdefGHIJKLMNOPQRSTUVwxyz";
    uint64_t a[CAP], b[CAP];
    unsigned piece;
    size_t i;

    (void) state;
    assert_int_equal(kvk_text(&p, t, 36, a, CAP), 2);
    assert_int_equal(kvk_text(&p, t, 31, b, CAP), 1);
    assert_int_equal(kvk_text(&p, t, 32, b, CAP), 2);
    assert_memory_equal(a, b, 2 * sizeof *a);
    /* every byte of a piece counts, the last of it too */
    memcpy(b, t, 0);
    {
        char u[36];

        memcpy(u, t, 36);
        u[15] = '!';
        assert_int_equal(kvk_text(&p, u, 36, b, CAP), 2);
        assert_true(a[0] != b[0] && a[1] != b[1]);
    }
    /* piece sizes that are not multiples of 8 cut the same, whether fed whole or in parts */
    for (piece = 1; piece <= 24; piece++) {
        p.piece_bytes = piece;
        assert_int_equal(kvk_text(&p, t, 36, a, CAP), 36 / piece);
        for (i = 1; i < 36 / piece; i++)
            assert_true(a[i] != a[i - 1]);
    }
    /* piece_bytes 0 is block_tokens x 4 */
    p.piece_bytes = 0;
    p.block_tokens = 2;
    assert_int_equal(kvk_text(&p, t, 36, a, CAP), 4);
    p.block_tokens = 0; /* 16 tokens, 64 bytes */
    assert_int_equal(kvk_text(&p, t, 36, a, CAP), 0);
}

static void test_body_ids_match_kvk_ids(void **state)
{
    struct kvk_params p = params(2, 0);
    uint64_t ids[5] = {11, 22, 33, 44, 55}, want[CAP], got[CAP];
    size_t n = kvk_ids(&p, ids, 5, want, CAP);
    int exact = -1;

    (void) state;
    assert_int_equal(n, 2);
    assert_int_equal(body_keys(&p, "{\"model\":\"m\",\"prompt\":[11,22,33,44,55]}", got, &exact),
                     2);
    assert_int_equal(exact, 1);
    assert_memory_equal(got, want, 2 * sizeof *got);
    assert_int_equal(body_keys(&p, "{\"prompt_token_ids\":[11,22,33,44,55]}", got, &exact), 2);
    assert_memory_equal(got, want, 2 * sizeof *got);
    assert_int_equal(body_keys(&p, "{\"input_ids\":[11,22,33,44]}", got, &exact), 2);
    assert_memory_equal(got, want, 2 * sizeof *got);
    /* a batch: the first prompt's keys only */
    assert_int_equal(body_keys(&p, "{\"prompt\":[[11,22,33,44],[1,2,3,4,5,6]]}", got, &exact), 2);
    assert_memory_equal(got, want, 2 * sizeof *got);
    assert_int_equal(body_keys(&p, "{\"input_ids\":[[11,22,33,44,55],[9,9]]}", got, &exact), 2);
    assert_memory_equal(got, want, 2 * sizeof *got);
    /* numbers that are not ids (fractions) and ids elsewhere are not the prompt */
    assert_int_equal(body_keys(&p, "{\"x\":[11,22,33,44],\"prompt\":[1.5,2e3]}", got, &exact), 0);
}

static void test_body_text_match_kvk_text(void **state)
{
    struct kvk_params p = params(2, 0); /* 8-byte pieces */
    uint64_t want[CAP], got[CAP];
    const char *r = "hello, world\x1e"
                    "user\x1f"
                    "fine\x1e"
                    "assistant\x1f";
    size_t n;
    int exact = -1;

    (void) state;
    n = kvk_text(&p, "hello, world, again", 19, want, CAP);
    assert_int_equal(n, 2);
    assert_int_equal(body_keys(&p, "{\"prompt\":\"hello, world, again\"}", got, &exact), 2);
    assert_int_equal(exact, 0);
    assert_memory_equal(got, want, n * sizeof *got);
    /* escapes hash as the characters they stand for */
    assert_int_equal(body_keys(&p, "{\"prompt\":\"hel\\u006co, w\\u006frld, again\"}", got, NULL),
                     2);
    assert_memory_equal(got, want, n * sizeof *got);
    /* a batch of strings: the first */
    assert_int_equal(
        body_keys(&p, "{\"prompt\":[\"hello, world, again\",\"zzzzzzzzzzzzzzzz\"]}", got, NULL), 2);
    assert_memory_equal(got, want, n * sizeof *got);
    /* chat: content then "\x1e" role "\x1f", whatever the order of the keys */
    n = kvk_text(&p, r, strlen(r), want, CAP);
    assert_int_equal(n, strlen(r) / 8);
    assert_int_equal(body_keys(&p,
                               "{\"messages\":[{\"role\":\"user\",\"content\":\"hello, world\"},"
                               "{\"content\":\"fine\",\"role\":\"assistant\"}]}",
                               got, &exact),
                     n);
    assert_int_equal(exact, 0);
    assert_memory_equal(got, want, n * sizeof *got);
    /* content parts: their text strings in order */
    assert_int_equal(body_keys(&p,
                               "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                               "\"text\":\"hello, \"},{\"type\":\"image_url\",\"image_url\":{}},"
                               "{\"text\":\"world\",\"type\":\"text\"}]},"
                               "{\"role\":\"assistant\",\"content\":\"fine\"}]}",
                               got, NULL),
                     n);
    assert_memory_equal(got, want, n * sizeof *got);
}

static void test_body_surrogates_and_utf8(void **state)
{
    struct kvk_params p = params(2, 0);
    uint64_t a[CAP], b[CAP];

    (void) state;
    /* U+1F600 escaped as a pair is the same text as raw, and é escaped as raw */
    assert_int_equal(body_keys(&p, "{\"prompt\":\"ab\\ud83d\\ude00cd\\u00e9fghij\"}", a, NULL), 1);
    assert_int_equal(body_keys(&p,
                               "{\"prompt\":\"ab\xf0\x9f\x98\x80"
                               "cd\xc3\xa9"
                               "fghij\"}",
                               b, NULL),
                     1);
    assert_true(a[0] == b[0]);
}

static void test_chat_turns_extend(void **state)
{
    struct kvk_params p = params(4, 0); /* 16-byte pieces */
    uint64_t a[CAP], b[CAP];
    size_t na, nb;

    (void) state;
    na = body_keys(&p,
                   "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"You are a "
                   "helpful assistant.\"},{\"role\":\"user\",\"content\":\"What is a prefix "
                   "cache, in one sentence?\"}]}",
                   a, NULL);
    nb = body_keys(&p,
                   "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"system\","
                   "\"content\":\"You are a helpful assistant.\"},{\"role\":\"user\",\"content\":"
                   "\"What is a prefix cache, in one sentence?\"},{\"role\":\"assistant\","
                   "\"content\":\"Reused KV blocks.\"},{\"role\":\"user\",\"content\":\"More?\"}]}",
                   b, NULL);
    assert_true(na >= 4);
    assert_true(nb > na);
    /* the next turn begins with this turn's keys: the same prefix, the same blocks */
    assert_memory_equal(a, b, na * sizeof *a);
    /* another role changes the keys from its message on */
    nb = body_keys(&p,
                   "{\"messages\":[{\"role\":\"developer\",\"content\":\"You are a helpful "
                   "assistant.\"},{\"role\":\"user\",\"content\":\"What is a prefix cache, in one "
                   "sentence?\"}]}",
                   b, NULL);
    assert_int_equal(nb, na);
    assert_true(a[0] == b[0] && a[1] != b[1]);
}

static void test_body_faults(void **state)
{
    struct kvk_params p = params(2, 0);
    const char *whole = "{\"prompt\":[1,2,3,4,5,6,7,8]}";
    uint64_t a[CAP], b[CAP];
    size_t n, cut, m;
    int exact;

    (void) state;
    n = kvk_body(&p, whole, strlen(whole), a, CAP, &exact);
    assert_int_equal(n, 4);
    /* a cut body: at most the keys of the whole, and the same ones */
    for (cut = 0; cut < strlen(whole); cut++) {
        m = kvk_body(&p, whole, cut, b, CAP, NULL);
        assert_true(m <= n);
        if (m)
            assert_memory_equal(a, b, m * sizeof *a);
    }
    assert_int_equal(kvk_body(&p, NULL, 0, b, CAP, &exact), 0);
    assert_int_equal(exact, 0);
    assert_int_equal(body_keys(&p, "not json", b, NULL), 0);
    assert_int_equal(body_keys(&p, "{\"prompt\":[1,2],\"prompt\":\"abcdefgh\"}", b, &exact), 1);
    assert_int_equal(exact, 1); /* ids came first: the text is not mixed in */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_chain_and_cut),
        cmocka_unit_test(test_seed_separates),
        cmocka_unit_test(test_text_pieces),
        cmocka_unit_test(test_body_ids_match_kvk_ids),
        cmocka_unit_test(test_body_text_match_kvk_text),
        cmocka_unit_test(test_body_surrogates_and_utf8),
        cmocka_unit_test(test_chat_turns_extend),
        cmocka_unit_test(test_body_faults),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
