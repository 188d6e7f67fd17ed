/* Unit tests for the client side of the HTTP/1.1 path (hconn): a real listener on loopback
 * and a client socket, driven from one event loop in this process. The owner here answers
 * every request at once with what it saw, so each test reads back what the connection made
 * of the bytes: the request's view, the order of pipelined answers, and the refusals; the
 * head deadline; and what memory a request costs: its buffer grows with the bytes that
 * arrive (an announced body that never comes costs nothing), and a request whose buffer
 * cannot grow is refused alone (allocations are limited here: see testenv.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/netaddr.h"
#include "http/hconn.h"
#include "../testenv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Under ASan no allocation may be over 4 MiB (without it, testenv_memory_cap limits the
 * address space in the tests that need it). */
TESTENV_ALLOCATION_LIMIT(4)

#define MIB (1024 * 1024)
/* Bodies the memory tests' listener takes (their buffers are what the limit refuses). */
#define BIG_BODY_MAX (64 * MIB)
/* The head deadline of the default listener, and its idle timeout. */
#define HEAD_MS 300
#define IDLE_MS 5000

struct fixture {
    struct event_base *base;
    struct hlisten *l;
    struct listen_stats st;
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

static int setup_body_max(void **state, unsigned body_max)
{
    struct fixture *f = calloc(1, sizeof *f);
    struct hc_limits lim = {(1u << HTTP_GET) | (1u << HTTP_POST),
                            4096,
                            body_max,
                            IDLE_MS,
                            HEAD_MS,
                            100,
                            "test",
                            &f->st};
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

static int setup(void **state)
{
    return setup_body_max(state, 8192);
}

static int setup_big(void **state)
{
    return setup_body_max(state, BIG_BODY_MAX);
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

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A client's side of a run of the loop: bytes dripped one at a time, what it read, when. */
struct drip {
    const char *bytes; /* sent one every `every` ms from the run's start (NULL: none) */
    size_t len, sent;
    long every, next;
    char out[2048];
    size_t got;
    long first_at;  /* when the first byte of an answer came (0: none) */
    long closed_at; /* when the server closed (0: still open) */
};

/* Runs the loop for at most ms, dripping d's bytes (until an answer comes) and reading;
 * stops early when the server closes the connection. */
static void run(struct fixture *f, int fd, struct drip *d, long ms)
{
    long end = now_ms() + ms;

    while (d->closed_at == 0 && now_ms() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;

        if (d->bytes != NULL && d->sent < d->len && d->got == 0 && now_ms() >= d->next) {
            sendall(fd, d->bytes + d->sent, 1);
            d->sent++;
            d->next = now_ms() + d->every;
        }
        event_base_loop(f->base, EVLOOP_NONBLOCK);
        if (poll(&p, 1, 2) <= 0)
            continue;
        n = recv(fd, d->out + d->got, sizeof d->out - 1 - d->got, MSG_DONTWAIT);
        if (n > 0 && d->got == 0)
            d->first_at = now_ms();
        if (n > 0)
            d->got += (size_t) n;
        d->out[d->got] = '\0';
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            d->closed_at = now_ms();
    }
}

/* A head that comes a byte every 40 ms (two seconds in all) is cut with 408 at the head
 * deadline, although no read ever waited the idle timeout; the connection then closes. */
static void test_head_deadline_cuts_a_dribbled_head(void **state)
{
    struct fixture *f = *state;
    static const char head[] = "POST /x HTTP/1.1\r\nHost: h\r\nX-A: a dribbled head, one byte at "
                               "a time\r\nContent-Length: 2\r\n\r\n{}";
    struct drip d = {head, sizeof head - 1, 0, 40, 0, "", 0, 0, 0};
    int fd = client(f);
    long t0 = now_ms();

    run(f, fd, &d, 6000);
    assert_true(d.sent < d.len); /* cut before it was whole */
    assert_true(strncmp(d.out, "HTTP/1.1 408 ", 13) == 0);
    assert_non_null(strstr(d.out, "Connection: close\r\n"));
    assert_non_null(strstr(d.out, "Request Timeout: the request head was not complete within "
                                  "300 ms"));
    assert_true(d.first_at - t0 >= HEAD_MS - 20);
    assert_true(d.first_at - t0 < IDLE_MS);
    assert_true(d.closed_at != 0);
    assert_int_equal(f->requests, 0);
    assert_int_equal(f->refusals, 1);
    assert_int_equal(f->st.head_timeouts, 1);
    close(fd);
}

/* A new connection that sends nothing is closed at the head deadline, without an answer. */
static void test_head_deadline_closes_a_silent_connection(void **state)
{
    struct fixture *f = *state;
    struct drip d = {NULL, 0, 0, 0, 0, "", 0, 0, 0};
    int fd = client(f);
    long t0 = now_ms();

    run(f, fd, &d, 6000);
    assert_true(d.closed_at != 0);
    assert_int_equal(d.got, 0);
    assert_true(d.closed_at - t0 >= HEAD_MS - 20);
    assert_true(d.closed_at - t0 < IDLE_MS);
    assert_int_equal(f->refusals, 0);
    assert_int_equal(f->st.head_timeouts, 1);
    close(fd);
}

/* Between keep-alive requests only the idle timeout counts: a connection idle for twice the
 * head deadline is served; a head that comes in pieces within the deadline is served; the
 * next head's deadline runs from its own first byte. */
static void test_head_deadline_spares_keepalive_idle(void **state)
{
    struct fixture *f = *state;
    static const char line[] = "GET /a HTTP/1.1\r\n", rest[] = "Host: h\r\n\r\n";
    static const char slow[] = "GET /b HTTP/1.1\r\nHost: h\r\nX-A: slow\r\n\r\n";
    struct drip d1 = {rest, sizeof rest - 1, 0, 10, 0, "", 0, 0, 0};
    struct drip idle = {NULL, 0, 0, 0, 0, "", 0, 0, 0};
    struct drip d2 = {slow, sizeof slow - 1, 0, 40, 0, "", 0, 0, 0};
    int fd = client(f);
    long t1;

    sendall(fd, line, sizeof line - 1);
    run(f, fd, &d1, 200); /* the rest a byte every 10 ms: about 110 ms */
    pump(f, fd, d1.out + d1.got, sizeof d1.out - d1.got, "peer=");
    assert_non_null(strstr(d1.out, "GET /a a=- len=0"));
    run(f, fd, &idle, 2 * HEAD_MS);
    assert_int_equal(idle.closed_at, 0);
    assert_int_equal(idle.got, 0);
    t1 = now_ms();
    run(f, fd, &d2, 4000);
    assert_true(strncmp(d2.out, "HTTP/1.1 408 ", 13) == 0);
    assert_true(d2.first_at - t1 >= HEAD_MS - 20);
    assert_int_equal(f->requests, 1);
    assert_int_equal(f->st.head_timeouts, 1);
    close(fd);
}

/* Sends what the socket takes now of p[*at..len), without waiting. */
static void send_some(int fd, const char *p, size_t len, size_t *at)
{
    ssize_t n = send(fd, p + *at, len - *at > 65536 ? 65536 : len - *at, MSG_DONTWAIT);

    if (n > 0)
        *at += (size_t) n;
}

/* A 64 KiB run of a filler byte, for bodies. */
static const char *filler(void)
{
    static char b[64 * 1024];

    memset(b, 'x', sizeof b);
    return b;
}

/* Runs the loop for ms, reading and dropping what comes; 1 when the server closed. */
static int drain_for(struct fixture *f, int fd, long ms)
{
    struct drip d = {NULL, 0, 0, 0, 0, "", 0, 0, 0};

    run(f, fd, &d, ms);
    return d.closed_at != 0;
}

/* A GET on a new connection is answered: the listener still serves. */
static void served(struct fixture *f)
{
    char out[1024];
    int fd = client(f);

    sendall(fd, "GET /ok HTTP/1.1\r\nHost: h\r\n\r\n", 29);
    pump(f, fd, out, sizeof out, "peer=");
    assert_non_null(strstr(out, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(out, "GET /ok"));
    close(fd);
}

/* Bodies that announce 32 MiB and send 100 KiB: at once then a hang-up; in two pieces, the
 * second later, then a reset; or left open. The connection's buffer grows with what came
 * (allocations over 4 MiB fail here, or the address space may grow by 20 MiB only: an
 * up-front reservation of what was announced would abort the process). */
static void test_announced_body_costs_what_arrives(void **state)
{
    struct fixture *f = *state;
    char head[128];
    int n = snprintf(head, sizeof head,
                     "POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n", 32 * MIB);
    int fds[3];

    testenv_memory_cap(20 * MIB);
    for (int i = 0; i < 3; i++) {
        fds[i] = client(f);
        sendall(fds[i], head, (size_t) n);
        for (int k = 0; k < 100; k++) {
            sendall(fds[i], filler(), 1024);
            if (i == 1 && k == 50)
                drain_for(f, fds[i], 50); /* the second half comes later */
        }
        assert_int_equal(drain_for(f, fds[i], 50), 0);
    }
    shutdown(fds[0], SHUT_WR); /* a hang-up mid-body: closed, nothing answered */
    {
        struct drip d = {NULL, 0, 0, 0, 0, "", 0, 0, 0};

        run(f, fds[0], &d, 2000);
        assert_true(d.closed_at != 0);
        assert_int_equal(d.got, 0);
    }
    {
        struct linger lg = {1, 0}; /* a reset */

        setsockopt(fds[1], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fds[1]);
    }
    drain_for(f, fds[2], 100);
    served(f); /* while the third waits for its 32 MiB */
    assert_int_equal(f->requests, 1);
    testenv_memory_uncap();
    close(fds[0]);
    close(fds[2]);
}

/* A body that needs more memory than there is: that request alone is refused, 500 in
 * OpenAI's shape and Connection: close, while another client is served in the middle of
 * it. */
static void test_request_without_memory_refused_alone(void **state)
{
    struct fixture *f = *state;
    /* Over the limit: 4 MiB under ASan, 20 MiB of address space without. */
    size_t body = TESTENV_ASAN ? 8 * MIB : 24 * MIB, at = 0;
    char head[128];
    int n = snprintf(head, sizeof head,
                     "POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: %zu\r\n\r\n", body);
    struct drip d = {NULL, 0, 0, 0, 0, "", 0, 0, 0};
    int fd, other = 0;

    testenv_memory_cap(20 * MIB);
    fd = client(f);
    sendall(fd, head, (size_t) n);
    while (d.got == 0 && d.closed_at == 0 && at < body) {
        size_t piece = at + 65536 <= body ? 65536 : body - at, was = 0;

        send_some(fd, filler(), piece, &was);
        at += was;
        run(f, fd, &d, 1);
        if (!other && at >= 2 * MIB) {
            served(f); /* another client, while this one is half way */
            other = 1;
        }
    }
    run(f, fd, &d, 3000);
    assert_true(other);
    assert_true(strncmp(d.out, "HTTP/1.1 500 ", 13) == 0);
    assert_non_null(strstr(d.out, "Connection: close\r\n"));
    assert_non_null(strstr(d.out, "\"type\":\"server_error\""));
    assert_non_null(strstr(d.out, "Server out of memory: "));
    assert_int_equal(f->requests, 1);
    assert_int_equal(f->refusals, 0);
    assert_int_equal(f->st.oom_refusals, 1);
    testenv_memory_uncap();
    served(f);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chunked_body_any_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_that_moves_the_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_head_deadline_cuts_a_dribbled_head, setup, teardown),
        cmocka_unit_test_setup_teardown(test_head_deadline_closes_a_silent_connection, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_head_deadline_spares_keepalive_idle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_announced_body_costs_what_arrives, setup_big,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_request_without_memory_refused_alone, setup_big,
                                        teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
