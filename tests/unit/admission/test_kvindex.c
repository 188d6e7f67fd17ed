/* Unit tests for the prefix index: depth, TTL, capacity, the global cap, correction, forget. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/kvindex.h"

#include <stdlib.h>
#include <string.h>

#define HITS 64

static struct kvindex *new_index(uint32_t workers, uint32_t ranks, uint32_t cap, uint32_t ttl)
{
    struct kvi_config c = {workers, ranks, cap, ttl, 16, 0};

    return kvi_new(&c);
}

/* The depth kvi_match reports for (worker, rank), 0 when it is not a holder. */
static uint32_t depth_of(struct kvindex *x, const uint64_t *keys, size_t n, uint64_t now,
                         uint32_t worker, uint32_t rank)
{
    struct kvi_hit hits[HITS];
    size_t i, m = kvi_match(x, keys, n, now, hits, HITS), found = 0;
    uint32_t d = 0;

    for (i = 0; i < m; i++) {
        assert_true(hits[i].depth >= 1 && hits[i].depth <= n);
        if (hits[i].worker == worker && hits[i].rank == rank)
            d = hits[i].depth, found++;
    }
    assert_true(found <= 1);
    return d;
}

/* A chain of n keys: prefix p (shared by chains with the same p) then the chain's own. */
static void chain(uint64_t *keys, size_t n, uint64_t p, size_t shared, uint64_t own)
{
    size_t i;

    for (i = 0; i < n; i++)
        keys[i] = i < shared ? p * 1000 + i : own * 100000 + i;
}

static void test_insert_match_depth(void **state)
{
    struct kvindex *x = new_index(8, 2, 1024, 0);
    uint64_t a[10], b[10], c[10];
    struct kvi_hit hits[HITS];
    struct kvi_stats s;

    (void) state;
    chain(a, 10, 1, 4, 1);
    chain(b, 10, 1, 4, 2); /* shares a's first 4 blocks */
    chain(c, 10, 3, 0, 3); /* shares nothing */
    kvi_insert(x, 1, 0, a, 10, 1000);
    kvi_insert(x, 2, 1, a, 6, 1000);
    kvi_insert(x, 3, 0, b, 10, 1000);
    assert_int_equal(depth_of(x, a, 10, 1001, 1, 0), 10);
    assert_int_equal(depth_of(x, a, 10, 1001, 2, 1), 6);
    assert_int_equal(depth_of(x, a, 10, 1001, 3, 0), 4);
    assert_int_equal(depth_of(x, a, 10, 1001, 2, 0), 0); /* another rank of worker 2 */
    assert_int_equal(depth_of(x, b, 10, 1001, 3, 0), 10);
    assert_int_equal(depth_of(x, b, 10, 1001, 1, 0), 4);
    assert_int_equal(depth_of(x, b, 3, 1001, 1, 0), 3); /* a shorter request */
    assert_int_equal(kvi_match(x, c, 10, 1001, hits, HITS), 0);
    /* a prompt whose first block nobody holds matches nothing, whatever follows */
    c[1] = a[1];
    assert_int_equal(kvi_match(x, c, 10, 1001, hits, HITS), 0);
    /* the cap on hits */
    assert_int_equal(kvi_match(x, a, 10, 1001, hits, 2), 2);
    assert_int_equal(kvi_held(x, 1, 0), 10);
    assert_int_equal(kvi_held(x, 3, 0), 10);
    /* inserting again refreshes, adds nothing */
    kvi_insert(x, 1, 0, a, 10, 1002);
    kvi_stats(x, &s);
    assert_int_equal(s.blocks, 26);
    assert_int_equal(kvi_blocks(x), s.blocks); /* the getter reads the same */
    assert_int_equal(s.inserted_blocks, 26);
    assert_true(s.lookups >= 9);
    assert_true(s.bytes_per_block <= 64);
    /* out of range holders are ignored */
    kvi_insert(x, 8, 0, a, 10, 1002);
    kvi_insert(x, 0, 2, a, 10, 1002);
    assert_int_equal(kvi_held(x, 8, 0), 0);
    kvi_stats(x, &s);
    assert_int_equal(s.blocks, 26);
    assert_int_equal(kvi_blocks(x), s.blocks); /* the getter reads the same */
    kvi_free(x);
}

static void test_depth_with_many_holders(void **state)
{
    /* holders drop out at every depth: the explicit looks and the equal-count skips agree */
    struct kvindex *x = new_index(40, 1, 4096, 0);
    uint64_t a[40];
    uint32_t w;

    (void) state;
    chain(a, 40, 7, 40, 0);
    for (w = 0; w < 40; w++)
        kvi_insert(x, w, 0, a, w + 1, 5);
    for (w = 0; w < 40; w++)
        assert_int_equal(depth_of(x, a, 40, 6, w, 0), w + 1);
    /* every other worker alone from depth 20: the skip must not carry the others along */
    for (w = 0; w < 40; w += 2)
        kvi_insert(x, w, 0, a, 40, 7);
    for (w = 0; w < 40; w++)
        assert_int_equal(depth_of(x, a, 40, 8, w, 0), w % 2 ? w + 1 : 40);
    /* a holder that lacks a middle block (a correction can leave that) is not carried past
     * it, though it holds a block further on that the others also hold */
    chain(a, 40, 9, 40, 0);
    kvi_insert(x, 1, 0, a, 3, 9);
    {
        uint64_t gap[2] = {a[0], a[2]};

        kvi_insert(x, 2, 0, gap, 2, 9);
    }
    assert_int_equal(depth_of(x, a, 3, 10, 1, 0), 3);
    assert_int_equal(depth_of(x, a, 3, 10, 2, 0), 1);
    kvi_free(x);
}

static int by_depth_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;

    return x < y ? 1 : x > y ? -1 : 0;
}

static void test_match_against_model(void **state)
{
    /* random prefixes of chains that share openings, for 32 holders, against a model of what
     * each holds; then with few hits, those reported are the deepest */
    enum { W = 16, R = 2, C = 4, N = 40 };
    struct kvindex *x = new_index(W, R, 1 << 16, 0);
    uint64_t keys[C][N];
    uint32_t held[W * R][C], want[W * R], got[HITS];
    struct kvi_hit hits[HITS];
    int i, c, o;

    (void) state;
    memset(held, 0, sizeof held);
    for (c = 0; c < C; c++)
        chain(keys[c], N, 1, (size_t) (8 * c), (uint64_t) c + 1);
    srand(7);
    for (i = 0; i < 400; i++) {
        uint32_t h = (uint32_t) rand() % (W * R), n = (uint32_t) rand() % (N + 1);

        c = rand() % C;
        kvi_insert(x, h / R, h % R, keys[c], n, 100);
        if (n > held[h][c])
            held[h][c] = n;
        if (i % 40 != 39)
            continue;
        for (c = 0; c < C; c++) {
            size_t m, j, nwant = 0;

            for (uint32_t k = 0; k < W * R; k++) {
                want[k] = 0;
                for (o = 0; o < C; o++) { /* chains c and o share min(8c, 8o) blocks */
                    uint32_t common = o == c ? N : (uint32_t) (8 * (c < o ? c : o));
                    uint32_t d = held[k][o] < common ? held[k][o] : common;

                    want[k] = d > want[k] ? d : want[k];
                }
                nwant += want[k] > 0;
            }
            m = kvi_match(x, keys[c], N, 101, hits, HITS);
            assert_int_equal(m, nwant);
            for (j = 0; j < m; j++)
                assert_int_equal(hits[j].depth, want[hits[j].worker * R + hits[j].rank]);
            /* room for 3: the 3 deepest depths, each the holder's own */
            m = kvi_match(x, keys[c], N, 101, hits, 3);
            assert_int_equal(m, nwant < 3 ? nwant : 3);
            for (j = 0; j < m; j++) {
                got[j] = hits[j].depth;
                assert_int_equal(got[j], want[hits[j].worker * R + hits[j].rank]);
            }
            qsort(got, m, sizeof *got, by_depth_desc);
            qsort(want, W * R, sizeof *want, by_depth_desc);
            for (j = 0; j < m; j++)
                assert_int_equal(got[j], want[j]);
        }
    }
    kvi_free(x);
}

static void test_cap_keeps_deepest(void **state)
{
    /* a whole fleet holds a system prompt, one worker the rest of the prompt too: with room
     * for fewer hits than holders, that one is among them, and at its full depth */
    struct kvindex *x = new_index(64, 1, 8192, 0);
    uint64_t a[30];
    struct kvi_hit hits[4];
    uint32_t w;
    size_t m, j, deep = 0;

    (void) state;
    chain(a, 30, 5, 30, 0);
    kvi_insert(x, 17, 0, a, 30, 10);
    for (w = 0; w < 64; w++) /* the others after it: first on the block's list */
        if (w != 17)
            kvi_insert(x, w, 0, a, 8, 10);
    m = kvi_match(x, a, 30, 11, hits, 4);
    assert_int_equal(m, 4);
    for (j = 0; j < m; j++) {
        assert_int_equal(hits[j].depth, hits[j].worker == 17 ? 30 : 8);
        deep += hits[j].worker == 17;
    }
    assert_int_equal(deep, 1);
    kvi_free(x);
}

static void test_no_first_block_no_hit(void **state)
{
    /* a holder met deep in the chain that lacks its first block (a correction dropped it) is
     * no holder of the prompt's prefix: not reported, and the others' depths stay right */
    struct kvindex *x = new_index(8, 1, 1024, 0);
    uint64_t a[3];
    struct kvi_hit hits[HITS];

    (void) state;
    chain(a, 3, 4, 3, 0);
    kvi_insert(x, 1, 0, a, 3, 10);
    kvi_insert(x, 2, 0, a, 1, 10);
    kvi_insert(x, 4, 0, a, 1, 10);
    kvi_insert(x, 3, 0, a + 1, 2, 10);
    assert_int_equal(kvi_match(x, a, 3, 11, hits, HITS), 3);
    assert_int_equal(depth_of(x, a, 3, 11, 1, 0), 3);
    assert_int_equal(depth_of(x, a, 3, 11, 2, 0), 1);
    assert_int_equal(depth_of(x, a, 3, 11, 4, 0), 1);
    assert_int_equal(depth_of(x, a, 3, 11, 3, 0), 0);
    kvi_free(x);
}

static void test_ttl(void **state)
{
    struct kvindex *x = new_index(4, 1, 64, 1000);
    uint64_t a[3] = {1, 2, 3}, b[3] = {4, 5, 6};
    struct kvi_stats s;

    (void) state;
    kvi_insert(x, 0, 0, a, 3, 10000);
    kvi_insert(x, 1, 0, b, 3, 10500);
    assert_int_equal(depth_of(x, a, 3, 11000, 0, 0), 3); /* exactly the TTL: alive */
    assert_int_equal(depth_of(x, a, 3, 11001, 0, 0), 0);
    assert_int_equal(depth_of(x, b, 3, 11001, 1, 0), 3);
    kvi_stats(x, &s);
    assert_int_equal(s.evicted_ttl, 3);
    assert_int_equal(s.blocks, 3);
    assert_int_equal(kvi_blocks(x), s.blocks); /* the getter reads the same */
    /* a new insert pushes the expiry forward */
    kvi_insert(x, 1, 0, b, 2, 11400);
    kvi_expire(x, 12000);
    assert_int_equal(kvi_held(x, 1, 0), 2);
    assert_int_equal(depth_of(x, b, 3, 12000, 1, 0), 2);
    /* time that goes back is the last time seen */
    assert_int_equal(depth_of(x, b, 3, 100, 1, 0), 2);
    kvi_expire(x, 12401);
    assert_int_equal(kvi_held(x, 1, 0), 0);
    kvi_stats(x, &s);
    assert_int_equal(s.evicted_ttl, 6);
    /* the default TTL is Dynamo's 120 s */
    kvi_free(x);
    x = new_index(1, 1, 8, 0);
    kvi_insert(x, 0, 0, a, 3, 1);
    assert_int_equal(depth_of(x, a, 3, 1 + KVI_TTL_MS_DEFAULT, 0, 0), 3);
    assert_int_equal(depth_of(x, a, 3, 2 + KVI_TTL_MS_DEFAULT, 0, 0), 0);
    kvi_free(x);
}

static void test_capacity_lru(void **state)
{
    struct kvindex *x = new_index(2, 1, 64, 0);
    uint64_t a[4] = {10, 11, 12, 13}, b[4] = {20, 21, 22, 23}, c[2] = {30, 31};
    struct kvi_stats s;

    (void) state;
    assert_int_equal(kvi_capacity_blocks(1000, 16, 16), 1000);
    assert_int_equal(kvi_capacity_blocks(1000, 16, 64), 250);
    assert_int_equal(kvi_capacity_blocks(1, 16, 64), 1);
    assert_int_equal(kvi_capacity_blocks(0, 16, 64), 0);
    assert_int_equal(kvi_capacity_blocks(UINT64_MAX, 16, 1), UINT32_MAX);
    kvi_set_capacity(x, 0, 0, 6);
    kvi_insert(x, 0, 0, a, 4, 1);
    kvi_insert(x, 0, 0, b, 4, 2);
    /* 8 blocks into 6: a's last two went, its first two stay (a chain ages from its end) */
    assert_int_equal(kvi_held(x, 0, 0), 6);
    assert_int_equal(depth_of(x, a, 4, 3, 0, 0), 2);
    assert_int_equal(depth_of(x, b, 4, 3, 0, 0), 4);
    /* the other worker is not bounded by worker 0's capacity */
    kvi_insert(x, 1, 0, a, 4, 3);
    kvi_insert(x, 1, 0, b, 4, 3);
    assert_int_equal(kvi_held(x, 1, 0), 8);
    /* touching a again (past the freshness window, 1 s at the default TTL) makes b the least
     * recently used */
    kvi_insert(x, 0, 0, a, 2, 1004);
    kvi_insert(x, 0, 0, c, 2, 1005);
    assert_int_equal(depth_of(x, a, 4, 1006, 0, 0), 2);
    assert_int_equal(depth_of(x, b, 4, 1006, 0, 0), 2);
    assert_int_equal(depth_of(x, c, 2, 1006, 0, 0), 2);
    /* a smaller capacity evicts at once */
    kvi_set_capacity(x, 0, 0, 2);
    assert_int_equal(kvi_held(x, 0, 0), 2);
    assert_int_equal(depth_of(x, c, 2, 1007, 0, 0), 2);
    kvi_stats(x, &s);
    assert_int_equal(s.evicted_capacity, 8);
    assert_int_equal(s.evicted_global, 0);
    kvi_free(x);
}

/* A chain whose last block its holder refreshed less than a window ago (TTL / 32, at most 1 s)
 * is left alone by an insert: order and ages are coarse by that much, never what is held. */
static void test_fresh_chain(void **state)
{
    struct kvindex *x = new_index(1, 1, 64, 0);
    uint64_t a[6] = {10, 11, 12, 13, 14, 15}, b[4] = {20, 21, 22, 23}, c[1] = {99};
    struct kvi_stats s;

    (void) state;
    kvi_set_capacity(x, 0, 0, 8);
    kvi_insert(x, 0, 0, a, 4, 0);
    kvi_insert(x, 0, 0, b, 4, 10);
    /* within the window: a is not moved, so it is still the least recently used */
    kvi_insert(x, 0, 0, a, 4, 500);
    kvi_insert(x, 0, 0, c, 1, 510); /* a ninth block evicts the least recently used */
    assert_int_equal(depth_of(x, a, 4, 520, 0, 0), 3);
    /* a fresher first block says nothing of the rest: a chain that goes further is inserted,
     * its blocks held before refreshed, its new ones added */
    kvi_insert(x, 0, 0, a, 2, 1200);
    kvi_insert(x, 0, 0, a, 6, 1300);
    assert_int_equal(depth_of(x, a, 6, 1310, 0, 0), 6);
    /* past the window an insert refreshes: the TTL counts from it */
    kvi_free(x);
    x = new_index(1, 1, 64, 0);
    kvi_insert(x, 0, 0, a, 3, 0);
    kvi_insert(x, 0, 0, a, 3, 999);
    kvi_insert(x, 0, 0, a, 3, 2000);
    assert_int_equal(depth_of(x, a, 3, KVI_TTL_MS_DEFAULT + 1000, 0, 0), 3);
    assert_int_equal(depth_of(x, a, 3, KVI_TTL_MS_DEFAULT + 2001, 0, 0), 0);
    kvi_stats(x, &s);
    assert_int_equal(s.inserted_blocks, 3);
    assert_int_equal(s.evicted_ttl, 3);
    /* a short TTL has a short window: 3 ms at 100 ms */
    kvi_free(x);
    x = new_index(1, 1, 64, 100);
    kvi_insert(x, 0, 0, a, 3, 0);
    kvi_insert(x, 0, 0, a, 3, 3);
    assert_int_equal(depth_of(x, a, 3, 102, 0, 0), 3);
    assert_int_equal(depth_of(x, a, 3, 104, 0, 0), 0);
    kvi_free(x);
}

static void test_global_cap(void **state)
{
    struct kvindex *x = new_index(3, 1, 5, 0);
    uint64_t a[3] = {1, 2, 3}, b[3] = {4, 5, 6};
    struct kvi_stats s;

    (void) state;
    kvi_insert(x, 0, 0, a, 3, 1);
    kvi_insert(x, 1, 0, b, 3, 2);
    kvi_stats(x, &s);
    assert_int_equal(s.blocks, 5);
    assert_int_equal(s.evicted_global, 1);
    /* the least recently used went: a's last block */
    assert_int_equal(depth_of(x, a, 3, 3, 0, 0), 2);
    assert_int_equal(depth_of(x, b, 3, 3, 1, 0), 3);
    /* a key held by two holders is two blocks, and the cap still holds */
    kvi_insert(x, 2, 0, b, 3, 4);
    kvi_stats(x, &s);
    assert_int_equal(s.blocks, 5);
    assert_int_equal(depth_of(x, b, 3, 5, 2, 0), 3);
    assert_int_equal(depth_of(x, a, 3, 5, 0, 0), 0);
    kvi_free(x);
}

static void test_correct(void **state)
{
    struct kvindex *x = new_index(2, 2, 64, 0);
    uint64_t a[6] = {1, 2, 3, 4, 5, 6};
    struct kvi_stats s;

    (void) state;
    kvi_insert(x, 0, 1, a, 6, 1);
    kvi_insert(x, 1, 0, a, 6, 1);
    /* the engine had 2 blocks and a bit (40 tokens of 16-token blocks): 2 stay */
    assert_int_equal(kvi_correct(x, 0, 1, a, 6, 6, 40), 4);
    assert_int_equal(depth_of(x, a, 6, 2, 0, 1), 2);
    assert_int_equal(depth_of(x, a, 6, 2, 1, 0), 6); /* the other holder is untouched */
    kvi_stats(x, &s);
    assert_int_equal(s.predicted_tokens, 96);
    assert_int_equal(s.confirmed_tokens, 40);
    assert_int_equal(s.dropped_correct, 4);
    /* all cached: nothing dropped; more than predicted confirms what was predicted */
    assert_int_equal(kvi_correct(x, 1, 0, a, 6, 6, 200), 0);
    kvi_stats(x, &s);
    assert_int_equal(s.predicted_tokens, 192);
    assert_int_equal(s.confirmed_tokens, 136);
    /* an engine that restarted empty: none cached, every predicted block goes */
    assert_int_equal(kvi_correct(x, 1, 0, a, 6, 6, 0), 6);
    assert_int_equal(kvi_held(x, 1, 0), 0);
    kvi_free(x);
}

static void test_correct_drops_tail(void **state)
{
    /* a request of 6 blocks predicted to find 4 on (0, 0), which had 1: its blocks past the
     * first go, the 2 this request added too, so that (0, 0) keeps a prefix of the chain and
     * (1, 0), which holds the 4, is not credited with the 2 (the walk takes a block held by as
     * many as are still in it to be held by them all) */
    struct kvindex *x = new_index(2, 1, 64, 0);
    uint64_t a[6] = {1, 2, 3, 4, 5, 6};
    struct kvi_stats s;

    (void) state;
    kvi_insert(x, 0, 0, a, 6, 1);
    kvi_insert(x, 1, 0, a, 4, 1);
    assert_int_equal(kvi_correct(x, 0, 0, a, 6, 4, 16), 5);
    assert_int_equal(kvi_held(x, 0, 0), 1);
    assert_int_equal(depth_of(x, a, 6, 2, 0, 0), 1);
    assert_int_equal(depth_of(x, a, 6, 2, 1, 0), 4);
    kvi_stats(x, &s);
    assert_int_equal(s.predicted_tokens, 64);
    assert_int_equal(s.confirmed_tokens, 16);
    /* all it was predicted confirmed: the blocks past them, computed now, stay */
    kvi_insert(x, 0, 0, a, 6, 2);
    assert_int_equal(kvi_correct(x, 0, 0, a, 6, 4, 64), 0);
    assert_int_equal(kvi_held(x, 0, 0), 6);
    kvi_free(x);
}

/* An index of 3 workers of 2 ranks where worker 1's ranks hold a[0 .. 4) and a[0 .. 3), and
 * worker 2's rank 0 a[0 .. 4). */
static struct kvindex *three_holders(const uint64_t *a)
{
    struct kvindex *x = new_index(3, 2, 64, 0);

    kvi_insert(x, 1, 0, a, 4, 1);
    kvi_insert(x, 1, 1, a, 3, 1);
    kvi_insert(x, 2, 0, a, 4, 1);
    return x;
}

static void test_forget_worker(void **state)
{
    uint64_t a[4] = {1, 2, 3, 4};
    struct kvindex *x = three_holders(a);
    struct kvi_stats s;

    (void) state;
    kvi_forget_worker(x, 1);
    assert_int_equal(kvi_held(x, 1, 0), 0);
    assert_int_equal(kvi_held(x, 1, 1), 0);
    assert_int_equal(depth_of(x, a, 4, 2, 1, 0), 0);
    assert_int_equal(depth_of(x, a, 4, 2, 2, 0), 4);
    kvi_stats(x, &s);
    assert_int_equal(s.dropped_forget, 7);
    assert_int_equal(s.blocks, 4);
    kvi_forget_worker(x, 99); /* out of range: nothing */
    kvi_free(x);
}

static void test_remove_keys(void **state)
{
    struct kvindex *x = new_index(3, 2, 64, 0);
    uint64_t a[6] = {1, 2, 3, 4, 5, 6}, tail[2] = {5, 6}, mid[1] = {3}, none[2] = {77, 78};
    struct kvi_stats s;

    (void) state;
    kvi_insert(x, 1, 0, a, 6, 1);
    kvi_insert(x, 1, 1, a, 6, 1);
    kvi_insert(x, 2, 0, a, 6, 1);
    /* the engine evicted the chain's last two blocks: that rank alone loses them */
    assert_int_equal(kvi_remove(x, 1, 0, tail, 2), 2);
    assert_int_equal(kvi_held(x, 1, 0), 4);
    assert_int_equal(depth_of(x, a, 6, 2, 1, 0), 4);
    assert_int_equal(depth_of(x, a, 6, 2, 1, 1), 6);
    assert_int_equal(depth_of(x, a, 6, 2, 2, 0), 6);
    /* a block of the middle: the prefix held ends before it */
    assert_int_equal(kvi_remove(x, 1, 0, mid, 1), 1);
    assert_int_equal(depth_of(x, a, 6, 2, 1, 0), 2);
    /* keys it does not hold, again or never: nothing */
    assert_int_equal(kvi_remove(x, 1, 0, tail, 2), 0);
    assert_int_equal(kvi_remove(x, 1, 0, none, 2), 0);
    assert_int_equal(kvi_remove(x, 99, 0, a, 6), 0);
    assert_int_equal(kvi_remove(x, 1, 9, a, 6), 0);
    /* the first block: no prefix at all */
    assert_int_equal(kvi_remove(x, 2, 0, a, 1), 1);
    assert_int_equal(depth_of(x, a, 6, 2, 2, 0), 0);
    kvi_stats(x, &s);
    assert_int_equal(s.dropped_removed, 4);
    assert_int_equal(s.blocks, 18 - 4);
    assert_int_equal(s.inserted_blocks, s.blocks + s.dropped_removed);
    kvi_free(x);
}

static void test_forget_rank(void **state)
{
    uint64_t a[4] = {1, 2, 3, 4};
    struct kvindex *x = three_holders(a);
    struct kvi_stats s;

    (void) state;
    assert_int_equal(kvi_forget_rank(x, 1, 0), 4);
    assert_int_equal(kvi_held(x, 1, 0), 0);
    assert_int_equal(depth_of(x, a, 4, 2, 1, 0), 0);
    assert_int_equal(depth_of(x, a, 4, 2, 1, 1), 3); /* the worker's other rank keeps its own */
    assert_int_equal(depth_of(x, a, 4, 2, 2, 0), 4);
    assert_int_equal(kvi_forget_rank(x, 1, 0), 0);
    assert_int_equal(kvi_forget_rank(x, 1, 5), 0); /* out of range: nothing */
    assert_int_equal(kvi_forget_rank(x, 7, 0), 0);
    kvi_stats(x, &s);
    assert_int_equal(s.dropped_forget, 4);
    assert_int_equal(s.blocks, 7);
    /* the rank takes blocks again after */
    kvi_insert(x, 1, 0, a, 2, 3);
    assert_int_equal(depth_of(x, a, 4, 3, 1, 0), 2);
    kvi_free(x);
}

static void test_churn_keeps_invariants(void **state)
{
    /* random inserts, lookups, corrections and forgets over a small cap: the counts add up */
    struct kvindex *x = new_index(16, 2, 200, 500);
    uint64_t keys[24], now = 1;
    struct kvi_hit hits[HITS];
    struct kvi_stats s;
    uint32_t w, r, held;
    int i, k;

    (void) state;
    srand(25);
    for (w = 0; w < 16; w++)
        kvi_set_capacity(x, w, 0, 20 + w);
    for (i = 0; i < 20000; i++) {
        w = (uint32_t) rand() % 16, r = (uint32_t) rand() % 2;
        now += (uint64_t) (rand() % 7);
        chain(keys, 24, (uint64_t) (rand() % 5), (size_t) (rand() % 24), (uint64_t) (rand() % 50));
        k = rand() % 10;
        if (k < 6)
            kvi_insert(x, w, r, keys, (size_t) (rand() % 24), now);
        else if (k < 9)
            (void) kvi_match(x, keys, 24, now, hits, HITS);
        else if (rand() % 20 > 3)
            (void) kvi_correct(x, w, r, keys, 24, (size_t) (rand() % 25),
                               (uint64_t) (rand() % 400));
        else if (rand() % 3 == 0)
            (void) kvi_remove(x, w, r, keys + rand() % 12, (size_t) (rand() % 12));
        else if (rand() % 2)
            (void) kvi_forget_rank(x, w, r);
        else
            kvi_forget_worker(x, w);
        if (k >= 6 && k < 9)
            continue;
        for (held = 0, w = 0; w < 16; w++) {
            assert_true(w == 0 || kvi_held(x, w, 0) <= 20 + w);
            held += kvi_held(x, w, 0) + kvi_held(x, w, 1);
        }
        kvi_stats(x, &s);
        assert_int_equal(held, s.blocks);
        assert_true(s.blocks <= 200);
        assert_int_equal(s.inserted_blocks, s.blocks + s.evicted_ttl + s.evicted_capacity +
                                                s.evicted_global + s.dropped_correct +
                                                s.dropped_forget + s.dropped_removed);
    }
    kvi_free(x);
}

/* An insert right after a lookup of its chain reuses the nodes the lookup found: the index
 * must end up as one whose lookups were of other chains. Twins take the same random inserts,
 * corrections and forgets over a small cap with evictions; before each insert, one looks up
 * the inserted chain (at times changed in place after, or with a removal between), the other
 * a chain of its own. Their lookups of every chain and their counts stay equal throughout. */
static void test_insert_after_lookup(void **state)
{
    struct kvindex *a = new_index(8, 2, 120, 300), *b = new_index(8, 2, 120, 300);
    uint64_t keys[24], other[24], now = 1;
    struct kvi_hit ha[HITS], hb[HITS];
    struct kvi_stats sa, sb;
    uint32_t w, r;
    size_t ma, mb;
    int i, k, c;

    (void) state;
    srand(2525);
    for (w = 0; w < 8; w++) {
        kvi_set_capacity(a, w, 0, 15 + w);
        kvi_set_capacity(b, w, 0, 15 + w);
    }
    chain(other, 24, 99, 0, 999);
    for (i = 0; i < 20000; i++) {
        w = (uint32_t) rand() % 8, r = (uint32_t) rand() % 2;
        now += (uint64_t) (rand() % 5);
        chain(keys, 24, (uint64_t) (rand() % 4), (size_t) (rand() % 24), (uint64_t) (rand() % 30));
        k = rand() % 10;
        if (k < 7) {
            size_t n = (size_t) (rand() % 25);

            (void) kvi_match(a, keys, (size_t) (rand() % 25), now, ha, HITS);
            (void) kvi_match(b, other, 24, now, hb, HITS);
            if (k == 0) /* the same buffer, other keys */
                keys[rand() % 24] ^= 1;
            else if (k == 1) /* a removal between the lookup and the insert */
                kvi_forget_worker(a, (w + 1) % 8), kvi_forget_worker(b, (w + 1) % 8);
            kvi_insert(a, w, r, keys, n, now);
            kvi_insert(b, w, r, keys, n, now);
        } else if (k < 9) {
            size_t depth = (size_t) (rand() % 25);
            uint64_t cached = (uint64_t) (rand() % 400);

            (void) kvi_correct(a, w, r, keys, 24, depth, cached);
            (void) kvi_correct(b, w, r, keys, 24, depth, cached);
        } else if (rand() % 10 == 0) {
            kvi_forget_worker(a, w);
            kvi_forget_worker(b, w);
        }
        kvi_stats(a, &sa);
        kvi_stats(b, &sb);
        assert_int_equal(sa.blocks, sb.blocks);
        assert_int_equal(sa.evicted_capacity, sb.evicted_capacity);
        assert_int_equal(sa.evicted_global, sb.evicted_global);
        assert_int_equal(sa.evicted_ttl, sb.evicted_ttl);
        for (w = 0; w < 8; w++)
            for (r = 0; r < 2; r++)
                assert_int_equal(kvi_held(a, w, r), kvi_held(b, w, r));
        if (i % 10 != 0)
            continue;
        for (c = 0; c < 30; c++) {
            chain(keys, 24, (uint64_t) (c % 4), (size_t) (c % 24), (uint64_t) c);
            ma = kvi_match(a, keys, 24, now, ha, HITS);
            mb = kvi_match(b, keys, 24, now, hb, HITS);
            assert_int_equal(ma, mb);
            assert_memory_equal(ha, hb, ma * sizeof *ha);
        }
    }
    kvi_free(a);
    kvi_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_insert_match_depth),
        cmocka_unit_test(test_depth_with_many_holders),
        cmocka_unit_test(test_match_against_model),
        cmocka_unit_test(test_insert_after_lookup),
        cmocka_unit_test(test_cap_keeps_deepest),
        cmocka_unit_test(test_no_first_block_no_hit),
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_capacity_lru),
        cmocka_unit_test(test_fresh_chain),
        cmocka_unit_test(test_global_cap),
        cmocka_unit_test(test_correct),
        cmocka_unit_test(test_correct_drops_tail),
        cmocka_unit_test(test_forget_worker),
        cmocka_unit_test(test_remove_keys),
        cmocka_unit_test(test_forget_rank),
        cmocka_unit_test(test_churn_keeps_invariants),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
