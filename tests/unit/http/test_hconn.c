/* Unit tests for the client side of the HTTP/1.1 path (hconn): a real listener on loopback
 * and a client socket, driven from one event loop in this process. The owner here answers
 * every request at once with what it saw, so each test reads back what the connection made
 * of the bytes: the request's view, the order of pipelined answers, and the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/netaddr.h"
#include "http/hconn.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct fixture {
    struct event_base *base;
    struct hlisten *l;
    int port;
    int requests;   /* requests the owner saw */
    int refusals;   /* ... and the parser refused */
    char body[256]; /* what the owner answers: a digest of the request */
};

static void on_request(void *arg, struct hconn *c, const struct http_req *r)
{
    struct fixture *f = arg;
    const char *xa = http_req_header(r, "x-a");
    int n;

    f->requests++;
    /* The header's value is a NUL-terminated string; the body is the whole decoded body. */
    n = snprintf(f->body, sizeof f->body, "%s %s a=%s len=%zu body=%.*s peer=%s",
                 http_method_name(r->method), r->target, xa ? xa : "-", r->body_len,
                 (int) (r->body_len < 40 ? r->body_len : 40), r->body, r->peer);
    assert_int_equal(hc_reply(c, 200, "text/plain", f->body, (size_t) n, NULL, 0), 0);
    hc_end(c, 1);
}

static void on_gone(void *arg, struct hconn *c, void *owner)
{
    (void) arg;
    (void) c;
    (void) owner;
}

static void on_refused(void *arg, int status)
{
    struct fixture *f = arg;

    (void) status;
    f->refusals++;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    struct hc_limits lim = {(1u << HTTP_GET) | (1u << HTTP_POST), 4096, 8192, 5000};
    struct hc_ops ops = {on_request, on_gone, NULL, on_refused};
    struct hostport hp = {"127.0.0.1", 0};
    char bound[64], err[128];

    f->base = event_base_new();
    f->l = hl_new(f->base, &lim, &ops, f);
    assert_int_equal(hl_bind(f->l, &hp, bound, sizeof bound, err, sizeof err), 0);
    f->port = atoi(strrchr(bound, ':') + 1);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    hl_free(f->l);
    event_base_free(f->base);
    free(f);
    return 0;
}

static int client(struct fixture *f)
{
    struct sockaddr_in sa = {0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t) f->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *) &sa, sizeof sa), 0);
    return fd;
}

/* Runs the loop until the client has read until (NULL: until the server closes), for at most
 * rounds of 5 ms. */
static size_t pump_for(struct fixture *f, int fd, char *out, size_t cap, const char *until,
                       int rounds)
{
    size_t got = 0;

    out[0] = '\0';
    for (int i = 0; i < rounds && !(until != NULL && strstr(out, until) != NULL); i++) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;

        event_base_loop(f->base, EVLOOP_NONBLOCK);
        if (poll(&p, 1, 5) <= 0)
            continue;
        n = recv(fd, out + got, cap - 1 - got, MSG_DONTWAIT);
        if (n == 0)
            break;
        if (n > 0)
            got += (size_t) n;
        out[got] = '\0';
    }
    return got;
}

/* ... for at most 2 s */
static size_t pump(struct fixture *f, int fd, char *out, size_t cap, const char *until)
{
    return pump_for(f, fd, out, cap, until, 400);
}

/* Lets the server read what was sent, without waiting for an answer. */
static void settle(struct fixture *f, int fd)
{
    char out[64];

    assert_int_equal(pump_for(f, fd, out, sizeof out, "HTTP", 4), 0); /* nothing answered yet */
}

static void sendall(int fd, const char *p, size_t n)
{
    assert_int_equal(send(fd, p, n, 0), (ssize_t) n);
}

/* A chunked body with an extension, split at every offset: the same decoded request each
 * time, whatever the split. */
static void test_chunked_body_any_split(void **state)
{
    struct fixture *f = *state;
    static const char req[] = "POST /v1/x?q=1 HTTP/1.1\r\nHost: h\r\nX-A:  one two \r\n"
                              "Transfer-Encoding: chunked\r\n\r\n"
                              "5;ext=\"v\"\r\nhello\r\n6\r\n world\r\n0\r\nT: x\r\n\r\n";
    const size_t len = sizeof req - 1;

    for (size_t cut = 1; cut < len; cut += 7) {
        char out[1024];
        int fd = client(f);

        sendall(fd, req, cut);
        settle(f, fd); /* the request is not whole: nothing is answered */
        sendall(fd, req + cut, len - cut);
        pump(f, fd, out, sizeof out, "peer=127.0.0.1");
        assert_non_null(strstr(out, "HTTP/1.1 200 OK\r\n"));
        assert_non_null(
            strstr(out, "POST /v1/x?q=1 a=one two len=11 body=hello world peer=127.0.0.1"));
        close(fd);
    }
}

/* Two requests in one write, the second with a body: answered one after the other, in order,
 * on the same connection. */
static void test_pipelined_in_order(void **state)
{
    struct fixture *f = *state;
    static const char req[] = "GET /first HTTP/1.1\r\nHost: h\r\n\r\n"
                              "POST /second HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc";
    char out[2048];
    char *a, *b;
    int fd = client(f);

    f->requests = 0;
    sendall(fd, req, sizeof req - 1);
    pump(f, fd, out, sizeof out, "body=abc peer=127.0.0.1");
    a = strstr(out, "GET /first");
    b = strstr(out, "POST /second a=- len=3 body=abc");
    assert_non_null(a);
    assert_non_null(b);
    assert_true(a < b);
    assert_int_equal(f->requests, 2);
    close(fd);
}

/* A body larger than the connection's first buffer: the buffer grows (and moves) while the
 * body comes, and the head's strings are still right. */
static void test_body_that_moves_the_buffer(void **state)
{
    struct fixture *f = *state;
    char head[128], body[6000], out[1024];
    int fd = client(f);
    int n = snprintf(head, sizeof head,
                     "POST /big HTTP/1.1\r\nHost: h\r\nX-A: kept\r\nContent-Length: %zu\r\n\r\n",
                     sizeof body);
    size_t at = 0;

    memset(body, 'z', sizeof body);
    memcpy(body, "start", 5);

    sendall(fd, head, (size_t) n);
    settle(f, fd);
    for (; at + 1500 < sizeof body; at += 1500) { /* in pieces; the last one below */
        sendall(fd, body + at, 1500);
        settle(f, fd);
    }
    sendall(fd, body + at, sizeof body - at);
    pump(f, fd, out, sizeof out, "peer=");
    assert_non_null(strstr(out, "POST /big a=kept len=6000 body=startzzz"));
    close(fd);
}

/* A bare LF, obs-fold, a method the listener does not serve: refused with the parser's
 * status and Connection: close, never handed to the owner, and the connection then closes. */
static void test_refusals_close(void **state)
{
    struct fixture *f = *state;
    static const struct {
        const char *req;
        const char *status;
    } cases[] = {
        {"GET / HTTP/1.1\nHost: h\r\n\r\n", "HTTP/1.1 400 "},
        {"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n b\r\n\r\n", "HTTP/1.1 400 "},
        {"DELETE / HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 405 "},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 9000\r\n\r\n", "HTTP/1.1 413 "},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[1024];
        int fd = client(f);

        f->requests = f->refusals = 0;
        sendall(fd, cases[i].req, strlen(cases[i].req));
        pump(f, fd, out, sizeof out, NULL); /* to the close */
        assert_true(strncmp(out, cases[i].status, strlen(cases[i].status)) == 0);
        assert_non_null(strstr(out, "Connection: close\r\n"));
        assert_int_equal(f->requests, 0);
        assert_int_equal(f->refusals, 1);
        close(fd);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chunked_body_any_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_that_moves_the_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals_close, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
