/* Unit tests for the body-framing switch: for each way a head delimits its body (none, a
 * Content-Length, chunked, the close), a message is read the way the callers read it (the
 * body decoded in place at the front of one buffer, new bytes appended after it), whole and
 * split at every byte, and gives the same data, the same end, the same verdict. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/h1body.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bcase {
    const char *name;
    int resp;           /* 0: a request head; else the response to a request of method resp */
    const char *msg;    /* head and body (and maybe the next message's bytes) */
    uint64_t max;       /* the body's limit; 0: none */
    int eof;            /* the peer closes after the last byte */
    int rc;             /* H1_DONE, H1_AGAIN or H1_ERROR */
    const char *data;   /* the body, decoded (with H1_ERROR: NULL) */
    size_t rest;        /* with H1_DONE: bytes after the body's end, not taken */
    int status;         /* with H1_ERROR */
    const char *reason; /* ... */
};

#define REQ(s)  "POST / HTTP/1.1\r\nHost: a\r\n" s
#define RESP(s) "HTTP/1.1 200 OK\r\n" s

static const struct bcase cases[] = {
    {"request without a body", 0, REQ("\r\n"), 0, 0, H1_DONE, "", 0, 0, NULL},
    {"request without a body, the next behind", 0, REQ("\r\nGET / HTTP/1.1\r\n"), 0, 0, H1_DONE, "",
     16, 0, NULL},
    {"content-length", 0, REQ("Content-Length: 5\r\n\r\nhello"), 0, 0, H1_DONE, "hello", 0, 0,
     NULL},
    {"content-length, the next behind", 0, REQ("Content-Length: 5\r\n\r\nhelloGET /"), 0, 0,
     H1_DONE, "hello", 5, 0, NULL},
    {"content-length zero", 0, REQ("Content-Length: 0\r\n\r\nGET"), 0, 0, H1_DONE, "", 3, 0, NULL},
    {"content-length short", 0, REQ("Content-Length: 9\r\n\r\nhello"), 0, 0, H1_AGAIN, "hello", 0,
     0, NULL},
    {"content-length at the limit", 0, REQ("Content-Length: 5\r\n\r\nhello"), 5, 0, H1_DONE,
     "hello", 0, 0, NULL},
    {"chunked", 0, REQ("Transfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n"), 0,
     0, H1_DONE, "hello", 0, 0, NULL},
    {"chunked, the next behind", 0,
     REQ("Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1"), 0, 0, H1_DONE,
     "hello", 14, 0, NULL},
    {"chunked unfinished", 0, REQ("Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"), 0, 0,
     H1_AGAIN, "hello", 0, 0, NULL},
    {"chunked broken", 0, REQ("Transfer-Encoding: chunked\r\n\r\n5\r\nhelloX"), 0, 0, H1_ERROR,
     NULL, 0, 400, "chunk data not followed by CRLF"},
    {"chunked over the limit", 0, REQ("Transfer-Encoding: chunked\r\n\r\n6\r\nhello!\r\n0\r\n\r\n"),
     5, 0, H1_ERROR, NULL, 0, 413, "chunked body too large"},
    {"response with a length", H1_M_GET, RESP("Content-Length: 2\r\n\r\nok"), 0, 0, H1_DONE, "ok",
     0, 0, NULL},
    {"response to HEAD has no body", H1_M_HEAD, RESP("Content-Length: 2\r\n\r\n"), 0, 0, H1_DONE,
     "", 0, 0, NULL},
    {"204 has no body", H1_M_GET, "HTTP/1.1 204 No Content\r\n\r\nxyz", 0, 0, H1_DONE, "", 3, 0,
     NULL},
    {"until the close, open", H1_M_GET, RESP("\r\nsome data"), 0, 0, H1_AGAIN, "some data", 0, 0,
     NULL},
    {"until the close, closed", H1_M_GET, RESP("\r\nsome data"), 0, 1, H1_DONE, "some data", 0, 0,
     NULL},
    {"until the close, at the limit", H1_M_GET, RESP("\r\nsome data"), 9, 1, H1_DONE, "some data",
     0, 0, NULL},
    {"until the close, over the limit", H1_M_GET, RESP("\r\nsome data"), 8, 0, H1_ERROR, NULL, 0,
     413, "body too large"},
    {"chunked response", H1_M_GET, RESP("Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
     0, 0, H1_DONE, "ok", 0, 0, NULL},
};

#define NCASES (sizeof cases / sizeof cases[0])

struct result {
    int rc;
    int status;
    const char *reason;
    char data[128];
    size_t ndata; /* the body decoded, at the front of the buffer */
    size_t rest;  /* bytes given but not taken */
};

/* Parses t's head, then feeds its body bytes in pieces ending at cuts[0..n) (offsets in the
 * body), appended to one buffer behind the data decoded so far, as the pollers do. */
static void read_msg(const struct bcase *t, const size_t *cuts, size_t n, struct result *r)
{
    struct h1_header slots[16];
    struct h1_parser p;
    struct h1_body b;
    size_t len = strlen(t->msg), head, from = 0, held = 0;
    char *buf;

    memset(r, 0, sizeof *r);
    if (t->resp == 0)
        h1_req_init(&p, slots, 16, 4096);
    else
        h1_resp_init(&p, slots, 16, 4096, (enum h1_method) t->resp);
    assert_int_equal(h1_parse(&p, t->msg, len), H1_DONE);
    head = p.head_len;
    assert_int_equal(h1b_init(&b, &p, t->max ? t->max : UINT64_MAX), 0);
    buf = malloc(len - head + 1);
    assert_non_null(buf);
    r->rc = H1_AGAIN;
    for (size_t k = 0; k < n && r->rc == H1_AGAIN; from = cuts[k++]) {
        size_t piece = cuts[k] - from, used = 0, dlen = 0;
        int last = k + 1 == n;

        memcpy(buf + held, t->msg + head + from, piece);
        held += piece;
        r->rc = h1b_take(&b, buf + r->ndata, held - r->ndata, t->eof && last, buf + r->ndata, &used,
                         &dlen);
        assert_true(used <= held - r->ndata && dlen <= used);
        if (r->rc == H1_ERROR)
            break;
        r->rest = held - r->ndata - used;
        r->ndata += dlen;
        /* What was taken is gone (chunk lines included); what was not stays behind it. */
        memmove(buf + r->ndata, buf + r->ndata - dlen + used, r->rest);
        held = r->ndata + r->rest;
        if (r->rc == H1_AGAIN)
            assert_int_equal(r->rest, 0); /* more is wanted: every byte was taken */
    }
    assert_true(r->ndata <= sizeof r->data);
    memcpy(r->data, buf, r->ndata);
    r->rest += len - head - from; /* pieces never fed: after the end */
    r->status = b.err_status;
    r->reason = b.err_reason;
    free(buf);
}

static void check(const struct bcase *t, const struct result *r, const char *how)
{
    if (r->rc != t->rc)
        print_error("%s (%s): rc %d, want %d\n", t->name, how, r->rc, t->rc);
    assert_int_equal(r->rc, t->rc);
    if (t->rc == H1_ERROR) {
        assert_int_equal(r->status, t->status);
        assert_string_equal(r->reason, t->reason);
        return;
    }
    assert_int_equal(r->ndata, strlen(t->data));
    assert_memory_equal(r->data, t->data, r->ndata);
    if (t->rc == H1_DONE)
        assert_int_equal(r->rest, t->rest);
}

static void test_table(void **state)
{
    (void) state;
    for (size_t i = 0; i < NCASES; i++) {
        const struct bcase *t = &cases[i];
        const char *body = strstr(t->msg, "\r\n\r\n") + 4;
        size_t blen = strlen(body), cuts[2], n;
        struct result r;

        cuts[0] = blen;
        read_msg(t, cuts, 1, &r);
        check(t, &r, "whole");
        for (size_t at = 0; at <= blen; at++) {
            cuts[0] = at;
            cuts[1] = blen;
            n = at == blen ? 1 : 2;
            read_msg(t, cuts, n, &r);
            check(t, &r, "split");
        }
        {
            size_t ones[128];

            assert_true(blen < 128);
            for (n = 0; n < blen; n++)
                ones[n] = n + 1;
            if (n == 0)
                ones[n++] = 0;
            read_msg(t, ones, n, &r);
            check(t, &r, "byte by byte");
        }
    }
}

/* A Content-Length over the limit is refused when the head is, before any byte of the body. */
static void test_length_over_limit(void **state)
{
    static const char msg[] = REQ("Content-Length: 6\r\n\r\n");
    struct h1_header slots[8];
    struct h1_parser p;
    struct h1_body b;

    (void) state;
    h1_req_init(&p, slots, 8, 4096);
    assert_int_equal(h1_parse(&p, msg, sizeof msg - 1), H1_DONE);
    assert_int_equal(h1b_init(&b, &p, 5), -1);
    assert_int_equal(h1b_init(&b, &p, 6), 0);
    assert_int_equal(b.left, 6);
}

/* The data goes to dst when it is below the bytes (a body gathered at the front of a buffer
 * whose raw bytes come after), and the bytes past a length are left as they are. */
static void test_moved_down(void **state)
{
    static const char msg[] = REQ("Content-Length: 3\r\n\r\n");
    struct h1_header slots[8];
    struct h1_parser p;
    struct h1_body b;
    char buf[] = "..abcdef";
    size_t used, len;

    (void) state;
    h1_req_init(&p, slots, 8, 4096);
    assert_int_equal(h1_parse(&p, msg, sizeof msg - 1), H1_DONE);
    assert_int_equal(h1b_init(&b, &p, UINT64_MAX), 0);
    assert_int_equal(h1b_take(&b, buf + 2, 6, 0, buf, &used, &len), H1_DONE);
    assert_int_equal(used, 3);
    assert_int_equal(len, 3);
    assert_memory_equal(buf, "abcbcdef", 8);
    /* Done stays done: nothing more is taken. */
    assert_int_equal(h1b_take(&b, buf + 5, 3, 0, buf + 5, &used, &len), H1_DONE);
    assert_int_equal(used, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_length_over_limit),
        cmocka_unit_test(test_moved_down),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
