/* Unit tests for the one-pass prompt token counter, with a jansson-based reference count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/tokcount.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The counts of a body with ratio 4; asserts the invariants every result must satisfy. */
static struct tokcount count_n(const char *body, size_t len, double cpt)
{
    struct tokcount t;

    memset(&t, 0xa5, sizeof t);
    tokcount_body(body, len, cpt, &t);
    assert_true(t.id_tokens <= t.tokens);
    assert_true(t.exact == 0 || t.exact == 1);
    assert_true(t.complete == 0 || t.complete == 1);
    if (t.exact)
        assert_true(t.text_bytes == 0 && t.id_tokens > 0 && t.tokens == t.id_tokens);
    assert_true(t.text_bytes <= len);
    return t;
}

static struct tokcount count(const char *body)
{
    return count_n(body, strlen(body), 4.0);
}

/* Asserts a body's counts: tokens, ids, text bytes, exact, complete. */
static void expect(const char *body, uint64_t tokens, uint64_t ids, uint64_t text, int exact,
                   int complete)
{
    struct tokcount t = count(body);

    if (t.tokens != tokens || t.id_tokens != ids || t.text_bytes != text || t.exact != exact ||
        t.complete != complete)
        print_error("body %s: got %llu %llu %llu %d %d\n", body, (unsigned long long) t.tokens,
                    (unsigned long long) t.id_tokens, (unsigned long long) t.text_bytes, t.exact,
                    t.complete);
    assert_int_equal(t.tokens, tokens);
    assert_int_equal(t.id_tokens, ids);
    assert_int_equal(t.text_bytes, text);
    assert_int_equal(t.exact, exact);
    assert_int_equal(t.complete, complete);
}

static void test_chat_string_content(void **state)
{
    (void) state;
    /* 5 bytes -> 2 tokens, plus 4 for the message */
    expect("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}", 6, 0, 5, 0,
           1);
    expect("{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
           "{\"role\":\"user\",\"content\":\"hi\",\"name\":\"bob\"},"
           "{\"content\":\"abcd\",\"role\":\"assistant\"}]}",
           12 + 4, 0, 14, 0, 1);
    /* messages without content, null content, content as object: overhead only */
    expect("{\"messages\":[{\"role\":\"user\"},{\"role\":\"assistant\",\"content\":null,"
           "\"tool_calls\":[{\"function\":{\"arguments\":\"{\\\"x\\\":1}\"}}]},"
           "{\"content\":{\"text\":\"nope\"}}]}",
           12, 0, 0, 0, 1);
    /* non-object elements of messages are not messages */
    expect("{\"messages\":[\"content\",1,null,[{\"content\":\"x\"}]]}", 0, 0, 0, 0, 1);
    expect("{\"messages\":[]}", 0, 0, 0, 0, 1);
    expect("{}", 0, 0, 0, 0, 1);
}

static void test_chat_parts(void **state)
{
    (void) state;
    expect("{\"messages\":[{\"role\":\"user\",\"content\":["
           "{\"type\":\"text\",\"text\":\"abc\"},"
           "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,AAAA\"}},"
           "{\"text\":\"defgh\",\"type\":\"text\"},"
           "{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"AAAA\",\"format\":\"wav\"}}]}]}",
           4 + 2, 0, 8, 0, 1);
    /* "text" only counts directly in a part, and only when it is a string */
    expect("{\"messages\":[{\"content\":[{\"type\":\"image_url\",\"image_url\":{\"text\":\"xx\"}},"
           "{\"text\":{\"value\":\"yy\"}},{\"text\":[\"zz\"]},\"bare\",[{\"text\":\"ww\"}]],"
           "\"text\":\"vv\"}]}",
           4, 0, 0, 0, 1);
    expect("{\"messages\":[{\"content\":[]},{\"content\":\"\"}]}", 8, 0, 0, 0, 1);
}

static void test_completions_prompt(void **state)
{
    (void) state;
    expect("{\"model\":\"m\",\"prompt\":\"Once upon a time\",\"max_tokens\":5}", 4, 0, 16, 0, 1);
    expect("{\"prompt\":[\"abcd\",\"efghi\",\"\"]}", 3, 0, 9, 0, 1);
    expect("{\"prompt\":[1,2,3,40000]}", 4, 4, 0, 1, 1);
    expect("{\"prompt\":[[1,2],[3],[]]}", 3, 3, 0, 1, 1);
    /* mixed (invalid for OpenAI, but each item counts by its own type) */
    expect("{\"prompt\":[\"abcd\",7,[8,\"no\"],{\"prompt\":\"no\"}]}", 1 + 2, 2, 4, 0, 1);
    /* only integers are ids */
    expect("{\"prompt\":[1,2.0,3e2,-4,0,1E+2,5.5e-1]}", 3, 3, 0, 1, 1);
    expect("{\"prompt\":null,\"suffix\":\"not counted\"}", 0, 0, 0, 0, 1);
    expect("{\"prompt\":{\"prompt\":\"x\"}}", 0, 0, 0, 0, 1);
    expect("{\"prompt\":\"\"}", 0, 0, 0, 0, 1);
}

static void test_vllm_sglang_ids(void **state)
{
    (void) state;
    expect("{\"prompt_token_ids\":[1,2,3]}", 3, 3, 0, 1, 1);
    expect("{\"input_ids\":[5,6]}", 2, 2, 0, 1, 1);
    expect("{\"input_ids\":[[5,6],[7]]}", 3, 3, 0, 1, 1);
    /* deeper arrays and strings in id lists are not ids */
    expect("{\"input_ids\":[[[1]],\"2\"],\"prompt_token_ids\":[[3],\"4\"]}", 0, 0, 0, 0, 1);
    /* ids and text together: not exact */
    expect("{\"prompt_token_ids\":[1,2],\"prompt\":\"abcde\"}", 4, 2, 5, 0, 1);
    expect("{\"input_ids\":[1],\"messages\":[{\"content\":\"\"}]}", 5, 1, 0, 0, 1);
    expect("{\"prompt_token_ids\":[]}", 0, 0, 0, 0, 1);
}

static void test_escapes(void **state)
{
    (void) state;
    expect("{\"prompt\":\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"}", 3, 0, 12, 0, 1);
    expect("{\"prompt\":\"\\u0041\\u00e9\\u20AC\"}", 2, 0, 1 + 2 + 3, 0, 1);
    expect("{\"prompt\":\"\\ud83d\\ude00\"}", 1, 0, 4, 0, 1);
    /* lone surrogates count their 3-byte (WTF-8) length; high, then pair: 3 + 4 */
    expect("{\"prompt\":\"\\ud83dx\\ude00\"}", 2, 0, 7, 0, 1);
    expect("{\"prompt\":\"\\ud83d\\ud83d\\ude00\"}", 2, 0, 7, 0, 1);
    /* raw UTF-8 counts its bytes */
    expect("{\"prompt\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}", 3, 0, 9, 0, 1);
    /* a string of escaped quotes and backslashes only, and a "\"}" lookalike */
    expect("{\"prompt\":\"\\\\\\\"\\\\\\\"\"}", 1, 0, 4, 0, 1);
    expect("{\"prompt\":\"x\\\"}\",\"messages\":[]}", 1, 0, 3, 0, 1);
    /* escaped keys are decoded; a non-ASCII escape matches nothing */
    expect("{\"pro\\u006dpt\":\"abcd\",\"\\u0070rompt_token_ids\":[1]}", 2, 1, 4, 0, 1);
    expect("{\"prompt\\u00e9\":\"abcd\",\"prompt_token_ids_and_more\":[1]}", 0, 0, 0, 0, 1);
    expect("{\"messages\":[{\"cont\\u0065nt\":\"ab\"}]}", 5, 0, 2, 0, 1);
    /* invalid escapes stop the scan */
    expect("{\"prompt\":\"ab\\x\"}", 1, 0, 2, 0, 0);
    expect("{\"prompt\":\"ab\\u12G4\"}", 1, 0, 2, 0, 0);
}

/* An escape, a quote or a control byte at every place in the first 48 bytes of a 64-byte
 * prompt: the plain run before it is scanned 16, 8 or 1 bytes at a time, and each must stop
 * there (a missed escape counts its bytes raw; a missed quote runs on). */
static void test_stop_anywhere(void **state)
{
    char body[128];
    size_t at;
    struct tokcount t;

    (void) state;
    for (at = 0; at < 48; at++) {
        memset(body, 'a', sizeof body);
        memcpy(body, "{\"prompt\":\"", 11);
        memcpy(body + 11 + at, "\\n", 2); /* 64 raw bytes, 63 decoded */
        memcpy(body + 11 + 64, "\"}", 2);
        t = count_n(body, 11 + 64 + 2, 4.0);
        assert_int_equal(t.text_bytes, 63);
        assert_int_equal(t.complete, 1);
        body[11 + at] = '"'; /* the prompt ends there: what follows is no JSON */
        t = count_n(body, 11 + 64 + 2, 4.0);
        assert_int_equal(t.text_bytes, at);
        assert_int_equal(t.complete, 0);
        body[11 + at] = '\x01'; /* a control byte stops the scan */
        t = count_n(body, 11 + 64 + 2, 4.0);
        assert_int_equal(t.text_bytes, at);
        assert_int_equal(t.complete, 0);
    }
}

static void test_whitespace(void **state)
{
    (void) state;
    expect(" \t\r\n{ \"messages\" :\n[ {\r\"content\"\t:\t[ { \"text\" : \"abcd\" } ] } ] ,"
           "\"prompt\" : [ 1 , 2 ] , \"input_ids\" : [ [ 3 ] ] }\n\t ",
           4 + 1 + 3, 3, 4, 0, 1);
    /* other bytes are not whitespace */
    expect("\v{\"prompt\":\"a\"}", 0, 0, 0, 0, 0);
    expect("{\"prompt\":\"abcd\"}\f", 1, 0, 4, 0, 0);
}

static void test_depth_rules(void **state)
{
    (void) state;
    /* keys count only at their own depth */
    expect(
        "{\"metadata\":{\"content\":\"xxxx\",\"prompt\":\"xxxx\",\"messages\":[{\"content\":\"x\"}]"
        ","
        "\"input_ids\":[1]},"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"prompt\":{\"type\":\"string\"}}}}}],"
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"text\":\"t\"}},"
        "\"stream_options\":{\"include_usage\":true},\"n\":1,\"stream\":false,\"stop\":null,"
        "\"logit_bias\":{\"50256\":-100}}",
        0, 0, 0, 0, 1);
    expect("{\"messages\":[{\"content\":\"ab\",\"prompt\":\"xx\",\"messages\":[{\"content\":\"y\"}]"
           "}]}",
           5, 0, 2, 0, 1);
    /* top-level non-objects count nothing */
    expect("[{\"prompt\":\"abcd\"}]", 0, 0, 0, 0, 1);
    expect("\"prompt\"", 0, 0, 0, 0, 1);
    expect("42", 0, 0, 0, 0, 1);
    expect("-0.5e3", 0, 0, 0, 0, 1);
    expect("null", 0, 0, 0, 0, 1);
    expect("true", 0, 0, 0, 0, 1);
    expect("false ", 0, 0, 0, 0, 1);
    /* duplicate keys count each occurrence */
    expect(
        "{\"prompt\":\"ab\",\"prompt\":\"cd\",\"prompt_token_ids\":[1],\"prompt_token_ids\":[2]}",
        3, 2, 4, 0, 1);
}

static void test_malformed(void **state)
{
    (void) state;
    expect("", 0, 0, 0, 0, 0);
    expect("   ", 0, 0, 0, 0, 0);
    expect("{\"prompt\":\"abc\",}", 1, 0, 3, 0, 0);
    expect("{\"prompt\":[1,2,]}", 2, 2, 0, 1, 0);
    expect("{\"prompt\":[1,2}", 2, 2, 0, 1, 0);
    expect("{\"prompt\" \"x\"}", 0, 0, 0, 0, 0);
    /* "0" ends before the "1", so it is understood as an id */
    expect("{\"prompt\":[01]}", 1, 1, 0, 1, 0);
    expect("{\"prompt\":[1x]}", 1, 1, 0, 1, 0);
    expect("{\"prompt\":[-]}", 0, 0, 0, 0, 0);
    expect("{\"prompt\":[1.]}", 0, 0, 0, 0, 0);
    expect("{\"prompt\":[1e]}", 0, 0, 0, 0, 0);
    expect("{\"prompt\":[+1]}", 0, 0, 0, 0, 0);
    expect("{\"a\":tru}", 0, 0, 0, 0, 0);
    expect("{\"a\":nul", 0, 0, 0, 0, 0);
    expect("{prompt:\"a\"}", 0, 0, 0, 0, 0);
    expect("{\"prompt\":'a'}", 0, 0, 0, 0, 0);
    expect("{\"prompt\":\"abcd\"}{}", 1, 0, 4, 0, 0);
    expect("{\"prompt\":\"abcd\"}]", 1, 0, 4, 0, 0);
    expect("{\"prompt\":\"abcd\"", 1, 0, 4, 0, 0);
    expect("]", 0, 0, 0, 0, 0);
    expect("{]", 0, 0, 0, 0, 0);
    expect("[}", 0, 0, 0, 0, 0);
    expect("{\"a\":1 \"b\":2}", 0, 0, 0, 0, 0);
    /* a raw control byte in a string is invalid: the counts stop there */
    expect("{\"prompt\":\"ab\ncd\"}", 1, 0, 2, 0, 0);
    /* a NULL body is empty */
    {
        struct tokcount t = count_n(NULL, 0, 4.0);

        assert_int_equal(t.tokens, 0);
        assert_int_equal(t.complete, 0);
    }
}

static void test_nul_and_invalid_utf8(void **state)
{
    static const char nul_in_string[] = "{\"prompt\":\"ab\0cd\"}";
    static const char nul_after[] = "{\"prompt\":\"abcd\"}\0";
    static const char nul_key[] = "{\"prompt\0\":\"abcd\"}";
    static const char bad_utf8[] = "{\"prompt\":\"\xff\xfe\xc3\x28\xed\xa0\x80\x80\"}";
    struct tokcount t;

    (void) state;
    t = count_n(nul_in_string, sizeof nul_in_string - 1, 4.0);
    assert_int_equal(t.text_bytes, 2);
    assert_int_equal(t.complete, 0);
    t = count_n(nul_after, sizeof nul_after - 1, 4.0);
    assert_int_equal(t.text_bytes, 4);
    assert_int_equal(t.complete, 0);
    t = count_n(nul_key, sizeof nul_key - 1, 4.0);
    assert_int_equal(t.tokens, 0);
    assert_int_equal(t.complete, 0);
    /* UTF-8 validity is not checked: the bytes count as they are */
    t = count_n(bad_utf8, sizeof bad_utf8 - 1, 4.0);
    assert_int_equal(t.text_bytes, 8);
    assert_int_equal(t.complete, 1);
    /* an escaped NUL is a character like any other */
    expect("{\"prompt\":\"a\\u0000b\"}", 1, 0, 3, 0, 1);
}

static void test_chars_per_token(void **state)
{
    static const char body[] = "{\"messages\":[{\"content\":\"0123456789\"}]}";
    struct tokcount t;

    (void) state;
    assert_int_equal(count_n(body, strlen(body), 4.0).tokens, 4 + 3);
    assert_int_equal(count_n(body, strlen(body), 0).tokens, 4 + 3);
    assert_int_equal(count_n(body, strlen(body), -2).tokens, 4 + 3);
    assert_int_equal(count_n(body, strlen(body), NAN).tokens, 4 + 3);
    assert_int_equal(count_n(body, strlen(body), INFINITY).tokens, 4 + 3);
    assert_int_equal(count_n(body, strlen(body), 1.0).tokens, 4 + 10);
    assert_int_equal(count_n(body, strlen(body), 2.5).tokens, 4 + 4);
    assert_int_equal(count_n(body, strlen(body), 3.0).tokens, 4 + 4);
    assert_int_equal(count_n(body, strlen(body), 10.0).tokens, 4 + 1);
    assert_int_equal(count_n(body, strlen(body), 1e9).tokens, 4 + 1);
    assert_int_equal(count_n(body, strlen(body), 0.5).tokens, 4 + 20);
    /* a tiny ratio saturates instead of overflowing */
    t = count_n(body, strlen(body), 1e-300);
    assert_true(t.tokens == UINT64_MAX);
    assert_int_equal(t.text_bytes, 10);
    /* no text: the ratio does not matter */
    assert_int_equal(count_n("{\"prompt\":[1]}", 14, 1e-300).tokens, 1);
}

/* Bodies used for truncation and the jansson cross-check. */
static const char *const samples[] = {
    "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"You are \\\"helpful\\\".\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"caf\\u00e9 \\ud83d\\ude00\"},"
    "{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x/y.png\"}}]}],\"max_tokens\":16,"
    "\"temperature\":0.7,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
    "{\"prompt\":[[101,2023,2003,-1],[7592,1012]],\"n\":2,\"logprobs\":null}",
    "{\"prompt\":[\"a\\nb\",\"\xc3\xa9t\xc3\xa9\",\"\"],\"echo\":false,\"seed\":12345678901}",
    "{\"input_ids\":[[1,2,3],[4]],\"prompt_token_ids\":[5,6,7,8],\"metadata\":{\"content\":\"x\"}}",
    ("{ \"messages\" : [ { \"content\" : \"x\" , \"role\" : \"user\" } , { \"content\" : [ ] } ] ,"
     " \"tools\" : [ { \"function\" : { \"parameters\" : { \"text\" : \"t\" } } } ] }"),
    "{\"prompt\":\"tab\\there \\\\ \\/ \\u0001 \\u07FF \\uFFFF\",\"x\":[true,false,null,1e5]}",
};

/* The reference count of a valid body, computed from its jansson tree. */
static void reference(const char *body, double cpt, struct tokcount *t)
{
    json_error_t err;
    json_t *root = json_loads(body, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err), *v, *e, *p;
    uint64_t messages = 0;
    size_t i, j, k;

    assert_non_null(root);
    memset(t, 0, sizeof *t);
    if (json_is_object(root)) {
        json_array_foreach(json_object_get(root, "messages"), i, e)
        {
            if (!json_is_object(e))
                continue;
            messages++;
            v = json_object_get(e, "content");
            if (json_is_string(v))
                t->text_bytes += json_string_length(v);
            json_array_foreach(v, j, p)
            {
                if (json_is_string(json_object_get(p, "text")))
                    t->text_bytes += json_string_length(json_object_get(p, "text"));
            }
        }
        v = json_object_get(root, "prompt");
        if (json_is_string(v))
            t->text_bytes += json_string_length(v);
        json_array_foreach(v, i, e)
        {
            if (json_is_string(e))
                t->text_bytes += json_string_length(e);
            t->id_tokens += json_is_integer(e);
            json_array_foreach(e, j, p) t->id_tokens += json_is_integer(p);
        }
        json_array_foreach(json_object_get(root, "prompt_token_ids"), i, e) t->id_tokens +=
            json_is_integer(e);
        json_array_foreach(json_object_get(root, "input_ids"), i, e)
        {
            t->id_tokens += json_is_integer(e);
            json_array_foreach(e, k, p) t->id_tokens += json_is_integer(p);
        }
    }
    json_decref(root);
    t->tokens = t->id_tokens + (uint64_t) ceil((double) t->text_bytes / cpt) + 4 * messages;
    t->exact = t->text_bytes == 0 && messages == 0 && t->id_tokens > 0;
    t->complete = 1;
}

static void check_against_reference(const char *body, double cpt)
{
    struct tokcount want, got = count_n(body, strlen(body), cpt);

    reference(body, cpt, &want);
    if (memcmp(&want, &got, sizeof want) != 0)
        print_error("body %s\nwant %llu %llu %llu %d, got %llu %llu %llu %d %d\n", body,
                    (unsigned long long) want.tokens, (unsigned long long) want.id_tokens,
                    (unsigned long long) want.text_bytes, want.exact,
                    (unsigned long long) got.tokens, (unsigned long long) got.id_tokens,
                    (unsigned long long) got.text_bytes, got.exact, got.complete);
    assert_int_equal(got.tokens, want.tokens);
    assert_int_equal(got.id_tokens, want.id_tokens);
    assert_int_equal(got.text_bytes, want.text_bytes);
    assert_int_equal(got.exact, want.exact);
    assert_int_equal(got.complete, 1);
}

static void test_truncation(void **state)
{
    size_t i, n, cut;

    (void) state;
    for (i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        struct tokcount full = count(samples[i]);

        n = strlen(samples[i]);
        assert_int_equal(full.complete, 1);
        for (cut = 0; cut < n; cut++) {
            /* a heap copy of exactly cut bytes, so ASan catches any read past the end */
            char *copy = malloc(cut ? cut : 1);
            struct tokcount t;

            assert_non_null(copy);
            memcpy(copy, samples[i], cut);
            t = count_n(copy, cut, 4.0);
            free(copy);
            assert_int_equal(t.complete, 0);
            assert_true(t.tokens <= full.tokens);
            assert_true(t.id_tokens <= full.id_tokens);
            assert_true(t.text_bytes <= full.text_bytes);
        }
    }
}

static void test_deep_nesting(void **state)
{
    size_t n = 100000, i;
    char *b = malloc(6 * n + 128);
    struct tokcount t;
    int len;

    (void) state;
    assert_non_null(b);
    memset(b, '[', n);
    t = count_n(b, n, 4.0);
    assert_int_equal(t.tokens, 0);
    assert_int_equal(t.complete, 0);
    memset(b + n, ']', n);
    t = count_n(b, 2 * n, 4.0);
    assert_int_equal(t.complete, 0);
    /* deep objects too */
    for (i = 0; i < n; i++)
        memcpy(b + 6 * i, "{\"a\":[", 6);
    t = count_n(b, 6 * n, 4.0);
    assert_int_equal(t.tokens, 0);
    assert_int_equal(t.complete, 0);
    /* a deep value before the prompt, with brackets in a string: skipped, and what follows
     * still counts */
    len = sprintf(b, "{\"metadata\":");
    memset(b + len, '[', n);
    memcpy(b + len + n, "\"]}[\"", 5);
    memset(b + len + n + 5, ']', n);
    len += (int) (2 * n + 5);
    len += sprintf(b + len, ",\"prompt\":\"abcd\",\"prompt_token_ids\":[1,2]}");
    t = count_n(b, (size_t) len, 4.0);
    assert_int_equal(t.complete, 0);
    assert_int_equal(t.text_bytes, 4);
    assert_int_equal(t.id_tokens, 2);
    assert_int_equal(t.tokens, 3);
    /* exactly TOKCOUNT_MAX_DEPTH levels are complete, one more is not */
    memset(b, '[', TOKCOUNT_MAX_DEPTH);
    memset(b + TOKCOUNT_MAX_DEPTH, ']', TOKCOUNT_MAX_DEPTH);
    assert_int_equal(count_n(b, 2 * TOKCOUNT_MAX_DEPTH, 4.0).complete, 1);
    memset(b, '[', TOKCOUNT_MAX_DEPTH + 1);
    memset(b + TOKCOUNT_MAX_DEPTH + 1, ']', TOKCOUNT_MAX_DEPTH + 1);
    assert_int_equal(count_n(b, 2 * TOKCOUNT_MAX_DEPTH + 2, 4.0).complete, 0);
    free(b);
}

static void test_big_id_array(void **state)
{
    size_t cap = (1 << 20) + 64, len, ids = 0;
    char *b = malloc(cap);
    struct tokcount t;

    (void) state;
    assert_non_null(b);
    len = (size_t) sprintf(b, "{\"prompt_token_ids\":[");
    while (len < (1 << 20)) {
        len += (size_t) sprintf(b + len, "%zu,", (ids * 7919) % 151936);
        ids++;
    }
    b[len - 1] = ']';
    b[len++] = '}';
    t = count_n(b, len, 4.0);
    assert_int_equal(t.id_tokens, ids);
    assert_int_equal(t.tokens, ids);
    assert_int_equal(t.exact, 1);
    assert_int_equal(t.complete, 1);
    free(b);
}

static void test_samples_match_jansson(void **state)
{
    size_t i;

    (void) state;
    for (i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        check_against_reference(samples[i], 4.0);
        check_against_reference(samples[i], 3.3);
    }
}

/* Random request-like trees, so the cross-check meets shapes nobody thought of. */
static unsigned long rng_state = 88172645463325252UL;

static unsigned rnd(unsigned n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned) (rng_state % n);
}

static json_t *random_string(void)
{
    static const char *const pieces[] = {"a",
                                         "hello ",
                                         "\"",
                                         "\\",
                                         "\n",
                                         "\t",
                                         "\x01",
                                         "/",
                                         "\xc3\xa9",
                                         "\xe2\x82\xac",
                                         "\xf0\x9f\x98\x80",
                                         "}",
                                         "]",
                                         ",",
                                         ":",
                                         "\x7f"};
    char s[64] = "";
    unsigned i, n;

    for (i = 0, n = rnd(8); i < n; i++)
        strcat(s, pieces[rnd(sizeof pieces / sizeof pieces[0])]);
    return json_string(s);
}

static json_t *random_value(int depth)
{
    static const char *const keys[] = {
        "messages", "content",   "text",     "prompt", "type", "prompt_token_ids", "input_ids",
        "role",     "image_url", "metadata", "tools",  "pro",  "messages ",        "Prompt"};
    unsigned i, n;
    json_t *v;

    switch (rnd(depth > 6 ? 4 : 7)) {
    case 0:
        return rnd(2) ? json_integer((json_int_t) rnd(200000) - 10) : json_real(rnd(100) / 8.0);
    case 1:
        return random_string();
    case 2:
        return rnd(3) ? json_null() : json_true();
    case 3:
        return json_integer(rnd(50000));
    case 4:
    case 5:
        v = json_array();
        for (i = 0, n = rnd(5); i < n; i++)
            json_array_append_new(v, random_value(depth + 1));
        return v;
    default:
        v = json_object();
        for (i = 0, n = rnd(5); i < n; i++)
            json_object_set_new(v, keys[rnd(sizeof keys / sizeof keys[0])],
                                random_value(depth + 1));
        return v;
    }
}

/* An array of n items from make, or now and then something random instead. */
static json_t *random_array(json_t *(*make)(void), unsigned n)
{
    json_t *v = json_array();
    unsigned i;

    for (i = 0; i < n; i++)
        json_array_append_new(v, rnd(8) ? make() : random_value(3));
    return v;
}

static json_t *random_id(void)
{
    return json_integer(rnd(151936));
}

static json_t *random_ids(void)
{
    return random_array(random_id, rnd(6));
}

static json_t *random_part(void)
{
    json_t *p = json_object();

    if (rnd(3)) {
        json_object_set_new(p, "type", json_string("text"));
        json_object_set_new(p, "text", random_string());
    } else {
        json_object_set_new(p, "type", json_string("image_url"));
        json_object_set_new(p, "image_url", json_pack("{s:s}", "url", "data:image/png;base64,QQ"));
    }
    return p;
}

static json_t *random_message(void)
{
    json_t *m = json_object();

    json_object_set_new(m, "role", json_string(rnd(2) ? "user" : "assistant"));
    json_object_set_new(m, "content", rnd(2) ? random_string() : random_array(random_part, rnd(4)));
    if (!rnd(4))
        json_object_set_new(m, "name", random_string());
    return m;
}

/* A chat, completions or vLLM/SGLang body, with random extras. */
static json_t *random_body(unsigned shape)
{
    json_t *root = json_object();

    json_object_set_new(root, "model", json_string("m"));
    if (shape == 0)
        json_object_set_new(root, "messages", random_array(random_message, rnd(5)));
    if (shape == 1)
        json_object_set_new(root, "prompt",
                            rnd(3) == 0   ? random_string()
                            : rnd(2) == 0 ? random_array(random_string, rnd(4))
                            : rnd(2) == 0 ? random_ids()
                                          : random_array(random_ids, rnd(4)));
    if (shape == 2)
        json_object_set_new(root, rnd(2) ? "prompt_token_ids" : "input_ids",
                            rnd(2) ? random_ids() : random_array(random_ids, rnd(4)));
    if (rnd(2))
        json_object_set_new(root, "metadata", random_value(1));
    if (rnd(2))
        json_object_set_new(root, "tools", random_value(1));
    return root;
}

static void test_random_bodies_match_jansson(void **state)
{
    static const size_t flags[] = {JSON_COMPACT, JSON_INDENT(2), JSON_ENSURE_ASCII,
                                   JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ESCAPE_SLASH};
    int i;

    (void) state;
    for (i = 0; i < 3000; i++) {
        json_t *root = i % 4 == 3 ? random_value(0) : random_body((unsigned) i % 4);
        char *body;

        body = json_dumps(root, flags[(i / 4) % 4] | JSON_ENCODE_ANY);
        assert_non_null(body);
        check_against_reference(body, i % 2 ? 4.0 : 2.7);
        free(body);
        json_decref(root);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_string_content),
        cmocka_unit_test(test_chat_parts),
        cmocka_unit_test(test_completions_prompt),
        cmocka_unit_test(test_vllm_sglang_ids),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_stop_anywhere),
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_depth_rules),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_nul_and_invalid_utf8),
        cmocka_unit_test(test_chars_per_token),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_big_id_array),
        cmocka_unit_test(test_samples_match_jansson),
        cmocka_unit_test(test_random_bodies_match_jansson),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
