/* Unit tests for the bounded nng close: a healthy close reports 0; a close held up inside
 * nng is abandoned at the deadline and still finishes, and frees, once nng lets go; a dialer
 * closed that way leaves its socket, and the socket's other dialers, working. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/pubsub0/sub.h>
#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pubsub/nngclose.h"

static void test_healthy_sockets_close(void **state)
{
    nng_socket pub, sub;
    nng_listener l;
    nng_sockaddr sa;
    char url[64];

    (void) state;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(nng_pub0_open(&pub), 0);
        assert_int_equal(nng_listen(pub, "tcp://127.0.0.1:0", &l, 0), 0);
        assert_int_equal(nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa), 0);
        snprintf(url, sizeof url, "tcp://127.0.0.1:%u", ntohs(sa.s_in.sa_port));
        assert_int_equal(nng_sub0_open(&sub), 0);
        assert_int_equal(nng_dial(sub, url, NULL, 0), 0);
        /* Generous deadlines: only a hung close can miss them. */
        assert_int_equal(nngc_close(sub, 10000), 0);
        assert_int_equal(nngc_close(pub, 10000), 0);
    }
}

static void listen_any(nng_socket pub, char *url, size_t len)
{
    nng_listener l;
    nng_sockaddr sa;

    assert_int_equal(nng_listen(pub, "tcp://127.0.0.1:0", &l, 0), 0);
    assert_int_equal(nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa), 0);
    snprintf(url, len, "tcp://127.0.0.1:%u", ntohs(sa.s_in.sa_port));
}

/* Sends on pub until sub receives it, within about 10 s; 0 when it did. */
static int heard(nng_socket pub, nng_socket sub, const char *text)
{
    char buf[64];

    for (int i = 0; i < 1000; i++) {
        size_t len = sizeof buf - 1;

        assert_int_equal(nng_send(pub, (void *) text, strlen(text), 0), 0);
        usleep(10000);
        while (nng_recv(sub, buf, &len, NNG_FLAG_NONBLOCK) == 0) {
            buf[len] = '\0';
            if (strcmp(buf, text) == 0)
                return 0;
            len = sizeof buf - 1;
        }
    }
    return -1;
}

static void test_dialer_close_leaves_the_socket(void **state)
{
    nng_socket pub[2], sub;
    nng_dialer d[2];
    char url[2][64], buf[64];
    size_t len = sizeof buf;

    (void) state;
    assert_int_equal(nng_sub0_open(&sub), 0);
    assert_int_equal(nng_socket_set(sub, NNG_OPT_SUB_SUBSCRIBE, "", 0), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(nng_pub0_open(&pub[i]), 0);
        listen_any(pub[i], url[i], sizeof url[i]);
        assert_int_equal(nng_dial(sub, url[i], &d[i], NNG_FLAG_NONBLOCK), 0);
    }
    assert_int_equal(heard(pub[0], sub, "zero"), 0);
    assert_int_equal(heard(pub[1], sub, "one"), 0);
    assert_int_equal(nngc_dialer_close(d[0], 10000), 0);
    assert_int_equal(nngc_dialer_close(d[0], 10000), 0); /* gone already: as good */
    assert_int_equal(heard(pub[1], sub, "one again"), 0);
    /* What the closed dialer's publisher sends reaches nobody. */
    usleep(100000);
    while (nng_recv(sub, buf, &len, NNG_FLAG_NONBLOCK) == 0)
        len = sizeof buf;
    assert_int_equal(nng_send(pub[0], "zero again", 10, 0), 0);
    usleep(100000);
    len = sizeof buf;
    assert_int_equal(nng_recv(sub, buf, &len, NNG_FLAG_NONBLOCK), NNG_EAGAIN);
    assert_int_equal(nngc_close(sub, 10000), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(nngc_close(pub[i], 10000), 0);
}

/* A pipe callback that does not return until released holds nng_close up: the close must
 * wait for the pipe, which is what a hung close looks like from the outside. */
static atomic_int entered, release_cb;

static void hold_pipe(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    (void) p;
    (void) ev;
    (void) arg;
    atomic_store(&entered, 1);
    while (!atomic_load(&release_cb))
        usleep(1000);
}

static void test_held_close_is_abandoned_then_finishes(void **state)
{
    nng_socket pub, sub;
    nng_listener l;
    nng_sockaddr sa;
    char url[64];

    (void) state;
    assert_int_equal(nng_pub0_open(&pub), 0);
    assert_int_equal(nng_listen(pub, "tcp://127.0.0.1:0", &l, 0), 0);
    assert_int_equal(nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa), 0);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%u", ntohs(sa.s_in.sa_port));
    assert_int_equal(nng_sub0_open(&sub), 0);
    assert_int_equal(nng_pipe_notify(sub, NNG_PIPE_EV_ADD_PRE, hold_pipe, NULL), 0);
    assert_int_equal(nng_dial(sub, url, NULL, NNG_FLAG_NONBLOCK), 0);
    for (int i = 0; i < 10000 && !atomic_load(&entered); i++)
        usleep(1000);
    assert_true(atomic_load(&entered));

    assert_int_equal(nngc_close(sub, 100), -1);
    /* Released, the abandoned close completes on its own thread and frees its state (the
     * leak checker at exit would report it otherwise). */
    atomic_store(&release_cb, 1);
    usleep(200000);
    assert_int_equal(nngc_close(pub, 10000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_healthy_sockets_close),
        cmocka_unit_test(test_held_close_is_abandoned_then_finishes),
        cmocka_unit_test(test_dialer_close_leaves_the_socket),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);

    /* nng reaps closed sockets' pipes on its own thread: let it finish before the exit's
     * leak check. */
    if (nngc_fini(10000) != 0) {
        fprintf(stderr, "nng_fini did not finish\n");
        return 1;
    }
    return failed;
}
