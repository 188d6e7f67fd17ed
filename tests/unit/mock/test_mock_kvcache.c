/* Unit tests for the mock engine's prefix cache: hits, the chain, LRU eviction, pinning. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mock/mock_kvcache.h"

#include <string.h>

#define BS 4

/* A prompt of n ids: base, base+1, ... */
static void seq_ids(uint32_t *ids, size_t n, uint32_t base)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = base + (uint32_t) i;
}

/* Runs a prompt of n ids from base to completion (begin, release); returns its cached tokens. */
static size_t run(struct mock_kvc *c, uint32_t base, size_t n)
{
    uint32_t ids[64];
    struct mock_kvseq s;
    size_t cached;

    seq_ids(ids, n, base);
    cached = mock_kvc_begin(c, &s, 0, ids, n);
    mock_kvc_release(c, &s);
    return cached;
}

static void test_hash_chain(void **state)
{
    uint32_t a[BS] = {1, 2, 3, 4}, b[BS] = {1, 2, 3, 5};

    (void) state;
    assert_int_equal(mock_kvc_hash(0, a, BS), mock_kvc_hash(0, a, BS));
    assert_int_not_equal(mock_kvc_hash(0, a, BS), mock_kvc_hash(0, b, BS));
    /* The same block after another parent is another block. */
    assert_int_not_equal(mock_kvc_hash(mock_kvc_hash(0, a, BS), a, BS),
                         mock_kvc_hash(mock_kvc_hash(0, b, BS), a, BS));
    assert_int_not_equal(mock_kvc_hash(0, a, BS), mock_kvc_hash(mock_kvc_hash(0, a, BS), a, BS));
}

static void test_hits(void **state)
{
    struct mock_kvc *c = mock_kvc_new(100, BS);

    (void) state;
    assert_int_equal(run(c, 10, 10), 0); /* cold: 2 full blocks cached */
    assert_int_equal(mock_kvc_cached(c), 2);
    assert_int_equal(run(c, 10, 10), 8);  /* both blocks hit */
    assert_int_equal(run(c, 10, 20), 8);  /* a longer prompt: its first two */
    assert_int_equal(run(c, 10, 20), 16); /* now four of five; the 5th is the last */
    /* A prompt of exactly whole blocks never hits its last token's block. */
    assert_int_equal(run(c, 10, 8), 4);
    /* A different first block: nothing after it hits, whatever follows. */
    {
        uint32_t ids[12];
        struct mock_kvseq s;

        seq_ids(ids, 12, 10);
        ids[0] = 999;
        assert_int_equal(mock_kvc_begin(c, &s, 0, ids, 12), 0);
        mock_kvc_release(c, &s);
    }
    assert_int_equal(mock_kvc_in_use(c), 0);
    mock_kvc_free(c);
}

/* Held blocks are shared (one copy) and refcounted; released ones go LRU, tail first. */
static void test_refcount_and_lru(void **state)
{
    struct mock_kvc *c = mock_kvc_new(4, BS);
    uint32_t ids[12];
    struct mock_kvseq s1, s2, s3;

    (void) state;
    seq_ids(ids, 9, 100);
    mock_kvc_begin(c, &s1, 0, ids, 9);
    assert_int_equal(mock_kvc_begin(c, &s2, 0, ids, 9), 8);
    assert_int_equal(mock_kvc_in_use(c), 2);
    mock_kvc_release(c, &s1);
    assert_int_equal(mock_kvc_in_use(c), 2); /* s2 still holds both */
    mock_kvc_release(c, &s2);
    assert_int_equal(mock_kvc_in_use(c), 0);
    /* Conversation B, then C: C needs 2 blocks, the pool has 4, A's two go (LRU). */
    assert_int_equal(run(c, 200, 9), 0);
    assert_int_equal(mock_kvc_evictions(c), 0);
    assert_int_equal(run(c, 300, 9), 0);
    assert_int_equal(mock_kvc_evictions(c), 2);
    assert_int_equal(run(c, 200, 9), 8); /* B stayed */
    assert_int_equal(run(c, 300, 9), 8); /* C too */
    /* B was used after C: the next newcomer evicts C's tail first, then C's head. */
    assert_int_equal(run(c, 200, 9), 8);
    seq_ids(ids, 5, 400);
    mock_kvc_begin(c, &s3, 0, ids, 5); /* one block: C's second block goes */
    assert_int_equal(run(c, 300, 9), 4);
    mock_kvc_release(c, &s3);
    mock_kvc_free(c);
}

/* Blocks a running sequence holds are never evicted; with all held, new blocks go uncached
 * and the sequence still proceeds. */
static void test_pinned_and_full(void **state)
{
    struct mock_kvc *c = mock_kvc_new(2, BS);
    uint32_t ids[12];
    struct mock_kvseq s1, s2;

    (void) state;
    seq_ids(ids, 9, 500);
    mock_kvc_begin(c, &s1, 0, ids, 9); /* holds both blocks */
    seq_ids(ids, 12, 600);
    assert_int_equal(mock_kvc_begin(c, &s2, 0, ids, 12), 0);
    assert_int_equal(mock_kvc_evictions(c), 0);
    assert_int_equal(mock_kvc_cached(c), 2);
    /* A generated block pushed while all is held: not cached either. */
    assert_int_equal(mock_kvc_push(c, &s2, ids, 0), 0);
    mock_kvc_release(c, &s2);
    assert_int_equal(run(c, 500, 9), 8); /* s1's blocks survived */
    mock_kvc_release(c, &s1);
    assert_int_equal(run(c, 600, 9), 0); /* s2's were never cached */
    mock_kvc_free(c);
}

/* Generated blocks are pushed after the prompt's and found by the next turn. */
static void test_generated_blocks(void **state)
{
    struct mock_kvc *c = mock_kvc_new(100, BS);
    uint32_t ids[16];
    struct mock_kvseq s;

    (void) state;
    seq_ids(ids, 16, 700);
    mock_kvc_begin(c, &s, 0, ids, 6); /* one full prompt block */
    mock_kvc_push(c, &s, ids + 4, 0); /* ids 4..7: prompt tail + 2 generated */
    mock_kvc_push(c, &s, ids + 8, 0); /* 8..11, all generated */
    mock_kvc_release(c, &s);
    assert_int_equal(run(c, 700, 14), 12); /* the next turn hits all three */
    mock_kvc_free(c);
}

/* The pool grows past its first allocation and rehashes without losing a block. */
static void test_growth(void **state)
{
    struct mock_kvc *c = mock_kvc_new(1000, 1);
    uint32_t ids[600];
    struct mock_kvseq s;

    (void) state;
    seq_ids(ids, 600, 1);
    assert_int_equal(mock_kvc_begin(c, &s, 0, ids, 600), 0);
    mock_kvc_release(c, &s);
    assert_int_equal(mock_kvc_cached(c), 600);
    assert_int_equal(mock_kvc_begin(c, &s, 0, ids, 600), 599);
    mock_kvc_release(c, &s);
    mock_kvc_free(c);
    mock_kvc_free(NULL);
}

/* A cache_salt seeds the chain: the same prompt under another salt shares no block, under the
 * same salt shares as without one; and an unsalted prompt keeps its blocks. */
static void test_salt_isolates(void **state)
{
    struct mock_kvc *c = mock_kvc_new(100, BS);
    uint64_t a = mock_kvc_salt("tenant-a", 8), b = mock_kvc_salt("tenant-b", 8);
    uint32_t ids[9];
    struct mock_kvseq s1, s2;

    (void) state;
    assert_true(a != 0 && b != 0 && a != b);
    assert_true(a == mock_kvc_salt("tenant-a", 8));
    assert_true(mock_kvc_salt("", 0) != 0);
    seq_ids(ids, 9, 10);
    assert_int_equal(mock_kvc_begin(c, &s1, a, ids, 9), 0);
    mock_kvc_release(c, &s1);
    assert_int_equal(mock_kvc_begin(c, &s1, b, ids, 9), 0); /* the other tenant misses */
    assert_int_equal(mock_kvc_begin(c, &s2, 0, ids, 9), 0); /* so does no salt */
    mock_kvc_release(c, &s2);
    mock_kvc_release(c, &s1);
    assert_int_equal(mock_kvc_cached(c), 6); /* three chains of two blocks */
    assert_int_equal(mock_kvc_begin(c, &s1, a, ids, 9), 8);
    mock_kvc_release(c, &s1);
    assert_int_equal(run(c, 10, 9), 8);
    mock_kvc_free(c);
}

/* What a listener heard: stores (hash, parent or 0 for none, first id) and removals. */
struct heard {
    uint64_t stored[16], parent[16], seed[16], removed[16];
    uint32_t first_id[16];
    size_t nstored, nremoved;
};

static void heard_stored(void *arg, uint64_t hash, int has_parent, uint64_t parent,
                         const uint32_t *ids)
{
    struct heard *h = arg;

    h->parent[h->nstored] = has_parent ? parent : 0;
    h->seed[h->nstored] = has_parent ? 0 : parent;
    h->first_id[h->nstored] = ids[0];
    h->stored[h->nstored++] = hash;
}

static void heard_removed(void *arg, uint64_t hash)
{
    struct heard *h = arg;

    h->removed[h->nremoved++] = hash;
}

/* The listener hears each newly cached block once, chained to its parent (none for a
 * sequence's first, salted or not), and each evicted block's hash (mock_kvpub's input). */
static void test_listener(void **state)
{
    struct mock_kvc *c = mock_kvc_new(2, BS);
    struct heard h = {0};
    struct mock_kvc_listener l = {heard_stored, heard_removed, &h};
    uint32_t ids[9];
    struct mock_kvseq s;

    (void) state;
    mock_kvc_listen(c, &l);
    assert_int_equal(run(c, 100, 9), 0);
    assert_int_equal(h.nstored, 2);
    assert_int_equal(h.parent[0], 0);
    assert_int_equal(h.first_id[0], 100);
    assert_int_equal(h.parent[1], h.stored[0]);
    assert_int_equal(h.first_id[1], 104);
    assert_true(h.stored[1] == mock_kvc_hash(h.stored[0], (uint32_t[]){104, 105, 106, 107}, BS));
    assert_int_equal(run(c, 100, 9), 8); /* hits: nothing new */
    assert_int_equal(h.nstored, 2);
    assert_int_equal(h.nremoved, 0);
    /* A salted one-block prompt: no parent heard; it evicts the tail block first (LRU). */
    seq_ids(ids, 5, 100);
    mock_kvc_begin(c, &s, mock_kvc_salt("t", 1), ids, 5);
    mock_kvc_release(c, &s);
    assert_int_equal(h.nstored, 3);
    assert_int_equal(h.parent[2], 0);
    assert_true(h.seed[2] == mock_kvc_salt("t", 1) && h.seed[0] == 0);
    assert_int_equal(h.nremoved, 1);
    assert_true(h.removed[0] == h.stored[1]);
    mock_kvc_listen(c, NULL);
    assert_int_equal(run(c, 300, 9), 0);
    assert_int_equal(h.nstored, 3);
    mock_kvc_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_chain),       cmocka_unit_test(test_hits),
        cmocka_unit_test(test_refcount_and_lru), cmocka_unit_test(test_pinned_and_full),
        cmocka_unit_test(test_generated_blocks), cmocka_unit_test(test_growth),
        cmocka_unit_test(test_salt_isolates),    cmocka_unit_test(test_listener),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
