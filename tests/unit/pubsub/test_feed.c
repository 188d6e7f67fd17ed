/* Unit tests for the feed: real nng publishers on loopback ports picked at run time, the
 * feed dials them and receives within a bounded wait; other topics are filtered out; a
 * wait ends on its timeout or on a signal; errors come back as text; close works. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "admit/load.h"
#include "pubsub/feed.h"
#include "pubsub/nngclose.h"

/* Generous: only a broken feed misses it, even on two busy cores. */
#define DEADLINE_MS 10000

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A PUB listening on tcp://127.0.0.1 at a port the kernel picks; url gets its address. */
static nng_socket pub_on_loopback(char *url, size_t len)
{
    nng_socket pub;
    nng_listener l;
    nng_sockaddr sa;

    assert_int_equal(nng_pub0_open(&pub), 0);
    assert_int_equal(nng_listen(pub, "tcp://127.0.0.1:0", &l, 0), 0);
    assert_int_equal(nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa), 0);
    snprintf(url, len, "tcp://127.0.0.1:%u", ntohs(sa.s_in.sa_port));
    return pub;
}

static void pub_send(nng_socket pub, const char *text)
{
    /* PUB never blocks: with no subscriber connected yet the message is simply dropped. */
    assert_int_equal(nng_send(pub, (void *) text, strlen(text), 0), 0);
}

#define MSG_A ADMIT_LOAD_TOPIC " {\"from\":\"a\"}"
#define MSG_B ADMIT_LOAD_TOPIC " {\"from\":\"b\"}"

struct seen {
    int a, b, other;
};

static void record(void *arg, const void *msg, size_t len)
{
    struct seen *s = arg;

    if (len == strlen(MSG_A) && memcmp(msg, MSG_A, len) == 0)
        s->a++;
    else if (len == strlen(MSG_B) && memcmp(msg, MSG_B, len) == 0)
        s->b++;
    else
        s->other++;
}

static void test_receives_from_two_publishers(void **state)
{
    char url_a[64], url_b[64], err[256];
    nng_socket pub_a = pub_on_loopback(url_a, sizeof url_a);
    nng_socket pub_b = pub_on_loopback(url_b, sizeof url_b);
    struct feed *f = feed_open(err, sizeof err);
    struct seen seen = {0, 0, 0};
    int64_t deadline = mono_ms() + DEADLINE_MS;

    (void) state;
    assert_non_null(f);
    assert_true(feed_fd(f) >= 0);
    assert_int_equal(feed_dial(f, url_a, err, sizeof err), 0);
    assert_int_equal(feed_dial(f, url_b, err, sizeof err), 0);
    /* The dials connect in the background: publish until both have been heard. */
    while ((seen.a == 0 || seen.b == 0) && mono_ms() < deadline) {
        int rc;

        pub_send(pub_a, "elsewhere {\"from\":\"a\"}"); /* another topic: filtered out */
        pub_send(pub_a, MSG_A);
        pub_send(pub_b, MSG_B);
        assert_true(feed_wait(f, 20) >= 0);
        while ((rc = feed_recv(f, record, &seen, err, sizeof err)) == 1)
            ;
        assert_int_equal(rc, 0);
    }
    assert_true(seen.a > 0);
    assert_true(seen.b > 0);
    assert_int_equal(seen.other, 0);
    feed_free(f);
    assert_int_equal(nngc_close(pub_a, DEADLINE_MS), 0);
    assert_int_equal(nngc_close(pub_b, DEADLINE_MS), 0);
}

static void never_called(void *arg, const void *msg, size_t len)
{
    (void) arg;
    (void) msg;
    (void) len;
    fail_msg("a message arrived on a feed that dialed nothing");
}

static void test_wait_times_out_and_recv_does_not_block(void **state)
{
    char err[256];
    struct feed *f = feed_open(err, sizeof err);
    int64_t t0;

    (void) state;
    assert_non_null(f);
    t0 = mono_ms();
    assert_int_equal(feed_wait(f, 50), 0);
    assert_true(mono_ms() - t0 >= 40);
    t0 = mono_ms();
    assert_int_equal(feed_recv(f, never_called, NULL, err, sizeof err), 0);
    assert_true(mono_ms() - t0 < 1000);
    feed_free(f);
}

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
    (void) sig;
    alarms++;
}

/* Signals the waiting thread itself: a signal sent to the process could land on one of
 * nng's threads and leave the wait alone, which is not what is under test. */
static void *signal_later(void *arg)
{
    usleep(50000);
    pthread_kill(*(pthread_t *) arg, SIGALRM);
    return NULL;
}

static void test_a_signal_ends_the_wait(void **state)
{
    char err[256];
    struct feed *f = feed_open(err, sizeof err);
    struct sigaction sa, old;
    pthread_t self = pthread_self(), tid;
    int64_t t0;

    (void) state;
    assert_non_null(f);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGALRM, &sa, &old), 0);
    t0 = mono_ms();
    assert_int_equal(pthread_create(&tid, NULL, signal_later, &self), 0);
    /* Were it inside nng_recv, the wait would last its full timeout. */
    assert_int_equal(feed_wait(f, DEADLINE_MS), 0);
    assert_true(mono_ms() - t0 < DEADLINE_MS / 2);
    assert_int_equal(pthread_join(tid, NULL), 0);
    assert_int_equal(alarms, 1);
    assert_int_equal(sigaction(SIGALRM, &old, NULL), 0);
    feed_free(f);
}

static void test_dial_error_names_the_url(void **state)
{
    char err[256];
    struct feed *f = feed_open(err, sizeof err);

    (void) state;
    assert_non_null(f);
    err[0] = '\0';
    assert_int_equal(feed_dial(f, "nosuch://127.0.0.1:1", err, sizeof err), -1);
    assert_true(strncmp(err, "cannot dial nosuch://127.0.0.1:1: ", 34) == 0);
    assert_true(strlen(err) > 34); /* nng's reason follows */
    feed_free(f);
    feed_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_receives_from_two_publishers),
        cmocka_unit_test(test_wait_times_out_and_recv_does_not_block),
        cmocka_unit_test(test_a_signal_ends_the_wait),
        cmocka_unit_test(test_dial_error_names_the_url),
    };
    /* The feeds' sockets are left to the exit, as programs leave theirs (nngclose.h): the
     * leak check then sees every allocation of ours and none of nng's. */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
