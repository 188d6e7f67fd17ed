/* Unit tests for our own PUB (sppub): nng's SUB reads what it sends, over tcp and ipc; raw
 * subscribers on loopback (ports picked at run time, the same loop as the publisher) check
 * the bytes: our header at once, messages only once theirs is in (sent a byte at a time,
 * late, is fine), the framing whole when a slow subscriber's queue drops messages (the oldest
 * go, the newest arrive, a fast subscriber beside it gets everything in order), and the ways
 * a subscriber is dropped: a wrong header, a PUB0 header, data after the header, no header
 * in time, a reset with messages queued, one over SPPUB_PEERS_MAX. Then the listener: the
 * bound port, "*", a stale ipc socket file replaced, a live one refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/spframe.h"
#include "pubsub/sppub.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE_MS 10000

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs the loop for about ms. */
static void pump(struct event_base *base, int ms)
{
    int64_t end = mono_ms() + ms;

    do {
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        usleep(1000);
    } while (mono_ms() < end);
}

static struct sppub *start(struct event_base *base, const char *url, char *bound, size_t len)
{
    char err[256];
    struct sppub *p = sppub_new(base, url, bound, len, err, sizeof err);

    if (p == NULL)
        fail_msg("sppub_new(%s): %s", url, err);
    return p;
}

static int port_of(const char *bound)
{
    return atoi(strrchr(bound, ':') + 1);
}

/* A raw non-blocking TCP client of 127.0.0.1:port, with a receive buffer of rcvbuf bytes
 * when not 0. */
static int dial(int port, int rcvbuf)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t) port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *) &sa, sizeof sa), 0);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

static void send_hello(int fd, uint16_t proto)
{
    unsigned char h[SPFRAME_HELLO_LEN];

    spframe_hello(proto, h);
    assert_int_equal(send(fd, h, sizeof h, 0), (ssize_t) sizeof h);
}

/* What a raw subscriber has read, and the messages framed out of it. */
struct rx {
    unsigned char buf[1 << 20];
    size_t have;
    struct spframe fr;
    int hello, eof, bad;
    unsigned msgs;
    char last[64]; /* the newest message's body, as text */
};

static void rx_init(struct rx *r)
{
    memset(r, 0, sizeof *r);
    spframe_init(&r->fr, SPFRAME_TCP, SPFRAME_PROTO_PUB0, SPPUB_MSG_MAX);
}

/* Reads what fd has, or at most max bytes when max is not 0, and frames it; the callback,
 * when set, sees each body in turn. */
static void rx_read_some(struct rx *r, int fd, size_t max,
                         void (*each)(const struct spframe_unit *u, void *a), void *arg)
{
    for (;;) {
        size_t room = sizeof r->buf - r->have;
        ssize_t n = recv(fd, r->buf + r->have, max > 0 && max < room ? max : room, 0);
        size_t off = 0;
        struct spframe_unit u;
        enum spframe_result res;

        if (n == 0)
            r->eof = 1;
        if (n <= 0)
            return;
        r->have += (size_t) n;
        while ((res = spframe_next(&r->fr, r->buf + off, r->have - off, &u)) != SPFRAME_NEED) {
            if (res == SPFRAME_HELLO) {
                r->hello = 1;
            } else if (res == SPFRAME_MESSAGE) {
                r->msgs++;
                snprintf(r->last, sizeof r->last, "%.*s", (int) u.len, (const char *) u.body);
                if (each != NULL)
                    each(&u, arg);
            } else {
                r->bad = 1;
                return;
            }
            off += u.used;
        }
        memmove(r->buf, r->buf + off, r->have - off);
        r->have -= off;
        if (max > 0)
            return;
    }
}

static void rx_read(struct rx *r, int fd, void (*each)(const struct spframe_unit *u, void *a),
                    void *arg)
{
    rx_read_some(r, fd, 0, each, arg);
}

static void stats(struct sppub *p, struct sppub_stats *st)
{
    sppub_get_stats(p, st);
}

/* Pumps until the publisher counts want open subscribers. */
static void wait_subscribers(struct event_base *base, struct sppub *p, unsigned want)
{
    struct sppub_stats st;
    int64_t end = mono_ms() + DEADLINE_MS;

    do {
        pump(base, 2);
        stats(p, &st);
    } while (st.subscribers != want && mono_ms() < end);
    assert_int_equal(st.subscribers, want);
}

/* nng's own SUB reads what sppub sends, tcp and ipc: the wire is nng's. */
static void nng_reads(const char *url)
{
    struct event_base *base = event_base_new();
    char bound[300], got[64] = "";
    struct sppub *p = start(base, url, bound, sizeof bound);
    nng_socket sub;
    int64_t end = mono_ms() + DEADLINE_MS;

    assert_int_equal(nng_sub0_open(&sub), 0);
    assert_int_equal(nng_socket_set(sub, NNG_OPT_SUB_SUBSCRIBE, "", 0), 0);
    assert_int_equal(nng_dial(sub, bound, NULL, NNG_FLAG_NONBLOCK), 0);
    wait_subscribers(base, p, 1);
    /* Send until one arrives: nng's pipe may be open on our side before its reader runs. */
    while (got[0] == '\0' && mono_ms() < end) {
        char *msg = NULL;
        size_t len = 0;

        assert_int_equal(sppub_send(p, "kv_metrics {\"n\":1}", 18), 0);
        pump(base, 5);
        if (nng_recv(sub, &msg, &len, NNG_FLAG_ALLOC | NNG_FLAG_NONBLOCK) == 0) {
            snprintf(got, sizeof got, "%.*s", (int) len, msg);
            nng_free(msg, len);
        }
    }
    assert_string_equal(got, "kv_metrics {\"n\":1}");
    sppub_free(p); /* nng's SUB is left to the exit (lib/pubsub/nngclose.h) */
    event_base_free(base);
}

static void test_nng_sub_reads_tcp(void **state)
{
    (void) state;
    nng_reads("tcp://127.0.0.1:0");
}

static void test_nng_sub_reads_ipc(void **state)
{
    char url[128];

    (void) state;
    snprintf(url, sizeof url, "ipc:///tmp/test_sppub.%d.sock", (int) getpid());
    nng_reads(url);
    assert_int_equal(access(url + 6, F_OK), -1); /* the socket file went with the publisher */
}

/* Our header comes at once; messages only once the subscriber's header is in, which may come
 * a byte at a time and late; what was sent before it is not kept for it. */
static void test_header_first_then_messages(void **state)
{
    struct event_base *base = event_base_new();
    char bound[300];
    struct sppub *p = start(base, "tcp://127.0.0.1:0", bound, sizeof bound);
    static struct rx r;
    unsigned char h[SPFRAME_HELLO_LEN];
    int fd = dial(port_of(bound), 0);

    (void) state;
    rx_init(&r);
    pump(base, 20);
    rx_read(&r, fd, NULL, NULL);
    assert_true(r.hello); /* before we said anything */
    sppub_send(p, "kv_metrics early", 16);
    spframe_hello(SPFRAME_PROTO_SUB0, h);
    for (size_t i = 0; i < sizeof h; i++) {
        assert_int_equal(send(fd, h + i, 1, 0), 1);
        pump(base, 15);
    }
    wait_subscribers(base, p, 1);
    sppub_send(p, "kv_metrics one", 14);
    sppub_send(p, "kv_metrics two", 14);
    pump(base, 20);
    rx_read(&r, fd, NULL, NULL);
    assert_false(r.bad);
    assert_int_equal(r.msgs, 2);
    assert_string_equal(r.last, "kv_metrics two");
    assert_int_equal(sppub_send(p, r.buf, SPPUB_MSG_MAX + 1), -1);
    close(fd);
    sppub_free(p);
    event_base_free(base);
}

struct order {
    unsigned next, wrong;
};

static void in_order(const struct spframe_unit *u, void *arg)
{
    struct order *o = arg;
    unsigned n = 0;

    if (sscanf((const char *) u->body, "kv_metrics %u", &n) != 1 || n != o->next)
        o->wrong++;
    o->next = n + 1;
}

/* Ends body with its number too, so that a message made of two halves shows. */
static void number_tail(char *body, size_t len, unsigned n)
{
    char t[16];
    int tl = snprintf(t, sizeof t, " %010u", n);

    memcpy(body + len - (size_t) tl, t, (size_t) tl);
}

/* Counts in *arg the messages whose two numbers differ. */
static void whole(const struct spframe_unit *u, void *arg)
{
    unsigned head = 0, tail = 1;

    if (u->len < 11 || sscanf((const char *) u->body, "kv_metrics %u", &head) != 1 ||
        sscanf((const char *) u->body + u->len - 10, "%10u", &tail) != 1 || head != tail)
        ++*(unsigned *) arg;
}

/* A subscriber that does not read: the publisher never waits for it, its queue drops the
 * oldest messages but never one it has started, so what it reads once it reads again is
 * whole messages, ending with the newest. A fast subscriber beside it gets all, in order. */
static void test_slow_subscriber_drops_oldest_keeps_framing(void **state)
{
    struct event_base *base = event_base_new();
    char bound[300], body[1500];
    struct sppub *p = start(base, "tcp://127.0.0.1:0", bound, sizeof bound);
    static struct rx slow, fast;
    struct order o = {0, 0};
    unsigned mixed = 0;
    struct sppub_stats st;
    int sfd = dial(port_of(bound), 4096), ffd = dial(port_of(bound), 0);
    unsigned total = 3000;
    int64_t end;

    (void) state;
    rx_init(&slow);
    rx_init(&fast);
    send_hello(sfd, SPFRAME_PROTO_SUB0);
    send_hello(ffd, SPFRAME_PROTO_SUB0);
    wait_subscribers(base, p, 2);
    memset(body, 'x', sizeof body);
    for (unsigned i = 0; i < total; i++) {
        int n = snprintf(body, sizeof body, "kv_metrics %u ", i);

        body[n] = 'x';
        number_tail(body, sizeof body, i);
        assert_int_equal(sppub_send(p, body, sizeof body), 0);
        if (i % 8 == 0) {
            event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
            rx_read(&fast, ffd, in_order, &o);
        }
    }
    stats(p, &st);
    assert_true(st.dropped > 0);
    assert_int_equal(st.subscribers, 2);
    /* The slow one reads a little at a time: each flush of its queue leaves part of a
     * message written, and the sends after it overflow the queue again. */
    for (unsigned i = total; i < total + 400; i++) {
        int n = snprintf(body, sizeof body, "kv_metrics %u ", i);

        body[n] = 'x';
        number_tail(body, sizeof body, i);
        if (i % 20 == 0) {
            rx_read_some(&slow, sfd, 3000, whole, &mixed);
            event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
            rx_read(&fast, ffd, in_order, &o);
        }
        assert_int_equal(sppub_send(p, body, sizeof body), 0);
    }
    total += 400;
    assert_false(slow.bad);
    /* Now both read everything the publisher still has for them. */
    end = mono_ms() + DEADLINE_MS;
    do {
        pump(base, 5);
        rx_read(&fast, ffd, in_order, &o);
        rx_read(&slow, sfd, whole, &mixed);
    } while ((fast.msgs < total || strncmp(slow.last, "kv_metrics 3399 ", 16) != 0) &&
             mono_ms() < end);
    assert_int_equal(fast.msgs, total);
    assert_int_equal(o.wrong, 0);
    assert_false(slow.bad);
    assert_int_equal(mixed, 0);     /* no message made of two */
    assert_int_equal(slow.have, 0); /* no half message left over */
    assert_true(strncmp(slow.last, "kv_metrics 3399 ", 16) == 0);
    stats(p, &st);
    assert_int_equal(slow.msgs + st.dropped, total);
    close(sfd);
    close(ffd);
    sppub_free(p);
    event_base_free(base);
}

/* Counts the messages read and checks they rise; remembers the first of the run that ends
 * with the newest (what the queue kept after its last drop). */
struct rising {
    unsigned prev, n, run_start, wrong;
};

static void rising_one(const struct spframe_unit *u, void *arg)
{
    struct rising *r = arg;
    unsigned n = 0;

    if (sscanf((const char *) u->body, "kv_metrics %u", &n) != 1 || (r->n > 0 && n <= r->prev))
        r->wrong++;
    if (r->n == 0 || n != r->prev + 1)
        r->run_start = n;
    r->prev = n;
    r->n++;
}

/* A longer queue (sppub_set_queue, as admitd relaying KV events sets it): a subscriber that
 * does not read for a while still gets at least the queue's length of the newest messages,
 * with no gap among them, and what it lost is counted. Past the maximum the length is the
 * maximum. The messages are short (a kv_events message of a few keys): each is queued as a
 * copy of its own length. */
static void test_longer_queue(void **state)
{
    struct event_base *base = event_base_new();
    char bound[300], body[120];
    struct sppub *p = start(base, "tcp://127.0.0.1:0", bound, sizeof bound);
    static struct rx slow;
    struct rising r = {0, 0, 0, 0};
    struct sppub_stats st;
    int sfd = dial(port_of(bound), 4096);
    unsigned total = 60000, queue = 3000;
    int64_t end;

    (void) state;
    sppub_set_queue(p, queue);
    rx_init(&slow);
    send_hello(sfd, SPFRAME_PROTO_SUB0);
    wait_subscribers(base, p, 1);
    memset(body, 'k', sizeof body);
    for (unsigned i = 0; i < total; i++) {
        int n = snprintf(body, sizeof body, "kv_metrics %u ", i);

        body[n] = 'k';
        assert_int_equal(sppub_send(p, body, sizeof body), 0);
    }
    stats(p, &st);
    assert_true(st.dropped > 0);
    end = mono_ms() + DEADLINE_MS;
    do {
        pump(base, 5);
        rx_read(&slow, sfd, rising_one, &r);
    } while (r.prev != total - 1 && mono_ms() < end);
    stats(p, &st);
    assert_int_equal(r.wrong, 0);
    assert_int_equal(r.prev, total - 1);
    assert_true(total - r.run_start >= queue);
    assert_int_equal(r.n + st.dropped, total);
    sppub_set_queue(p, 1u << 30); /* clamped, not refused */
    close(sfd);
    sppub_free(p);
    event_base_free(base);
}

/* Pumps until fd reads EOF (or a reset): the publisher closed it. */
static void wait_closed(struct event_base *base, int fd)
{
    char junk[256];
    int64_t end = mono_ms() + DEADLINE_MS;

    for (;;) {
        ssize_t n = recv(fd, junk, sizeof junk, 0);

        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            return;
        if (mono_ms() >= end)
            fail_msg("the publisher did not close the subscriber");
        pump(base, 2);
    }
}

static void test_bad_subscribers_are_dropped(void **state)
{
    struct event_base *base = event_base_new();
    char bound[300];
    struct sppub *p = start(base, "tcp://127.0.0.1:0", bound, sizeof bound);
    struct sppub_stats st;
    int http = dial(port_of(bound), 0), pub = dial(port_of(bound), 0);
    int chatty = dial(port_of(bound), 0), mute;

    (void) state;
    assert_int_equal(send(http, "GET / HTTP/1.1\r\n\r\n", 18, 0), 18);
    send_hello(pub, SPFRAME_PROTO_PUB0);
    send_hello(chatty, SPFRAME_PROTO_SUB0);
    wait_subscribers(base, p, 1);
    assert_int_equal(send(chatty, "x", 1, 0), 1);
    wait_closed(base, http);
    wait_closed(base, pub);
    wait_closed(base, chatty);
    sppub_set_handshake_ms(p, 100);
    mute = dial(port_of(bound), 0);
    wait_closed(base, mute);
    stats(p, &st);
    assert_int_equal(st.bad_peers, 4);
    assert_int_equal(st.subscribers, 0);
    assert_int_equal(st.accepted, 4);
    close(http);
    close(pub);
    close(chatty);
    close(mute);
    sppub_free(p);
    event_base_free(base);
}

/* A subscriber that resets with messages queued for it goes; the others go on. */
static void test_reset_with_queue(void **state)
{
    struct event_base *base = event_base_new();
    char bound[300], body[1500];
    struct sppub *p = start(base, "tcp://127.0.0.1:0", bound, sizeof bound);
    static struct rx r;
    struct sppub_stats st;
    struct linger lg = {1, 0};
    int sfd = dial(port_of(bound), 4096), ok = dial(port_of(bound), 0);
    int64_t end;

    (void) state;
    rx_init(&r);
    send_hello(sfd, SPFRAME_PROTO_SUB0);
    send_hello(ok, SPFRAME_PROTO_SUB0);
    wait_subscribers(base, p, 2);
    memset(body, 'y', sizeof body);
    memcpy(body, "kv_metrics ", 11);
    for (int i = 0; i < 200; i++)
        sppub_send(p, body, sizeof body);
    setsockopt(sfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(sfd); /* an RST */
    end = mono_ms() + DEADLINE_MS;
    do {
        pump(base, 5);
        sppub_send(p, "kv_metrics after", 16);
        rx_read(&r, ok, NULL, NULL);
        stats(p, &st);
    } while ((st.subscribers != 1 || strcmp(r.last, "kv_metrics after") != 0) && mono_ms() < end);
    assert_int_equal(st.subscribers, 1);
    assert_string_equal(r.last, "kv_metrics after");
    assert_false(r.bad);
    close(ok);
    sppub_free(p);
    event_base_free(base);
}

static void test_subscribers_over_the_limit_are_closed(void **state)
{
    struct event_base *base = event_base_new();
    char bound[300];
    struct sppub *p = start(base, "tcp://127.0.0.1:0", bound, sizeof bound);
    static int fds[SPPUB_PEERS_MAX + 1];
    struct sppub_stats st;
    int64_t end = mono_ms() + DEADLINE_MS;

    (void) state;
    /* Accepted as they come: a blocking connect to a full backlog would wait for ever. */
    for (int i = 0; i <= SPPUB_PEERS_MAX; i++) {
        fds[i] = dial(port_of(bound), 0);
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    do {
        pump(base, 2);
        stats(p, &st);
    } while (st.accepted + st.refused < SPPUB_PEERS_MAX + 1 && mono_ms() < end);
    assert_int_equal(st.accepted, SPPUB_PEERS_MAX);
    assert_int_equal(st.refused, 1);
    for (int i = 0; i <= SPPUB_PEERS_MAX; i++)
        close(fds[i]);
    sppub_free(p);
    event_base_free(base);
}

/* Out of descriptors: the connection waits in the backlog while the listener rests, and is
 * taken once descriptors are free again. */
static void test_accept_resumes_after_emfile(void **state)
{
    struct event_base *base = event_base_new();
    char bound[300];
    struct sppub *p = start(base, "tcp://127.0.0.1:0", bound, sizeof bound);
    struct rlimit was, low;
    struct sppub_stats st;
    int fd, spare;
    int64_t end;

    (void) state;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
    fd = dial(port_of(bound), 0); /* before the limit: the client's own descriptor */
    spare = dup(0);
    close(spare);
    low = was;
    low.rlim_cur = (rlim_t) spare; /* the lowest free descriptor is over the limit */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    pump(base, 150);
    stats(p, &st);
    assert_int_equal(st.accepted, 0);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &was), 0);
    end = mono_ms() + DEADLINE_MS;
    do {
        pump(base, 5);
        stats(p, &st);
    } while (st.accepted == 0 && mono_ms() < end);
    assert_int_equal(st.accepted, 1);
    close(fd);
    sppub_free(p);
    event_base_free(base);
}

static void test_listen_urls(void **state)
{
    struct event_base *base = event_base_new();
    char bound[300], err[256], url[96];
    struct sockaddr_un su = {.sun_family = AF_UNIX};
    struct sppub *p;
    int stale, live;

    (void) state;
    p = start(base, "tcp://127.0.0.1:0", bound, sizeof bound);
    assert_true(strncmp(bound, "tcp://127.0.0.1:", 16) == 0 && port_of(bound) > 0);
    sppub_free(p);
    p = start(base, "tcp://*:0", bound, sizeof bound);
    assert_true(strncmp(bound, "tcp://*:", 8) == 0 && port_of(bound) > 0);
    close(dial(port_of(bound), 0)); /* every address: loopback too */
    sppub_free(p);
    assert_null(sppub_new(base, "tcp://127.0.0.1", bound, sizeof bound, err, sizeof err));
    assert_non_null(strstr(err, "cannot publish load on tcp://127.0.0.1"));
    assert_null(sppub_new(base, "ws://127.0.0.1:1", bound, sizeof bound, err, sizeof err));
    assert_non_null(strstr(err, "only tcp:// and ipc://"));

    /* A socket file left by a publisher that died is taken over... */
    snprintf(url, sizeof url, "ipc:///tmp/test_sppub_stale.%d.sock", (int) getpid());
    snprintf(su.sun_path, sizeof su.sun_path, "%s", url + 6);
    stale = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_int_equal(bind(stale, (struct sockaddr *) &su, sizeof su), 0);
    close(stale); /* the file stays, no one listens */
    p = start(base, url, bound, sizeof bound);
    assert_string_equal(bound, url);
    /* ... one that answers is not. */
    live = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_int_equal(connect(live, (struct sockaddr *) &su, sizeof su), 0);
    close(live);
    assert_null(sppub_new(base, url, bound, sizeof bound, err, sizeof err));
    assert_non_null(strstr(err, "in use"));
    sppub_free(p);
    assert_int_equal(access(url + 6, F_OK), -1);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nng_sub_reads_tcp),
        cmocka_unit_test(test_nng_sub_reads_ipc),
        cmocka_unit_test(test_header_first_then_messages),
        cmocka_unit_test(test_slow_subscriber_drops_oldest_keeps_framing),
        cmocka_unit_test(test_bad_subscribers_are_dropped),
        cmocka_unit_test(test_reset_with_queue),
        cmocka_unit_test(test_longer_queue),
        cmocka_unit_test(test_subscribers_over_the_limit_are_closed),
        cmocka_unit_test(test_accept_resumes_after_emfile),
        cmocka_unit_test(test_listen_urls),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
