/* kvroute: the router's prefix index and its keys (see kvroute.h). */
#include "kvroute.h"
#include "admission/kvkeys.h"
#include "admission/tokcount.h"
#include "util/log.h"
#include "util/xmalloc.h"

#include <stdlib.h>
#include <string.h>

/* The index's first size in workers (made again twice as large when one beyond is added). */
#define KVR_WORKERS_MIN 64

/* The global cap in blocks: 2^18 entries, 16 MiB at 64 bytes a block (Dynamo's
 * --router-max-tree-size is 2^20; ours is preallocated, so it is a quarter of it). */
#define KVR_CAP_BLOCKS (1u << 18)

struct kvroute {
    struct kvindex *idx;   /* NULL while the weight is 0 */
    uint32_t workers;      /* what idx is sized for */
    unsigned block_tokens; /* the keys' block: --kv-block-size */
    unsigned ttl_ms;
    /* Each rank's newest capacity, so that an index made again (larger) starts with them:
     * cap[worker * SEL_MAX_RANKS + rank], for the workers idx is sized for. */
    uint32_t *cap;
    /* reports[worker]: its answers have given a number of cached_tokens, so its engine reports
     * them, and a usage without them is 0 cached. Learned of the engine, as cap is, so both
     * outlive an index made again; forgotten with the worker. */
    uint8_t *reports;
    struct kvi_stats gone; /* the counters of the indexes dropped (so that they only grow) */
};

/* to's counters (not its gauges: blocks, bytes) plus from's. */
static void kvr_add_counters(struct kvi_stats *to, const struct kvi_stats *from)
{
    to->lookups += from->lookups;
    to->matched_blocks += from->matched_blocks;
    to->inserted_blocks += from->inserted_blocks;
    to->predicted_tokens += from->predicted_tokens;
    to->confirmed_tokens += from->confirmed_tokens;
    to->evicted_ttl += from->evicted_ttl;
    to->evicted_capacity += from->evicted_capacity;
    to->evicted_global += from->evicted_global;
    to->dropped_correct += from->dropped_correct;
    to->dropped_forget += from->dropped_forget;
}

/* Keeps idx's counters in gone, before idx goes. */
static void kvr_keep_counters(struct kvroute *kv)
{
    struct kvi_stats s;

    if (kv->idx == NULL)
        return;
    kvi_stats(kv->idx, &s);
    kvr_add_counters(&kv->gone, &s);
    kv->gone.dropped_forget += s.blocks; /* what it held goes with it */
}

static void kvr_start(struct kvroute *kv, uint32_t workers)
{
    struct kvi_config c = {
        .workers = workers,
        .ranks = SEL_MAX_RANKS,
        .cap_blocks = KVR_CAP_BLOCKS,
        .ttl_ms = kv->ttl_ms,
        .block_tokens = kv->block_tokens,
        .max_keys = KVR_MAX_KEYS,
    };
    uint32_t *cap = xcalloc((size_t) workers * SEL_MAX_RANKS, sizeof *cap);
    uint8_t *reports = xcalloc(workers, sizeof *reports);

    if (kv->cap != NULL)
        memcpy(cap, kv->cap, (size_t) kv->workers * SEL_MAX_RANKS * sizeof *cap);
    if (kv->reports != NULL)
        memcpy(reports, kv->reports, kv->workers * sizeof *reports);
    free(kv->cap);
    free(kv->reports);
    kv->cap = cap;
    kv->reports = reports;
    kvr_keep_counters(kv);
    kvi_free(kv->idx);
    kv->idx = kvi_new(&c);
    kv->workers = workers;
    for (uint32_t k = 0; k < workers; k++)
        for (uint32_t r = 0; r < SEL_MAX_RANKS; r++)
            if (cap[k * SEL_MAX_RANKS + r] != 0)
                kvi_set_capacity(kv->idx, k, r, cap[k * SEL_MAX_RANKS + r]);
}

static void kvr_stop(struct kvroute *kv)
{
    kvr_keep_counters(kv);
    kvi_free(kv->idx);
    kv->idx = NULL;
}

/* 1 when worker has a place in the index, made larger (empty) when it is beyond it. */
static int kvr_fits(struct kvroute *kv, int worker)
{
    uint32_t n = kv->workers;

    if (kv->idx == NULL || worker < 0)
        return 0;
    if ((uint32_t) worker < n)
        return 1;
    while (n <= (uint32_t) worker)
        n *= 2;
    log_info("prefix index: %u workers now, made again for %u (what it held is forgotten)",
             (unsigned) worker + 1, (unsigned) n);
    kvr_start(kv, n);
    return 1;
}

struct kvroute *kvr_new(const struct router_cfg *cfg)
{
    struct kvroute *kv = xcalloc(1, sizeof *kv);

    kv->block_tokens = cfg->kv_block_size ? cfg->kv_block_size : 16;
    kv->ttl_ms = cfg->router_ttl_secs ? cfg->router_ttl_secs * 1000u : KVI_TTL_MS_DEFAULT;
    kv->workers = KVR_WORKERS_MIN;
    kvr_reconfigure(kv, cfg);
    return kv;
}

void kvr_free(struct kvroute *kv)
{
    if (kv == NULL)
        return;
    kvi_free(kv->idx);
    free(kv->cap);
    free(kv->reports);
    free(kv);
}

void kvr_reconfigure(struct kvroute *kv, const struct router_cfg *cfg)
{
    if (cfg->kv_overlap_weight > 0 && kv->idx == NULL)
        kvr_start(kv, kv->workers);
    else if (!(cfg->kv_overlap_weight > 0) && kv->idx != NULL)
        kvr_stop(kv);
}

int kvr_on(const struct kvroute *kv)
{
    return kv->idx != NULL;
}

/* The keys' parameters for a request of model whose body is body: the seed from the model
 * and the body's salt (vLLM's cache_salt keeps a tenant's blocks apart in the engine: in the
 * index too). One rule for the keys of its text or ids and of the ids its tokenizer gave. */
static void kvr_params(const struct kvroute *kv, const char *model, const char *body, size_t len,
                       struct kvk_params *p)
{
    char room[KVK_SALT_MAX];
    const char *salt;
    size_t salt_len;

    memset(p, 0, sizeof *p);
    p->block_tokens = kv->block_tokens;
    salt = kvk_salt(body, len, room, sizeof room, &salt_len);
    p->seed = kvk_seed(model, strlen(model), salt, salt_len);
}

size_t kvr_keys(const struct kvroute *kv, const char *model, const char *body, size_t len,
                double chars_per_token, struct tokcount *counts, uint64_t *keys, int *exact)
{
    struct kvk_params p;

    *exact = 0;
    if (kv->idx == NULL || len == 0) {
        tokcount_body(body, len, chars_per_token, counts);
        return 0;
    }
    kvr_params(kv, model, body, len, &p);
    return kvk_body_counted(&p, body, len, keys, KVR_MAX_KEYS, exact, chars_per_token, counts);
}

size_t kvr_keys_ids(const struct kvroute *kv, const char *model, const char *body, size_t len,
                    const uint64_t *ids, size_t n, uint64_t *keys)
{
    struct kvk_params p;

    if (kv->idx == NULL)
        return 0;
    kvr_params(kv, model, body, len, &p);
    return kvk_ids(&p, ids, n, keys, KVR_MAX_KEYS);
}

size_t kvr_max_ids(const struct kvroute *kv)
{
    return (size_t) KVR_MAX_KEYS * kv->block_tokens;
}

size_t kvr_match(struct kvroute *kv, const uint64_t *keys, size_t n, int64_t prompt_tokens,
                 uint64_t now_ms, struct sel_hit *out)
{
    struct kvi_hit hits[KVR_MAX_HITS];
    size_t m;

    if (kv->idx == NULL || n == 0)
        return 0;
    m = kvi_match(kv->idx, keys, n, now_ms, hits, KVR_MAX_HITS);
    for (size_t i = 0; i < m; i++) {
        int64_t t = (int64_t) hits[i].depth * kv->block_tokens;

        out[i].worker = hits[i].worker;
        out[i].rank = hits[i].rank;
        out[i].cached = t < prompt_tokens ? t : prompt_tokens;
    }
    return m;
}

void kvr_routed(struct kvroute *kv, int worker, unsigned rank, const uint64_t *keys, size_t n,
                uint64_t now_ms)
{
    if (n == 0 || rank >= SEL_MAX_RANKS || !kvr_fits(kv, worker))
        return;
    kvi_insert(kv->idx, (uint32_t) worker, rank, keys, n, now_ms);
}

void kvr_correct(struct kvroute *kv, int worker, unsigned rank, const uint64_t *keys, size_t n,
                 int64_t predicted, int64_t cached_tokens)
{
    size_t depth = predicted > 0 ? (size_t) predicted / kv->block_tokens : 0;

    if (kv->idx == NULL || worker < 0 || (uint32_t) worker >= kv->workers)
        return;
    if (cached_tokens >= 0)
        kv->reports[worker] = 1;
    else if (cached_tokens == KVR_CACHED_UNSAID && kv->reports[worker])
        cached_tokens = 0; /* its engine left the details out: nothing was cached */
    if (depth == 0 || cached_tokens < 0)
        return;
    kvi_correct(kv->idx, (uint32_t) worker, rank, keys, n, depth, (uint64_t) cached_tokens);
}

void kvr_message(struct kvroute *kv, int worker, const struct admit_load *m)
{
    uint32_t blocks;

    if (m->dp_rank < 0 || m->dp_rank >= SEL_MAX_RANKS || !kvr_fits(kv, worker))
        return;
    blocks = kvi_capacity_blocks(m->kv_total_blocks > 0 ? (uint64_t) m->kv_total_blocks : 0,
                                 m->kv_block_size > 0 ? (uint64_t) m->kv_block_size : 0,
                                 kv->block_tokens);
    if (kv->cap[(size_t) worker * SEL_MAX_RANKS + (size_t) m->dp_rank] == blocks)
        return;
    kv->cap[(size_t) worker * SEL_MAX_RANKS + (size_t) m->dp_rank] = blocks;
    kvi_set_capacity(kv->idx, (uint32_t) worker, (uint32_t) m->dp_rank, blocks);
}

void kvr_forget(struct kvroute *kv, int worker)
{
    if (kv->reports != NULL && worker >= 0 && (uint32_t) worker < kv->workers)
        kv->reports[worker] = 0; /* its index may be another worker's next, weight 0 or not */
    if (kv->idx == NULL || worker < 0 || (uint32_t) worker >= kv->workers)
        return;
    kvi_forget_worker(kv->idx, (uint32_t) worker);
    memset(&kv->cap[(size_t) worker * SEL_MAX_RANKS], 0, SEL_MAX_RANKS * sizeof *kv->cap);
}

uint64_t kvr_held(const struct kvroute *kv, int worker)
{
    uint64_t n = 0;

    if (kv->idx == NULL || worker < 0 || (uint32_t) worker >= kv->workers)
        return 0;
    for (uint32_t r = 0; r < SEL_MAX_RANKS; r++)
        n += kvi_held(kv->idx, (uint32_t) worker, r);
    return n;
}

void kvr_stats(const struct kvroute *kv, struct kvi_stats *out)
{
    memset(out, 0, sizeof *out);
    if (kv->idx != NULL)
        kvi_stats(kv->idx, out);
    kvr_add_counters(out, &kv->gone);
}
