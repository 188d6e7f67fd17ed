/* Unit tests for the event-loop subscriber: the subscribers of one event base share one SUB
 * socket, and each message reaches the subscriber whose dialer received it, and no other;
 * a freed subscriber hears nothing more while the others go on; a closed one (sub_close)
 * closes its own dialer only, and what it had queued reaches nobody, not even a subscriber
 * made at once with the same callback argument; the demux table grows past its first size;
 * two event bases have sockets of their own. Real publishers (publish.h) on loopback ports
 * picked at run time, on the same loop, with a 20 ms heartbeat, and a raw nng publisher
 * sent from the test's thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admit/load.h"
#include "pubsub/publish.h"
#include "pubsub/subscribe.h"

#include <event2/event.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Generous: only a broken subscriber misses it, even on two busy cores. */
#define DEADLINE_MS 10000
#define MANY        40 /* more subscribers than the demux table's first size holds */

struct heard {
    char want[ADMIT_LOAD_WORKER_ID_MAX + 1]; /* the worker id this subscriber must hear */
    unsigned msgs, wrong;
};

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fill(void *arg, struct admit_load *msgs, unsigned *n)
{
    (void) arg;
    admit_load_init(&msgs[0]);
    msgs[0].engine_requests = 1;
    *n = 1;
}

static void on_msg(void *arg, const void *msg, size_t len)
{
    struct heard *h = arg;
    struct admit_load m;
    char err[128];

    if (admit_load_decode(msg, len, &m, err, sizeof err) != 0 || strcmp(m.worker_id, h->want))
        h->wrong++;
    else
        h->msgs++;
}

static struct publisher *publisher(struct event_base *base, const char *id, char *url, size_t len)
{
    char err[256];
    struct publisher *p =
        pub_new(base, "tcp://127.0.0.1:0", id, 20, fill, NULL, url, len, err, sizeof err);

    if (p == NULL)
        fail_msg("pub_new: %s", err);
    return p;
}

static struct subscriber *subscriber(struct event_base *base, const char *url, struct heard *h)
{
    char err[256];
    struct subscriber *s = sub_new(base, url, on_msg, h, err, sizeof err);

    if (s == NULL)
        fail_msg("sub_new: %s", err);
    return s;
}

/* Runs base until every h[i] (of n) has heard at least want messages, or the deadline. */
static void loop_until_heard(struct event_base *base, struct heard *h, size_t n, unsigned want)
{
    int64_t end = mono_ms() + DEADLINE_MS;

    for (;;) {
        size_t done = 0;

        for (size_t i = 0; i < n; i++)
            done += h[i].msgs >= want;
        if (done == n || mono_ms() > end)
            break;
        event_base_loop(base, EVLOOP_ONCE);
    }
    for (size_t i = 0; i < n; i++)
        assert_true(h[i].msgs >= want);
}

static void loop_for(struct event_base *base, int64_t ms)
{
    int64_t end = mono_ms() + ms;

    while (mono_ms() < end)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

static void test_each_message_reaches_its_subscriber(void **state)
{
    struct event_base *base = event_base_new();
    struct publisher *p[3];
    struct subscriber *s[3];
    struct heard h[3];
    char url[3][256];

    (void) state;
    memset(h, 0, sizeof h);
    for (int i = 0; i < 3; i++) {
        snprintf(h[i].want, sizeof h[i].want, "worker-%d", i);
        p[i] = publisher(base, h[i].want, url[i], sizeof url[i]);
    }
    for (int i = 0; i < 3; i++)
        s[i] = subscriber(base, url[i], &h[i]);
    loop_until_heard(base, h, 3, 5);
    for (int i = 0; i < 3; i++)
        assert_int_equal(h[i].wrong, 0);

    /* The middle one goes: it hears nothing more, the others go on. */
    sub_free(s[1]);
    memset(h, 0, sizeof h);
    snprintf(h[0].want, sizeof h[0].want, "worker-0");
    snprintf(h[2].want, sizeof h[2].want, "worker-2");
    loop_for(base, 200);
    assert_true(h[0].msgs > 0 && h[2].msgs > 0);
    assert_int_equal(h[1].msgs + h[1].wrong, 0);
    assert_int_equal(h[0].wrong + h[2].wrong, 0);

    sub_free(s[0]);
    sub_free(s[2]);
    for (int i = 0; i < 3; i++)
        pub_free(p[i]);
    event_base_free(base); /* the shared event went with the last subscriber */
}

/* A publisher of the test's own, on a raw nng PUB socket: it sends from the test's thread,
 * without the loop, so that its messages can be left waiting in the shared socket's queue,
 * and it counts the pipes its subscribers' dialers open and close. */
struct raw_pub {
    nng_socket sock;
    atomic_int added, removed;
    char url[64];
};

static void raw_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    struct raw_pub *r = arg;

    (void) p;
    if (ev == NNG_PIPE_EV_ADD_POST)
        atomic_fetch_add(&r->added, 1);
    else if (ev == NNG_PIPE_EV_REM_POST)
        atomic_fetch_add(&r->removed, 1);
}

static void raw_open(struct raw_pub *r)
{
    nng_listener l;
    nng_sockaddr sa;

    atomic_init(&r->added, 0);
    atomic_init(&r->removed, 0);
    assert_int_equal(nng_pub0_open(&r->sock), 0);
    assert_int_equal(nng_pipe_notify(r->sock, NNG_PIPE_EV_ADD_POST, raw_pipe_event, r), 0);
    assert_int_equal(nng_pipe_notify(r->sock, NNG_PIPE_EV_REM_POST, raw_pipe_event, r), 0);
    assert_int_equal(nng_listen(r->sock, "tcp://127.0.0.1:0", &l, 0), 0);
    assert_int_equal(nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa), 0);
    snprintf(r->url, sizeof r->url, "tcp://127.0.0.1:%u", ntohs(sa.s_in.sa_port));
}

static void raw_send(struct raw_pub *r, const char *worker_id, unsigned count)
{
    struct admit_load m;
    char buf[4096];
    int len;

    admit_load_init(&m);
    snprintf(m.worker_id, sizeof m.worker_id, "%s", worker_id);
    m.engine_requests = 1;
    len = admit_load_encode(&m, buf, sizeof buf);
    assert_true(len > 0);
    for (unsigned i = 0; i < count; i++)
        assert_int_equal(nng_send(r->sock, buf, (size_t) len, 0), 0);
}

/* Runs base until *n reaches want, or the deadline. */
static void loop_until_count(struct event_base *base, atomic_int *n, int want)
{
    int64_t end = mono_ms() + DEADLINE_MS;

    while (atomic_load(n) < want && mono_ms() < end)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_true(atomic_load(n) >= want);
}

static void test_closed_dialer_goes_alone_and_its_queue_reaches_nobody(void **state)
{
    struct event_base *base = event_base_new();
    struct publisher *p[3];
    struct subscriber *s[3];
    struct heard h[3];
    struct raw_pub raw;
    char url[3][256];

    (void) state;
    memset(h, 0, sizeof h);
    raw_open(&raw);
    for (int i = 0; i < 3; i += 2) {
        snprintf(h[i].want, sizeof h[i].want, "worker-%d", i);
        p[i] = publisher(base, h[i].want, url[i], sizeof url[i]);
        s[i] = subscriber(base, url[i], &h[i]);
    }
    snprintf(h[1].want, sizeof h[1].want, "worker-1");
    s[1] = subscriber(base, raw.url, &h[1]);
    loop_until_count(base, &raw.added, 1);
    raw_send(&raw, "worker-1", 3);
    loop_until_heard(base, h, 3, 3);

    /* Messages of worker 1 left waiting in the shared socket's queue (the loop does not
     * run), then its subscriber is closed and, as admit-router does with the index of a
     * worker that left, a new one made at once with the same argument, to worker 2. */
    raw_send(&raw, "worker-1", 50);
    usleep(200000);
    sub_close(s[1], DEADLINE_MS);
    memset(h, 0, sizeof h);
    for (int i = 0; i < 3; i++)
        snprintf(h[i].want, sizeof h[i].want, "worker-%d", i == 1 ? 2 : i);
    s[1] = subscriber(base, url[2], &h[1]);

    /* Only the closed dialer's pipe goes; the socket's other dialers go on delivering. */
    loop_until_count(base, &raw.removed, 1);
    raw_send(&raw, "worker-1", 5); /* nobody listens to it now */
    loop_for(base, 300);           /* past nng's reconnect time: the dialer is gone for good */
    assert_int_equal(atomic_load(&raw.removed), 1);
    assert_int_equal(atomic_load(&raw.added), 1);
    loop_until_heard(base, h, 3, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(h[i].wrong, 0);

    for (int i = 0; i < 3; i++)
        sub_close(s[i], DEADLINE_MS);
    sub_close(NULL, DEADLINE_MS);
    pub_free(p[0]);
    pub_free(p[2]);
    event_base_free(base); /* the shared event went with the last subscriber */
}

static void test_many_subscribers_of_one_publisher(void **state)
{
    struct event_base *base = event_base_new();
    struct publisher *p;
    struct subscriber *s[MANY];
    static struct heard h[MANY];
    char url[256];

    (void) state;
    memset(h, 0, sizeof h);
    p = publisher(base, "solo", url, sizeof url);
    for (int i = 0; i < MANY; i++) {
        snprintf(h[i].want, sizeof h[i].want, "solo");
        s[i] = subscriber(base, url, &h[i]);
    }
    /* Every dialer has its own pipe: each subscriber hears every message. */
    loop_until_heard(base, h, MANY, 3);
    for (int i = 0; i < MANY; i++) {
        assert_int_equal(h[i].wrong, 0);
        sub_free(s[i]);
    }
    pub_free(p);
    event_base_free(base);
}

static void test_two_bases_have_their_own_sockets(void **state)
{
    struct event_base *b1 = event_base_new(), *b2 = event_base_new();
    struct publisher *p1, *p2;
    struct subscriber *s1, *s2;
    struct heard h1 = {"one", 0, 0}, h2 = {"two", 0, 0};
    char u1[256], u2[256];

    (void) state;
    p1 = publisher(b1, "one", u1, sizeof u1);
    p2 = publisher(b2, "two", u2, sizeof u2);
    s1 = subscriber(b1, u1, &h1);
    s2 = subscriber(b2, u2, &h2);
    loop_until_heard(b1, &h1, 1, 3);
    loop_until_heard(b2, &h2, 1, 3);
    assert_int_equal(h1.wrong + h2.wrong, 0);
    /* One base's subscribers gone, the other's still hears. */
    sub_free(s1);
    pub_free(p1);
    event_base_free(b1);
    h2.msgs = 0;
    loop_until_heard(b2, &h2, 1, 3);
    sub_free(s2);
    pub_free(p2);
    event_base_free(b2);
}

static void test_bad_url_fails_and_leaves_no_socket_behind(void **state)
{
    struct event_base *base = event_base_new();
    struct heard h = {"x", 0, 0};
    char err[256];

    (void) state;
    assert_null(sub_new(base, "bogus://nowhere", on_msg, &h, err, sizeof err));
    assert_non_null(strstr(err, "bogus://nowhere"));
    event_base_free(base); /* nothing of the failed subscriber is left on it */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_message_reaches_its_subscriber),
        cmocka_unit_test(test_closed_dialer_goes_alone_and_its_queue_reaches_nobody),
        cmocka_unit_test(test_many_subscribers_of_one_publisher),
        cmocka_unit_test(test_two_bases_have_their_own_sockets),
        cmocka_unit_test(test_bad_url_fails_and_leaves_no_socket_behind),
    };

    /* Sockets are left to the exit, as programs leave theirs (nngclose.h). */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
