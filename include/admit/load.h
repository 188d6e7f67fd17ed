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
/* The bounds of a model list (the `models` field): at most this many names, each 1 to
 * ADMIT_LOAD_MODEL_NAME_MAX bytes without control bytes (0x00-0x1f), distinct, and the
 * array written compactly (only `"` and `\` escaped, as they must be) at most
 * ADMIT_LOAD_MODELS_JSON_MAX bytes, brackets included. A list over them is not sent: the
 * publisher sends `null` (unknown), which a router takes as "accepts any model". */
#define ADMIT_LOAD_MODELS_MAX      64
#define ADMIT_LOAD_MODEL_NAME_MAX  127
#define ADMIT_LOAD_MODELS_JSON_MAX 512

/* What the worker is doing. */
enum admit_load_state {
    ADMIT_LOAD_SERVING = 0, /* accepting requests */
    ADMIT_LOAD_DRAINING     /* finishing what it has, refusing new work */
};

/* What part of a request a worker serves (the `role` field; docs/load-message.md). A message
 * without the field is from an aggregated worker, ADMIT_LOAD_ROLE_BOTH: the role of every
 * worker before disaggregated serving. */
enum admit_load_role {
    ADMIT_LOAD_ROLE_BOTH = 0, /* aggregated: prefill and decode of whole requests */
    ADMIT_LOAD_ROLE_PREFILL,  /* the prefill leg only (vLLM: kv_transfer_params do_remote_decode) */
    ADMIT_LOAD_ROLE_DECODE    /* the decode leg only, its KV transferred from a prefill worker */
};

/* The engine's model names (whole worker, the same in every rank's message), packed: n
 * NUL-terminated names one after another in names[0 .. len). n is ADMIT_LOAD_UNKNOWN when
 * the list is not known (never scraped, or over the bounds, or from a publisher older than
 * the field); 0 is a known empty list. Build one with admit_load_models_clear() and
 * admit_load_models_add(), which keep it within the bounds; json is its compact JSON length. */
struct admit_load_models {
    int n;
    unsigned len;  /* bytes of names used, NULs included */
    unsigned json; /* bytes of the list as the encoder writes it ("[...]"); 0 when unknown */
    char names[ADMIT_LOAD_MODELS_JSON_MAX]; /* fits: a name takes >= 3 more bytes in JSON */
};

/* One rank's load. Numeric fields hold ADMIT_LOAD_UNKNOWN when not known.
 *
 * kv_block_size was added to version 1 compatibly: publishers before it do not send the key,
 * and such a message decodes with kv_block_size unknown. It is the block size of
 * active_decode_blocks (the engine's when it reports one, else admitd's --block-size), so a
 * router can book ceil(prompt tokens / kv_block_size) blocks per request; 0 is refused.
 * models was added the same way: absent (or null) decodes as an unknown list. So was role:
 * absent (or null) decodes as both, which the encoder does not write (an aggregated worker's
 * messages are what they were before the field); any value but a role's name is refused. */
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
    int64_t heartbeat_ms;            /* the publisher's heartbeat interval */
    struct admit_load_models models; /* added to v1 compatibly, like kv_block_size */
    enum admit_load_role role;       /* added to v1 compatibly: absent decodes as both */
};

/** sets every numeric field to unknown, state serving, worker id empty */
void admit_load_init(struct admit_load *m);
/** 1 when id is a worker id as admitd takes one (its --worker-id): 1 to
 *  ADMIT_LOAD_WORKER_ID_MAX bytes of printable ASCII other than space, '"' and '\\'. The
 *  wire carries any string; admit-router refuses a message whose id breaks this rule */
int admit_load_worker_id_ok(const char *id);
/** the wire name of a state ("serving", "draining") */
const char *admit_load_state_name(enum admit_load_state s);
/** the wire name of a role ("both", "prefill", "decode") */
const char *admit_load_role_name(enum admit_load_role r);
/** the role a wire name names (len bytes); 0, or -1 when it names none */
int admit_load_role_parse(const char *name, size_t len, enum admit_load_role *out);
/** writes "kv_metrics {...}" into buf; returns its length, or -1 if it does not fit */
int admit_load_encode(const struct admit_load *m, char *buf, size_t cap);
/** parses and validates one message (topic included); 0, or -1 with a reason in err */
int admit_load_decode(const void *data, size_t len, struct admit_load *out, char *err,
                      size_t errlen);
/** writes the message's JSON object alone (no topic) into buf; length or -1 */
int admit_load_to_json(const struct admit_load *m, char *buf, size_t cap);

/** makes l an unknown list */
void admit_load_models_unknown(struct admit_load_models *l);
/** makes l a known, empty list */
void admit_load_models_clear(struct admit_load_models *l);
/** appends name (len bytes, no NUL needed) to the known list l; one already there is kept
 *  once. 0, or -1 when the name is invalid (empty, over ADMIT_LOAD_MODEL_NAME_MAX, a control
 *  byte) and -2 when the list would go over its bounds; on failure l is unchanged */
int admit_load_models_add(struct admit_load_models *l, const char *name, size_t len);
/** the name after prev in l (prev NULL: the first); NULL after the last or when unknown */
const char *admit_load_models_next(const struct admit_load_models *l, const char *prev);
/** 1 when the known list l holds name */
int admit_load_models_has(const struct admit_load_models *l, const char *name);
/** 1 when a and b are the same list (both unknown, or the same names in the same order) */
int admit_load_models_equal(const struct admit_load_models *a, const struct admit_load_models *b);

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
