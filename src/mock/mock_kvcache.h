/* mock_kvcache: one rank's KV block pool with automatic prefix caching, as vLLM's.
 *
 * Pure: no sockets, no clock. A pool of at most `capacity` blocks of `block_size` tokens. A
 * full block of a sequence is known by a chained hash: of its parent's hash and its own
 * token ids, so a block matches only after the same whole prefix. A sequence (one running
 * request) walks its full blocks in order: the leading blocks already in the pool are hits
 * and are shared; the others get a block of their own, taken from the never-used ones first,
 * then from the least recently released block that no running request holds (evicted: its
 * hash is forgotten). A block held by a running request (refcount > 0) is never evicted.
 * When every block is held, the new block is not cached at all: the request still runs
 * (the mock does not preempt), and a later request simply misses on it.
 *
 * A sequence releases its blocks in reverse order, as vLLM frees them, so that of a released
 * prefix the tail is evicted first and the shared head stays longest.
 *
 * A request's cache_salt (vLLM's per-tenant isolation) seeds the chain: it stands for the
 * parent of the first block, so sequences with different salts never share a block, and
 * those without one share as before.
 *
 * A listener (mock_kvpub, the KV events publisher) hears of every block the pool starts to
 * cache and of every block it evicts, as vLLM's block pool reports them. */
#ifndef ADMIT_MOCK_KVCACHE_H
#define ADMIT_MOCK_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

struct mock_kvc;

/* The blocks one running request holds, in prefix order. */
struct mock_kvseq {
    uint32_t *held; /* block indices this sequence holds a reference on */
    size_t nheld, cap;
    uint64_t last; /* chained hash of the last full block pushed (the seed before one) */
    int missed;    /* a block was pushed that was no hit: no later one can be */
    int pushed;    /* a block was pushed: the next one has a parent block */
};

/* What a pool reports: a block newly cached (its hash; its parent's hash, or for the first
 * block of a sequence has_parent 0 and the sequence's seed, 0 without a cache_salt; and its
 * block_size ids), and a block evicted (its hash). */
struct mock_kvc_listener {
    void (*stored)(void *arg, uint64_t hash, int has_parent, uint64_t parent, const uint32_t *ids);
    void (*removed)(void *arg, uint64_t hash);
    void *arg;
};

/** creates a pool of at most capacity blocks (allocated as they are first used) */
struct mock_kvc *mock_kvc_new(unsigned capacity, unsigned block_size);
/** reports c's changes from now on to l (copied; NULL: to nobody) */
void mock_kvc_listen(struct mock_kvc *c, const struct mock_kvc_listener *l);
/** frees the pool; every sequence must have been released; NULL is a no-op */
void mock_kvc_free(struct mock_kvc *c);
/** the chained hash of a block of n ids after the block whose hash is parent (0: the first) */
uint64_t mock_kvc_hash(uint64_t parent, const uint32_t *ids, size_t n);
/** the seed of a sequence whose request has cache_salt salt (len bytes): never 0, the seed of
 * a request without one */
uint64_t mock_kvc_salt(const char *salt, size_t len);
/** pushes the next full block (block_size ids) of s; may_hit lets it be a hit: returns 1 if it
 * was one (found, and every block before it was a hit too), else 0 */
int mock_kvc_push(struct mock_kvc *c, struct mock_kvseq *s, const uint32_t *ids, int may_hit);
/** starts s, seeded by seed (mock_kvc_salt's, or 0 for no salt), over the full blocks of a
 * prompt of n ids; returns the cached tokens: whole hit blocks, never the prompt's last token
 * (it must be computed to sample the next one) */
size_t mock_kvc_begin(struct mock_kvc *c, struct mock_kvseq *s, uint64_t seed, const uint32_t *ids,
                      size_t n);
/** drops s's references (last block first) and empties s */
void mock_kvc_release(struct mock_kvc *c, struct mock_kvseq *s);
/** blocks holding a cached hash (held or evictable) */
size_t mock_kvc_cached(const struct mock_kvc *c);
/** distinct blocks some running sequence holds */
size_t mock_kvc_in_use(const struct mock_kvc *c);
/** blocks evicted so far */
uint64_t mock_kvc_evictions(const struct mock_kvc *c);

#endif
