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

/* The global cap in blocks when the configuration has none: 2^18 entries, 16 MiB at 64 bytes
 * a block (Dynamo's --router-max-tree-size is 2^20; ours is preallocated, so by default a
 * quarter of it). */
#define KVR_CAP_BLOCKS (1u << 18)

/* The side table's global cap: the decisions of its TTL (5 s by default) at a fleet's rate. */
#define KVR_PRED_CAP_BLOCKS (1u << 16)

/* The events index's TTL: the largest an index takes (24 days): its entries go by the engine's
 * word (removed, cleared), by their holder's capacity or by the global cap, not by age. */
#define KVR_EVENTS_TTL_MS UINT32_MAX

struct kvroute {
    struct kvindex *idx;   /* the history; NULL while the weight is 0 */
    struct kvindex *ev;    /* the engines' KV events; NULL until a worker sends them */
    struct kvindex *pred;  /* the side table of event workers' exact decisions; with ev */
    uint32_t workers;      /* what idx is sized for */
    uint32_t gen;          /* changes whenever ev is made again or dropped (kvr_generation) */
    unsigned block_tokens; /* the keys' block: --kv-block-size */
    unsigned ttl_ms;
    uint32_t cap_blocks;  /* --router-max-tree-size: of the history, and of the events index */
    unsigned pred_ttl_ms; /* --kv-predicted-ttl-ms */
    /* Each rank's newest capacity, so that an index made again (larger) starts with them:
     * cap[worker * SEL_MAX_RANKS + rank], for the workers idx is sized for. */
    uint32_t *cap;
    /* reports[worker]: its answers have given a number of cached_tokens, so its engine reports
     * them, and a usage without them is 0 cached. Learned of the engine, as cap is, so both
     * outlive an index made again; forgotten with the worker. */
    uint8_t *reports;
    /* events[worker]: it has sent a valid kv_events message (an event worker): its exact
     * decisions go to the side table. Kept and forgotten as reports. */
    uint8_t *events;
    /* kvr_match's merge of the three indexes' hits: the holder's place in out, valid when its
     * mark is the lookup's (one of each per worker rank) */
    uint32_t *mark;
    uint16_t *place;
    uint32_t lookup;
    uint64_t lookups, matched; /* kvr_match's, over the three */
    struct kvi_stats gone;     /* the counters of the indexes dropped (so that they only grow) */
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
    to->dropped_removed += from->dropped_removed;
}

/* Keeps x's counters in gone, and frees it (NULL is fine). */
static void kvr_drop_index(struct kvroute *kv, struct kvindex *x)
{
    struct kvi_stats s;

    if (x == NULL)
        return;
    kvi_stats(x, &s);
    kvr_add_counters(&kv->gone, &s);
    kv->gone.dropped_forget += s.blocks; /* what it held goes with it */
    kvi_free(x);
}

/* Drops the events index and the side table: the followers' state goes stale with them. */
static void kvr_drop_events(struct kvroute *kv)
{
    kvr_drop_index(kv, kv->ev);
    kvr_drop_index(kv, kv->pred);
    kv->ev = kv->pred = NULL;
    kv->gen++;
}

/* A new index for the workers of kv, of cap blocks and ttl_ms, with the capacities known. */
static struct kvindex *kvr_index(const struct kvroute *kv, uint32_t cap, uint32_t ttl_ms)
{
    struct kvi_config c = {
        .workers = kv->workers,
        .ranks = SEL_MAX_RANKS,
        .cap_blocks = cap,
        .ttl_ms = ttl_ms,
        .block_tokens = kv->block_tokens,
        .max_keys = KVR_MAX_KEYS,
    };
    struct kvindex *x = kvi_new(&c);

    for (uint32_t k = 0; k < kv->workers; k++)
        for (uint32_t r = 0; r < SEL_MAX_RANKS; r++)
            if (kv->cap[k * SEL_MAX_RANKS + r] != 0)
                kvi_set_capacity(x, k, r, kv->cap[k * SEL_MAX_RANKS + r]);
    return x;
}

/* Copies an array of old workers' items into one of workers' (the rest zero); frees old. */
static void *kvr_grow(void *old, size_t old_n, size_t n, size_t size)
{
    void *p = xcalloc(n, size);

    if (old != NULL)
        memcpy(p, old, old_n * size);
    free(old);
    return p;
}

static void kvr_start(struct kvroute *kv, uint32_t workers)
{
    int had_events = kv->ev != NULL;

    kv->cap = kvr_grow(kv->cap, (size_t) kv->workers * SEL_MAX_RANKS,
                       (size_t) workers * SEL_MAX_RANKS, sizeof *kv->cap);
    kv->reports = kvr_grow(kv->reports, kv->workers, workers, sizeof *kv->reports);
    kv->events = kvr_grow(kv->events, kv->workers, workers, sizeof *kv->events);
    free(kv->mark);
    free(kv->place);
    kv->mark = xcalloc((size_t) workers * SEL_MAX_RANKS, sizeof *kv->mark);
    kv->place = xcalloc((size_t) workers * SEL_MAX_RANKS, sizeof *kv->place);
    kv->lookup = 0;
    kvr_drop_index(kv, kv->idx);
    kvr_drop_events(kv);
    kv->workers = workers;
    kv->idx = kvr_index(kv, kv->cap_blocks, kv->ttl_ms);
    if (had_events) /* empty: each follower fetches its worker's blocks again (kvfollow.h) */
        kvr_events_on(kv);
}

static void kvr_stop(struct kvroute *kv)
{
    kvr_drop_index(kv, kv->idx);
    kv->idx = NULL;
    kvr_drop_events(kv);
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
    kv->cap_blocks = cfg->router_max_tree_size ? cfg->router_max_tree_size : KVR_CAP_BLOCKS;
    kv->pred_ttl_ms = cfg->kv_predicted_ttl_ms ? cfg->kv_predicted_ttl_ms : KVR_PRED_TTL_MS;
    kv->workers = KVR_WORKERS_MIN;
    kvr_reconfigure(kv, cfg);
    return kv;
}

void kvr_free(struct kvroute *kv)
{
    if (kv == NULL)
        return;
    kvi_free(kv->idx);
    kvi_free(kv->ev);
    kvi_free(kv->pred);
    free(kv->cap);
    free(kv->reports);
    free(kv->events);
    free(kv->mark);
    free(kv->place);
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

/* Merges x's holders of keys[0 .. n) into out[0 .. m), each holder once at its deepest; the
 * new m. An empty index is not looked up (most fleets have no events: one of three costs). */
static size_t kvr_merge(struct kvroute *kv, struct kvindex *x, const uint64_t *keys, size_t n,
                        uint64_t now_ms, struct kvi_hit *out, size_t m)
{
    struct kvi_hit hits[KVR_MAX_HITS];
    size_t got;

    if (x == NULL || kvi_blocks(x) == 0)
        return m;
    got = kvi_match(x, keys, n, now_ms, hits, KVR_MAX_HITS);
    for (size_t i = 0; i < got; i++) {
        size_t h = (size_t) hits[i].worker * SEL_MAX_RANKS + hits[i].rank;

        if (kv->mark[h] == kv->lookup) {
            if (out[kv->place[h]].depth < hits[i].depth)
                out[kv->place[h]].depth = hits[i].depth;
        } else if (m < KVR_MAX_HITS) {
            kv->mark[h] = kv->lookup;
            kv->place[h] = (uint16_t) m;
            out[m++] = hits[i];
        }
    }
    return m;
}

size_t kvr_match(struct kvroute *kv, const uint64_t *keys, size_t n, int64_t prompt_tokens,
                 uint64_t now_ms, struct sel_hit *out)
{
    struct kvi_hit hits[KVR_MAX_HITS];
    uint32_t deepest = 0;
    size_t m;

    if (kv->idx == NULL || n == 0)
        return 0;
    if (kv->ev == NULL) /* no worker sends events: the history alone, as it was */
        m = kvi_match(kv->idx, keys, n, now_ms, hits, KVR_MAX_HITS);
    else {
        if (++kv->lookup == 0) { /* wrapped: no mark may look like this lookup's */
            memset(kv->mark, 0, (size_t) kv->workers * SEL_MAX_RANKS * sizeof *kv->mark);
            kv->lookup = 1;
        }
        /* per holder the deepest of the three: the engine's word, our fresh guesses for it,
         * and the history (only the workers without events have exact keys there) */
        m = kvr_merge(kv, kv->ev, keys, n, now_ms, hits, 0);
        m = kvr_merge(kv, kv->pred, keys, n, now_ms, hits, m);
        m = kvr_merge(kv, kv->idx, keys, n, now_ms, hits, m);
    }
    for (size_t i = 0; i < m; i++) {
        int64_t t = (int64_t) hits[i].depth * kv->block_tokens;

        if (hits[i].depth > deepest)
            deepest = hits[i].depth;
        out[i].worker = hits[i].worker;
        out[i].rank = hits[i].rank;
        out[i].cached = t < prompt_tokens ? t : prompt_tokens;
    }
    kv->lookups++;
    kv->matched += deepest;
    return m;
}

/* Where worker's decisions of exact (or text) keys go: an event worker's exact ones to the side
 * table, the rest to the history. */
static struct kvindex *kvr_guesses(const struct kvroute *kv, int worker, int exact)
{
    return exact && kv->events[worker] && kv->pred != NULL ? kv->pred : kv->idx;
}

void kvr_routed(struct kvroute *kv, int worker, unsigned rank, const uint64_t *keys, size_t n,
                int exact, uint64_t now_ms)
{
    if (n == 0 || rank >= SEL_MAX_RANKS || !kvr_fits(kv, worker))
        return;
    kvi_insert(kvr_guesses(kv, worker, exact), (uint32_t) worker, rank, keys, n, now_ms);
}

void kvr_correct(struct kvroute *kv, int worker, unsigned rank, const uint64_t *keys, size_t n,
                 int exact, int64_t predicted, int64_t cached_tokens)
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
    /* the guesses only: the engine's events say what it evicts */
    kvi_correct(kvr_guesses(kv, worker, exact), (uint32_t) worker, rank, keys, n, depth,
                (uint64_t) cached_tokens);
}

void kvr_message(struct kvroute *kv, int worker, const struct admit_load *m)
{
    uint32_t blocks;
    size_t h;

    if (m->dp_rank < 0 || m->dp_rank >= SEL_MAX_RANKS || !kvr_fits(kv, worker))
        return;
    blocks = kvi_capacity_blocks(m->kv_total_blocks > 0 ? (uint64_t) m->kv_total_blocks : 0,
                                 m->kv_block_size > 0 ? (uint64_t) m->kv_block_size : 0,
                                 kv->block_tokens);
    h = (size_t) worker * SEL_MAX_RANKS + (size_t) m->dp_rank;
    if (kv->cap[h] == blocks)
        return;
    kv->cap[h] = blocks;
    kvi_set_capacity(kv->idx, (uint32_t) worker, (uint32_t) m->dp_rank, blocks);
    if (kv->ev != NULL) {
        kvi_set_capacity(kv->ev, (uint32_t) worker, (uint32_t) m->dp_rank, blocks);
        kvi_set_capacity(kv->pred, (uint32_t) worker, (uint32_t) m->dp_rank, blocks);
    }
}

void kvr_forget(struct kvroute *kv, int worker)
{
    if (kv->reports != NULL && worker >= 0 && (uint32_t) worker < kv->workers)
        kv->reports[worker] = kv->events[worker] = 0; /* its index may be another worker's */
    if (kv->idx == NULL || worker < 0 || (uint32_t) worker >= kv->workers)
        return;
    /* its blocks go from every index at once */
    kvi_forget_worker(kv->idx, (uint32_t) worker);
    if (kv->ev != NULL) {
        kvi_forget_worker(kv->ev, (uint32_t) worker);
        kvi_forget_worker(kv->pred, (uint32_t) worker);
    }
    memset(&kv->cap[(size_t) worker * SEL_MAX_RANKS], 0, SEL_MAX_RANKS * sizeof *kv->cap);
}

/* The blocks worker's ranks hold in x (0 when x is NULL or worker out of range). */
static uint64_t kvr_held_in(const struct kvroute *kv, const struct kvindex *x, int worker)
{
    uint64_t n = 0;

    if (x == NULL || worker < 0 || (uint32_t) worker >= kv->workers)
        return 0;
    for (uint32_t r = 0; r < SEL_MAX_RANKS; r++)
        n += kvi_held(x, (uint32_t) worker, r);
    return n;
}

uint64_t kvr_held(const struct kvroute *kv, int worker)
{
    return kvr_held_in(kv, kv->idx, worker) + kvr_held_in(kv, kv->pred, worker);
}

uint64_t kvr_events_held(const struct kvroute *kv, int worker)
{
    return kvr_held_in(kv, kv->ev, worker);
}

int kvr_event_worker(const struct kvroute *kv, int worker)
{
    return kv->idx != NULL && worker >= 0 && (uint32_t) worker < kv->workers && kv->events[worker];
}

void kvr_stats(const struct kvroute *kv, struct kvi_stats *out, uint64_t *events_blocks)
{
    struct kvi_stats s;

    memset(out, 0, sizeof *out);
    *events_blocks = 0;
    if (kv->idx != NULL)
        kvi_stats(kv->idx, out);
    if (kv->pred != NULL) {
        kvi_stats(kv->pred, &s);
        kvr_add_counters(out, &s);
        out->blocks += s.blocks;
        out->bytes += s.bytes;
    }
    if (kv->ev != NULL) {
        kvi_stats(kv->ev, &s);
        kvr_add_counters(out, &s);
        out->bytes += s.bytes;
        *events_blocks = s.blocks;
    }
    kvr_add_counters(out, &kv->gone);
    out->lookups = kv->lookups; /* one per kvr_match, however many indexes it asked */
    out->matched_blocks = kv->matched;
}

/* ---- the engines' KV events (kvfollow.c applies them) ------------------------------------ */

unsigned kvr_block_tokens(const struct kvroute *kv)
{
    return kv->block_tokens;
}

uint32_t kvr_generation(const struct kvroute *kv)
{
    return kv->gen;
}

uint32_t kvr_events_on(struct kvroute *kv)
{
    if (kv->idx == NULL)
        return 0;
    if (kv->ev == NULL) {
        kv->ev = kvr_index(kv, kv->cap_blocks, KVR_EVENTS_TTL_MS);
        kv->pred = kvr_index(kv, KVR_PRED_CAP_BLOCKS, kv->pred_ttl_ms);
        kv->gen++;
    }
    return kv->gen;
}

/* 1 when worker's rank has a place in the events index (kvr_events_on before). */
static int kvr_ev_fits(const struct kvroute *kv, int worker, unsigned rank)
{
    return kv->ev != NULL && worker >= 0 && (uint32_t) worker < kv->workers && rank < SEL_MAX_RANKS;
}

void kvr_ev_worker(struct kvroute *kv, int worker)
{
    if (kv->idx != NULL && worker >= 0 && (uint32_t) worker < kv->workers)
        kv->events[worker] = 1;
}

void kvr_ev_stored(struct kvroute *kv, int worker, unsigned rank, const uint64_t *keys, size_t n,
                   uint64_t now_ms)
{
    if (kvr_ev_fits(kv, worker, rank) && n > 0)
        kvi_insert(kv->ev, (uint32_t) worker, rank, keys, n, now_ms);
}

void kvr_ev_removed(struct kvroute *kv, int worker, unsigned rank, const uint64_t *keys, size_t n)
{
    if (!kvr_ev_fits(kv, worker, rank))
        return;
    /* the engine's word is newer than our guess: from the side table too */
    kvi_remove(kv->ev, (uint32_t) worker, rank, keys, n);
    kvi_remove(kv->pred, (uint32_t) worker, rank, keys, n);
}

void kvr_ev_clear(struct kvroute *kv, int worker, unsigned rank, int guesses_too)
{
    if (!kvr_ev_fits(kv, worker, rank))
        return;
    kvi_forget_rank(kv->ev, (uint32_t) worker, rank);
    if (guesses_too)
        kvi_forget_rank(kv->pred, (uint32_t) worker, rank);
}
