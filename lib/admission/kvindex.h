/* kvindex: which worker rank holds which block key (admission/kvkeys.h), as predicted from
 * the router's own routing decisions, for prefix-aware selection.
 *
 * Each entry is one (block key, holder) pair, a holder being a (worker index, rank). The router
 * inserts a request's keys for the rank it chose; a lookup walks a request's key chain and
 * tells, for each holder of its first block, how many leading blocks it holds (its prefix
 * overlap). What bounds it, all of it preallocated at kvi_new (no allocation after):
 *  - a TTL per entry (Dynamo's 120 s by default), refreshed when the key is inserted again;
 *  - a capacity per holder in blocks (what its engine publishes, kvi_capacity_blocks), least
 *    recently used out first;
 *  - a global cap in blocks, least recently used (so soonest to expire) out first.
 * A request's blocks are touched last to first, so that block 0 is the most recent and a
 * chain ages from its end, as an engine's LRU evicts it: what a holder keeps of a chain stays
 * a prefix of it.
 *
 * A lookup costs O(blocks) hash probes, then walks back from the deepest block held and
 * visits entries only at the depths where the count of holders changes; a depth held by as
 * many as the one before costs its probe alone, whatever the fleet. It reports the deepest
 * holders first and stops adding when its room for hits is full, so that a system prompt held
 * by a whole fleet costs about as many visits as the room, not as the fleet; each holder
 * reported costs a (key, holder) probe at each further depth visited.
 * Inserting a key touches its holder's entry, found among the key's holders (O(holders of
 * that key)); an insert right after a lookup of the same keys (the router's decision after
 * its lookup) takes the keys' nodes from that lookup rather than probing for them again,
 * while no node has been freed since. Times are the caller's monotonic milliseconds; an
 * index is not thread-safe. */
#ifndef ADMIT_KVINDEX_H
#define ADMIT_KVINDEX_H

#include <stddef.h>
#include <stdint.h>

/* The default TTL of an entry, Dynamo's --router-ttl-secs. */
#define KVI_TTL_MS_DEFAULT 120000u

/* What an index is sized for; fixed for its life. */
struct kvi_config {
    uint32_t workers;      /* worker indexes 0 .. workers - 1 */
    uint32_t ranks;        /* ranks per worker 0 .. ranks - 1 (0 means 1) */
    uint32_t cap_blocks;   /* the global cap: entries held at most (>= 1) */
    uint32_t ttl_ms;       /* an entry's life since its last insert; 0 means the default */
    uint32_t block_tokens; /* tokens per block, for the stats in tokens (0 means 16) */
    uint32_t max_keys;     /* longest chain a lookup walks (more are ignored); 0 means 4096 */
};

/* One holder of a request's prefix: worker, rank, and its leading blocks held (>= 1). */
struct kvi_hit {
    uint32_t worker, rank, depth;
};

/* Counters since kvi_new, and the size now. Every entry inserted is held or went one way:
 * inserted_blocks = blocks + evicted_* + dropped_*. */
struct kvi_stats {
    uint64_t lookups;          /* kvi_match calls */
    uint64_t matched_blocks;   /* per lookup, the deepest hit's depth, summed */
    uint64_t inserted_blocks;  /* entries created (not refreshed) */
    uint64_t predicted_tokens; /* kvi_correct: the cached tokens the index predicted */
    uint64_t confirmed_tokens; /* ... and of them, those the engine reported cached */
    uint64_t evicted_ttl;      /* entries gone by age */
    uint64_t evicted_capacity; /* ... by their holder's capacity */
    uint64_t evicted_global;   /* ... by the global cap */
    uint64_t dropped_correct;  /* ... by kvi_correct */
    uint64_t dropped_forget;   /* ... by kvi_forget_worker or kvi_forget_rank */
    uint64_t dropped_removed;  /* ... by kvi_remove (an engine's eviction) */
    uint64_t blocks;           /* entries held now */
    uint64_t bytes;            /* memory the index took at kvi_new (all of it) */
    uint64_t bytes_per_block;  /* bytes / cap_blocks, rounded up */
};

struct kvindex;

/** a new index for config (aborts when out of memory, as xmalloc does) */
struct kvindex *kvi_new(const struct kvi_config *config);
/** frees an index (NULL is fine) */
void kvi_free(struct kvindex *idx);

/** a holder's capacity in our blocks from what its engine publishes: total x engine block
    size / our block tokens; 0 (no cap but the global one) when any is 0 */
uint32_t kvi_capacity_blocks(uint64_t kv_total_blocks, uint64_t kv_block_size,
                             unsigned block_tokens);
/** sets a holder's capacity (0: none beyond the global cap), evicting down to it now */
void kvi_set_capacity(struct kvindex *idx, uint32_t worker, uint32_t rank, uint32_t blocks);

/** records that worker's rank holds keys[0 .. n) as of now_ms (a routing decision) */
void kvi_insert(struct kvindex *idx, uint32_t worker, uint32_t rank, const uint64_t *keys, size_t n,
                uint64_t now_ms);
/** for each holder of keys[0], writes its leading blocks held of keys[0 .. n) to out, at
    most cap of them: the deepest first (ties in no set order); the count written */
size_t kvi_match(struct kvindex *idx, const uint64_t *keys, size_t n, uint64_t now_ms,
                 struct kvi_hit *out, size_t cap);
/** the engine answered a request of keys[0 .. n), inserted for worker's rank and predicted to
    find its first depth there (the depth kvi_match gave it), reporting cached_tokens: when
    fewer than predicted, drops that rank's entries of keys past the cached ones, to n; the
    count dropped. Counts predicted and confirmed tokens */
size_t kvi_correct(struct kvindex *idx, uint32_t worker, uint32_t rank, const uint64_t *keys,
                   size_t n, size_t depth, uint64_t cached_tokens);
/** drops worker's rank's entries of keys[0 .. n) (its engine evicted those blocks); the count
    dropped */
size_t kvi_remove(struct kvindex *idx, uint32_t worker, uint32_t rank, const uint64_t *keys,
                  size_t n);
/** drops every entry of worker's rank (its engine's cache cleared); the count dropped */
size_t kvi_forget_rank(struct kvindex *idx, uint32_t worker, uint32_t rank);
/** drops every entry of every rank of worker (an engine restarted, a worker removed) */
void kvi_forget_worker(struct kvindex *idx, uint32_t worker);
/** drops the entries older than the TTL (inserts and lookups do it too) */
void kvi_expire(struct kvindex *idx, uint64_t now_ms);

/** the entries worker's rank holds now (for /load) */
uint32_t kvi_held(const struct kvindex *idx, uint32_t worker, uint32_t rank);
/** the counters and size */
void kvi_stats(const struct kvindex *idx, struct kvi_stats *out);
/** entries held now (kvi_stats()'s blocks, without copying the rest) */
uint64_t kvi_blocks(const struct kvindex *idx);

#endif
