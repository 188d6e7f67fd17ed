/* admit/load.h: the load message admitd publishes, and the table subscribers keep.
 *
 * A message is the topic "kv_metrics", one space, and one JSON object: a self-contained
 * snapshot of one data-parallel rank of one worker. Publishing is lossy (nng pub drops the
 * oldest message for a slow subscriber), so every message carries absolute values, a
 * per-publisher sequence number and a timestamp, and a subscriber that sees only the newest
 * one has the whole picture. The wire contract is written down in docs/load-message.md.
 *
 * Everything here is pure (no sockets, no clocks: callers pass the time), so it can be
 * unit-tested and fuzzed, and linked by tools written against the library. */
#ifndef ADMIT_LOAD_H
#define ADMIT_LOAD_H

#include <stddef.h>
#include <stdint.h>

/* The topic every load message starts with (followed by one space). */
#define ADMIT_LOAD_TOPIC "kv_metrics"
/* The only message version this library writes and reads. */
#define ADMIT_LOAD_VERSION 1
/* A numeric field whose value is not known: `null` on the wire, never a made-up 0. */
#define ADMIT_LOAD_UNKNOWN (-1)
/* Longest worker id, in bytes, without the terminating NUL. */
#define ADMIT_LOAD_WORKER_ID_MAX 127
/* Largest integer a field may hold: 2^53 - 1, exact in every JSON implementation. */
#define ADMIT_LOAD_INT_MAX 9007199254740991LL
/* Largest encoded message, topic included. */
#define ADMIT_LOAD_MSG_MAX 2048

/* What the worker is doing. */
enum admit_load_state {
    ADMIT_LOAD_SERVING = 0, /* accepting requests */
    ADMIT_LOAD_DRAINING     /* finishing what it has, refusing new work */
};

/* One rank's load. Numeric fields hold ADMIT_LOAD_UNKNOWN when not known.
 *
 * kv_block_size was added to version 1 compatibly: publishers before it do not send the key,
 * and such a message decodes with kv_block_size unknown. It is the block size of
 * active_decode_blocks (the engine's when it reports one, else admitd's --block-size), so a
 * router can book ceil(prompt tokens / kv_block_size) blocks per request; 0 is refused. */
struct admit_load {
    char worker_id[ADMIT_LOAD_WORKER_ID_MAX + 1];
    int64_t dp_rank;                /* 0-based data-parallel rank */
    int64_t seq;                    /* per publisher, strictly increasing */
    int64_t ts_ms;                  /* publisher's wall clock, ms since the Unix epoch */
    int64_t kv_used_blocks;         /* engine-reported KV blocks in use */
    int64_t kv_total_blocks;        /* engine-reported KV blocks of this rank */
    int64_t kv_block_size;          /* tokens per KV block that admitd books with (>= 1) */
    int64_t active_decode_blocks;   /* booked: blocks of the requests admitd let in */
    int64_t active_prefill_tokens;  /* booked: prompt tokens not yet past their first byte */
    int64_t max_num_batched_tokens; /* the engine's per-step token budget */
    int64_t engine_requests;        /* requests holding an admitd slot (whole worker) */
    int64_t engine_request_limit;   /* N (whole worker); unknown when there is no cap */
    int64_t queued_requests;        /* requests waiting in admitd (whole worker) */
    int64_t request_queue_limit;    /* Q (whole worker); unknown when there is no cap */
    enum admit_load_state state;
    int64_t heartbeat_ms; /* the publisher's heartbeat interval */
};

/** sets every numeric field to unknown, state serving, worker id empty */
void admit_load_init(struct admit_load *m);
/** the wire name of a state ("serving", "draining") */
const char *admit_load_state_name(enum admit_load_state s);
/** writes "kv_metrics {...}" into buf; returns its length, or -1 if it does not fit */
int admit_load_encode(const struct admit_load *m, char *buf, size_t cap);
/** parses and validates one message (topic included); 0, or -1 with a reason in err */
int admit_load_decode(const void *data, size_t len, struct admit_load *out, char *err,
                      size_t errlen);
/** writes the message's JSON object alone (no topic) into buf; length or -1 */
int admit_load_to_json(const struct admit_load *m, char *buf, size_t cap);

/* ---- the subscriber's table ---------------------------------------------------------- */

struct admit_loadtab;

/* One entry of the table, as returned by lookups. */
struct admit_loadtab_entry {
    struct admit_load load; /* the newest message for this (worker, rank) */
    int64_t received_ms;    /* when it arrived, on the caller's clock */
    int stale;              /* silent for more than the allowed missed heartbeats */
};

/** creates an empty table; an entry is stale after missed_heartbeats heartbeats of silence */
struct admit_loadtab *admit_loadtab_new(unsigned missed_heartbeats);
/** frees the table */
void admit_loadtab_free(struct admit_loadtab *t);
/** applies a message received at now_ms; returns 1 if kept, 0 if older than what is held */
int admit_loadtab_update(struct admit_loadtab *t, const struct admit_load *m, int64_t now_ms);
/** finds (worker, rank); fills e with staleness as of now_ms; 0 or -1 if never heard of */
int admit_loadtab_get(const struct admit_loadtab *t, const char *worker_id, int64_t dp_rank,
                      int64_t now_ms, struct admit_loadtab_entry *e);
/** number of (worker, rank) entries */
size_t admit_loadtab_size(const struct admit_loadtab *t);
/** the i-th entry in (worker id, rank) order, as of now_ms; 0 or -1 if i is out of range */
int admit_loadtab_at(const struct admit_loadtab *t, size_t i, int64_t now_ms,
                     struct admit_loadtab_entry *e);
/** drops entries silent for longer than max_age_ms; returns how many were dropped */
size_t admit_loadtab_expire(struct admit_loadtab *t, int64_t now_ms, int64_t max_age_ms);

#endif
