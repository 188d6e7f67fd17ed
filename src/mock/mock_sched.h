/* mock_sched: the mock engine's scheduler (ranks, timers, token generation, cancellation)
 * and the engine state it shares with the HTTP surface in mock.c, which is the only user of
 * this header: the dependency runs one way, mock -> mock_sched -> mock_opts.
 *
 * Invariant: every accepted generation request is an mreq on exactly one list of exactly one
 * rank, waiting or running, until mreq_free() unlinks it; the rank counters always equal the
 * list lengths, and own_blocks equals the sum, over its running requests, of the blocks each
 * holds outside the prefix cache. A running request holds references on its rank's prefix
 * cache blocks (mock_kvcache) until it is freed; a waiting one holds none. */
#ifndef ADMIT_MOCK_SCHED_H
#define ADMIT_MOCK_SCHED_H

#include "mock_opts.h"
#include "mock_model.h"
#include "mock_kvcache.h"
#include "mock_disagg.h"
#include "mock_busy.h"
#include "util/netaddr.h"

#include <sys/queue.h>

#include <stdint.h>

struct evhttp;
struct evhttp_request;
struct evbuffer;

struct mreq;
struct mock_kvpub;
TAILQ_HEAD(mreq_list, mreq);

/* One data-parallel rank: its own sequence slots, queue and KV cache. */
struct mock_rank {
    unsigned index;
    struct mreq_list waiting; /* FIFO of requests that have no sequence slot yet */
    struct mreq_list running; /* at most max_num_seqs */
    unsigned nwaiting, nrunning;
    /* KV blocks the running requests hold outside the prefix cache, each its own: every
     * block without a cache; with one, each context's partial last block and any full block
     * the cache had no room for. With the cache's held blocks, the KV in use (see
     * mock_rank_kv_blocks) */
    uint64_t own_blocks;
    struct mock_kvc *cache;   /* the prefix cache; NULL with --no-enable-prefix-caching */
    struct mock_kvpub *kvpub; /* its KV events publisher; NULL without --kv-events-endpoint */
    uint64_t prefix_queries;  /* prompt tokens looked up in the cache */
    uint64_t prefix_hits;     /* of which cached */
    uint64_t prompt_tokens_total;
    uint64_t generation_tokens_total;
    struct mock_busy busy;    /* its prefill work, with --prefill-interference */
    uint64_t decode_stalls;   /* decode tokens that waited for its prefill work */
    uint64_t decode_stall_us; /* how long they waited, in all */
};

struct mock_engine {
    struct event_base *base;
    struct evhttp *http;
    struct mock_opts o;
    struct mock_rank *ranks;    /* o.data_parallel_size of them */
    unsigned next_rank;         /* round robin cursor */
    struct evbuffer *scratch;   /* one SSE event at a time, handed to evhttp */
    uint32_t *block_ids;        /* o.block_size ids: a block of prompt and generated tokens */
    unsigned running_total;     /* over all ranks */
    unsigned running_peak;      /* highest running_total ever */
    unsigned in_flight;         /* requests running or waiting, over all ranks */
    unsigned in_flight_max;     /* highest in_flight ever */
    uint64_t requests_total;    /* generation requests received, valid or not */
    uint64_t cancelled_total;   /* clients that left before the end */
    uint64_t connections_total; /* client connections accepted */
    struct mock_kvx_counts kvx; /* disaggregated legs served, prompt tokens prefilled */
    uint32_t next_own_block;    /* the next id of a block outside the prefix cache */
    char engine_id[NETADDR_HOST_MAX + 16]; /* a prefill leg's remote_engine_id */
    char kv_host[NETADDR_HOST_MAX];        /* ... and remote_host: the listener's host */
    int named;                             /* the two are the first listener's */
    uint64_t next_id;
    void *zctx;        /* the ZMQ context of the KV events publishers, or NULL */
    long long started; /* Unix time of creation, the "created" of the served model */
};

/* Longest X-Request-Id the mock echoes; a longer one is ignored (see mock.c). */
#define MOCK_REQUEST_ID_MAX 128

/* A validated generation request, as the HTTP surface hands it over. */
struct mock_gen {
    enum mock_api api;
    int stream;
    int include_usage;
    unsigned prompt_tokens;
    uint32_t *ids; /* the prompt's token ids (prompt_tokens of them), taken over by submit */
    size_t nids;
    unsigned max_tokens; /* 1..MOCK_MAX_TOKENS_CAP */
    uint64_t kv_seed;    /* mock_kvc_salt() of its cache_salt, 0 without one */
    struct mock_kvx kvx; /* its kv_transfer_params: which leg of a disaggregated request */
    const char *model;   /* echoed back; the engine copies it */
    /* the client's valid X-Request-Id (the base of the completion id, as vLLM's), or NULL
     * for the engine's own; the engine copies it */
    const char *request_id;
};

/** KV blocks the rank's running requests hold, a block shared by several once: vLLM's
 * usage (cached blocks that no running request holds are free, so they do not count) */
uint64_t mock_rank_kv_blocks(const struct mock_rank *r);
/** answers req with status code and the JSON value j (which it releases); no body for HEAD */
void mock_reply_json(struct evhttp_request *req, int code, json_t *j);
/** takes over req and g->ids: queues it on the next rank and answers it when its tokens are
 * done */
void mock_sched_submit(struct mock_engine *e, struct evhttp_request *req, const struct mock_gen *g);
/** frees every request of every rank without answering; the connections stay with evhttp */
void mock_sched_drop_all(struct mock_engine *e);

#endif
