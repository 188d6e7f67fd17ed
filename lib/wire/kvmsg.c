/* kvmsg: the kv_events message, written and read in place (see kvmsg.h). */
#include "wire/kvmsg.h"

#include <stdio.h>
#include <string.h>

static void put_be(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (unsigned char) (v & 0xff);
        v >>= 8;
    }
}

static uint64_t get_be(const unsigned char *p, int bytes)
{
    uint64_t v = 0;

    for (int i = 0; i < bytes; i++)
        v = v << 8 | p[i];
    return v;
}

size_t kvm_encode(const struct kvm_msg *m, const uint64_t *keys, unsigned char *out, size_t cap)
{
    size_t len;

    /* The rank travels as 16 bits: a wider one would name another rank. */
    if (m->n > KVM_KEYS_MAX || m->dp_rank > 0xffff)
        return 0;
    len = KVM_HEADER + (size_t) m->n * 8;
    if (cap < len)
        return 0;
    memcpy(out, KVM_TOPIC, KVM_TOPIC_LEN);
    out[10] = KVM_VERSION;
    out[11] = (unsigned char) m->op;
    put_be(out + 12, m->dp_rank, 2);
    put_be(out + 14, m->n, 2);
    put_be(out + 16, m->epoch, 8);
    put_be(out + 24, m->seq, 8);
    put_be(out + 32, m->block_size, 4);
    put_be(out + 36, 0, 4);
    for (uint32_t i = 0; i < m->n; i++)
        put_be(out + KVM_HEADER + (size_t) i * 8, keys[i], 8);
    return len;
}

int kvm_decode(const void *buf, size_t len, struct kvm_msg *m, char *err, size_t errlen)
{
    const unsigned char *b = buf;
    unsigned op;
    uint32_t n;

    memset(m, 0, sizeof *m);
    if (len < KVM_HEADER) {
        snprintf(err, errlen, "kv_events message of %zu bytes, shorter than its header", len);
        return -1;
    }
    if (memcmp(b, KVM_TOPIC, KVM_TOPIC_LEN) != 0) {
        snprintf(err, errlen, "not a kv_events message");
        return -1;
    }
    if (b[10] != KVM_VERSION) {
        snprintf(err, errlen, "kv_events version %u, not %u", b[10], KVM_VERSION);
        return -1;
    }
    op = b[11];
    if (op < KVM_STORED || op > KVM_SNAPSHOT) {
        snprintf(err, errlen, "unknown kv_events op %u", op);
        return -1;
    }
    n = (uint32_t) get_be(b + 14, 2);
    /* The bound every message keeps (KVM_MSG_MAX); the encoder never writes more. */
    if (n > KVM_KEYS_MAX) {
        snprintf(err, errlen, "kv_events message of %u keys, more than %u", (unsigned) n,
                 (unsigned) KVM_KEYS_MAX);
        return -1;
    }
    if (len != KVM_HEADER + (size_t) n * 8) {
        snprintf(err, errlen, "kv_events message of %zu bytes, not %zu for %u keys", len,
                 KVM_HEADER + (size_t) n * 8, (unsigned) n);
        return -1;
    }
    if (op == KVM_CLEARED && n != 0) {
        snprintf(err, errlen, "kv_events cleared with %u keys", (unsigned) n);
        return -1;
    }
    m->op = (enum kvm_op) op;
    m->dp_rank = (uint32_t) get_be(b + 12, 2);
    m->n = n;
    m->epoch = get_be(b + 16, 8);
    m->seq = get_be(b + 24, 8);
    m->block_size = (uint32_t) get_be(b + 32, 4);
    m->keys = b + KVM_HEADER;
    return 0;
}

uint64_t kvm_key(const struct kvm_msg *m, size_t i)
{
    return get_be(m->keys + i * 8, 8);
}
