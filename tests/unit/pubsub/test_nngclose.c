/* Unit tests for the bounded nng close: a healthy close reports 0; a close held up inside
 * nng is abandoned at the deadline and still finishes, and frees, once nng lets go. */
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
