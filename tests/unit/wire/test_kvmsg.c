/* Unit tests for the kv_events message: the layout byte for byte, every field through a round
 * trip at its edges, the split bound, and each refusal of the decoder (with a message, never a
 * read outside the buffer: every prefix of a valid message is refused). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/kvmsg.h"

#include <string.h>

static void test_layout(void **state)
{
    static const unsigned char want[] = {
        'k',  'v',  '_',  'e',  'v',  'e',  'n',  't',  's',  ' ',  1, 1, 0x01, 0x02,
        0x00, 0x02, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0, 0, 0,    0,
        0,    0,    0,    9,    0,    0,    0,    16,   0,    0,    0, 0, 0x80, 0,
        0,    0,    0,    0,    0,    1,    0,    0,    0,    0,    0, 0, 0,    0xff};
    uint64_t keys[2] = {0x8000000000000001ull, 0xff};
    struct kvm_msg m = {.op = KVM_STORED,
                        .dp_rank = 0x102,
                        .block_size = 16,
                        .n = 2,
                        .epoch = 0x1122334455667788ull,
                        .seq = 9};
    unsigned char out[KVM_MSG_MAX];

    (void) state;
    assert_int_equal(KVM_KEYS_MAX, 251);
    assert_int_equal(kvm_encode(&m, keys, out, sizeof out), sizeof want);
    assert_memory_equal(out, want, sizeof want);
}

static void test_round_trip(void **state)
{
    static const enum kvm_op ops[] = {KVM_STORED, KVM_REMOVED, KVM_SNAPSHOT};
    uint64_t keys[KVM_KEYS_MAX];
    unsigned char out[KVM_MSG_MAX];
    char err[128];

    (void) state;
    for (size_t i = 0; i < KVM_KEYS_MAX; i++)
        keys[i] = i * 0x9e3779b97f4a7c15ull;
    for (size_t o = 0; o < 3; o++) {
        static const uint32_t ns[] = {0, 1, 2, 250, KVM_KEYS_MAX};

        for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
            struct kvm_msg m = {.op = ops[o],
                                .dp_rank = 65535,
                                .block_size = 0xffffffffu,
                                .n = ns[k],
                                .epoch = UINT64_MAX,
                                .seq = UINT64_MAX - 1};
            struct kvm_msg d;
            size_t len = kvm_encode(&m, keys, out, sizeof out);

            assert_int_equal(len, KVM_HEADER + 8 * ns[k]);
            assert_int_equal(kvm_decode(out, len, &d, err, sizeof err), 0);
            assert_int_equal(d.op, ops[o]);
            assert_int_equal(d.dp_rank, 65535);
            assert_int_equal(d.block_size, 0xffffffffu);
            assert_int_equal(d.n, ns[k]);
            assert_true(d.epoch == UINT64_MAX);
            assert_true(d.seq == UINT64_MAX - 1);
            assert_ptr_equal(d.keys, out + KVM_HEADER);
            for (size_t i = 0; i < d.n; i++)
                assert_true(kvm_key(&d, i) == keys[i]);
        }
    }
}

static void test_encode_bounds(void **state)
{
    uint64_t keys[KVM_KEYS_MAX + 1] = {0};
    unsigned char out[KVM_MSG_MAX + 8];
    struct kvm_msg m = {.op = KVM_STORED, .n = KVM_KEYS_MAX + 1, .block_size = 16};

    (void) state;
    assert_int_equal(kvm_encode(&m, keys, out, sizeof out), 0);
    m.n = KVM_KEYS_MAX;
    assert_int_equal(kvm_encode(&m, keys, out, sizeof out), KVM_MSG_MAX);
    assert_int_equal(kvm_encode(&m, keys, out, KVM_MSG_MAX), KVM_MSG_MAX);
    assert_int_equal(kvm_encode(&m, keys, out, KVM_MSG_MAX - 1), 0);
    m.n = 0;
    m.op = KVM_CLEARED;
    assert_int_equal(kvm_encode(&m, keys, out, KVM_HEADER), KVM_HEADER);
    assert_int_equal(kvm_encode(&m, keys, out, KVM_HEADER - 1), 0);
    m.dp_rank = 65536;
    assert_int_equal(kvm_encode(&m, keys, out, sizeof out), 0);
}

/* A valid message of two keys, then each field made wrong alone. */
static size_t good(unsigned char *out)
{
    uint64_t keys[2] = {1, 2};
    struct kvm_msg m = {
        .op = KVM_REMOVED, .dp_rank = 3, .block_size = 16, .n = 2, .epoch = 7, .seq = 1};

    return kvm_encode(&m, keys, out, KVM_MSG_MAX);
}

static void refused(const unsigned char *b, size_t len, const char *what)
{
    struct kvm_msg d;
    char err[128] = "";

    assert_int_equal(kvm_decode(b, len, &d, err, sizeof err), -1);
    assert_non_null(strstr(err, what));
}

static void test_refusals(void **state)
{
    unsigned char b[KVM_MSG_MAX + 8];
    size_t len = good(b);

    (void) state;
    for (size_t n = 0; n < KVM_HEADER; n++)
        refused(b, n, "shorter than its header");
    for (size_t n = KVM_HEADER; n < len; n++)
        refused(b, n, "not 56 for 2 keys");
    refused(b, len + 1, "not 56 for 2 keys");
    b[0] = 'K';
    refused(b, len, "not a kv_events");
    len = good(b);
    b[9] = '_';
    refused(b, len, "not a kv_events");
    len = good(b);
    memcpy(b, "kv_metrics {}", 13);
    refused(b, len, "not a kv_events");
    len = good(b);
    b[10] = 2;
    refused(b, len, "version 2");
    b[10] = 0;
    refused(b, len, "version 0");
    len = good(b);
    b[11] = 0;
    refused(b, len, "unknown kv_events op 0");
    b[11] = 5;
    refused(b, len, "unknown kv_events op 5");
    b[11] = 3;
    refused(b, len, "cleared with 2 keys");
    /* More keys than any message carries: refused even when the length agrees. */
    len = good(b);
    b[14] = 0;
    b[15] = KVM_KEYS_MAX + 1;
    refused(b, len, "more than 251");
}

static void test_cleared_and_reserved(void **state)
{
    struct kvm_msg m = {.op = KVM_CLEARED, .dp_rank = 1, .epoch = 5, .seq = 2};
    unsigned char b[KVM_MSG_MAX];
    struct kvm_msg d;
    char err[64];
    size_t len = kvm_encode(&m, NULL, b, sizeof b);

    (void) state;
    assert_int_equal(len, KVM_HEADER);
    /* Readers ignore the reserved bytes. */
    memset(b + 36, 0xff, 4);
    assert_int_equal(kvm_decode(b, len, &d, err, sizeof err), 0);
    assert_int_equal(d.op, KVM_CLEARED);
    assert_int_equal(d.n, 0);
    assert_int_equal(d.block_size, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_encode_bounds),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_cleared_and_reserved),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
