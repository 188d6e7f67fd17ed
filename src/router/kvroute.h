/* kvroute: admit-router's prefix index, from its own routing decisions (issue 25) and from the
 * engines' KV events that admitd relays (issue 26): the block keys of a request
 * (admission/kvkeys.h), which worker ranks hold them (admission/kvindex.h), in three indexes:
 *  - the history: the decisions of text keys, and of exact keys (token ids) for the workers
 *    that send no events, filled at dispatch (--router-ttl-secs), corrected by the
 *    cached_tokens the answers report;
 *  - the events index: what the event workers' engines say they store, remove and clear
 *    (kvfollow.h feeds it), no TTL;
 *  - the side table: the event workers' decisions of exact keys, for the moment between a
 *    decision and the engine's first event (--kv-predicted-ttl-ms, Dynamo's
 *    --router-predicted-ttl-secs).
 * A lookup takes per holder the deepest of the three (text keys never match event keys). All
 * are bounded by what each worker publishes and forgotten with a worker. The events index and
 * the side table are made at the first worker that sends events (16 MiB and 4 MiB).
 *
 * Kept only while --kv-overlap-score-weight is above 0: at 0 nothing is hashed or held, and
 * every call here is a no-op (a reload to 0 frees the index, one back above 0 starts it empty).
 * Its worker indexes are the selection view's; the index is sized for a number of them and
 * made again (empty) twice as large when a worker beyond it is added. */
#ifndef ADMIT_KVROUTE_H
#define ADMIT_KVROUTE_H

#include "admission/kvindex.h"
#include "wire/usage.h"
#include "admit/load.h"
#include "config.h"
#include "select.h"

#include <stddef.h>
#include <stdint.h>

struct tokcount;

/* The longest chain of a request's keys that is hashed and looked up (longer prompts are
 * judged on their first KVR_MAX_KEYS blocks): the per-exchange array's size. */
#define KVR_MAX_KEYS 512

/* Most holders of a request's first block that a lookup reports. */
#define KVR_MAX_HITS 256

/* kvr_correct's cached_tokens of an answer whose usage says nothing of them: vLLM and SGLang
 * leave prompt_tokens_details out when nothing was cached, so from a worker that has reported
 * them before it means 0, and from one that never has it means nothing. */
#define KVR_CACHED_UNSAID USAGE_CACHED_UNSAID

/* The side table's TTL by default (Dynamo's --router-predicted-ttl-secs, 5 s). */
#define KVR_PRED_TTL_MS 5000u

struct kvroute;

/** a new prefix index for cfg (none kept while its weight is 0) */
struct kvroute *kvr_new(const struct router_cfg *cfg);
/** frees it (NULL is fine) */
void kvr_free(struct kvroute *kv);
/** a reload: the weight may start or end the index */
void kvr_reconfigure(struct kvroute *kv, const struct router_cfg *cfg);
/** 1 when an index is kept (the weight is above 0) */
int kvr_on(const struct kvroute *kv);
/** the block keys of a request body of model (at most KVR_MAX_KEYS; 0 when off), and always
    its prompt's token counts at chars_per_token (tokcount_body's: one walk for both); *exact 1
    when they came from token ids the body carries, 0 from its text (or none) */
size_t kvr_keys(const struct kvroute *kv, const char *model, const char *body, size_t len,
                double chars_per_token, struct tokcount *counts, uint64_t *keys, int *exact);
/** the block keys of ids[0 .. n), the token ids of a request body of model (its tokenizer's
    answer), made as kvr_keys makes those of ids in the body (at most KVR_MAX_KEYS; 0 when
    off) */
size_t kvr_keys_ids(const struct kvroute *kv, const char *model, const char *body, size_t len,
                    const uint64_t *ids, size_t n, uint64_t *keys);
/** the most token ids kvr_keys_ids uses: KVR_MAX_KEYS blocks */
size_t kvr_max_ids(const struct kvroute *kv);
/** the ranks predicted to hold a prefix of keys[0 .. n), their cached tokens capped at
    prompt_tokens, into out (KVR_MAX_HITS of them at most); the count */
size_t kvr_match(struct kvroute *kv, const uint64_t *keys, size_t n, int64_t prompt_tokens,
                 uint64_t now_ms, struct sel_hit *out);
/** a request of keys[0 .. n) (exact: of token ids) was sent to worker's rank */
void kvr_routed(struct kvroute *kv, int worker, unsigned rank, const uint64_t *keys, size_t n,
                int exact, uint64_t now_ms);
/** worker's answer to a request of keys[0 .. n), predicted to find predicted tokens cached on
    its rank, reports cached_tokens (KVR_CACHED_UNSAID: a usage without them, 0 from a worker
    that has reported them before): what the index holds past them there is dropped */
void kvr_correct(struct kvroute *kv, int worker, unsigned rank, const uint64_t *keys, size_t n,
                 int exact, int64_t predicted, int64_t cached_tokens);
/** a load message of worker: its rank's capacity in blocks */
void kvr_message(struct kvroute *kv, int worker, const struct admit_load *m);
/** worker is retired or removed: what it held in every index, that it reports cached_tokens
    and that it sends events, is forgotten */
void kvr_forget(struct kvroute *kv, int worker);
/** the blocks worker's ranks are predicted to hold (history and side table), summed (0 when
    off) */
uint64_t kvr_held(const struct kvroute *kv, int worker);
/** the blocks worker's ranks hold by their events, summed */
uint64_t kvr_events_held(const struct kvroute *kv, int worker);
/** 1 when worker has sent a valid kv_events message (and the index is on) */
int kvr_event_worker(const struct kvroute *kv, int worker);
/** the indexes' counters, those of indexes dropped included (they only grow), and their size
    now (0 when off): the history's and side table's blocks in out, the events index's in
    *events_blocks */
void kvr_stats(const struct kvroute *kv, struct kvi_stats *out, uint64_t *events_blocks);

/* ---- the engines' KV events, as kvfollow.c applies them ---- */

/** the tokens of a block of the router's keys (--kv-block-size) */
unsigned kvr_block_tokens(const struct kvroute *kv);
/** the events index's generation: it changes whenever that index is made again or dropped
    (a larger fleet, a reload to weight 0), so what a follower applied before is gone */
uint32_t kvr_generation(const struct kvroute *kv);
/** makes the events index and side table when there are none (while on); the generation, 0
    when off */
uint32_t kvr_events_on(struct kvroute *kv);
/** worker sends events: its exact decisions go to the side table from now on */
void kvr_ev_worker(struct kvroute *kv, int worker);
/** worker's rank stored keys[0 .. n) (a chain's blocks, parents first) */
void kvr_ev_stored(struct kvroute *kv, int worker, unsigned rank, const uint64_t *keys, size_t n,
                   uint64_t now_ms);
/** worker's rank removed keys[0 .. n): from the events index and the side table */
void kvr_ev_removed(struct kvroute *kv, int worker, unsigned rank, const uint64_t *keys, size_t n);
/** worker's rank's events entries go (a gap, a dump to come), and with guesses_too its side
    table entries (the engine cleared its cache) */
void kvr_ev_clear(struct kvroute *kv, int worker, unsigned rank, int guesses_too);

#endif
