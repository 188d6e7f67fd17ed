/* Unit tests for the acceptor: a real listening socket on loopback and clients in this
 * process, one event loop. Out of descriptors it pauses instead of spinning (it tries a
 * handful of times a second, not thousands) and takes the waiting connections once
 * descriptors are back; at its cap it stops watching until a connection closes; the
 * automatic cap follows the open-file limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "net/acceptor.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define CLIENTS 20

struct fixture {
    struct event_base *base;
    struct acceptor *a;
    struct sockaddr_in addr;
    int clients[CLIENTS];
    int accepted[CLIENTS]; /* descriptors fn was given, in order */
    int naccepted;
    struct rlimit nofile; /* as it was: restored by teardown */
};

static void on_conn(void *arg, int fd, const struct sockaddr *sa, socklen_t salen)
{
    struct fixture *f = arg;

    (void) sa;
    (void) salen;
    assert_true(f->naccepted < CLIENTS);
    f->accepted[f->naccepted++] = fd;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    socklen_t len = sizeof f->addr;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    f->addr.sin_family = AF_INET;
    f->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(lfd, (struct sockaddr *) &f->addr, sizeof f->addr), 0);
    assert_int_equal(listen(lfd, 128), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *) &f->addr, &len), 0);
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &f->nofile), 0);
    f->base = event_base_new();
    f->a = acc_new(f->base, lfd, "test listener", on_conn, f, NULL);
    for (int i = 0; i < CLIENTS; i++)
        f->clients[i] = -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    setrlimit(RLIMIT_NOFILE, &f->nofile);
    for (int i = 0; i < CLIENTS; i++)
        if (f->clients[i] >= 0)
            close(f->clients[i]);
    for (int i = 0; i < f->naccepted; i++)
        if (f->accepted[i] >= 0)
            close(f->accepted[i]);
    acc_free(f->a);
    event_base_free(f->base);
    free(f);
    return 0;
}

/* n clients connect (the kernel completes the handshakes: they wait in the backlog). */
static void connect_clients(struct fixture *f, int n)
{
    for (int i = 0; i < n; i++) {
        f->clients[i] = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(f->clients[i] >= 0);
        assert_int_equal(connect(f->clients[i], (struct sockaddr *) &f->addr, sizeof f->addr), 0);
    }
}

/* Runs the loop for ms. */
static void run_ms(struct fixture *f, long ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    event_base_loopexit(f->base, &tv);
    event_base_dispatch(f->base);
}

/* An open-file limit that leaves exactly room descriptors free: a new one takes the lowest
 * free number, which must be under the limit. */
static rlim_t limit_leaving(int room)
{
    char open_fd[4096] = {0};
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int dfd = dirfd(d), free_below = 0;

    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);

        if (e->d_name[0] != '.' && fd != dfd && fd < (int) sizeof open_fd)
            open_fd[fd] = 1;
    }
    closedir(d);
    for (int lim = 0; lim < (int) sizeof open_fd; lim++) {
        if (free_below == room)
            return (rlim_t) lim;
        free_below += !open_fd[lim];
    }
    fail_msg("no such limit");
    return 0;
}

/* Out of descriptors with connections waiting: the acceptor pauses, about one try per
 * ACC_PAUSE_MS (each failed try is a pause: a spin would count thousands), and takes them
 * all once descriptors are back. */
static void test_pauses_when_out_of_descriptors(void **state)
{
    struct fixture *f = *state;
    struct rlimit low = f->nofile;
    const struct listen_stats *st = acc_stats(f->a);

    connect_clients(f, CLIENTS);
    low.rlim_cur = limit_leaving(3);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    run_ms(f, 500);
    assert_int_equal(f->naccepted, 3);
    assert_true(st->accept_pauses >= 2 && st->accept_pauses <= 10);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &f->nofile), 0);
    run_ms(f, 300);
    assert_int_equal(f->naccepted, CLIENTS);
    assert_int_equal(st->conns, CLIENTS);
}

/* Recovery is seen even when the backlog empties on the last accept a wakeup takes: a
 * starved listener goes on to the empty backlog, so the next starvation is warned of again. */
static void test_recovery_at_a_full_wakeup(void **state)
{
    struct fixture *f = *state;
    struct rlimit low = f->nofile;

    connect_clients(f, ACC_PER_WAKEUP);
    low.rlim_cur = limit_leaving(0);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    run_ms(f, 50);
    assert_int_equal(f->naccepted, 0);
    assert_true(acc_starved(f->a));
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &f->nofile), 0);
    run_ms(f, 300);
    assert_int_equal(f->naccepted, ACC_PER_WAKEUP);
    assert_false(acc_starved(f->a));
}

/* A connection closing ends a pause at once: its descriptor goes to one that waits. */
static void test_a_close_ends_the_pause(void **state)
{
    struct fixture *f = *state;
    struct rlimit low = f->nofile;
    const struct listen_stats *st = acc_stats(f->a);
    int before;

    connect_clients(f, 4);
    low.rlim_cur = limit_leaving(1);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    run_ms(f, 50);
    assert_int_equal(f->naccepted, 1);
    assert_true(st->accept_pauses >= 1);
    before = f->naccepted;
    close(f->accepted[0]);
    f->accepted[0] = -1;
    acc_closed(f->a);
    event_base_loop(f->base, EVLOOP_NONBLOCK); /* no 100 ms wait */
    assert_int_equal(f->naccepted, before + 1);
}

/* Linux takes a descriptor before it looks at the backlog: out of descriptors, the accept
 * after the last waiting connection fails with EMFILE, not EAGAIN. Once a descriptor is
 * back (a close, or the pause running out) the listener tries once more, finds the backlog
 * empty and knows it has recovered, though the empty backlog never wakes its watch. */
static void test_recovery_with_the_backlog_already_empty(void **state)
{
    struct fixture *f = *state;
    struct rlimit low = f->nofile;

    connect_clients(f, 1);
    low.rlim_cur = limit_leaving(1);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    run_ms(f, 50);
    assert_int_equal(f->naccepted, 1);
    assert_true(acc_starved(f->a));
    close(f->accepted[0]);
    f->accepted[0] = -1;
    acc_closed(f->a);
    run_ms(f, 50);
    assert_false(acc_starved(f->a));
}

static void test_recovery_at_the_end_of_a_pause(void **state)
{
    struct fixture *f = *state;
    struct rlimit low = f->nofile;
    const struct listen_stats *st = acc_stats(f->a);

    connect_clients(f, 1);
    low.rlim_cur = limit_leaving(1);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    run_ms(f, 50);
    assert_int_equal(f->naccepted, 1);
    assert_true(acc_starved(f->a));
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &f->nofile), 0);
    run_ms(f, 3 * ACC_PAUSE_MS);
    assert_false(acc_starved(f->a));
    assert_int_equal(st->accept_pauses, 1);
}

/* At its cap the acceptor stops watching (no spin on the waiting connections) and takes
 * one more each time one closes. */
static void test_cap_leaves_the_rest_in_the_backlog(void **state)
{
    struct fixture *f = *state;
    const struct listen_stats *st = acc_stats(f->a);

    acc_set_cap(f->a, 3);
    assert_int_equal(acc_cap(f->a), 3);
    connect_clients(f, 5);
    run_ms(f, 300);
    assert_int_equal(f->naccepted, 3);
    assert_int_equal(st->conns, 3);
    assert_int_equal(st->cap_reached, 1);
    for (int k = 0; k < 2; k++) {
        close(f->accepted[k]);
        f->accepted[k] = -1;
        acc_closed(f->a);
        run_ms(f, 100);
        assert_int_equal(f->naccepted, 4 + k);
        assert_int_equal(st->conns, 3);
    }
    assert_int_equal(st->cap_reached, 3);
    assert_int_equal(st->accept_pauses, 0);
}

/* The automatic cap: half of what the open-file limit leaves past ACC_FD_RESERVE, and at
 * least ACC_CAP_MIN. */
static void test_auto_cap_follows_the_open_file_limit(void **state)
{
    struct fixture *f = *state;
    struct rlimit rl = f->nofile;

    rl.rlim_cur = 1024;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_int_equal(acc_auto_cap(), (1024 - ACC_FD_RESERVE) / 2);
    rl.rlim_cur = 100;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_int_equal(acc_auto_cap(), ACC_CAP_MIN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pauses_when_out_of_descriptors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recovery_at_a_full_wakeup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_close_ends_the_pause, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recovery_with_the_backlog_already_empty, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_recovery_at_the_end_of_a_pause, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cap_leaves_the_rest_in_the_backlog, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auto_cap_follows_the_open_file_limit, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
