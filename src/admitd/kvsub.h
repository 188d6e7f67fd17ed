/* kvsub: admitd's reader of its engine's KV events (issue 26), on the event loop.
 *
 * An engine started with --kv-events-config publishes on a ZMQ PUB per data-parallel rank,
 * rank r at the endpoint's port + r (vLLM's offset; an ipc name gets "_dp<r>"), messages of
 * three frames: the topic, an 8-byte big-endian sequence number and a msgpack payload that
 * lib/admission/kvevents decodes. kvsub holds one SUB per rank and watches each socket's
 * ZMQ_FD on the libevent loop (no thread of ours; ZMQ's own I/O thread does the network).
 * Per rank it follows the sequence (a jump forward is a gap, a step back the engine's
 * restart) and counts batches, events and blocks for /metrics. A malformed batch is counted
 * and dropped. Each decoded batch goes to the relay (admission/kvrelay.h), which keys its
 * blocks and hands kv_events messages to the caller's emit function (admitd's publisher). A
 * gap in the engine's sequence is filled from its replay socket when admitd has one
 * (kvreplay.c: a ZMQ DEALER per rank asks vLLM's ROUTER for the batches after the last one
 * relayed, for at most KVREPLAY_MS); a gap not filled, and a restart of the engine, are
 * relayed as `cleared` before the batches after them. */
#ifndef ADMIT_KVSUB_H
#define ADMIT_KVSUB_H

#include "admission/kvrelay.h"
#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct kvsub;

/* The most ranks read: as many as admitd's --data-parallel-size allows. */
#define KVSUB_MAX_RANKS 64

/** opens a ZMQ context and SUBs for ranks 0 .. ranks-1 of endpoint, subscribed to topic
    ("" = every message), with a DEALER per rank on the replay endpoint (NULL or "": none),
    relaying kv_events messages to emit(arg, ...) under a random epoch; NULL with err set if
    an endpoint is invalid */
struct kvsub *kvsub_new(struct event_base *base, const char *endpoint, const char *topic,
                        const char *replay, unsigned ranks, kvrelay_emit_fn emit, void *arg,
                        char *err, size_t errlen);
/** the engine's base model (the first of its /v1/models list): the seed of blocks without a
    LoRA name; NULL keeps the one known */
void kvsub_set_model(struct kvsub *s, const char *model);
/** rank's engine has `blocks` KV blocks (<= 0: unknown): bounds the rank's table */
void kvsub_set_blocks(struct kvsub *s, unsigned rank, int64_t blocks);
/** appends the dump of every rank read (GET /admitd/kv_blocks's body) to out */
void kvsub_dump(const struct kvsub *s, struct buf *out);
/** reads ranks up to `ranks` too (the engine reported more than at start); never fewer */
void kvsub_set_ranks(struct kvsub *s, unsigned ranks);
/** appends the admitd_engine_kv_events_* families to out */
void kvsub_render(const struct kvsub *s, struct buf *out);
/** closes the sockets without lingering, ends the context, frees s; NULL is a no-op */
void kvsub_free(struct kvsub *s);

#endif
