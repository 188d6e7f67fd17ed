/* Unit tests for kvrelay: stored blocks keyed exactly as kvk_ids keys the same token ids (a
 * chain split over several events, a LoRA's name as the model); what cannot be keyed (no base
 * model yet, a LoRA by id alone, extra keys beyond the LoRA name, an unknown or unkeyable
 * parent) counted and not relayed, its children neither; removals by remembered keys; the
 * split at KVM_KEYS_MAX; cleared; evictions relayed as removals; per-rank sequence and epoch;
 * and the dump equal to the key set the messages imply. Every message goes through kvm_decode
 * into a reader's model of the rank (a set of keys), which checks seq and epoch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/kvkeys.h"
#include "admission/kvrelay.h"
#include "wire/kvmsg.h"

#include <stdlib.h>
#include <string.h>

#define EPOCH 0x1234567890abcdefull
#define MAXK  4096

/* What a reader of the messages holds, per rank, and every message seen. */
static struct reader {
    uint64_t keys[MAXK];
    size_t n;
    uint64_t seq;
} rd[4];
static struct kvm_msg last;
static uint64_t last_keys[KVM_KEYS_MAX];
static unsigned msgs;
static unsigned ops[64];
static uint32_t sizes[64];

static void apply(struct reader *r, const struct kvm_msg *m)
{
    if (m->op == KVM_CLEARED) {
        r->n = 0;
        return;
    }
    for (size_t i = 0; i < m->n; i++) {
        uint64_t k = kvm_key(m, i);
        size_t j;

        for (j = 0; j < r->n && r->keys[j] != k; j++)
            ;
        if (m->op == KVM_STORED && j == r->n) {
            assert_true(r->n < MAXK);
            r->keys[r->n++] = k;
        } else if (m->op == KVM_REMOVED && j < r->n) {
            r->keys[j] = r->keys[--r->n];
        }
    }
}

static void on_msg(void *arg, unsigned rank, const unsigned char *msg, size_t len)
{
    char err[128];

    (void) arg;
    assert_true(len <= KVM_MSG_MAX);
    assert_int_equal(kvm_decode(msg, len, &last, err, sizeof err), 0);
    assert_int_equal(last.dp_rank, rank);
    assert_true(last.epoch == EPOCH);
    assert_true(last.seq == rd[rank].seq + 1); /* +1 per message of the rank */
    rd[rank].seq = last.seq;
    for (size_t i = 0; i < last.n; i++)
        last_keys[i] = kvm_key(&last, i);
    if (msgs < 64) {
        ops[msgs] = last.op;
        sizes[msgs] = last.n;
    }
    msgs++;
    apply(&rd[rank], &last);
}

static struct kvrelay *fresh(void)
{
    memset(rd, 0, sizeof rd);
    msgs = 0;
    return kvrelay_new(EPOCH, on_msg, NULL);
}

/* A batch being built. */
static struct kve_event ev[16];
static uint64_t hs[1024];
static uint32_t ts[4096];
static struct kve_out out;

static void begin(void)
{
    memset(&out, 0, sizeof out);
    out.events = ev;
    out.hashes = hs;
    out.tokens = ts;
}

/* A store of n blocks of bs ids (ids[0 .. n*bs)), hashes h0, h0+1, ...; parent 0: the root. */
static struct kve_event *store(uint64_t parent, uint64_t h0, uint32_t n, uint32_t bs,
                               const uint32_t *ids)
{
    struct kve_event *e = &ev[out.n_events++];

    memset(e, 0, sizeof *e);
    e->kind = KVE_STORED;
    e->hash_first = (uint32_t) out.n_hashes;
    e->n_hashes = n;
    e->token_first = (uint32_t) out.n_tokens;
    e->n_tokens = n * bs;
    e->parent = parent;
    e->has_parent = parent != 0;
    e->block_size = bs;
    e->lora_id = -1;
    e->group_idx = -1;
    e->n_plain = n;
    for (uint32_t i = 0; i < n; i++)
        hs[out.n_hashes++] = h0 + i;
    memcpy(ts + out.n_tokens, ids, (size_t) n * bs * sizeof *ids);
    out.n_tokens += (size_t) n * bs;
    return e;
}

static struct kve_event *removal(uint64_t h0, uint32_t n)
{
    struct kve_event *e = &ev[out.n_events++];

    memset(e, 0, sizeof *e);
    e->kind = KVE_REMOVED;
    e->hash_first = (uint32_t) out.n_hashes;
    e->n_hashes = n;
    e->lora_id = -1;
    e->group_idx = -1;
    for (uint32_t i = 0; i < n; i++)
        hs[out.n_hashes++] = h0 + i;
    return e;
}

static void cleared(void)
{
    struct kve_event *e = &ev[out.n_events++];

    memset(e, 0, sizeof *e);
    e->kind = KVE_CLEARED;
    e->group_idx = -1;
}

static uint32_t prompt[4096];
static uint64_t want[1024];

/* The router's keys of prompt[0 .. n) for model, blocks of bs. */
static size_t router_keys(const char *model, size_t n, unsigned bs)
{
    struct kvk_params p = {.seed = kvk_seed(model, strlen(model), "", 0), .block_tokens = bs};
    static uint64_t ids[4096];

    for (size_t i = 0; i < n; i++)
        ids[i] = prompt[i];
    return kvk_ids(&p, ids, n, want, 1024);
}

static int holds(const struct reader *r, uint64_t k)
{
    for (size_t j = 0; j < r->n; j++)
        if (r->keys[j] == k)
            return 1;
    return 0;
}

static int setup(void **state)
{
    (void) state;
    for (size_t i = 0; i < 4096; i++)
        prompt[i] = (uint32_t) (1000 + i * 7);
    return 0;
}

/* A prompt of 5 blocks stored as 2 + 3 over two batches: the router's keys, in order. */
static void test_keys_like_router(void **state)
{
    struct kvrelay *r = fresh();

    (void) state;
    kvrelay_set_model(r, "base", 4);
    router_keys("base", 5 * 4, 4);
    begin();
    store(0, 100, 2, 4, prompt);
    kvrelay_batch(r, 1, &out);
    assert_int_equal(msgs, 1);
    assert_int_equal(last.op, KVM_STORED);
    assert_int_equal(last.dp_rank, 1);
    assert_int_equal(last.block_size, 4);
    assert_true(last.seq == 1);
    assert_int_equal(last.n, 2);
    assert_memory_equal(last_keys, want, 2 * 8);
    begin();
    store(101, 102, 3, 4, prompt + 8);
    kvrelay_batch(r, 1, &out);
    assert_int_equal(msgs, 2);
    assert_true(last.seq == 2);
    assert_int_equal(last.n, 3);
    assert_memory_equal(last_keys, want + 2, 3 * 8);
    assert_int_equal(kvrelay_seq(r, 1), 2);
    assert_int_equal(kvrelay_seq(r, 0), 0);
    /* a removal by the engine's hashes gives the keys back; an unknown hash is counted */
    begin();
    removal(103, 2);
    removal(999, 1);
    kvrelay_batch(r, 1, &out);
    assert_int_equal(last.op, KVM_REMOVED);
    assert_int_equal(last.n, 2);
    assert_int_equal(last.block_size, 4);
    assert_memory_equal(last_keys, want + 3, 2 * 8);
    assert_int_equal(kvrelay_stats(r, 1).unknown, 1);
    assert_int_equal(kvrelay_stats(r, 1).keys[0], 5);
    assert_int_equal(kvrelay_stats(r, 1).keys[1], 2);
    assert_int_equal(rd[1].n, 3);
    /* a LoRA by name: its name is the model */
    router_keys("my-lora", 8, 4);
    begin();
    store(0, 200, 2, 4, prompt)->lora_name = "my-lora";
    ev[0].lora_name_len = 7;
    kvrelay_batch(r, 1, &out);
    assert_memory_equal(last_keys, want, 2 * 8);
    assert_int_equal(kvrelay_epoch(r), EPOCH);
    kvrelay_free(r);
}

/* What cannot be keyed is counted, not relayed, and poisons its children. */
static void test_unkeyable(void **state)
{
    struct kvrelay *r = fresh();

    (void) state;
    begin(); /* no base model yet */
    store(0, 10, 2, 4, prompt);
    kvrelay_batch(r, 0, &out);
    assert_int_equal(msgs, 0);
    assert_int_equal(kvrelay_stats(r, 0).unkeyed, 2);
    kvrelay_set_model(r, "base", 4);
    begin(); /* a child of an unkeyable block, though the model is known now */
    store(11, 12, 1, 4, prompt + 8);
    kvrelay_batch(r, 0, &out);
    assert_int_equal(msgs, 0);
    assert_int_equal(kvrelay_stats(r, 0).unkeyed, 3);
    begin(); /* a child of a block never seen */
    store(77, 78, 1, 4, prompt);
    kvrelay_batch(r, 0, &out);
    assert_int_equal(msgs, 0);
    begin(); /* their removal: recognised, nothing relayed, not unknown */
    removal(10, 3);
    kvrelay_batch(r, 0, &out);
    assert_int_equal(msgs, 0);
    assert_int_equal(kvrelay_stats(r, 0).unknown, 0);
    /* extra keys beyond the LoRA name from block 1 on: block 0 relayed, 1 and 2 not */
    router_keys("base", 12, 4);
    begin();
    store(0, 20, 3, 4, prompt)->n_plain = 1;
    kvrelay_batch(r, 0, &out);
    assert_int_equal(msgs, 1);
    assert_int_equal(last.n, 1);
    assert_true(last_keys[0] == want[0]);
    begin(); /* ... and a child of block 2 neither */
    store(22, 23, 1, 4, prompt + 12);
    kvrelay_batch(r, 0, &out);
    assert_int_equal(msgs, 1);
    begin(); /* a LoRA by id alone, at the root and below a keyed parent */
    store(0, 30, 1, 4, prompt)->lora_id = 3;
    store(20, 31, 1, 4, prompt + 4)->lora_id = 3;
    kvrelay_batch(r, 0, &out);
    assert_int_equal(msgs, 1);
    /* a group other than the first: skipped, stores and removals */
    begin();
    store(0, 40, 1, 4, prompt)->group_idx = 1;
    removal(20, 1)->group_idx = 2;
    kvrelay_batch(r, 0, &out);
    assert_int_equal(msgs, 1);
    assert_int_equal(kvrelay_stats(r, 0).other_group, 2);
    assert_int_equal(kvrelay_stats(r, 0).unkeyed, 3 + 1 + 2 + 1 + 2);
    kvrelay_free(r);
}

/* 600 blocks of one id: 251 + 251 + 98 keys in three messages, seq 1, 2, 3. */
static void test_split(void **state)
{
    struct kvrelay *r = fresh();

    (void) state;
    kvrelay_set_model(r, "base", 4);
    router_keys("base", 600, 1);
    begin();
    store(0, 1000, 600, 1, prompt);
    kvrelay_batch(r, 2, &out);
    assert_int_equal(msgs, 3);
    assert_int_equal(sizes[0], KVM_KEYS_MAX);
    assert_int_equal(sizes[1], KVM_KEYS_MAX);
    assert_int_equal(sizes[2], 600 - 2 * KVM_KEYS_MAX);
    assert_true(rd[2].seq == 3);
    assert_int_equal(rd[2].n, 600);
    for (size_t i = 0; i < 600; i++)
        assert_true(holds(&rd[2], want[i]));
    /* exactly KVM_KEYS_MAX removals: one message */
    begin();
    removal(1000, KVM_KEYS_MAX);
    kvrelay_batch(r, 2, &out);
    assert_int_equal(msgs, 4);
    assert_int_equal(last.n, KVM_KEYS_MAX);
    kvrelay_free(r);
}

/* Stored, removed, stored again in one batch: messages in the events' order. */
static void test_order_and_clear(void **state)
{
    struct kvrelay *r = fresh();

    (void) state;
    kvrelay_set_model(r, "base", 4);
    router_keys("base", 4, 4);
    begin();
    store(0, 5, 1, 4, prompt);
    removal(5, 1);
    store(0, 5, 1, 4, prompt);
    kvrelay_batch(r, 0, &out);
    assert_int_equal(msgs, 3);
    assert_int_equal(ops[0], KVM_STORED);
    assert_int_equal(ops[1], KVM_REMOVED);
    assert_int_equal(ops[2], KVM_STORED);
    assert_int_equal(rd[0].n, 1);
    /* the engine's AllBlocksCleared, then a store: cleared (no keys), then the store */
    begin();
    cleared();
    store(0, 6, 1, 4, prompt);
    kvrelay_batch(r, 0, &out);
    assert_int_equal(msgs, 5);
    assert_int_equal(ops[3], KVM_CLEARED);
    assert_int_equal(sizes[3], 0);
    assert_int_equal(ops[4], KVM_STORED);
    assert_int_equal(kvrelay_stats(r, 0).cleared[KVRELAY_ENGINE], 1);
    begin(); /* block 5 was forgotten with the clear */
    removal(5, 1);
    kvrelay_batch(r, 0, &out);
    assert_int_equal(msgs, 5);
    assert_int_equal(kvrelay_stats(r, 0).unknown, 1);
    /* the caller's clears: counted by reason, table emptied */
    kvrelay_clear(r, 0, KVRELAY_RESTART);
    kvrelay_clear(r, 0, KVRELAY_GAP);
    assert_int_equal(last.op, KVM_CLEARED);
    assert_int_equal(last.block_size, 0);
    assert_true(last.seq == 7);
    assert_int_equal(rd[0].n, 0);
    assert_int_equal(kvrelay_stats(r, 0).cleared[KVRELAY_RESTART], 1);
    assert_int_equal(kvrelay_stats(r, 0).cleared[KVRELAY_GAP], 1);
    assert_int_equal(kvrelay_stats(r, 0).messages[KVM_CLEARED - 1], 3);
    kvrelay_free(r);
}

/* Reads a dump: every rank's records, their keys into a set; checks seq and epoch. */
static void read_dump(const struct buf *b, unsigned ranks, struct reader *got)
{
    size_t off = 0;
    unsigned seen = 0;

    memset(got, 0, sizeof *got * ranks);
    while (off < b->len) {
        struct kvm_msg m;
        char err[128];
        size_t len;

        assert_true(off + 4 <= b->len);
        len =
            (size_t) ((unsigned char) b->data[off] << 24 | (unsigned char) b->data[off + 1] << 16 |
                      (unsigned char) b->data[off + 2] << 8 | (unsigned char) b->data[off + 3]);
        assert_true(off + 4 + len <= b->len);
        assert_int_equal(kvm_decode(b->data + off + 4, len, &m, err, sizeof err), 0);
        assert_int_equal(m.op, KVM_SNAPSHOT);
        assert_true(m.dp_rank < ranks);
        assert_true(m.epoch == EPOCH);
        assert_true(m.seq == rd[m.dp_rank].seq);
        seen |= 1u << m.dp_rank;
        for (size_t i = 0; i < m.n; i++)
            got[m.dp_rank].keys[got[m.dp_rank].n++] = kvm_key(&m, i);
        off += 4 + len;
    }
    assert_int_equal(seen, (1u << ranks) - 1);
}

static void same_set(const struct reader *a, const struct reader *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++)
        assert_true(holds(b, a->keys[i]));
}

/* The table's bound (2 x the engine's blocks): the oldest stored go, relayed as removed; the
 * dump is what the messages imply, for each rank, a rank without events included. */
static void test_evictions_and_dump(void **state)
{
    struct kvrelay *r = fresh();
    static struct reader got[3];
    struct buf b;

    (void) state;
    kvrelay_set_model(r, "base", 4);
    kvrelay_set_blocks(r, 0, 3); /* a table of 6 */
    router_keys("base", 10 * 4, 4);
    begin();
    store(0, 1, 10, 4, prompt);
    kvrelay_batch(r, 0, &out);
    assert_int_equal(kvrelay_stats(r, 0).evicted, 4);
    assert_int_equal(rd[0].n, 6);
    for (size_t i = 4; i < 10; i++)
        assert_true(holds(&rd[0], want[i]));
    /* lowering the bound evicts at once */
    kvrelay_set_blocks(r, 0, 2);
    assert_int_equal(rd[0].n, 4);
    assert_int_equal(kvrelay_stats(r, 0).evicted, 6);
    /* 300 on rank 1: two records there */
    kvrelay_set_model(r, "base", 4);
    begin();
    store(0, 5000, 300, 1, prompt);
    kvrelay_batch(r, 1, &out);
    buf_init(&b);
    kvrelay_dump(r, 3, &b);
    read_dump(&b, 3, got);
    same_set(&rd[0], &got[0]);
    same_set(&rd[1], &got[1]);
    assert_int_equal(got[1].n, 300);
    assert_int_equal(got[2].n, 0);
    /* 4 + 251 + 49 keys and an empty rank: 4 records */
    assert_int_equal(b.len, 4 * (4 + KVM_HEADER) + 8 * (4 + 300));
    buf_free(&b);
    kvrelay_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_like_router),
        cmocka_unit_test(test_unkeyable),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_order_and_clear),
        cmocka_unit_test(test_evictions_and_dump),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
