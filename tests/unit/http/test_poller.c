/* Unit tests for the engine poller: a real event loop in this thread, and on a loopback
 * socket at a port picked at run time a scripted engine in a thread of its own, which
 * accepts, reads requests, writes bytes in pieces with delays, closes, resets, and checks
 * that the poller closed what it should have. Each test reads back what the callback got,
 * how many connections the engine accepted and how many requests it read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/netaddr.h"
#include "http/poller.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_MALLOC_HOOKS 1
/* The sanitizer's allocation hooks (sanitizer/allocator_interface.h, which GCC does not
 * install). */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
#endif

/* ---- the scripted engine ------------------------------------------------------------- */

enum op {
    E_END,
    E_ACCEPT, /* the next connection (one still open is closed first) */
    E_REQ,    /* reads one request head */
    E_SEND,   /* writes text */
    E_BIG,    /* writes n bytes of 'x' (a large body), ignoring a peer that went */
    E_DRIP,   /* writes text a byte at a time, n ms apart, ignoring a peer that went */
    E_SLEEP,  /* waits n ms */
    E_CLOSE,  /* closes the connection (FIN) */
    E_RST,    /* closes it with a reset (SO_LINGER 0) */
    E_EOF,    /* waits for the poller to close the connection */
};

struct step {
    enum op op;
    const char *text;
    size_t n;
};

#define ACCEPT                                                                                     \
    {                                                                                              \
        E_ACCEPT, NULL, 0                                                                          \
    }
#define REQ                                                                                        \
    {                                                                                              \
        E_REQ, NULL, 0                                                                             \
    }
#define SEND(s)                                                                                    \
    {                                                                                              \
        E_SEND, s, 0                                                                               \
    }
#define BIG(k)                                                                                     \
    {                                                                                              \
        E_BIG, NULL, k                                                                             \
    }
#define DRIP(s, ms)                                                                                \
    {                                                                                              \
        E_DRIP, s, ms                                                                              \
    }
#define SLEEP(ms)                                                                                  \
    {                                                                                              \
        E_SLEEP, NULL, ms                                                                          \
    }
#define CLOSE                                                                                      \
    {                                                                                              \
        E_CLOSE, NULL, 0                                                                           \
    }
#define RST                                                                                        \
    {                                                                                              \
        E_RST, NULL, 0                                                                             \
    }
#define EOF_                                                                                       \
    {                                                                                              \
        E_EOF, NULL, 0                                                                             \
    }
#define END                                                                                        \
    {                                                                                              \
        E_END, NULL, 0                                                                             \
    }
#define OK(body) SEND("HTTP/1.1 200 OK\r\nContent-Length: " #body "\r\n\r\n")
#define ANSWER_HELLO                                                                               \
    SEND("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello")

struct engine {
    int lfd, port;
    const struct step *script;
    pthread_t th;
    atomic_int accepts, requests;
    atomic_int failed; /* 1 + the index of a step that could not be done */
    char first[512];   /* the first request head read */
};

/* Waits for fd to be readable, for at most 3 s: a poller that never comes fails the step
 * rather than hanging the test. */
static int wait_in(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};

    return poll(&p, 1, 3000) == 1;
}

static int read_head(struct engine *e, int fd)
{
    char buf[512];
    size_t got = 0;

    while (got < sizeof buf - 1) {
        ssize_t n;

        if (!wait_in(fd) || (n = recv(fd, buf + got, 1, 0)) <= 0)
            return -1;
        got++;
        buf[got] = '\0';
        if (got >= 4 && memcmp(buf + got - 4, "\r\n\r\n", 4) == 0) {
            if (atomic_fetch_add(&e->requests, 1) == 0)
                memcpy(e->first, buf, got + 1);
            return 0;
        }
    }
    return -1;
}

static void *engine_main(void *arg)
{
    struct engine *e = arg;
    int fd = -1;

    for (int i = 0; e->script[i].op != E_END && !atomic_load(&e->failed); i++) {
        const struct step *s = &e->script[i];
        int ok = 1;

        switch (s->op) {
        case E_ACCEPT:
            if (fd >= 0)
                close(fd);
            fd = wait_in(e->lfd) ? accept(e->lfd, NULL, NULL) : -1;
            ok = fd >= 0;
            if (ok)
                atomic_fetch_add(&e->accepts, 1);
            break;
        case E_REQ:
            ok = read_head(e, fd) == 0;
            break;
        case E_SEND:
            ok = send(fd, s->text, strlen(s->text), MSG_NOSIGNAL) == (ssize_t) strlen(s->text);
            break;
        case E_BIG: {
            static char xs[65536];
            size_t left = s->n;

            memset(xs, 'x', sizeof xs);
            while (left > 0) {
                ssize_t n = send(fd, xs, left < sizeof xs ? left : sizeof xs, MSG_NOSIGNAL);
                if (n <= 0)
                    break; /* the poller gave up on it: that is what some tests want */
                left -= (size_t) n;
            }
            break;
        }
        case E_DRIP:
            for (const char *c = s->text; *c != '\0'; c++) {
                struct timespec ts = {0, (long) s->n * 1000000L};

                if (send(fd, c, 1, MSG_NOSIGNAL) != 1)
                    break;
                nanosleep(&ts, NULL);
            }
            break;
        case E_SLEEP: {
            struct timespec ts = {(time_t) (s->n / 1000), (long) (s->n % 1000) * 1000000L};
            nanosleep(&ts, NULL);
            break;
        }
        case E_RST: {
            struct linger lg = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
            /* fall through */
        case E_CLOSE:
            close(fd);
            fd = -1;
            break;
        case E_EOF: {
            char b[4096];
            ssize_t n = 1;

            while (n > 0 && wait_in(fd))
                n = recv(fd, b, sizeof b, 0);
            ok = n <= 0;
            break;
        }
        case E_END:
            break;
        }
        if (!ok)
            atomic_store(&e->failed, i + 1);
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* A TCP socket bound to 127.0.0.1 at a port the kernel picks: the fd, and the port in *port. */
static int bind_loopback(int *port)
{
    struct sockaddr_in sa = {0};
    socklen_t sl = sizeof sa;
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *) &sa, sizeof sa), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *) &sa, &sl), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static void engine_start(struct engine *e, const struct step *script)
{
    memset(e, 0, sizeof *e);
    e->script = script;
    e->lfd = bind_loopback(&e->port);
    assert_int_equal(listen(e->lfd, 16), 0);
    assert_int_equal(pthread_create(&e->th, NULL, engine_main, e), 0);
}

/* Waits for the script's end; a step that failed fails the test. */
static void engine_join(struct engine *e)
{
    pthread_join(e->th, NULL);
    close(e->lfd);
    assert_int_equal(atomic_load(&e->failed), 0);
}

/* ---- the poller's side -------------------------------------------------------------- */

#define MAXA 8

struct run {
    struct event_base *base;
    struct poller *p;
    int want, n;
    int status[MAXA];
    size_t len[MAXA];
    char body[MAXA][64];
    int all_x[MAXA];    /* the body is len bytes of 'x' */
    double at[MAXA];    /* ms since the run started */
    char why[MAXA][64]; /* poller_error() during the callback */
    struct timespec t0;
    void (*then)(struct run *r); /* called after each answer */
};

static double ms_since(const struct timespec *t0)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) (t.tv_sec - t0->tv_sec) * 1e3 + (double) (t.tv_nsec - t0->tv_nsec) / 1e6;
}

static void on_answer(void *arg, int status, const char *body, size_t len)
{
    struct run *r = arg;
    int k = r->n++;

    assert_true(k < MAXA);
    assert_int_equal(body[len], '\0'); /* NUL-terminated */
    assert_int_equal(strlen(body) <= len, 1);
    r->status[k] = status;
    r->len[k] = len;
    snprintf(r->body[k], sizeof r->body[k], "%.*s", (int) (len < 63 ? len : 63), body);
    r->all_x[k] = 1;
    for (size_t i = 0; i < len && r->all_x[k]; i++)
        r->all_x[k] = body[i] == 'x';
    r->at[k] = ms_since(&r->t0);
    snprintf(r->why[k], sizeof r->why[k], "%s", poller_error(r->p));
    if (r->then != NULL)
        r->then(r);
    if (r->n >= r->want)
        event_base_loopbreak(r->base);
}

/* Polls port until want answers came, or for at most limit_ms. */
static void run_poller(struct run *r, int port, unsigned interval_ms, unsigned timeout_ms, int want,
                       unsigned limit_ms)
{
    struct http_url url;
    char s[64], err[128];
    struct timeval lim = {limit_ms / 1000, (limit_ms % 1000) * 1000};

    snprintf(s, sizeof s, "http://127.0.0.1:%d", port);
    assert_int_equal(http_url_parse(s, &url, err, sizeof err), 0);
    r->base = event_base_new();
    r->want = want;
    clock_gettime(CLOCK_MONOTONIC, &r->t0);
    r->p = poller_new(r->base, &url, "/health", interval_ms, timeout_ms, on_answer, r);
    event_base_loopexit(r->base, &lim);
    event_base_dispatch(r->base);
}

/* Runs the loop on for ms more (whatever it does then is checked by the caller). */
static void run_more(struct run *r, unsigned ms)
{
    struct timeval lim = {ms / 1000, (ms % 1000) * 1000};

    r->want = MAXA;
    event_base_loopexit(r->base, &lim);
    event_base_dispatch(r->base);
}

static void run_end(struct run *r)
{
    poller_free(r->p);
    event_base_free(r->base);
}

/* Frees the poller, then runs the loop for ms: nothing of it may run any more. */
static void run_end_after(struct run *r, unsigned ms)
{
    poller_free(r->p);
    r->p = NULL;
    run_more(r, ms);
    event_base_free(r->base);
}

/* Runs script against a poller until want answers came (run_poller's arguments), then frees
 * both; the script must have run to its end. */
static void polls(const struct step *script, struct run *r, struct engine *e, unsigned interval_ms,
                  unsigned timeout_ms, int want, unsigned limit_ms)
{
    engine_start(e, script);
    run_poller(r, e->port, interval_ms, timeout_ms, want, limit_ms);
    run_end(r);
    engine_join(e);
    assert_int_equal(r->n, want);
}

/* One script, one poll: the answer the callback got. */
static void one_poll(const struct step *script, struct run *r, struct engine *e)
{
    polls(script, r, e, 60000, 2000, 1, 3000);
}

/* Answers from to before to had status, and body unless NULL. */
static void assert_answers(const struct run *r, int from, int to, int status, const char *body)
{
    for (int i = from; i < to; i++) {
        assert_int_equal(r->status[i], status);
        if (body != NULL)
            assert_string_equal(r->body[i], body);
    }
}

/* ---- the tests ---------------------------------------------------------------------- */

static void test_content_length(void **state)
{
    static const struct step s[] = {ACCEPT, REQ, ANSWER_HELLO, EOF_, END};
    struct run r = {0};
    struct engine e;
    char host[64];

    (void) state;
    one_poll(s, &r, &e);
    assert_int_equal(r.status[0], 200);
    assert_int_equal(r.len[0], 5);
    assert_string_equal(r.body[0], "hello");
    /* The request: the path, the Host, no body. */
    snprintf(host, sizeof host, "\r\nHost: 127.0.0.1:%d\r\n", e.port);
    assert_int_equal(strncmp(e.first, "GET /health HTTP/1.1\r\n", 22), 0);
    assert_non_null(strstr(e.first, host));
    assert_non_null(strstr(e.first, "\r\nAccept: */*\r\n"));
    assert_null(strstr(e.first, "Content-Length"));
}

static void test_chunked_split_with_delays(void **state)
{
    static const struct step s[] = {
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 200 OK\r\nTransfer-"),
        SLEEP(20),
        SEND("Encoding: chunked\r\n\r\n5\r\nhel"),
        SLEEP(20),
        SEND("lo\r\n6;ext=1\r\n worl"),
        SLEEP(20),
        SEND("d\r"),
        SLEEP(20),
        SEND("\n0\r\nX-Trailer: 1\r\n"),
        SLEEP(20),
        SEND("\r\n"),
        REQ, /* chunked, whole: the connection is reused */
        SEND("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
        END};
    struct run r = {0};
    struct engine e;

    (void) state;
    polls(s, &r, &e, 10, 2000, 2, 3000);
    assert_int_equal(r.status[0], 200);
    assert_string_equal(r.body[0], "hello world");
    assert_int_equal(r.len[0], 11);
    assert_string_equal(r.body[1], "ok");
    assert_int_equal(atomic_load(&e.accepts), 1);
}

static void test_close_delimited(void **state)
{
    static const struct step s[] = {
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil"),
        SLEEP(30),
        SEND(" the close"),
        CLOSE,
        ACCEPT,
        REQ,
        SEND("HTTP/1.0 200 OK\r\n\r\nten"),
        CLOSE,
        END};
    struct run r = {0};
    struct engine e;

    (void) state;
    polls(s, &r, &e, 10, 2000, 2, 3000);
    assert_int_equal(r.status[0], 200);
    assert_string_equal(r.body[0], "until the close");
    assert_string_equal(r.body[1], "ten");
    assert_int_equal(atomic_load(&e.accepts), 2);
}

/* A body delimited by the close that ends in a reset, not a FIN: broken, not complete. */
static void test_close_delimited_reset(void **state)
{
    static const struct step s[] = {ACCEPT,    REQ, SEND("HTTP/1.1 200 OK\r\n\r\npart"),
                                    SLEEP(30), RST, END};
    struct run r = {0};
    struct engine e;

    (void) state;
    one_poll(s, &r, &e);
    assert_int_equal(r.status[0], 0);
    assert_int_equal(r.len[0], 0);
}

static void test_keep_alive_reuse(void **state)
{
    static const struct step s[] = {ACCEPT,       REQ, ANSWER_HELLO, REQ,
                                    ANSWER_HELLO, REQ, ANSWER_HELLO, END};
    struct run r = {0};
    struct engine e;

    (void) state;
    polls(s, &r, &e, 50, 2000, 3, 3000);
    assert_answers(&r, 0, 3, 200, "hello");
    assert_int_equal(atomic_load(&e.accepts), 1);
    assert_int_equal(atomic_load(&e.requests), 3);
    /* The next poll comes an interval after the answer before it, not at once. */
    assert_true(r.at[1] - r.at[0] >= 45.0);
    assert_true(r.at[2] - r.at[1] >= 45.0);
}

/* The engine closes the kept connection between polls, with a FIN and then with a reset: the
 * poller sees it while idle and the next poll connects anew. */
static void test_idle_close_between_polls(void **state)
{
    static const struct step s[] = {ACCEPT, REQ,          ANSWER_HELLO, CLOSE, ACCEPT,
                                    REQ,    ANSWER_HELLO, SLEEP(10),    RST,   ACCEPT,
                                    REQ,    ANSWER_HELLO, END};
    struct run r = {0};
    struct engine e;

    (void) state;
    polls(s, &r, &e, 100, 2000, 3, 3000);
    assert_answers(&r, 0, 3, 200, NULL);
    assert_int_equal(atomic_load(&e.accepts), 3);
}

/* The engine's close crosses the next request: it reads it and closes (or resets) without a
 * byte of answer. That poll goes on once on a new connection, unseen by the callback. */
static void test_close_crossing_request_retried(void **state)
{
    static const struct step s[] = {ACCEPT, REQ, ANSWER_HELLO, REQ, CLOSE,
                                    ACCEPT, REQ, ANSWER_HELLO, REQ, RST,
                                    ACCEPT, REQ, ANSWER_HELLO, END};
    struct run r = {0};
    struct engine e;

    (void) state;
    polls(s, &r, &e, 20, 2000, 3, 3000);
    assert_answers(&r, 0, 3, 200, "hello");
    assert_int_equal(atomic_load(&e.accepts), 3);
    assert_int_equal(atomic_load(&e.requests), 5);
}

/* A new connection that closes before answering is no answer: no retry there. */
static void test_fresh_connection_closed_not_retried(void **state)
{
    static const struct step s[] = {ACCEPT, REQ, CLOSE, SLEEP(100), END};
    struct run r = {0};
    struct engine e;

    (void) state;
    one_poll(s, &r, &e);
    assert_int_equal(r.status[0], 0);
    assert_int_equal(atomic_load(&e.accepts), 1);
    assert_int_equal(atomic_load(&e.requests), 1);
}

/* A kept connection that breaks after a byte of the answer came is not retried: that poll
 * has no answer, and the next one connects anew. */
static void test_hangup_after_partial_answer(void **state)
{
    static const struct step s[] = {ACCEPT,
                                    REQ,
                                    ANSWER_HELLO,
                                    REQ,
                                    SEND("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"),
                                    SLEEP(30),
                                    CLOSE,
                                    ACCEPT,
                                    REQ,
                                    ANSWER_HELLO,
                                    REQ,
                                    SEND("HTTP/1.1 200 OK\r\nContent-"),
                                    SLEEP(30),
                                    RST,
                                    ACCEPT,
                                    REQ,
                                    ANSWER_HELLO,
                                    END};
    struct run r = {0};
    struct engine e;

    (void) state;
    polls(s, &r, &e, 20, 2000, 5, 4000);
    for (int i = 0; i < 5; i++)
        assert_int_equal(r.status[i], i % 2 ? 0 : 200);
    assert_int_equal(atomic_load(&e.accepts), 3);
    assert_int_equal(atomic_load(&e.requests), 5);
}

static void test_interim_then_final(void **state)
{
    static const struct step s[] = {
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 100 Continue\r\n\r\n"),
        SLEEP(20),
        SEND("HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 2"),
        SLEEP(20),
        SEND("04 No Content\r\n\r\n"),
        REQ,
        SEND("HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 503 Service Unavailable\r\n"
             "Content-Length: 4\r\n\r\nbusy"),
        END};
    struct run r = {0};
    struct engine e;

    (void) state;
    polls(s, &r, &e, 10, 2000, 2, 3000);
    assert_int_equal(r.status[0], 204);
    assert_int_equal(r.len[0], 0);
    assert_int_equal(r.status[1], 503);
    assert_string_equal(r.body[1], "busy");
    assert_int_equal(atomic_load(&e.accepts), 1);
}

/* A malformed head is no answer, and the connection is closed (the engine reads the close);
 * the next poll connects anew. */
static void test_malformed_head(void **state)
{
    static const struct step s[] = {
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok"),
        EOF_,
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 200 OK\nContent-Length: 2\n\nok"),
        EOF_,
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"),
        EOF_,
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nok"),
        EOF_,
        ACCEPT,
        REQ,
        ANSWER_HELLO,
        END};
    struct run r = {0};
    struct engine e;

    (void) state;
    polls(s, &r, &e, 10, 2000, 5, 4000);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r.status[i], 0);
        assert_int_equal(r.len[i], 0);
        assert_int_equal(strncmp(r.why[i], "invalid answer: ", 16), 0);
    }
    assert_int_equal(r.status[4], 200);
    assert_string_equal(r.why[4], ""); /* an answer: no error any more */
    assert_int_equal(atomic_load(&e.accepts), 5);
}

/* POLLER_MAX_BODY (8 MiB) is handed over; a byte more is no answer, however it is framed. */
static void test_body_limit(void **state)
{
    static const struct step s[] = {
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 200 OK\r\nContent-Length: 8388608\r\n\r\n"),
        BIG(8388608),
        REQ,
        SEND("HTTP/1.1 200 OK\r\nContent-Length: 8388609\r\n\r\n"),
        EOF_,
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 200 OK\r\n\r\n"),
        BIG(8388609),
        EOF_,
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n800001\r\n"),
        BIG(8388609),
        EOF_,
        END};
    struct run r = {0};
    struct engine e;

    (void) state;
    polls(s, &r, &e, 10, 5000, 4, 10000);
    assert_int_equal(r.status[0], 200);
    assert_int_equal(r.len[0], 8388608);
    assert_true(r.all_x[0]);
    assert_answers(&r, 1, 4, 0, NULL);
}

static void test_connect_refused(void **state)
{
    struct run r = {0};
    int port;

    (void) state;
    close(bind_loopback(&port)); /* a port just bound and let go: nothing listens there */
    run_poller(&r, port, 20, 1000, 2, 2000);
    run_end(&r);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.status[0], 0);
    assert_int_equal(r.status[1], 0);
    assert_true(r.at[1] < 500.0); /* refused at once, not after the timeout */
    assert_string_equal(r.why[0], "Connection refused"); /* what admitd logs as the reason */
    assert_string_equal(r.why[1], "Connection refused");
}

/* An engine that accepts and never answers, and one that answers a byte at a time for
 * longer than the timeout: each poll ends at the timeout, counted from its start. */
static void test_timeout(void **state)
{
    static const struct step s[] = {ACCEPT,
                                    REQ,
                                    EOF_,
                                    ACCEPT,
                                    REQ,
                                    SEND("HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n"),
                                    DRIP("abcdefgh", 50),
                                    EOF_,
                                    END};
    struct run r = {0};
    struct engine e;

    (void) state;
    polls(s, &r, &e, 10, 200, 2, 3000);
    assert_int_equal(r.status[0], 0);
    assert_int_equal(r.status[1], 0);
    assert_string_equal(r.why[0], "no answer within 200 ms");
    assert_string_equal(r.why[1], "no answer within 200 ms");
    assert_true(r.at[0] >= 190.0 && r.at[0] < 600.0);
    assert_true(r.at[1] - r.at[0] >= 190.0 && r.at[1] - r.at[0] < 600.0);
}

/* Freed while waiting for the head, while a large body is coming, and before the first poll
 * ran: no callback then or later (the loop runs on past the poll's timeout), nothing leaks
 * (LeakSanitizer), and the engine reads the close. */
static void test_free_in_flight(void **state)
{
    static const struct step waiting[] = {ACCEPT, REQ, EOF_, END};
    static const struct step reading[] = {
        ACCEPT,       REQ,  SEND("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n"),
        BIG(1 << 20), EOF_, END};
    const struct step *scripts[] = {waiting, reading};

    (void) state;
    for (int i = 0; i < 2; i++) {
        struct run r = {0};
        struct engine e;

        engine_start(&e, scripts[i]);
        run_poller(&r, e.port, 10, 250, 1, 150);
        assert_int_equal(r.n, 0);
        run_end_after(&r, 250); /* past the poll's timeout */
        engine_join(&e);
        assert_int_equal(atomic_load(&e.requests), 1);
    }
    {
        /* ... and before the first poll ran. */
        struct run r = {0};
        struct http_url url;
        char err[64];

        assert_int_equal(http_url_parse("http://127.0.0.1:9", &url, err, sizeof err), 0);
        r.base = event_base_new();
        r.p = poller_new(r.base, &url, "/", 10, 100, on_answer, &r);
        run_end_after(&r, 50);
        assert_int_equal(r.n, 0);
    }
}

static void kick_cb(evutil_socket_t fd, short what, void *arg)
{
    struct run *r = arg;

    (void) fd;
    (void) what;
    poller_kick(r->p);
}

/* After the first answer: a kick 30 ms later starts the second poll (the interval is a
 * minute), and a kick 60 ms later, while the engine holds the answer back, does nothing. */
static void kick_later(struct run *r)
{
    struct timeval t30 = {0, 30000}, t60 = {0, 60000};

    if (r->n != 1)
        return;
    event_base_once(r->base, -1, EV_TIMEOUT, kick_cb, r, &t30);
    event_base_once(r->base, -1, EV_TIMEOUT, kick_cb, r, &t60);
}

static void test_kick(void **state)
{
    static const struct step s[] = {ACCEPT, REQ, ANSWER_HELLO, REQ, SLEEP(100), ANSWER_HELLO, END};
    struct run r = {0};
    struct engine e;

    (void) state;
    engine_start(&e, s);
    r.then = kick_later;
    run_poller(&r, e.port, 60000, 300, 2, 3000);
    assert_int_equal(r.n, 2);
    poller_kick(NULL); /* a no-op */
    run_more(&r, 500); /* no third poll (the interval is a minute), no late timeout */
    run_end(&r);
    engine_join(&e);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.status[1], 200);
    assert_true(r.at[1] - r.at[0] >= 120.0 && r.at[1] - r.at[0] < 1000.0);
    assert_int_equal(atomic_load(&e.requests), 2);
    assert_int_equal(atomic_load(&e.accepts), 1);
}

/* Connection: close in the answer, and bytes nobody asked for after one: the connection goes
 * after that answer, which is handed over all the same. */
static void test_connection_close_and_extra_bytes(void **state)
{
    static const struct step s[] = {
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"),
        EOF_,
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1"),
        EOF_,
        ACCEPT,
        REQ,
        SEND("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nX"),
        EOF_,
        ACCEPT,
        REQ,
        ANSWER_HELLO,
        SLEEP(10),
        SEND("junk while idle"),
        EOF_,
        ACCEPT,
        REQ,
        ANSWER_HELLO,
        END};
    struct run r = {0};
    struct engine e;

    (void) state;
    polls(s, &r, &e, 50, 2000, 5, 4000);
    assert_int_equal(r.status[0], 200);
    assert_string_equal(r.body[0], "ok");
    assert_string_equal(r.body[1], "ok");
    assert_string_equal(r.body[2], "ok");
    assert_string_equal(r.body[3], "hello");
    assert_string_equal(r.body[4], "hello");
    assert_int_equal(atomic_load(&e.accepts), 5);
}

#ifdef HAVE_MALLOC_HOOKS
/* Allocations made by this thread (the loop's) while counting is on. */
static pthread_t loop_thread;
static atomic_int counting, allocs;

static void on_malloc(const volatile void *ptr, size_t size)
{
    (void) ptr;
    (void) size;
    if (atomic_load(&counting) && pthread_equal(pthread_self(), loop_thread))
        atomic_fetch_add(&allocs, 1);
}

static void on_free(const volatile void *ptr)
{
    (void) ptr;
}

/* Counts from the second answer to the sixth. */
static void count_polls(struct run *r)
{
    atomic_store(&counting, r->n >= 2 && r->n < 6);
}
#endif

/* Once the buffer has grown to the engine's page, a poll allocates nothing: Content-Length
 * and chunked answers of 20,000 bytes on a kept connection, allocations counted through the
 * sanitizer's hooks (so only in the ASan build). */
static void test_no_allocation_per_poll(void **state)
{
#ifndef HAVE_MALLOC_HOOKS
    /* No hooks to count with (and cmocka's skip() reads as a failure to meson's TAP parser):
     * CI's sanitizer build runs it. */
    (void) state;
    print_message("# allocations are counted only in the ASan build\n");
#else
#define PAGE_CL SEND("HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n\r\n"), BIG(20000)
#define PAGE_CHUNKED                                                                               \
    SEND("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4e20\r\n"), BIG(20000),             \
        SEND("\r\n0\r\n\r\n")
    static const struct step s[] = {ACCEPT,  REQ,     PAGE_CL,      REQ,          PAGE_CHUNKED,
                                    REQ,     PAGE_CL, REQ,          PAGE_CHUNKED, REQ,
                                    PAGE_CL, REQ,     PAGE_CHUNKED, END};
    struct run r = {0};
    struct engine e;

    (void) state;
    loop_thread = pthread_self();
    engine_start(&e, s);
    r.then = count_polls;
    run_poller(&r, e.port, 10, 2000, 6, 3000);
    atomic_store(&counting, 0);
    run_end(&r);
    engine_join(&e);
    assert_int_equal(r.n, 6);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(r.status[i], 200);
        assert_int_equal(r.len[i], 20000);
        assert_true(r.all_x[i]);
    }
    assert_int_equal(atomic_load(&e.accepts), 1);
    assert_int_equal(atomic_load(&allocs), 0);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_chunked_split_with_delays),
        cmocka_unit_test(test_close_delimited),
        cmocka_unit_test(test_close_delimited_reset),
        cmocka_unit_test(test_keep_alive_reuse),
        cmocka_unit_test(test_idle_close_between_polls),
        cmocka_unit_test(test_close_crossing_request_retried),
        cmocka_unit_test(test_fresh_connection_closed_not_retried),
        cmocka_unit_test(test_hangup_after_partial_answer),
        cmocka_unit_test(test_interim_then_final),
        cmocka_unit_test(test_malformed_head),
        cmocka_unit_test(test_body_limit),
        cmocka_unit_test(test_connect_refused),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_free_in_flight),
        cmocka_unit_test(test_kick),
        cmocka_unit_test(test_connection_close_and_extra_bytes),
        cmocka_unit_test(test_no_allocation_per_poll),
    };

#ifdef HAVE_MALLOC_HOOKS
    __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
#endif

    return cmocka_run_group_tests(tests, NULL, NULL);
}
