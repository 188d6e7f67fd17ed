/* Unit tests for the SP framing parser: the header judged whole, messages of both
 * transports in place, a length refused before its body, and every prefix of a stream
 * asking for more rather than guessing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/spframe.h"

#include <string.h>

static const unsigned char pub_hello[8] = {0, 'S', 'P', 0, 0, 0x20, 0, 0};

static void test_hello(void **state)
{
    unsigned char h[SPFRAME_HELLO_LEN];

    (void) state;
    spframe_hello(SPFRAME_PROTO_SUB0, h);
    assert_memory_equal(h, "\0SP\0\0\x21\0\0", 8);
    spframe_hello(0x1234, h);
    assert_memory_equal(h, "\0SP\0\x12\x34\0\0", 8);
}

/* Judges one header as the first thing on a connection. */
static enum spframe_result first(const void *hdr, struct spframe_unit *u)
{
    struct spframe f;

    spframe_init(&f, SPFRAME_TCP, SPFRAME_PROTO_PUB0, 100);
    return spframe_next(&f, hdr, 8, u);
}

static void test_header_judged(void **state)
{
    struct spframe f;
    struct spframe_unit u;

    (void) state;
    assert_int_equal(first(pub_hello, &u), SPFRAME_HELLO);
    assert_int_equal(u.used, 8);
    assert_int_equal(u.proto, SPFRAME_PROTO_PUB0);
    assert_int_equal(first("\0SP\0\0\x21\0\0", &u), SPFRAME_WRONG_PEER);
    assert_int_equal(u.proto, SPFRAME_PROTO_SUB0);
    assert_int_equal(u.used, 0);
    assert_int_equal(first("\x01SP\0\0\x20\0\0", &u), SPFRAME_NOT_SP);
    assert_int_equal(first("\0sP\0\0\x20\0\0", &u), SPFRAME_NOT_SP);
    assert_int_equal(first("\0SP\x01\0\x20\0\0", &u), SPFRAME_NOT_SP);
    assert_int_equal(first("\0SP\0\0\x20\x01\0", &u), SPFRAME_NOT_SP);
    assert_int_equal(first("\0SP\0\0\x20\0\x01", &u), SPFRAME_NOT_SP);
    /* Seven bytes of even a hopeless header are not judged yet: nng waits for all 8. */
    spframe_init(&f, SPFRAME_TCP, SPFRAME_PROTO_PUB0, 100);
    for (size_t n = 0; n < 8; n++)
        assert_int_equal(spframe_next(&f, "GET / HTTP/1.1", n, &u), SPFRAME_NEED);
    assert_int_equal(spframe_next(&f, "GET / HTTP/1.1", 8, &u), SPFRAME_NOT_SP);
    assert_string_equal(spframe_result_name(SPFRAME_TOO_LONG), "message too long");
}

/* header, "ab", "", "xyz" as each transport frames them */
static size_t stream(enum spframe_mode mode, unsigned char *b)
{
    static const char *bodies[] = {"ab", "", "xyz"};
    size_t n = 8;

    memcpy(b, pub_hello, 8);
    for (int i = 0; i < 3; i++) {
        size_t len = strlen(bodies[i]);

        if (mode == SPFRAME_IPC)
            b[n++] = 0x01;
        memset(b + n, 0, 7);
        b[n + 7] = (unsigned char) len;
        n += 8;
        memcpy(b + n, bodies[i], len);
        n += len;
    }
    return n;
}

static void walk(enum spframe_mode mode)
{
    unsigned char b[64];
    size_t len = stream(mode, b), off = 0;
    struct spframe f;
    struct spframe_unit u;
    const char *want[] = {"ab", "", "xyz"};

    spframe_init(&f, mode, SPFRAME_PROTO_PUB0, 3);
    /* Every cut short of a unit asks for more. */
    for (size_t cut = 0; cut < 8; cut++)
        assert_int_equal(spframe_next(&f, b, cut, &u), SPFRAME_NEED);
    assert_int_equal(spframe_next(&f, b, len, &u), SPFRAME_HELLO);
    off += u.used;
    for (int i = 0; i < 3; i++) {
        size_t whole = (mode == SPFRAME_IPC ? 9 : 8) + strlen(want[i]);

        for (size_t cut = 0; cut < whole; cut++)
            assert_int_equal(spframe_next(&f, b + off, cut, &u), SPFRAME_NEED);
        assert_int_equal(spframe_next(&f, b + off, len - off, &u), SPFRAME_MESSAGE);
        assert_int_equal(u.used, whole);
        assert_int_equal(u.len, strlen(want[i]));
        assert_ptr_equal(u.body, b + off + whole - u.len); /* in place, not copied */
        assert_memory_equal(u.body, want[i], u.len);
        off += u.used;
    }
    assert_int_equal(off, len);
    assert_int_equal(spframe_next(&f, b + off, 0, &u), SPFRAME_NEED);
}

static void test_messages_tcp(void **state)
{
    (void) state;
    walk(SPFRAME_TCP);
}

static void test_messages_ipc(void **state)
{
    (void) state;
    walk(SPFRAME_IPC);
}

/* A length over the maximum is refused from its 8 bytes alone, whatever it is. */
static void test_too_long(void **state)
{
    static const unsigned char max_plus_one[8] = {0, 0, 0, 0, 0, 0, 0, 101};
    static const unsigned char huge[9] = {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    static const unsigned char max[8] = {0, 0, 0, 0, 0, 0, 0, 100};
    struct spframe f;
    struct spframe_unit u;

    (void) state;
    spframe_init(&f, SPFRAME_TCP, SPFRAME_PROTO_PUB0, 100);
    assert_int_equal(spframe_next(&f, pub_hello, 8, &u), SPFRAME_HELLO);
    assert_int_equal(spframe_next(&f, max, 8, &u), SPFRAME_NEED); /* 100: wait for it */
    assert_int_equal(spframe_next(&f, max_plus_one, 8, &u), SPFRAME_TOO_LONG);
    assert_int_equal(u.announced, 101);
    spframe_init(&f, SPFRAME_IPC, SPFRAME_PROTO_PUB0, 100);
    assert_int_equal(spframe_next(&f, pub_hello, 8, &u), SPFRAME_HELLO);
    assert_int_equal(spframe_next(&f, huge, 9, &u), SPFRAME_TOO_LONG);
    assert_true(u.announced == UINT64_MAX);
}

/* ipc's message type is judged from its one byte. */
static void test_ipc_type(void **state)
{
    struct spframe f;
    struct spframe_unit u;

    (void) state;
    spframe_init(&f, SPFRAME_IPC, SPFRAME_PROTO_PUB0, 100);
    assert_int_equal(spframe_next(&f, pub_hello, 8, &u), SPFRAME_HELLO);
    assert_int_equal(spframe_next(&f, "\x01", 1, &u), SPFRAME_NEED);
    assert_int_equal(spframe_next(&f, "\x00", 1, &u), SPFRAME_BAD_TYPE);
    assert_int_equal(spframe_next(&f, "\x02\0\0\0\0\0\0\0\0", 9, &u), SPFRAME_BAD_TYPE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello),        cmocka_unit_test(test_header_judged),
        cmocka_unit_test(test_messages_tcp), cmocka_unit_test(test_messages_ipc),
        cmocka_unit_test(test_too_long),     cmocka_unit_test(test_ipc_type),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
