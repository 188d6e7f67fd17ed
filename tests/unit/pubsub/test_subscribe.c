/* Unit tests for the event-loop subscriber, each run twice: through nng (SUB_NNG: the
 * subscribers of one event base share one SUB socket, and each message reaches the
 * subscriber whose dialer received it) and through spsub (SUB_AUTO, every URL here numeric,
 * read in the passes of the base's poller). Either way each message reaches its subscriber
 * and no other; a freed subscriber hears nothing more while the others go on; a closed one
 * (sub_close) closes its own connection only, and what it had queued reaches nobody, not
 * even a subscriber made at once with the same callback argument; the demux table grows past
 * its first size; two event bases have sockets (pollers) of their own. Then SUB_AUTO itself:
 * a host name goes to nng, an address to spsub, both counted; and a callback that closes its
 * own subscriber and others of the same pass. Real publishers (publish.h) on loopback ports
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
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Generous: only a broken subscriber misses it, even on two busy cores. */
#define DEADLINE_MS 10000
#define MANY        40 /* more subscribers than the demux table's first size holds */

struct heard {
    char want[ADMIT_LOAD_WORKER_ID_MAX + 1]; /* the worker id this subscriber must hear */
    unsigned msgs, wrong;
};

/* How the tests subscribe: the nng runs, then the spsub runs (read every 10 ms: a pass
 * takes several sockets). */
static struct sub_opts via = {SUB_NNG, 0};
static const struct sub_opts via_nng = {SUB_NNG, 0}, via_sp = {SUB_AUTO, 10};

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
        pub_new(base, "tcp://127.0.0.1:0", PUB_AUTO, id, 20, fill, NULL, url, len, err, sizeof err);

    if (p == NULL)
        fail_msg("pub_new: %s", err);
    return p;
}

static struct subscriber *subscriber(struct event_base *base, const char *url, struct heard *h)
{
    char err[256];
    struct subscriber *s = sub_new(base, url, &via, on_msg, h, err, sizeof err);

    if (s == NULL)
        fail_msg("sub_new: %s", err);
    assert_int_equal(sub_is_sp(s), via.via == SUB_AUTO);
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

/* The events each of test_events_reach_who_asked's subscribers heard, by its heard struct. */
static struct heard events_h[2];
static unsigned events_heard[2];

static void on_events(void *arg, const void *msg, size_t len)
{
    struct heard *h = arg;

    if (len == 12 && memcmp(msg, "kv_events ", 10) == 0)
        events_heard[h == &events_h[1]]++;
    else
        h->wrong++;
}

/* nng's SUB takes the kv_events topic once a subscriber asks, and hands its messages to that
 * subscriber's events callback only: another of the same socket hears the load topic alone. */
static void test_events_reach_who_asked(void **state)
{
    struct event_base *base = event_base_new();
    struct heard *h = events_h;
    static struct raw_pub r; /* its pipe callbacks may run until the exit */
    struct subscriber *s[2];
    char err[256];
    int64_t end;

    (void) state;
    memset(events_h, 0, sizeof events_h);
    memset(events_heard, 0, sizeof events_heard);
    raw_open(&r);
    for (int i = 0; i < 2; i++) {
        snprintf(h[i].want, sizeof h[i].want, "w");
        s[i] = sub_new(base, r.url, &via_nng, on_msg, &h[i], err, sizeof err);
        assert_non_null(s[i]);
    }
    sub_set_events(s[1], on_events);
    loop_until_count(base, &r.added, 2);
    end = mono_ms() + DEADLINE_MS;
    while ((h[0].msgs < 3 || h[1].msgs < 3 || events_heard[1] < 3) && mono_ms() < end) {
        assert_int_equal(nng_send(r.sock, "kv_events \1\2", 12, 0), 0);
        raw_send(&r, "w", 1);
        loop_for(base, 20);
    }
    assert_true(h[0].msgs >= 3 && h[1].msgs >= 3);
    assert_true(events_heard[1] >= 3);
    assert_int_equal(events_heard[0], 0); /* the first asked for none */
    assert_int_equal(h[0].wrong + h[1].wrong, 0);
    sub_free(s[0]);
    sub_free(s[1]);
    event_base_free(base); /* the publisher's socket is left to the exit, as nng's are */
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

    /* Only the closed dialer's pipe goes; the socket's other dialers go on delivering. (An
     * spsub's connection goes with it: no pipe event is waited for then, since nng's PUB,
     * whose connection a reset has ended with messages still unread, does not always say
     * so, and spsub has nothing left to reconnect.) */
    if (via.via == SUB_NNG)
        loop_until_count(base, &raw.removed, 1);
    raw_send(&raw, "worker-1", 5); /* nobody listens to it now */
    loop_for(base, 300);           /* past nng's reconnect time: the dialer is gone for good */
    if (via.via == SUB_NNG)
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
    assert_null(sub_new(base, "bogus://nowhere", &via, on_msg, &h, err, sizeof err));
    assert_non_null(strstr(err, "bogus://nowhere"));
    event_base_free(base); /* nothing of the failed subscriber is left on it */
}

/* SUB_AUTO: an address is spsub's, a host name nng's (it resolves it); both hear their
 * publisher, and both count what they handed on. */
static void test_auto_takes_addresses_and_leaves_names_to_nng(void **state)
{
    struct event_base *base = event_base_new();
    struct publisher *p = NULL;
    struct subscriber *sp, *nn;
    struct heard h[2];
    struct spsub_stats st;
    char url[256], name_url[256], err[256];
    const char *port;

    (void) state;
    memset(h, 0, sizeof h);
    p = publisher(base, "both", url, sizeof url);
    port = strrchr(url, ':') + 1;
    snprintf(name_url, sizeof name_url, "tcp://localhost:%s", port);
    for (int i = 0; i < 2; i++)
        snprintf(h[i].want, sizeof h[i].want, "both");
    sp = sub_new(base, url, NULL, on_msg, &h[0], err, sizeof err);
    nn = sub_new(base, name_url, NULL, on_msg, &h[1], err, sizeof err);
    assert_non_null(sp);
    assert_non_null(nn);
    assert_int_equal(sub_is_sp(sp), 1);
    assert_int_equal(sub_is_sp(nn), 0);
    loop_until_heard(base, h, 2, 3);
    assert_int_equal(h[0].wrong + h[1].wrong, 0);
    sub_get_stats(sp, &st);
    assert_int_equal(st.messages, h[0].msgs);
    assert_true(st.bytes > 20 * st.messages);
    assert_int_equal(st.sessions, 1);
    assert_int_equal(st.connected, 1);
    sub_get_stats(nn, &st);
    assert_int_equal(st.messages, h[1].msgs);
    assert_true(st.bytes > 20 * st.messages);
    assert_int_equal(st.sessions, 0); /* nng keeps its connections to itself */
    sub_close(sp, DEADLINE_MS);
    sub_close(nn, DEADLINE_MS);
    pub_free(p);
    event_base_free(base);
}

/* A publisher of the test's own for spsub, without nng: a loopback listener whose accepted
 * connections get the SP header of PUB0 and then framed messages (8-byte big-endian length,
 * body) written from the test, so that they wait in the kernel before the loop runs. */
static int sp_listen(char *url, size_t len)
{
    struct sockaddr_in sa;
    socklen_t salen = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *) &sa, sizeof sa), 0);
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *) &sa, &salen), 0);
    snprintf(url, len, "tcp://127.0.0.1:%u", ntohs(sa.sin_port));
    return fd;
}

/* The next connection to lfd, accepted while base runs (spsub connects from the loop). */
static int sp_accept(struct event_base *base, int lfd)
{
    static const unsigned char hello[8] = {0, 'S', 'P', 0, 0, 0x20, 0, 0};
    int64_t end = mono_ms() + DEADLINE_MS;
    int fd;

    while ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0 && mono_ms() < end)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_true(fd >= 0);
    assert_int_equal(send(fd, hello, sizeof hello, MSG_NOSIGNAL), (ssize_t) sizeof hello);
    return fd;
}

/* count messages of worker_id on fd, in one write; a peer gone is no error. */
static void sp_send(int fd, const char *worker_id, unsigned count)
{
    struct admit_load m;
    unsigned char buf[8192];
    size_t at = 0;
    int len;

    admit_load_init(&m);
    snprintf(m.worker_id, sizeof m.worker_id, "%s", worker_id);
    for (unsigned i = 0; i < count; i++) {
        m.seq = i + 1;
        len = admit_load_encode(&m, (char *) buf + at + 8, sizeof buf - at - 8);
        assert_true(len > 0);
        for (int b = 0; b < 8; b++)
            buf[at + (size_t) b] = (unsigned char) ((uint64_t) len >> (56 - 8 * b));
        at += 8 + (size_t) len;
    }
    (void) send(fd, buf, at, MSG_NOSIGNAL);
}

/* A callback that closes its own subscriber and others whose messages wait in the same
 * pass: none of them is heard again, and the one that stays goes on. Every connection has
 * messages waiting when the loop runs, so one pass finds them all; the first subscriber
 * heard closes itself and every other but the next one, whose events are still to come in
 * that pass (the poller must forget them) or came before. */
#define CLOSING 4
static struct subscriber *closing[CLOSING];
static struct heard closed_h[CLOSING];
static int first_heard = -1;

static void on_msg_closing(void *arg, const void *msg, size_t len)
{
    struct heard *h = arg;
    int me = (int) (h - closed_h);

    on_msg(arg, msg, len);
    if (first_heard >= 0)
        return;
    first_heard = me;
    for (int k = 0; k < CLOSING; k++)
        if (k != (me + 1) % CLOSING) {
            sub_close(closing[k], DEADLINE_MS);
            closing[k] = NULL;
        }
}

static void test_sp_callback_closes_itself_and_others_in_its_pass(void **state)
{
    struct event_base *base = event_base_new();
    int lfd, fds[CLOSING], kept;
    int64_t end = mono_ms() + DEADLINE_MS;
    char url[64], err[256];

    (void) state;
    memset(closed_h, 0, sizeof closed_h);
    lfd = sp_listen(url, sizeof url);
    for (int i = 0; i < CLOSING; i++) {
        snprintf(closed_h[i].want, sizeof closed_h[i].want, "many");
        closing[i] = sub_new(base, url, &via_sp, on_msg_closing, &closed_h[i], err, sizeof err);
        assert_non_null(closing[i]);
        assert_int_equal(sub_is_sp(closing[i]), 1);
    }
    for (int i = 0; i < CLOSING; i++)
        fds[i] = sp_accept(base, lfd);
    /* Every session up (the header read) before any message is sent. */
    for (;;) {
        int up = 0;

        for (int i = 0; i < CLOSING; i++) {
            struct spsub_stats st;

            sub_get_stats(closing[i], &st);
            up += st.connected;
        }
        if (up == CLOSING || mono_ms() > end)
            break;
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    for (int i = 0; i < CLOSING; i++)
        sp_send(fds[i], "many", 10);
    usleep(50000);
    while (first_heard < 0 && mono_ms() < end)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_true(first_heard >= 0);
    kept = (first_heard + 1) % CLOSING;
    loop_until_heard(base, &closed_h[kept], 1, 10);
    /* More for everyone: only the one kept hears it. */
    for (int i = 0; i < CLOSING; i++)
        sp_send(fds[i], "many", 5);
    loop_until_heard(base, &closed_h[kept], 1, 15);
    loop_for(base, 100);
    for (int i = 0; i < CLOSING; i++) {
        assert_int_equal(closed_h[i].wrong, 0);
        if (i != kept)
            assert_int_equal(closed_h[i].msgs, i == first_heard ? 1 : 0);
    }
    assert_int_equal(closed_h[kept].msgs, 15);
    sub_close(closing[kept], DEADLINE_MS);
    for (int i = 0; i < CLOSING; i++)
        close(fds[i]);
    close(lfd);
    event_base_free(base);
}

/* The shared tests, each through nng and through spsub. */
#define BOTH(name)                                                                                 \
    static void name##_nng(void **state)                                                           \
    {                                                                                              \
        via = via_nng;                                                                             \
        name(state);                                                                               \
    }                                                                                              \
    static void name##_sp(void **state)                                                            \
    {                                                                                              \
        via = via_sp;                                                                              \
        name(state);                                                                               \
    }

BOTH(test_each_message_reaches_its_subscriber)
BOTH(test_closed_dialer_goes_alone_and_its_queue_reaches_nobody)
BOTH(test_many_subscribers_of_one_publisher)
BOTH(test_two_bases_have_their_own_sockets)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_message_reaches_its_subscriber_nng),
        cmocka_unit_test(test_closed_dialer_goes_alone_and_its_queue_reaches_nobody_nng),
        cmocka_unit_test(test_events_reach_who_asked),
        cmocka_unit_test(test_many_subscribers_of_one_publisher_nng),
        cmocka_unit_test(test_two_bases_have_their_own_sockets_nng),
        cmocka_unit_test(test_bad_url_fails_and_leaves_no_socket_behind),
        cmocka_unit_test(test_each_message_reaches_its_subscriber_sp),
        cmocka_unit_test(test_closed_dialer_goes_alone_and_its_queue_reaches_nobody_sp),
        cmocka_unit_test(test_many_subscribers_of_one_publisher_sp),
        cmocka_unit_test(test_two_bases_have_their_own_sockets_sp),
        cmocka_unit_test(test_auto_takes_addresses_and_leaves_names_to_nng),
        cmocka_unit_test(test_sp_callback_closes_itself_and_others_in_its_pass),
    };

    /* Sockets are left to the exit, as programs leave theirs (nngclose.h). */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
