/* kvmsg: the `kv_events` message admitd publishes beside `kv_metrics` (docs/load-message.md,
 * "The kv_events topic"): which block keys a data-parallel rank of an engine stored or
 * removed, that it holds nothing (cleared), or a part of its whole key set (a snapshot, in
 * the body of GET /admitd/kv_blocks).
 *
 * Layout, all integers big-endian:
 *
 *   0  10  "kv_events " (the topic and one space)
 *   10  1  version, 1
 *   11  1  op (enum kvm_op)
 *   12  2  dp_rank
 *   14  2  n, the number of keys
 *   16  8  epoch: names the publisher's stream for the rank (random, nonzero)
 *   24  8  seq: 1, 2, 3, ... per (epoch, rank)
 *   32  4  block_size: tokens per block the keys cover (0 for cleared)
 *   36  4  reserved, 0 (readers ignore it)
 *   40 8n  keys
 *
 * A message is at most KVM_MSG_MAX bytes (ADMIT_LOAD_MSG_MAX: what today's readers of the
 * publisher take), so it carries at most KVM_KEYS_MAX keys; longer batches are split by the
 * writer. Pure: no sockets. */
#ifndef ADMIT_KVMSG_H
#define ADMIT_KVMSG_H

#include <stddef.h>
#include <stdint.h>

/* The topic and its separating space, as the message starts. */
#define KVM_TOPIC "kv_events "
/* Its length. */
#define KVM_TOPIC_LEN 10
/* The fixed part before the keys. */
#define KVM_HEADER 40
/* The longest message. */
#define KVM_MSG_MAX 2048
/* The most keys one message carries. */
#define KVM_KEYS_MAX ((KVM_MSG_MAX - KVM_HEADER) / 8)
/* The version this codec writes and reads. */
#define KVM_VERSION 1

/* What a message says of its keys. */
enum kvm_op {
    KVM_STORED = 1,  /* the rank now holds these keys */
    KVM_REMOVED = 2, /* the rank no longer holds these keys */
    KVM_CLEARED = 3, /* the rank holds nothing (no keys) */
    KVM_SNAPSHOT = 4 /* a part of the rank's whole key set (only in a dump body) */
};

/* One message, decoded; keys point into the message (8 bytes each, big-endian). */
struct kvm_msg {
    enum kvm_op op;
    uint32_t dp_rank;
    uint32_t block_size;
    uint32_t n;
    uint64_t epoch, seq;
    const unsigned char *keys;
};

/** writes m with keys[0 .. m->n) to out (cap bytes, KVM_MSG_MAX suffices); its length, 0 when
    m->n > KVM_KEYS_MAX or cap is too small */
size_t kvm_encode(const struct kvm_msg *m, const uint64_t *keys, unsigned char *out, size_t cap);
/** decodes a message of len bytes; 0, or -1 with a message in err */
int kvm_decode(const void *buf, size_t len, struct kvm_msg *m, char *err, size_t errlen);
/** key i (< m->n) of a decoded message */
uint64_t kvm_key(const struct kvm_msg *m, size_t i);

#endif
