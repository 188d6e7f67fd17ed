/* Unit tests for ioconn's buffers: the input buffer grows with the bytes that arrive, by
 * doubling and never past what the caller's bound needs; a buffer that cannot grow is a
 * -1 with ENOMEM (and the buffer as it was), and so is a spill buffer that cannot take
 * what the socket did not: the owner ends that connection, the process goes on. Memory is
 * limited here (see testenv.h): allocations over 4 MiB fail under ASan, and without it
 * the address space may grow by 20 MiB in the tests that need it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "http/ioconn.h"
#include "../testenv.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TESTENV_ALLOCATION_LIMIT(4)

#define KIB 1024
#define MIB (1024 * 1024)

struct fixture {
    struct event_base *base;
    struct ioconn io;
    int peer; /* the other end of io's socket */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    int sv[2];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    f->base = event_base_new();
    ioc_init(&f->io, f->base, sv[0], NULL);
    f->peer = sv[1];
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    ioc_close(&f->io);
    ioc_release(&f->io);
    close(f->peer);
    event_base_free(f->base);
    free(f);
    return 0;
}

/* Byte i of the stream the peer sends: a pattern, so that kept bytes can be checked. */
static char byte_at(size_t i)
{
    return (char) ('a' + i % 23);
}

/* The peer sends n bytes of the stream from offset at. */
static void peer_send(struct fixture *f, size_t at, size_t n)
{
    char b[4096];

    while (n > 0) {
        size_t k = n < sizeof b ? n : sizeof b;

        for (size_t i = 0; i < k; i++)
            b[i] = byte_at(at + i);
        assert_int_equal(send(f->peer, b, k, 0), (ssize_t) k);
        at += k;
        n -= k;
    }
}

/* Reads until the socket is empty (or fill fails); the last result of ioc_fill. */
static ssize_t fill_all(struct fixture *f, size_t max)
{
    ssize_t n;

    while ((n = ioc_fill(&f->io, max, 1)) > 0)
        ;
    return n;
}

/* 100 KiB arrive, 4 KiB at a time, for a bound of 32 MiB (a body that announced 32 MiB):
 * the buffer holds them all and is at most twice their size, not the bound. */
static void test_growth_follows_the_bytes(void **state)
{
    struct fixture *f = *state;

    for (size_t at = 0; at < 100 * KIB; at += 4 * KIB) {
        peer_send(f, at, 4 * KIB);
        assert_int_equal(fill_all(f, 32 * MIB), -1);
        assert_int_equal(errno, EAGAIN);
    }
    assert_int_equal(f->io.in.len - f->io.in.off, 100 * KIB);
    assert_true(f->io.in.cap <= 256 * KIB);
    for (size_t i = 0; i < 100 * KIB; i++)
        if (f->io.in.p[f->io.in.off + i] != byte_at(i))
            fail_msg("byte %zu changed", i);
}

/* Growth by doubling stops at what the bound needs: 5000 bytes held take a 5000-byte
 * buffer (not 8 KiB), and a byte more is ENOBUFS. */
static void test_growth_stops_at_the_bound(void **state)
{
    struct fixture *f = *state;

    for (size_t at = 0; at < 5000; at += 1000) {
        peer_send(f, at, 1000);
        fill_all(f, 5000);
    }
    assert_int_equal(f->io.in.len - f->io.in.off, 5000);
    assert_int_equal(f->io.in.cap, 5000);
    peer_send(f, 5000, 1);
    assert_int_equal(ioc_fill(&f->io, 5000, 1), -1);
    assert_int_equal(errno, ENOBUFS);
}

/* The bytes keep coming and the buffer cannot double any more: ENOMEM, with the bytes held
 * and the buffer as they were; once they are consumed, reading goes on. */
static void test_growth_failure_keeps_the_buffer(void **state)
{
    struct fixture *f = *state;
    size_t at = 0, cap, held;
    ssize_t n = 0;

    testenv_memory_cap(20 * MIB);
    while (at < 64 * MIB) {
        peer_send(f, at, 64 * KIB);
        at += 64 * KIB;
        if ((n = fill_all(f, SIZE_MAX)) == -1 && errno == ENOMEM)
            break;
    }
    assert_int_equal(n, -1);
    assert_int_equal(errno, ENOMEM);
    held = f->io.in.len - f->io.in.off;
    cap = f->io.in.cap;
    assert_true(held > 0 && held <= at);
    for (size_t i = 0; i < held; i += 4093)
        assert_int_equal(f->io.in.p[f->io.in.off + i], byte_at(i));
    peer_send(f, at, 4 * KIB); /* more comes: still no room for it */
    assert_int_equal(ioc_fill(&f->io, SIZE_MAX, 1), -1);
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(f->io.in.cap, cap);
    assert_int_equal(f->io.in.len - f->io.in.off, held);
    f->io.in.off = f->io.in.len = 0; /* consumed: the rest fits */
    assert_true(ioc_fill(&f->io, SIZE_MAX, 1) > 0);
    assert_int_equal(f->io.in.p[0], byte_at(held));
    testenv_memory_uncap();
}

/* 48 MiB written to a peer that reads nothing: what the socket does not take cannot be
 * kept, so the write fails with ENOMEM, nothing is left pending, and the connection takes
 * no more writes (err), as when the peer is gone. */
static void test_spill_failure_ends_the_writes(void **state)
{
    static char mib[MIB]; /* 48 pieces of the same MiB: the test allocates nothing large */
    struct fixture *f = *state;
    struct iovec iov[48];

    memset(mib, 'y', sizeof mib);
    for (int i = 0; i < 48; i++) {
        iov[i].iov_base = mib;
        iov[i].iov_len = sizeof mib;
    }
    testenv_memory_cap(20 * MIB);
    errno = 0;
    assert_int_equal(ioc_writev(&f->io, iov, 48), -1);
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(f->io.err, ENOMEM);
    assert_int_equal(ioc_pending(&f->io), 0);
    assert_int_equal(ioc_writev(&f->io, iov, 1), -1);
    testenv_memory_uncap();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_growth_follows_the_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_growth_stops_at_the_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_growth_failure_keeps_the_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spill_failure_ends_the_writes, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
