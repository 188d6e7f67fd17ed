/* Unit tests for the chunked decoder: a table of every refusal and accepted shape, each input
 * fed whole, split at every byte offset and one byte at a time (each piece in a buffer of
 * its own, so that a read past a piece is a sanitizer error), all giving the same data, the
 * same end and the same verdict. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/h1chunk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ccase {
    const char *name;
    const char *in;
    size_t len;
    int rc;             /* H1_DONE, H1_ERROR or H1_AGAIN */
    int status;         /* with H1_ERROR */
    const char *reason; /* ... */
    const char *data;   /* the body decoded (so far) */
    size_t end;         /* with H1_DONE: where the message ends; with H1_ERROR: the bad byte */
    uint64_t max;       /* 0: no limit */
};

/* rest: the bytes after the message's end */
#define OK(n, s, d, rest)                                                                          \
    {                                                                                              \
        n, s, sizeof(s) - 1, H1_DONE, 0, NULL, d, sizeof(s) - 1 - (rest), 0                        \
    }
#define BAD(n, s, r, at)                                                                           \
    {                                                                                              \
        n, s, sizeof(s) - 1, H1_ERROR, 400, r, NULL, at, 0                                         \
    }
#define R_LINE "invalid character in chunk size line"
#define R_EXT  "malformed chunk extension"
#define R_DATA "chunk data not followed by CRLF"
#define R_HEX  "chunk size has no hex digits"
#define R_WS   "whitespace in chunk size line"

static const struct ccase cases[] = {
    OK("last chunk only", "0\r\n\r\n", "", 0),
    OK("one chunk", "7\r\n1234567\r\n0\r\n\r\n", "1234567", 0),
    OK("several chunks", "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n", "abcdefg", 0),
    OK("hex sizes", "A\r\n0123456789\r\nb\r\n0123456789a\r\n0\r\n\r\n", "01234567890123456789a", 0),
    OK("sixteen digits", "0000000000000003\r\nabc\r\n0\r\n\r\n", "abc", 0),
    OK("next message after", "1\r\nx\r\n0\r\n\r\nGET / HTTP/1.1\r\n", "x", 16),
    OK("extension token", "7;ext=1\r\n1234567\r\n0\r\n\r\n", "1234567", 0),
    OK("extension name only", "1;a\r\nx\r\n0\r\n\r\n", "x", 0),
    OK("extension quoted", "7;a=\"q\\\"s\"\r\n1234567\r\n0\r\n\r\n", "1234567", 0),
    OK("extension empty quoted", "1;a=\"\"\r\nx\r\n0\r\n\r\n", "x", 0),
    OK("extension obs-text quoted", "1;a=\"\xff \t\"\r\nx\r\n0\r\n\r\n", "x", 0),
    OK("extensions with BWS", "1 \t; a = b ;c=\"d\"\t;e\r\nx\r\n0\r\n\r\n", "x", 0),
    OK("extension on the last chunk", "0;a=b\r\n\r\n", "", 0),
    OK("trailers", "1\r\nx\r\n0\r\nX-Sum: 1\r\nEmpty:\r\nV: a\tb\xc3\xa9\r\n\r\n", "x", 0),
    /* ---- the size ---- */
    BAD("no digits", "x\r\n", R_HEX, 0),
    BAD("empty size line", "\r\n", R_HEX, 0),
    BAD("space before size", " 7\r\n", R_HEX, 0),
    BAD("extension without size", ";a\r\n", R_HEX, 0),
    BAD("plus sign", "+7\r\n", R_HEX, 0),
    BAD("minus sign", "-7\r\n", R_HEX, 0),
    BAD("0x prefix", "0x7\r\n1234567\r\n0\r\n\r\n", R_LINE, 1),
    BAD("seventeen digits", "00000000000000007\r\n", "chunk size over 16 hex digits", 16),
    BAD("bare LF after size", "7\n1234567\r\n0\r\n\r\n", H1_R_BARE_LF, 1),
    BAD("bare CR after size", "7\rX", H1_R_BARE_CR, 2),
    BAD("space after size", "7 \r\n1234567\r\n", R_WS, 2),
    BAD("word after size", "7 x\r\n", R_WS, 2),
    BAD("size then garbage", "7x\r\n", R_LINE, 1),
    /* ---- extensions ---- */
    BAD("empty extension", "7;\r\n", R_EXT, 2),
    BAD("extension without a name", "7;=b\r\n", R_EXT, 2),
    BAD("extension without a value", "7;a=\r\n", R_EXT, 4),
    BAD("two words as a value", "7;a=b c\r\n", R_EXT, 6),
    BAD("space before CR", "7;a=b \r\n", R_EXT, 6),
    BAD("CR in a quoted value", "7;a=\"b\r\n", R_EXT, 6),
    BAD("CR after a backslash", "7;a=\"b\\\r\n", R_EXT, 7),
    BAD("at as a value", "7;a=@\r\n", R_EXT, 4),
    BAD("control in a quoted value", "7;a=\"\001\"\r\n", R_EXT, 5),
    BAD("bare LF after an extension", "7;a=b\n", H1_R_BARE_LF, 5),
    BAD("text after a quoted value", "7;a=\"b\"c\r\n", R_EXT, 7),
    /* ---- data ---- */
    BAD("data runs over", "7\r\n1234567X\r\n0\r\n\r\n", R_DATA, 10),
    BAD("data then bare CR", "7\r\n1234567\rX", R_DATA, 11),
    BAD("data then bare LF", "7\r\n1234567\n0\r\n\r\n", R_DATA, 10),
    /* ---- trailers: the head's field rules ---- */
    BAD("trailer space before colon", "0\r\nX : y\r\n\r\n", H1_R_WS_COLON, 4),
    BAD("trailer obs-fold", "0\r\nX: y\r\n z\r\n\r\n", H1_R_OBS_FOLD, 9),
    BAD("trailer empty name", "0\r\n: y\r\n\r\n", H1_R_EMPTY_NAME, 3),
    BAD("trailer without colon", "0\r\nX\r\n\r\n", H1_R_NO_COLON, 4),
    BAD("trailer bad name", "0\r\nX(: y\r\n\r\n", H1_R_NAME_CHAR, 4),
    BAD("trailer NUL", "0\r\nX: \0\r\n\r\n", H1_R_NUL, 6),
    BAD("trailer control", "0\r\nX: \177\r\n\r\n", H1_R_CTL, 6),
    BAD("trailer bare LF", "0\r\nX: y\n\r\n", H1_R_BARE_LF, 7),
    BAD("trailer bare CR", "0\r\nX: y\r\r\n", H1_R_BARE_CR, 8),
    BAD("final bare LF", "0\r\n\n", H1_R_BARE_LF, 3),
    BAD("final bare CR", "0\r\n\rX", H1_R_BARE_CR, 4),
    /* ---- the body's budget ---- */
    {"chunk over the budget", "7\r\n1234567\r\n0\r\n\r\n", 17, H1_ERROR, 413,
     "chunked body too large", NULL, 1, 5},
    {"sum over the budget", "3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n", 21, H1_ERROR, 413,
     "chunked body too large", NULL, 9, 5},
    {"budget met exactly", "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", 20, H1_DONE, 0, NULL, "abcde", 20,
     5},
    {"largest size over a budget", "FFFFFFFFFFFFFFFF\r\n", 18, H1_ERROR, 413,
     "chunked body too large", NULL, 16, UINT64_MAX - 1},
    /* ---- incomplete ---- */
    {"in the data", "7\r\n123", 6, H1_AGAIN, 0, NULL, "123", 0, 0},
    {"in the trailers", "0\r\nX: y\r\n", 9, H1_AGAIN, 0, NULL, "", 0, 0},
    {"nothing", "", 0, H1_AGAIN, 0, NULL, "", 0, 0},
};

#define NCASES (sizeof cases / sizeof cases[0])

struct result {
    int rc;
    int status;
    const char *reason;
    size_t at; /* the message's end, or the bad byte, from the start of the input */
    char data[256];
    size_t ndata;
    uint64_t total, chunks;
};

/* Feeds in[0..len) in pieces ending at cuts[0..n), each piece copied into its own buffer. */
static void feed(const char *in, uint64_t max, const size_t *cuts, size_t n, struct result *r)
{
    struct h1_chunked c;
    size_t from = 0;

    memset(r, 0, sizeof *r);
    h1c_init(&c, max ? max : UINT64_MAX);
    r->rc = H1_AGAIN;
    for (size_t k = 0; k < n && r->rc == H1_AGAIN; from = cuts[k++]) {
        size_t len = cuts[k] - from, pos = 0;
        char *buf = malloc(len ? len : 1);
        assert_non_null(buf);
        memcpy(buf, in + from, len);
        while (r->rc == H1_AGAIN) {
            struct h1_str d = {NULL, 0};
            size_t used = 0;
            int rc = h1c_feed(&c, buf + pos, len - pos, &used, &d);
            assert_true(used <= len - pos);
            if (rc == H1_DATA) {
                assert_true(d.p >= buf + pos && d.p + d.len == buf + pos + used && d.len > 0);
                assert_true(r->ndata + d.len <= sizeof r->data);
                memcpy(r->data + r->ndata, d.p, d.len);
                r->ndata += d.len;
                pos += used;
                continue;
            }
            if (rc == H1_AGAIN) {
                assert_int_equal(used, len - pos);
                break;
            }
            r->rc = rc;
            r->at = from + pos + used;
            r->status = c.err_status;
            r->reason = c.err_reason;
        }
        free(buf);
    }
    r->total = c.total;
    r->chunks = c.chunks;
}

static void same(const struct ccase *t, const struct result *a, const struct result *b,
                 const char *how)
{
    if (a->rc != b->rc || a->at != b->at || a->reason != b->reason || a->ndata != b->ndata)
        print_error("%s (%s): rc %d/%d at %zu/%zu %s/%s\n", t->name, how, a->rc, b->rc, a->at,
                    b->at, a->reason ? a->reason : "-", b->reason ? b->reason : "-");
    assert_int_equal(a->rc, b->rc);
    assert_int_equal(a->at, b->at);
    assert_ptr_equal(a->reason, b->reason);
    assert_int_equal(a->status, b->status);
    assert_int_equal(a->ndata, b->ndata);
    assert_memory_equal(a->data, b->data, a->ndata);
    assert_int_equal(a->total, b->total);
    assert_int_equal(a->chunks, b->chunks);
}

static void test_table(void **state)
{
    size_t cuts[512];

    (void) state;
    for (size_t i = 0; i < NCASES; i++) {
        const struct ccase *t = &cases[i];
        struct result whole, split;
        size_t n = t->len;

        feed(t->in, t->max, &n, 1, &whole);
        if (whole.rc != t->rc ||
            (t->reason && (!whole.reason || strcmp(whole.reason, t->reason))) ||
            (t->rc != H1_AGAIN && whole.at != t->end))
            print_error("%s: rc %d at %zu: %s\n", t->name, whole.rc, whole.at,
                        whole.reason ? whole.reason : "-");
        assert_int_equal(whole.rc, t->rc);
        if (t->rc == H1_ERROR) {
            assert_int_equal(whole.status, t->status);
            assert_string_equal(whole.reason, t->reason);
        }
        if (t->rc != H1_AGAIN)
            assert_int_equal(whole.at, t->end);
        if (t->data != NULL) {
            assert_int_equal(whole.ndata, strlen(t->data));
            assert_memory_equal(whole.data, t->data, whole.ndata);
        }
        for (size_t k = 0; k < n; k++) {
            cuts[0] = k;
            cuts[1] = n;
            feed(t->in, t->max, cuts, 2, &split);
            same(t, &whole, &split, "split");
        }
        assert_true(n <= sizeof cuts / sizeof cuts[0]);
        for (size_t k = 0; k < n; k++)
            cuts[k] = k + 1;
        if (n > 0) {
            feed(t->in, t->max, cuts, n, &split);
            same(t, &whole, &split, "bytewise");
        }
    }
}

/* Builds a body in out: the chunk lines of k chunks of one byte with ext bytes of
 * extensions each, then the last chunk. */
static size_t with_extensions(char *out, size_t k, size_t ext)
{
    size_t n = 0;

    for (size_t i = 0; i < k; i++) {
        out[n++] = '1';
        out[n++] = ';';
        memset(out + n, 'e', ext - 1);
        n += ext - 1;
        memcpy(out + n, "\r\nx\r\n", 5);
        n += 5;
    }
    memcpy(out + n, "0\r\n\r\n", 5);
    return n + 5;
}

static void test_limits(void **state)
{
    static char big[3 * H1C_MAX_TRAILER];
    struct result r;
    size_t n;

    (void) state;
    /* Extensions: the bound is on every chunk line of the message together. */
    n = with_extensions(big, 1, H1C_MAX_EXT);
    feed(big, 0, &n, 1, &r);
    assert_int_equal(r.rc, H1_DONE);
    n = with_extensions(big, 1, H1C_MAX_EXT + 1);
    feed(big, 0, &n, 1, &r);
    assert_int_equal(r.rc, H1_ERROR);
    assert_string_equal(r.reason, "chunk extensions too long");
    assert_int_equal(r.at, 1 + H1C_MAX_EXT);
    n = with_extensions(big, 3, H1C_MAX_EXT / 2);
    feed(big, 0, &n, 1, &r);
    assert_int_equal(r.rc, H1_ERROR);
    assert_string_equal(r.reason, "chunk extensions too long");
    /* Trailers. */
    memcpy(big, "0\r\nX: ", 6);
    memset(big + 6, 'a', H1C_MAX_TRAILER);
    memcpy(big + 6 + H1C_MAX_TRAILER, "\r\n\r\n", 4);
    n = 10 + H1C_MAX_TRAILER;
    feed(big, 0, &n, 1, &r);
    assert_int_equal(r.rc, H1_ERROR);
    assert_int_equal(r.status, 431);
    assert_string_equal(r.reason, "trailer section too large");
    assert_int_equal(r.at, 3 + H1C_MAX_TRAILER);
    /* The largest size is taken (the budget check total + size <= max is what keeps the
     * sum from wrapping: the budget cases above test it). */
    struct h1_chunked c;
    struct h1_str d;
    size_t used;
    h1c_init(&c, UINT64_MAX);
    assert_int_equal(h1c_feed(&c, "FFFFFFFFFFFFFFFF\r\n", 18, &used, &d), H1_AGAIN);
    assert_int_equal(c.left, UINT64_MAX);
    assert_int_equal(c.total, UINT64_MAX);
}

/* A decoder that finished keeps its verdict, and says where it ended. */
static void test_after_end(void **state)
{
    struct h1_chunked c;
    struct h1_str d;
    size_t used = 99;

    (void) state;
    h1c_init(&c, UINT64_MAX);
    assert_int_equal(h1c_feed(&c, "0\r\n\r\nGET", 8, &used, &d), H1_DONE);
    assert_int_equal(used, 5);
    assert_int_equal(h1c_feed(&c, "GET", 3, &used, &d), H1_DONE);
    assert_int_equal(used, 0);
    assert_int_equal(h1c_feed(&c, "", 0, &used, &d), H1_DONE);
    h1c_init(&c, UINT64_MAX);
    assert_int_equal(h1c_feed(&c, "x", 1, &used, &d), H1_ERROR);
    assert_int_equal(h1c_feed(&c, "0\r\n\r\n", 5, &used, &d), H1_ERROR);
    assert_int_equal(h1c_feed(&c, "", 0, &used, &d), H1_ERROR);
    assert_int_equal(c.err_status, 400);
}

/* h1c_decode: the data moves down over the chunk lines, in place or to a buffer of its own,
 * in one call or split anywhere; the bytes after the end are left where they are. */
static void test_decode(void **state)
{
    static const char body[] = "5\r\nhello\r\n6;x=1\r\n world\r\n0\r\nT: v\r\n\r\nNEXT";
    size_t n = sizeof body - 1;

    (void) state;
    for (size_t split = 0; split < n - 4; split++) {
        char buf[sizeof body], out[sizeof body];
        struct h1_chunked c;
        size_t used = 0, len = 0, got = 0;
        int rv;

        memcpy(buf, body, sizeof body);
        h1c_init(&c, UINT64_MAX);
        /* In place: the first piece's data at buf, the second's after it. */
        assert_int_equal(h1c_decode(&c, buf, split, buf, &used, &len), H1_AGAIN);
        assert_int_equal(used, split);
        got = len;
        rv = h1c_decode(&c, buf + split, n - split, buf + got, &used, &len);
        assert_int_equal(rv, H1_DONE);
        assert_int_equal(split + used, n - 4);
        got += len;
        assert_int_equal(got, 11);
        assert_memory_equal(buf, "hello world", 11);
        assert_memory_equal(buf + n - 4, "NEXT", 4);
        /* ... and to a buffer of its own. */
        h1c_init(&c, UINT64_MAX);
        assert_int_equal(h1c_decode(&c, body, split, out, &used, &len), H1_AGAIN);
        got = len;
        assert_int_equal(h1c_decode(&c, body + split, n - split, out + got, &used, &len), H1_DONE);
        assert_int_equal(got + len, 11);
        assert_memory_equal(out, "hello world", 11);
    }
    /* An error says where, counted from the start of what was given. */
    {
        char buf[] = "2\r\nok\r\n0x1\r\n";
        struct h1_chunked c;
        size_t used = 0, len = 0;

        h1c_init(&c, UINT64_MAX);
        assert_int_equal(h1c_decode(&c, buf, sizeof buf - 1, buf, &used, &len), H1_ERROR);
        assert_int_equal(used, 8);
        assert_int_equal(len, 2);
        assert_int_equal(c.err_status, 400);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_after_end),
        cmocka_unit_test(test_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
