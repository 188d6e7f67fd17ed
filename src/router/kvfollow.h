/* kvfollow: follows one worker's kv_events stream (docs/load-message.md, "The kv_events topic")
 * into the prefix index's events index (kvroute.h), per data-parallel rank.
 *
 * A rank is followed message by message while each one's epoch is the last one's and its seq
 * the last one's + 1: stored keys go in, removed ones out, cleared takes the rank's blocks
 * (and the side table's guesses for it) away. Any other message means messages were lost (or
 * admitd restarted, or this router just started following): the rank's events entries go, the
 * worker's dump (GET /admitd/kv_blocks on its URL, on the loop, KVF_DUMP_TIMEOUT_MS at most,
 * retried with a backoff from KVF_RETRY_MIN_MS to KVF_RETRY_MAX_MS) is fetched, and the rank's
 * live messages are kept meanwhile (KVF_PENDING_MAX bytes at most; past that they are dropped
 * and the check below asks for another dump). The dump replaces the rank's entries; then the
 * kept messages of its epoch with seq above the dump's are applied, the first of them at the
 * dump's seq + 1, or that is a gap again. An events index made again (kvr_generation) is a gap
 * too, seen at the rank's next message.
 *
 * Messages that do not decode, snapshots outside a dump, and keys of another block size than
 * --kv-block-size (which the router's keys could never match) are counted and not applied;
 * a block size of its own does not break the stream's order. The counters are the table's
 * (struct kvf_stats), so that they outlive the worker. */
#ifndef ADMIT_ROUTER_KVFOLLOW_H
#define ADMIT_ROUTER_KVFOLLOW_H

#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct kvroute;
struct kvfollow;

/* The dump's deadline per attempt, and the wait between failed attempts (doubling). */
#define KVF_DUMP_TIMEOUT_MS 2000
#define KVF_RETRY_MIN_MS    200
#define KVF_RETRY_MAX_MS    10000
/* Bytes of live messages kept per rank while its dump is fetched. */
#define KVF_PENDING_MAX (256 * 1024)

/* What a follower's messages did, summed over the workers. Counters only grow. */
enum kvf_refusal { KVF_INVALID, KVF_BLOCK_SIZE, KVF_OFF, KVF_NREFUSALS };
struct kvf_stats {
    uint64_t messages[3]; /* applied: stored, removed, cleared */
    uint64_t keys[3];     /* their keys: stored, removed, and those of dumps' snapshots */
    uint64_t refused[KVF_NREFUSALS]; /* not applied: does not decode (or a snapshot outside a
                                        dump), another block size, the index off (weight 0) */
    uint64_t gaps;                   /* a rank's stream broke: a new epoch or a seq not last + 1 */
    uint64_t dumps_fetched;          /* dumps applied */
    uint64_t dumps_failed;           /* attempts without a usable dump */
    uint64_t overflows;              /* a rank's kept messages passed KVF_PENDING_MAX */
};

/** a follower of worker (its index) at proxy_url (host:port, where its dump is asked) on
    base, applying to kv, counting into st (which must outlive it) */
struct kvfollow *kvf_new(struct event_base *base, struct kvroute *kv, int worker,
                         const char *proxy_url, struct kvf_stats *st);
/** frees it, a dump in flight included (NULL is fine); not from inside its dump's answer */
void kvf_free(struct kvfollow *f);
/** one kv_events message of the worker (topic included) */
void kvf_message(struct kvfollow *f, const void *msg, size_t len);
/** 1 while a rank of the worker waits for a dump */
int kvf_waiting(const struct kvfollow *f);

/** appends the admit_router_kv_events_* families: st, the events index's blocks and the
    event workers */
void kvf_render_metrics(const struct kvf_stats *st, uint64_t events_blocks, unsigned workers,
                        struct buf *out);

#endif
