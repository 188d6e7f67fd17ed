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

/* One block at a time from its parent's key (admitd's way, kvk_block32) gives the keys of
 * kvk_ids over the whole prompt, for blocks of 1, 3 and 16 ids and ids past 2^31. */
static void test_block_by_block(void **state)
{
    static const unsigned sizes[] = {1, 3, 16};

    (void) state;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        unsigned bs = sizes[s];
        struct kvk_params p = {.seed = kvk_seed("model-x", 7, "", 0), .block_tokens = bs};
        uint64_t ids[48], keys[48];
        uint32_t ids32[48];
        uint64_t parent = p.seed;
        size_t n;

        for (size_t i = 0; i < 48; i++) {
            ids32[i] = (uint32_t) (i * 2654435761u);
            ids[i] = ids32[i];
        }
        n = kvk_ids(&p, ids, 48, keys, 48);
        assert_int_equal(n, 48 / bs);
        for (size_t b = 0; b < n; b++) {
            uint64_t k = kvk_block32(parent, ids32 + b * bs, bs);

            assert_true(k == keys[b]);
            parent = k;
        }
    }
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

/* The salt kvk_salt finds (NULL for none), checked as a NUL-terminated string. */
static void expect_salt(const char *body, size_t cap, const char *want)
{
    char buf[KVK_SALT_MAX];
    size_t n = 99;
    const char *got = kvk_salt(body, strlen(body), buf, cap, &n);

    if (want == NULL) {
        assert_null(got);
        assert_int_equal(n, 0);
        return;
    }
    assert_non_null(got);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(got, want, n);
    /* in the body unless it was decoded */
    assert_true((got >= body && got + n <= body + strlen(body)) || got == buf);
}

static void test_salt_found(void **state)
{
    (void) state;
    expect_salt("{\"model\":\"m\",\"cache_salt\":\"tenant-a\",\"prompt\":\"x\"}", KVK_SALT_MAX,
                "tenant-a");
    expect_salt(" {\n\"prompt\" : \"x\" ,\t\"cache_salt\" :\"tenant-a\" } ", KVK_SALT_MAX,
                "tenant-a");
    /* only the top level counts; brackets and quotes inside strings are skipped */
    expect_salt(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"{\\\"cache_salt\\\":\\\"no\\\"}]\"}"
        "],\"cache_salt\":\"s\"}",
        KVK_SALT_MAX, "s");
    expect_salt("{\"metadata\":{\"cache_salt\":\"inner\"},\"prompt\":\"x\"}", KVK_SALT_MAX, NULL);
    expect_salt("{\"a\":[1,{\"b\":\"}\\\\\"},[]],\"n\":-1.5e3,\"t\":true,\"cache_salt\":\"q\"}",
                KVK_SALT_MAX, "q");
    /* none: empty, null, not a string, not an object, cut, malformed */
    expect_salt("{\"cache_salt\":\"\"}", KVK_SALT_MAX, NULL);
    expect_salt("{\"cache_salt\":null}", KVK_SALT_MAX, NULL);
    expect_salt("{\"cache_salt\":7}", KVK_SALT_MAX, NULL);
    expect_salt("{\"cache_salt\":[\"a\"]}", KVK_SALT_MAX, NULL);
    expect_salt("[\"cache_salt\",\"x\"]", KVK_SALT_MAX, NULL);
    expect_salt("{\"cache_salt\":\"abc\"", KVK_SALT_MAX, NULL);
    expect_salt("{\"cache_salt\":\"abc", KVK_SALT_MAX, NULL);
    expect_salt("{\"cache_salt\" \"abc\"}", KVK_SALT_MAX, NULL);
    expect_salt("{}", KVK_SALT_MAX, NULL);
    expect_salt("", KVK_SALT_MAX, NULL);
    expect_salt("{\"cache_salts\":\"x\",\"acache_salt\":\"y\"}", KVK_SALT_MAX, NULL);
    /* the last of several wins, as in the engine's parser */
    expect_salt("{\"cache_salt\":\"a\",\"cache_salt\":\"b\"}", KVK_SALT_MAX, "b");
    expect_salt("{\"cache_salt\":\"a\",\"cache_salt\":null}", KVK_SALT_MAX, NULL);
    /* escapes: in the key, and in the salt (decoded) */
    expect_salt("{\"cache\\u005fsalt\":\"k\"}", KVK_SALT_MAX, "k");
    expect_salt("{\"cache_salt\":\"t\\u00e9\\\"x\\\\\"}", KVK_SALT_MAX, "t\xc3\xa9\"x\\");
    /* ... one that does not fit decoded, or a bad escape: as written */
    expect_salt("{\"cache_salt\":\"\\u0041BCDEF\"}", 4, "\\u0041BCDEF");
    expect_salt("{\"cache_salt\":\"\\u0041BCDEF\"}", 6, "ABCDEF");
    expect_salt("{\"cache_salt\":\"x\\u0000\"}", KVK_SALT_MAX, "x\\u0000");
}

/* The keys kvr_keys makes: the seed from the model and the body's salt. */
static size_t salted_keys(const char *body, uint64_t *keys)
{
    struct kvk_params p = params(4, 0);
    char buf[KVK_SALT_MAX];
    size_t n;
    const char *salt = kvk_salt(body, strlen(body), buf, sizeof buf, &n);

    p.seed = kvk_seed("m", 1, salt, n);
    return body_keys(&p, body, keys, NULL);
}

static void test_salt_separates_keys(void **state)
{
    struct kvk_params p = params(4, 0);
    uint64_t plain[CAP], a[CAP], b[CAP], c[CAP];
    size_t n, i;

    (void) state;
#define TEXT "\"Forty-eight bytes of a system prompt, all the same.\""
    n = body_keys(&p, "{\"prompt\":" TEXT "}", plain, NULL);
    assert_int_equal(n, 3);
    /* no salt (or null): the keys are unchanged */
    assert_int_equal(salted_keys("{\"prompt\":" TEXT "}", a), n);
    assert_memory_equal(a, plain, n * sizeof *a);
    assert_int_equal(salted_keys("{\"prompt\":" TEXT ",\"cache_salt\":null}", a), n);
    assert_memory_equal(a, plain, n * sizeof *a);
    /* two salts: no key in common, with each other or with no salt */
    assert_int_equal(salted_keys("{\"prompt\":" TEXT ",\"cache_salt\":\"tenant-a\"}", a), n);
    assert_int_equal(salted_keys("{\"prompt\":" TEXT ",\"cache_salt\":\"tenant-b\"}", b), n);
    for (i = 0; i < n; i++)
        assert_true(a[i] != b[i] && a[i] != plain[i] && b[i] != plain[i]);
    /* the same salt: the same keys, wherever it stands in the body */
    assert_int_equal(salted_keys("{\"cache_salt\":\"tenant-a\",\"prompt\":" TEXT "}", c), n);
    assert_memory_equal(a, c, n * sizeof *a);
    /* ... and however it is written */
    assert_int_equal(salted_keys("{\"prompt\":" TEXT ",\"cache_salt\":\"tenant\\u002da\"}", c), n);
    assert_memory_equal(a, c, n * sizeof *a);
#undef TEXT
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_chain_and_cut),
        cmocka_unit_test(test_seed_separates),
        cmocka_unit_test(test_block_by_block),
        cmocka_unit_test(test_text_pieces),
        cmocka_unit_test(test_body_ids_match_kvk_ids),
        cmocka_unit_test(test_body_text_match_kvk_text),
        cmocka_unit_test(test_body_surrogates_and_utf8),
        cmocka_unit_test(test_chat_turns_extend),
        cmocka_unit_test(test_body_faults),
        cmocka_unit_test(test_salt_found),
        cmocka_unit_test(test_salt_separates_keys),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
