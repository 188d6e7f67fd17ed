/* kvindex: block key -> holders, in preallocated arrays indexed by 32-bit numbers.
 *
 * A node is one key: its hash-chain link and the list of its entries. An entry is one
 * (key, holder) pair and sits on four lists: its key's holders (singly linked: a removal walks
 * it, and only a hot key's list is long, which is rarely the one evicted), the chain of its
 * (key, holder) bucket, so that an insert finds a holder's entry of a hot key without walking
 * every holder, and two doubly linked ones: its holder's blocks (most recently used first)
 * and all entries (likewise; with one TTL for all, the least recently used is also the first
 * to expire). Both tables are chained with a bucket per two entries or fewer.
 *
 * Worst case per block (every key held once): an entry (36 bytes), a node (20) and at most
 * a bucket of each table (4 + 4): 64 bytes. */
#include "admission/kvindex.h"

#include "util/xmalloc.h"

#include <stdlib.h>
#include <string.h>

#define KVI_NIL UINT32_MAX
/* An entry's pnext when it is on no (key, holder) bucket's chain (see struct kvi_entry). */
#define KVI_UNPAIRED (UINT32_MAX - 1)

/* How many probes of a lookup run ahead of the one it is at. */
#define KVI_AHEAD 8

/* How many victims on an insert loads the buckets of the next one to be evicted ahead of it. */
#define KVI_VICTIMS_AHEAD 3

/* An insert leaves a chain alone when its holder refreshed the chain's last block less than
 * this long ago (a fraction of the TTL, at most 1 s): see kvi_insert. */
#define KVI_FRESH_MS(ttl) ((ttl) / 32 < 1000 ? (ttl) / 32 : 1000)
#if defined(__GNUC__)
#define KVI_PREFETCH(p) __builtin_prefetch(p)
#else
#define KVI_PREFETCH(p) ((void) (p))
#endif

struct kvi_node {
    uint32_t key_lo, key_hi; /* two halves: keeps the node at 20 bytes */
    uint32_t head;           /* the first entry of this key */
    uint32_t next;           /* the bucket chain (the free list when unused) */
    uint32_t count;          /* entries of this key */
};

struct kvi_entry {
    uint32_t node, holder;
    uint32_t knext;        /* the key's entries */
    uint32_t pnext;        /* the (key, holder) bucket's chain, or KVI_UNPAIRED */
    uint32_t hprev, hnext; /* the holder's, most recently used first */
    uint32_t gprev, gnext; /* all of them, likewise (gnext: the free list when unused) */
    uint32_t t;            /* last insert, milliseconds mod 2^32 */
};

struct kvi_holder {
    uint32_t head, tail; /* its entries, most recently used first */
    uint32_t count, cap; /* entries held; capacity (0: none) */
    uint32_t gen;        /* lookup scratch: the last lookup that reported this holder */
};

/* Why an entry goes, for the counters. */
enum { KVI_TTL, KVI_CAPACITY, KVI_GLOBAL, KVI_CORRECT, KVI_FORGET, KVI_REMOVED };

struct kvindex {
    struct kvi_config c;
    struct kvi_entry *e;
    struct kvi_node *n;
    uint32_t *bucket;
    uint32_t *pair; /* (key, holder) -> entry buckets, as many as bucket[] */
    struct kvi_holder *h;
    uint32_t *nodes; /* lookup scratch: the node of each key of the chain */
    /* What the last lookup found, for an insert of the same chain after it (the router's
     * decision follows its lookup): keys[0 .. seen) had the nodes nodes[0 .. seen), which
     * hold while no node was freed since (freed counts the frees). */
    uint64_t *seen_keys;
    uint32_t seen, seen_freed, freed;
    uint32_t mask; /* buckets - 1 */
    uint32_t efree, nfree;
    uint32_t ghead, gtail;
    uint32_t gen;
    uint64_t last_ms; /* the latest time seen */
    struct kvi_stats s;
};

static uint32_t kvi_pow2(uint32_t n)
{
    uint32_t p = 1;

    while (p < n)
        p <<= 1;
    return p;
}

struct kvindex *kvi_new(const struct kvi_config *config)
{
    struct kvindex *x = xcalloc(1, sizeof *x);
    uint32_t i, nb, holders;

    x->c = *config;
    if (x->c.ranks == 0)
        x->c.ranks = 1;
    if (x->c.cap_blocks == 0)
        x->c.cap_blocks = 1;
    if (x->c.cap_blocks > KVI_UNPAIRED - 1)
        x->c.cap_blocks = KVI_UNPAIRED - 1;
    if (x->c.ttl_ms == 0 || x->c.ttl_ms > INT32_MAX)
        x->c.ttl_ms = x->c.ttl_ms ? INT32_MAX : KVI_TTL_MS_DEFAULT;
    if (x->c.block_tokens == 0)
        x->c.block_tokens = 16;
    if (x->c.max_keys == 0)
        x->c.max_keys = 4096;
    if ((uint64_t) x->c.workers * x->c.ranks > UINT32_MAX)
        fatal("kvindex: %u workers of %u ranks are too many", x->c.workers, x->c.ranks);
    holders = x->c.workers * x->c.ranks;
    nb = kvi_pow2((x->c.cap_blocks + 1) / 2);
    x->mask = nb - 1;
    /* every probe lands on a random page of these: huge pages keep the TLB from missing too */
    x->e = xmalloc_huge((size_t) x->c.cap_blocks * sizeof *x->e);
    x->n = xmalloc_huge((size_t) x->c.cap_blocks * sizeof *x->n);
    x->bucket = xmalloc_huge((size_t) nb * sizeof *x->bucket);
    x->pair = xmalloc_huge((size_t) nb * sizeof *x->pair);
    x->h = xcalloc(holders ? holders : 1, sizeof *x->h);
    x->nodes = xmalloc((size_t) x->c.max_keys * sizeof *x->nodes);
    x->seen_keys = xmalloc((size_t) x->c.max_keys * sizeof *x->seen_keys);
    memset(x->bucket, 0xff, (size_t) nb * sizeof *x->bucket);
    memset(x->pair, 0xff, (size_t) nb * sizeof *x->pair);
    for (i = 0; i < x->c.cap_blocks; i++) {
        x->e[i].gnext = i + 1 < x->c.cap_blocks ? i + 1 : KVI_NIL;
        x->n[i].next = i + 1 < x->c.cap_blocks ? i + 1 : KVI_NIL;
    }
    for (i = 0; i < holders; i++)
        x->h[i].head = x->h[i].tail = KVI_NIL;
    x->efree = x->nfree = 0;
    x->ghead = x->gtail = KVI_NIL;
    x->s.bytes = sizeof *x + (uint64_t) x->c.cap_blocks * (sizeof *x->e + sizeof *x->n) +
                 (uint64_t) nb * (sizeof *x->bucket + sizeof *x->pair) +
                 (uint64_t) holders * sizeof *x->h +
                 (uint64_t) x->c.max_keys * (sizeof *x->nodes + sizeof *x->seen_keys);
    x->s.bytes_per_block = ((uint64_t) x->c.cap_blocks * (sizeof *x->e + sizeof *x->n) +
                            (uint64_t) nb * 8 + x->c.cap_blocks - 1) /
                           x->c.cap_blocks;
    return x;
}

void kvi_free(struct kvindex *idx)
{
    if (idx == NULL)
        return;
    free(idx->e);
    free(idx->n);
    free(idx->bucket);
    free(idx->pair);
    free(idx->h);
    free(idx->nodes);
    free(idx->seen_keys);
    free(idx);
}

uint32_t kvi_capacity_blocks(uint64_t kv_total_blocks, uint64_t kv_block_size,
                             unsigned block_tokens)
{
    uint64_t tokens;

    if (kv_total_blocks == 0 || kv_block_size == 0 || block_tokens == 0)
        return 0;
    if (kv_total_blocks > UINT64_MAX / kv_block_size)
        return UINT32_MAX;
    tokens = kv_total_blocks * kv_block_size / block_tokens;
    return tokens == 0 ? 1 : tokens > UINT32_MAX ? UINT32_MAX : (uint32_t) tokens;
}

/* The holder of (worker, rank), or KVI_NIL when out of range. */
static uint32_t kvi_holder(const struct kvindex *x, uint32_t worker, uint32_t rank)
{
    if (worker >= x->c.workers || rank >= x->c.ranks)
        return KVI_NIL;
    return worker * x->c.ranks + rank;
}

static uint32_t *kvi_slot(struct kvindex *x, uint64_t key)
{
    return &x->bucket[(uint32_t) (key ^ key >> 32) & x->mask];
}

/* The (key, holder) bucket of a node and a holder. */
static uint32_t *kvi_pslot(struct kvindex *x, uint32_t node, uint32_t holder)
{
    return &x->pair[(uint32_t) (((uint64_t) node << 32 | holder) * 0x9e3779b97f4a7c15ULL >> 32) &
                    x->mask];
}

static uint32_t kvi_find(struct kvindex *x, uint64_t key)
{
    uint32_t i = *kvi_slot(x, key);

    while (i != KVI_NIL &&
           (x->n[i].key_lo != (uint32_t) key || x->n[i].key_hi != (uint32_t) (key >> 32)))
        i = x->n[i].next;
    return i;
}

/* Whether entry i has outlived the TTL at now (milliseconds mod 2^32). */
static int kvi_old(const struct kvindex *x, uint32_t i, uint32_t now)
{
    return now - x->e[i].t > x->c.ttl_ms;
}

/* Takes entry i off its holder's list and the global one (to be pushed again). */
static void kvi_unlink_lru(struct kvindex *x, uint32_t i)
{
    struct kvi_entry *e = &x->e[i];
    struct kvi_holder *h = &x->h[e->holder];

    if (e->hprev != KVI_NIL)
        x->e[e->hprev].hnext = e->hnext;
    else
        h->head = e->hnext;
    if (e->hnext != KVI_NIL)
        x->e[e->hnext].hprev = e->hprev;
    else
        h->tail = e->hprev;
    if (e->gprev != KVI_NIL)
        x->e[e->gprev].gnext = e->gnext;
    else
        x->ghead = e->gnext;
    if (e->gnext != KVI_NIL)
        x->e[e->gnext].gprev = e->gprev;
    else
        x->gtail = e->gprev;
}

/* Unlinks entry i from all three lists, frees it, and its node when it was the last. */
static void kvi_drop(struct kvindex *x, uint32_t i, int why)
{
    struct kvi_entry *e = &x->e[i];
    struct kvi_node *nd = &x->n[e->node];
    struct kvi_holder *h = &x->h[e->holder];
    uint32_t *p;

    for (p = &nd->head; *p != i;)
        p = &x->e[*p].knext;
    *p = e->knext;
    if (e->pnext != KVI_UNPAIRED) {
        for (p = kvi_pslot(x, e->node, e->holder); *p != i;)
            p = &x->e[*p].pnext;
        *p = e->pnext;
    }
    if (--nd->count == 0) {
        for (p = kvi_slot(x, (uint64_t) nd->key_hi << 32 | nd->key_lo); *p != e->node;)
            p = &x->n[*p].next;
        *p = nd->next;
        nd->next = x->nfree;
        x->nfree = e->node;
        x->freed++;
    }
    kvi_unlink_lru(x, i);
    h->count--;
    e->gnext = x->efree;
    x->efree = i;
    x->s.blocks--;
    switch (why) {
    case KVI_TTL:
        x->s.evicted_ttl++;
        break;
    case KVI_CAPACITY:
        x->s.evicted_capacity++;
        break;
    case KVI_GLOBAL:
        x->s.evicted_global++;
        break;
    case KVI_CORRECT:
        x->s.dropped_correct++;
        break;
    case KVI_REMOVED:
        x->s.dropped_removed++;
        break;
    default:
        x->s.dropped_forget++;
    }
}

/* Puts entry i first on its holder's list and on the global one (most recently used). */
static void kvi_push(struct kvindex *x, uint32_t i)
{
    struct kvi_entry *e = &x->e[i];
    struct kvi_holder *h = &x->h[e->holder];

    e->hprev = KVI_NIL;
    e->hnext = h->head;
    if (h->head != KVI_NIL)
        x->e[h->head].hprev = i;
    else
        h->tail = i;
    h->head = i;
    e->gprev = KVI_NIL;
    e->gnext = x->ghead;
    if (x->ghead != KVI_NIL)
        x->e[x->ghead].gprev = i;
    else
        x->gtail = i;
    x->ghead = i;
}

/* The time of now_ms for entries; a clock that stood still for 2^31 ms expires them all. */
static uint32_t kvi_now(struct kvindex *x, uint64_t now_ms)
{
    if (now_ms < x->last_ms)
        now_ms = x->last_ms; /* time does not go back for the index */
    if (now_ms - x->last_ms >= (uint64_t) INT32_MAX)
        while (x->gtail != KVI_NIL)
            kvi_drop(x, x->gtail, KVI_TTL);
    x->last_ms = now_ms;
    return (uint32_t) now_ms;
}

void kvi_expire(struct kvindex *x, uint64_t now_ms)
{
    uint32_t now = kvi_now(x, now_ms);

    while (x->gtail != KVI_NIL && kvi_old(x, x->gtail, now))
        kvi_drop(x, x->gtail, KVI_TTL);
}

void kvi_set_capacity(struct kvindex *x, uint32_t worker, uint32_t rank, uint32_t blocks)
{
    uint32_t hi = kvi_holder(x, worker, rank);

    if (hi == KVI_NIL)
        return;
    x->h[hi].cap = blocks;
    while (blocks && x->h[hi].count > blocks)
        kvi_drop(x, x->h[hi].tail, KVI_CAPACITY);
}

/* The entry of key node ni held by holder hi, or KVI_NIL. Most keys have one holder (all but
 * a prompt's shared openings): then the node's first entry says, and the (key, holder) bucket,
 * a miss of its own, is not read. */
static uint32_t kvi_entry_of(struct kvindex *x, uint32_t ni, uint32_t hi)
{
    uint32_t i = x->n[ni].head;

    if (x->e[i].holder == hi)
        return i;
    if (x->n[ni].count == 1)
        return KVI_NIL;
    i = *kvi_pslot(x, ni, hi);

    while (i != KVI_NIL && (x->e[i].node != ni || x->e[i].holder != hi))
        i = x->e[i].pnext;
    return i;
}

/* Puts entry i on its (key, holder) bucket's chain. */
static void kvi_pair(struct kvindex *x, uint32_t i)
{
    uint32_t *slot = kvi_pslot(x, x->e[i].node, x->e[i].holder);

    x->e[i].pnext = *slot;
    *slot = i;
}

/* Inserts or refreshes one key for holder hi; ni is its node when known (else KVI_NIL: found
 * here). */
static void kvi_put(struct kvindex *x, uint32_t hi, uint64_t key, uint32_t ni, uint32_t now)
{
    uint32_t i;

    if (ni == KVI_NIL)
        ni = kvi_find(x, key);
    struct kvi_entry *e;

    if (ni != KVI_NIL && (i = kvi_entry_of(x, ni, hi)) != KVI_NIL) {
        kvi_unlink_lru(x, i);
        x->e[i].t = now;
        kvi_push(x, i);
        return;
    }
    /* room first: an eviction may free this very key's node, so look it up again after */
    if (x->h[hi].cap && x->h[hi].count >= x->h[hi].cap)
        kvi_drop(x, x->h[hi].tail, KVI_CAPACITY);
    else if (x->efree == KVI_NIL)
        kvi_drop(x, x->gtail, KVI_GLOBAL);
    if ((ni = kvi_find(x, key)) == KVI_NIL) {
        uint32_t *slot = kvi_slot(x, key);

        ni = x->nfree; /* never NIL: a node has at least one entry, and one is free */
        x->nfree = x->n[ni].next;
        x->n[ni].key_lo = (uint32_t) key;
        x->n[ni].key_hi = (uint32_t) (key >> 32);
        x->n[ni].head = KVI_NIL;
        x->n[ni].count = 0;
        x->n[ni].next = *slot;
        *slot = ni;
    }
    i = x->efree;
    e = &x->e[i];
    x->efree = e->gnext;
    e->node = ni;
    e->holder = hi;
    e->t = now;
    e->knext = x->n[ni].head;
    x->n[ni].head = i;
    /* Only a key's second holder needs the (key, holder) buckets: kvi_entry_of finds the one
     * holder of a key at its head. So the first entry of a key stays off them (a miss at random
     * saved on its insert and on its removal: most keys are a conversation's own), and is put
     * on them when a second comes; the entries of a key held twice or more are all on them. */
    if (x->n[ni].count == 0) {
        e->pnext = KVI_UNPAIRED;
    } else {
        kvi_pair(x, i);
        if (x->e[e->knext].pnext == KVI_UNPAIRED) /* the key's first holder, now its second */
            kvi_pair(x, e->knext);
    }
    x->n[ni].count++;
    x->h[hi].count++;
    kvi_push(x, i);
    x->s.blocks++;
    x->s.inserted_blocks++;
}

/* The entry evicted after entry v, on the list victims come from (holder's or global). */
static uint32_t kvi_next_victim(const struct kvindex *x, uint32_t v, int own)
{
    return own ? x->e[v].hprev : x->e[v].gprev;
}

/* How many of keys[0 .. n) the last lookup found nodes for (x->nodes), that are still theirs. */
static size_t kvi_seen(const struct kvindex *x, const uint64_t *keys, size_t n)
{
    size_t k = x->seen < n ? x->seen : n;

    if (x->freed != x->seen_freed || memcmp(keys, x->seen_keys, k * sizeof *keys) != 0)
        return 0;
    return k;
}

void kvi_insert(struct kvindex *x, uint32_t worker, uint32_t rank, const uint64_t *keys, size_t n,
                uint64_t now_ms)
{
    uint32_t hi = kvi_holder(x, worker, rank), now, b, v;
    size_t a, seen;
    int own;

    if (hi == KVI_NIL)
        return;
    kvi_expire(x, now_ms);
    now = (uint32_t) x->last_ms;
    /* the chain's nodes the lookup before found: no probe for them here, while no node goes */
    seen = kvi_seen(x, keys, n);
    /* A chain is refreshed from its end to its start (below), so when the holder's entry of its
     * last block is fresh, the holder refreshed the whole chain since (its blocks are each a
     * prefix of the last, and every insert of the last inserted them all): moving them again
     * would change neither what is held nor, by more than KVI_FRESH_MS, its order and ages.
     * The common case (a conversation's blocks come back within a second, or a shared opening
     * does) then costs one probe (none after a lookup of the chain) rather than n moves on two
     * lists; whether a lookup came before changes nothing else. An entry's age and
     * place are coarse by that much: it may expire, or be evicted, up to KVI_FRESH_MS early. A
     * correction may since have cut a gap into the chain: it is filled at the next insert past
     * the window. */
    if (n > 0 && (b = seen == n ? x->nodes[n - 1] : kvi_find(x, keys[n - 1])) != KVI_NIL &&
        (v = kvi_entry_of(x, b, hi)) != KVI_NIL && now - x->e[v].t < KVI_FRESH_MS(x->c.ttl_ms))
        return;
    for (a = 1; a <= n && a <= 2 * KVI_AHEAD; a++)
        KVI_PREFETCH(kvi_slot(x, keys[n - a]));
    /* last block first: block 0 ends up the most recently used, the chain ages from its end.
     * Loads start early, in stages, as in kvi_probe: the bucket of a key 2 x KVI_AHEAD on,
     * the node named by the bucket of one KVI_AHEAD on, and for one KVI_AHEAD / 2 on, what
     * kvi_entry_of reads of that node: its first entry, or its (key, holder) bucket. A refresh
     * (the common case: a conversation's blocks come back) would wait for each in turn. */
    while (n-- > 0) {
        if (n >= 2 * KVI_AHEAD && n - 2 * KVI_AHEAD >= seen)
            KVI_PREFETCH(kvi_slot(x, keys[n - 2 * KVI_AHEAD]));
        if (n >= KVI_AHEAD && n - KVI_AHEAD >= seen &&
            (b = *kvi_slot(x, keys[n - KVI_AHEAD])) != KVI_NIL)
            KVI_PREFETCH(&x->n[b]);
        if (n >= KVI_AHEAD / 2 &&
            (b = n - KVI_AHEAD / 2 < seen ? x->nodes[n - KVI_AHEAD / 2]
                                          : *kvi_slot(x, keys[n - KVI_AHEAD / 2])) != KVI_NIL) {
            KVI_PREFETCH(&x->e[x->n[b].head]);
            if (x->n[b].count > 1)
                KVI_PREFETCH(kvi_pslot(x, b, hi));
        }
        /* A holder at its capacity (or an index at its cap) evicts an entry for each new key,
         * the least recently used, which is cold. What kvi_drop reads of a victim is loaded
         * in stages, one victim further each: the entry of the victim KVI_VICTIMS_AHEAD + 2
         * on, the node of the one before it (its entry came in the step before), and the two
         * buckets of the one before that (its key's, from the node that came in the step
         * before, and its (key, holder) bucket): two misses at random per victim, each loaded
         * KVI_VICTIMS_AHEAD steps before the drop that reads it. The victims to come are
         * those at the list's end now, and the walk to them reads entries loaded the steps
         * before. (Here, not in a function of its own: GCC takes a function that only
         * prefetches for one without effects, and drops its calls.) */
        own = x->h[hi].cap && x->h[hi].count >= x->h[hi].cap;
        v = own ? x->h[hi].tail : x->efree == KVI_NIL ? x->gtail : KVI_NIL;
        for (a = 0; a < KVI_VICTIMS_AHEAD && v != KVI_NIL; a++)
            v = kvi_next_victim(x, v, own);
        if (v != KVI_NIL) {
            const struct kvi_entry *e = &x->e[v];
            const struct kvi_node *nd = &x->n[e->node];

            KVI_PREFETCH(kvi_slot(x, (uint64_t) nd->key_hi << 32 | nd->key_lo));
            if (e->pnext != KVI_UNPAIRED)
                KVI_PREFETCH(kvi_pslot(x, e->node, e->holder));
            if ((v = kvi_next_victim(x, v, own)) != KVI_NIL) {
                KVI_PREFETCH(&x->n[x->e[v].node]);
                if ((v = kvi_next_victim(x, v, own)) != KVI_NIL)
                    KVI_PREFETCH(&x->e[v]);
            }
        }
        if (x->freed != x->seen_freed)
            seen = 0;
        kvi_put(x, hi, keys[n], n < seen ? x->nodes[n] : KVI_NIL, now);
    }
}

/* 1 when node i is live and holds key (a free node keeps its last key, and a count of 0). */
static int kvi_node_is(const struct kvindex *x, uint32_t i, uint64_t key)
{
    const struct kvi_node *nd = &x->n[i];

    return nd->count != 0 && nd->key_lo == (uint32_t) key && nd->key_hi == (uint32_t) (key >> 32);
}

/* Probes keys[0 .. n) into nodes[] up to the first one nobody holds; how many were found.
 *
 * A chain's nodes are mostly next to each other: an insert takes its keys last first, each new
 * key the node freed last (by the eviction just before it, or by the insert before), and the free
 * list starts in order, so block i + 1's node is usually block i's minus one. That guess is
 * checked first: one load of a line the last node's load brought, or the next one, in order,
 * where a probe costs two misses at random (the bucket, then the node). Where the guesses fail
 * (a shared opening, a chain inserted piecemeal) the probes take over, and do not depend on
 * each other: the bucket of a key 2 x KVI_AHEAD on and the node named by the bucket of one
 * KVI_AHEAD on are loaded early, so that their misses overlap; while guesses succeed, nothing
 * is loaded ahead. */
static uint32_t kvi_probe(struct kvindex *x, const uint64_t *keys, uint32_t n, uint32_t *nodes)
{
    uint32_t lv, b, g = KVI_NIL;
    int guessing = 0;

    for (lv = 0; lv < n && lv < 2 * KVI_AHEAD; lv++)
        KVI_PREFETCH(kvi_slot(x, keys[lv]));
    for (lv = 0; lv < n; lv++) {
        if (g != KVI_NIL && kvi_node_is(x, g, keys[lv])) {
            nodes[lv] = g;
            guessing = 1;
        } else {
            /* Probing: the loads ahead start again after the first miss of a run (one guess
             * that fails, at the end of a shared opening, is usually followed by guesses that
             * hold: loading 2 x KVI_AHEAD buckets for it would be wasted). */
            if (!guessing) {
                if (lv + 2 * KVI_AHEAD < n)
                    KVI_PREFETCH(kvi_slot(x, keys[lv + 2 * KVI_AHEAD]));
                if (lv + KVI_AHEAD < n && (b = *kvi_slot(x, keys[lv + KVI_AHEAD])) != KVI_NIL)
                    KVI_PREFETCH(&x->n[b]);
            }
            guessing = 0;
            if ((nodes[lv] = kvi_find(x, keys[lv])) == KVI_NIL)
                break;
        }
        g = nodes[lv] > 0 ? nodes[lv] - 1 : KVI_NIL;
    }
    return lv;
}

size_t kvi_match(struct kvindex *x, const uint64_t *keys, size_t n, uint64_t now_ms,
                 struct kvi_hit *out, size_t cap)
{
    uint32_t i, d, found, next, depth = 0, *nodes = x->nodes;
    size_t nout = 0, j, k;
    struct kvi_holder *h;

    kvi_expire(x, now_ms);
    x->s.lookups++;
    if (n > x->c.max_keys)
        n = x->c.max_keys;
    found = kvi_probe(x, keys, (uint32_t) n, nodes);
    memcpy(x->seen_keys, keys, found * sizeof *keys);
    x->seen = found;
    x->seen_freed = x->freed;
    if (found == 0 || cap == 0)
        return 0;
    if (++x->gen == 0) { /* wrapped: no holder may look reported by an old lookup */
        for (i = 0; i < x->c.workers * x->c.ranks; i++)
            x->h[i].gen = 0;
        x->gen = 1;
    }
    /* From the deepest block found back to the first, looking at the entries of a block only
     * where its count of holders differs from the block before's: a holder keeps prefixes of
     * chains (see kvindex.h), so between two such looks the holders are the same ones. A
     * holder first met at a look holds through the depth of the deeper look (next), and is
     * reported at once: the deepest holders come first, and when more hold the prompt's
     * first block than out has room for, the walk stops adding there rather than visiting
     * every one of them (the first blocks of a common system prompt are held by whole
     * fleets). Each look checks that the holders already reported hold its block too (a
     * correction can leave a gap in a chain) and cuts the depth of those that do not. */
    next = found;
    for (d = found; d-- > 0;) {
        const struct kvi_node *nd = &x->n[nodes[d]];
        size_t had = nout;

        if (d > 0 && nd->count == x->n[nodes[d - 1]].count)
            continue;
        for (j = 0; j < had; j++) {
            uint32_t hi = kvi_holder(x, out[j].worker, out[j].rank);

            if (kvi_entry_of(x, nodes[d], hi) == KVI_NIL)
                out[j].depth = d;
        }
        for (i = nd->head; i != KVI_NIL && nout < cap; i = x->e[i].knext) {
            h = &x->h[x->e[i].holder];
            if (h->gen == x->gen)
                continue;
            h->gen = x->gen;
            out[nout].worker = x->e[i].holder / x->c.ranks;
            out[nout].rank = x->e[i].holder % x->c.ranks;
            out[nout].depth = next;
            nout++;
        }
        next = d;
    }
    /* a holder met deeper that lacks the first block holds no prefix at all */
    for (j = k = 0; j < nout; j++)
        if (out[j].depth > 0) {
            if (out[j].depth > depth)
                depth = out[j].depth;
            out[k++] = out[j];
        }
    x->s.matched_blocks += depth;
    return k;
}

size_t kvi_correct(struct kvindex *x, uint32_t worker, uint32_t rank, const uint64_t *keys,
                   size_t n, size_t depth, uint64_t cached_tokens)
{
    uint32_t hi = kvi_holder(x, worker, rank), ni, i;
    uint64_t predicted = (uint64_t) (depth < n ? depth : n) * x->c.block_tokens;
    size_t b, dropped = 0;

    if (hi == KVI_NIL)
        return 0;
    x->s.predicted_tokens += predicted;
    x->s.confirmed_tokens += cached_tokens < predicted ? cached_tokens : predicted;
    if (cached_tokens >= predicted)
        return 0;
    /* The chain breaks where the engine's hits end: the blocks after it go too, this request's
     * own included, or the rank would hold a tail without its head, and a lookup, which takes
     * a block held by as many as are still in its walk to be held by them, would credit
     * another holder of the head with that tail. */
    for (b = cached_tokens / x->c.block_tokens; b < n; b++)
        if ((ni = kvi_find(x, keys[b])) != KVI_NIL && (i = kvi_entry_of(x, ni, hi)) != KVI_NIL) {
            kvi_drop(x, i, KVI_CORRECT);
            dropped++;
        }
    return dropped;
}

size_t kvi_remove(struct kvindex *x, uint32_t worker, uint32_t rank, const uint64_t *keys, size_t n)
{
    uint32_t hi = kvi_holder(x, worker, rank), ni, i;
    size_t dropped = 0;

    if (hi == KVI_NIL)
        return 0;
    /* The keys are cold (an engine evicts what it used least): their buckets are loaded
     * 2 x KVI_AHEAD on, their nodes KVI_AHEAD on, as in kvi_probe, so that the misses overlap. */
    for (size_t a = 0; a < n && a < 2 * KVI_AHEAD; a++)
        KVI_PREFETCH(kvi_slot(x, keys[a]));
    for (size_t b = 0; b < n; b++) {
        if (b + 2 * KVI_AHEAD < n)
            KVI_PREFETCH(kvi_slot(x, keys[b + 2 * KVI_AHEAD]));
        if (b + KVI_AHEAD < n && (ni = *kvi_slot(x, keys[b + KVI_AHEAD])) != KVI_NIL)
            KVI_PREFETCH(&x->n[ni]);
        if (b + KVI_AHEAD / 2 < n && (ni = *kvi_slot(x, keys[b + KVI_AHEAD / 2])) != KVI_NIL &&
            x->n[ni].count != 0)
            KVI_PREFETCH(&x->e[x->n[ni].head]);
        if ((ni = kvi_find(x, keys[b])) != KVI_NIL && (i = kvi_entry_of(x, ni, hi)) != KVI_NIL) {
            kvi_drop(x, i, KVI_REMOVED);
            dropped++;
        }
    }
    return dropped;
}

size_t kvi_forget_rank(struct kvindex *x, uint32_t worker, uint32_t rank)
{
    uint32_t hi = kvi_holder(x, worker, rank);
    size_t dropped = 0;

    if (hi == KVI_NIL)
        return 0;
    for (; x->h[hi].tail != KVI_NIL; dropped++)
        kvi_drop(x, x->h[hi].tail, KVI_FORGET);
    return dropped;
}

void kvi_forget_worker(struct kvindex *x, uint32_t worker)
{
    for (uint32_t r = 0; r < x->c.ranks; r++)
        kvi_forget_rank(x, worker, r);
}

uint32_t kvi_held(const struct kvindex *x, uint32_t worker, uint32_t rank)
{
    uint32_t hi = kvi_holder(x, worker, rank);

    return hi == KVI_NIL ? 0 : x->h[hi].count;
}

void kvi_stats(const struct kvindex *x, struct kvi_stats *out)
{
    *out = x->s;
}

uint64_t kvi_blocks(const struct kvindex *x)
{
    return x->s.blocks;
}
