/* kvrelay: an engine's KV events as admitd relays them to routers: keyed as routers key
 * requests, in kv_events messages (wire/kvmsg.h; docs/load-message.md, "The kv_events topic").
 *
 * For each decoded batch of a rank (admission/kvevents.h) it keys every stored block the way
 * admit-router keys a request's token ids (admission/kvkeys.h): a chain's first block from
 * kvk_seed(model, "") with model the event's lora_name, else the engine's base model; each
 * block after from its parent's key (kvk_block32 over the block's ids). A block cannot be keyed
 * while the base model is unknown, when its LoRA is named only by lora_id, when its extra_keys
 * are more than its LoRA name (a cache_salt, media: kve_event.n_plain), or when its parent is
 * unkeyable or unknown: it is counted (unkeyed), kept as unkeyable in the rank's table
 * (admission/kvtab.h) so that its children and removal are recognised, and not relayed.
 * Removals are relayed by the keys the table remembers; hashes it does not know are counted.
 * Events of a KV-cache group other than the first (hybrid models, group_idx > 0) are counted
 * and skipped: the same tokens stored per group would give the same keys twice.
 *
 * Messages: per rank a sequence 1, 2, 3, ... under one epoch (the caller's, random, nonzero),
 * +1 for each message; stored and removed keys in event order, consecutive ones of one op and
 * block size in one message, split at KVM_KEYS_MAX. `cleared` when the engine clears its cache
 * or the caller says the rank's events cannot be followed (restart, gap): the table is emptied.
 * A rank's table holds at most 2 x its engine's blocks (kvrelay_set_blocks; 2 x 2^20 until
 * known); a block evicted from it is relayed as removed, so that routers keep nothing admitd
 * could no longer follow.
 *
 * The dump (kvrelay_dump): per rank, the keys of its table, in snapshot messages carrying the
 * rank's last sequence number, each after a 4-byte big-endian length. Pure: the caller sends
 * what the emit callback gets. */
#ifndef ADMIT_KVRELAY_H
#define ADMIT_KVRELAY_H

#include "admission/kvevents.h"
#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>

/* The most ranks relayed (as many as admitd reads). */
#define KVRELAY_MAX_RANKS 64
/* A rank's engine blocks until it reports them: the table holds twice as many. */
#define KVRELAY_DEFAULT_BLOCKS (1u << 20)

/* Why a rank was cleared. */
enum kvrelay_why {
    KVRELAY_ENGINE,  /* the engine's AllBlocksCleared */
    KVRELAY_RESTART, /* the engine's sequence went back: it restarted */
    KVRELAY_GAP,     /* events were lost and not replayed */
    KVRELAY__WHY
};

/* A rank's counters since kvrelay_new. */
struct kvrelay_stats {
    uint64_t messages[4]; /* published, per op - 1 (stored, removed, cleared; [3] unused) */
    uint64_t keys[2];     /* keys published stored, removed */
    uint64_t unkeyed;     /* stored blocks that could not be keyed */
    uint64_t evicted;     /* table entries evicted by its bound */
    uint64_t unknown;     /* removals of hashes the table did not hold */
    uint64_t other_group; /* events of a KV-cache group > 0, skipped */
    uint64_t cleared[KVRELAY__WHY];
};

/* Gets each message made, whole (at most KVM_MSG_MAX bytes), with its rank. */
typedef void (*kvrelay_emit_fn)(void *arg, unsigned rank, const unsigned char *msg, size_t len);

struct kvrelay;

/** a relay of epoch (nonzero) whose messages go to emit(arg, ...) */
struct kvrelay *kvrelay_new(uint64_t epoch, kvrelay_emit_fn emit, void *arg);
/** frees r (NULL is fine) */
void kvrelay_free(struct kvrelay *r);
/** the engine's base model (len bytes; NULL: unknown): the seed of blocks without lora_name */
void kvrelay_set_model(struct kvrelay *r, const char *model, size_t len);
/** rank's engine holds `blocks` blocks (0: unknown, the default): its table's bound is twice it */
void kvrelay_set_blocks(struct kvrelay *r, unsigned rank, uint64_t blocks);
/** relays one decoded batch of rank's events */
void kvrelay_batch(struct kvrelay *r, unsigned rank, const struct kve_out *o);
/** publishes `cleared` for rank and forgets its blocks */
void kvrelay_clear(struct kvrelay *r, unsigned rank, enum kvrelay_why why);
/** appends the dump of ranks 0 .. ranks-1 to out (GET /admitd/kv_blocks's body) */
void kvrelay_dump(const struct kvrelay *r, unsigned ranks, struct buf *out);
/** rank's counters (zeros for a rank never seen) */
struct kvrelay_stats kvrelay_stats(const struct kvrelay *r, unsigned rank);
/** rank's last published sequence number (0: none yet) */
uint64_t kvrelay_seq(const struct kvrelay *r, unsigned rank);
/** the epoch */
uint64_t kvrelay_epoch(const struct kvrelay *r);

#endif
