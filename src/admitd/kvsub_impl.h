/* kvsub's private parts: the state of a rank and of the whole reader, shared by kvsub.c (the
 * SUBs, the live stream, metrics) and kvreplay.c (filling a gap from the engine's replay
 * socket). Nothing outside src/admitd/kvsub*.c and kvreplay.c includes it. */
#ifndef ADMIT_KVSUB_IMPL_H
#define ADMIT_KVSUB_IMPL_H

#include "kvsub.h"
#include "admission/kvevents.h"
#include "admission/kvrelay.h"

#include <stddef.h>
#include <stdint.h>

struct event;
struct event_base;

/* Messages handled per wakeup of one rank: past it the rank yields the loop to clients and
 * comes back at once (event_active), so a flood of events never starves the proxy. */
#define KVSUB_BURST 256
/* Receive high-water mark, vLLM's publisher's default: past it ZMQ drops, and we see a gap. */
#define KVSUB_HWM 100000
/* Largest message read: ZMQ drops the connection of a peer that sends more (it reconnects;
 * the batch shows as a gap). A step of vLLM stores at most its token budget, a few hundred
 * KB of payload; the bound keeps a bad peer from making the decoder's zone and arrays
 * (about 40 bytes per payload byte together, kvevents.h) unbounded. */
#define KVSUB_MAX_MSG (16 << 20)
/* Room for the events of a payload that fits arrays of cap hashes and ids: an event takes
 * more than 8 bytes of payload (its tag alone has 11 or more), so cap / 8 entries do. */
#define EVENTS_CAP(cap) ((cap) / 8 + 16)

/* How long a replay may take, from the request to the batch that fills the gap (llm-d's
 * 2 s per attempt): past it the gap is relayed as cleared. */
#define KVREPLAY_MS 2000
/* Live batches held during a replay, at most (and their bytes): past either, the replay ends
 * unfilled. At a few hundred batches a second, far more than KVREPLAY_MS brings. */
#define KVREPLAY_HELD_MAX   4096
#define KVREPLAY_HELD_BYTES (64u << 20)

enum { RES_OK, RES_MALFORMED, RES_BAD_FRAMES, RES__COUNT };
enum { EVT_STORED, EVT_REMOVED, EVT_CLEARED, EVT_UNKNOWN, EVT_OTHER_MEDIUM, EVT__COUNT };
enum { BLK_STORED, BLK_REMOVED, BLK_OTHER_MEDIUM, BLK__COUNT };
/* How a replay ended: the gap filled; or not: the replay did not reach it (its start not
 * covered, a malformed batch, the end marker too soon), no answer in time, too much live
 * traffic held meanwhile, the engine restarted meanwhile. */
enum { RPL_FILLED, RPL_UNFILLED, RPL_TIMEOUT, RPL_OVERFLOW, RPL_RESTART, RPL__COUNT };

/* A live batch held while a replay fills the gap before it: its payload, copied. */
struct kvheld {
    int64_t seq;
    size_t len;
    unsigned char *buf;
};

struct kvsub_rank {
    struct kvsub *s;
    unsigned rank;
    void *sock;
    struct event *ev;
    char endpoint[300];
    int64_t last_seq; /* -1: no message yet */
    int state;        /* last batch decoded (1) or not (0); -1 before the first */
    uint64_t batches[RES__COUNT];
    uint64_t events[EVT__COUNT];
    uint64_t blocks[BLK__COUNT];
    uint64_t gaps, missed, restarts;
    struct kvrelay_stats rs; /* the relay's counters of the rank, as of its last change */
    /* the replay (kvreplay.c); dealer NULL: no replay socket */
    char replay_ep[300];
    void *dealer;
    struct event *dev, *timer;
    int replaying;
    struct kvheld *held; /* a ring of held_cap, held_n from held_head */
    size_t held_cap, held_head, held_n, held_bytes;
    uint64_t replays[RPL__COUNT];
    uint64_t replayed; /* batches relayed from the replay socket */
};

struct kvsub {
    struct event_base *base;
    void *zctx;
    char endpoint[256], topic[256], replay[256];
    struct kvsub_rank *r[KVSUB_MAX_RANKS];
    unsigned n;
    struct kve_decoder *dec;
    struct kve_event *events; /* decode arrays, grown when a batch does not fit */
    uint64_t *hashes;
    uint32_t *tokens;
    size_t cap; /* of hashes and tokens (events: EVENTS_CAP): a payload of cap bytes fits */
    struct kvrelay *relay; /* keys the events and makes the kv_events messages */
};

/* kvsub.c */

/** says (once per change) whether the rank's batches decode; why when not */
void kvsub_set_state(struct kvsub_rank *k, int ok, const char *why);
/** decodes a payload into o (the reader's arrays); 0, or -1 counted as malformed */
int kvsub_decode(struct kvsub_rank *k, const void *p, size_t len, struct kve_out *o);
/** relays decoded batch seq as the rank's next one (last_seq = seq), counted */
void kvsub_apply(struct kvsub_rank *k, int64_t seq, const struct kve_out *o);
/** relays `cleared` for the rank */
void kvsub_clear(struct kvsub_rank *k, enum kvrelay_why why);

/* kvreplay.c */

/** opens the rank's DEALER on its replay endpoint (s->replay, at port + rank); 0, or -1 with
    err; nothing when no replay endpoint is set */
int kvreplay_open(struct kvsub_rank *k, char *err, size_t errlen);
/** asks the replay socket for the batches from last_seq + 1 on, holding live batch seq (a
    copy of p) to relay after them: 1; 0 when there is no replay socket or it cannot ask */
int kvreplay_start(struct kvsub_rank *k, int64_t seq, const void *p, size_t len);
/** the newest live batch held during a replay */
int64_t kvreplay_newest(const struct kvsub_rank *k);
/** holds one more live batch during a replay (too many: the replay ends, unfilled) */
void kvreplay_hold(struct kvsub_rank *k, int64_t seq, const void *p, size_t len);
/** ends the replay (result RPL_*): the held batches are relayed, after `cleared` if the gap was
    not filled; with RPL_RESTART they are dropped */
void kvreplay_end(struct kvsub_rank *k, int result);
/** closes the DEALER and frees what is held */
void kvreplay_close(struct kvsub_rank *k);

#endif
