/* mock_opts: the mock engine's options (defaults, --flag parsing, --help).
 *
 * Both the HTTP surface (mock) and the scheduler (mock_sched) read the options; they live
 * here so that neither of those two modules needs the other's header for them. */
#ifndef ADMIT_MOCK_OPTS_H
#define ADMIT_MOCK_OPTS_H

#include "admit/load.h"
#include "util/log.h"
#include "util/netaddr.h"

#include <stddef.h>

/* Defaults of struct mock_opts. */
#define MOCK_DEFAULT_BLOCK_SIZE             16
#define MOCK_DEFAULT_NUM_GPU_BLOCKS         16384
#define MOCK_DEFAULT_MAX_NUM_SEQS           256
#define MOCK_DEFAULT_MAX_NUM_BATCHED_TOKENS 8192
#define MOCK_DEFAULT_MODEL                  "mock-model"
#define MOCK_DEFAULT_LISTEN                 "127.0.0.1:8000"
/* Most --served-model-name names, beside --model-name. */
#define MOCK_MAX_SERVED 8
/* Batches each rank keeps for its KV events replay socket (vLLM's buffer_steps). */
#define MOCK_DEFAULT_KV_BUFFER_STEPS 10000
/* Longest --kv-events-* endpoint or topic. */
#define MOCK_KV_ENDPOINT_MAX 256

/* How KV events are packed (--kv-events-encoding): vLLM's events as arrays with the tag
 * first (until mid-2026), or as maps with the tag under "type" (vLLM 0.26). */
enum mock_kv_encoding { MOCK_KV_POSITIONAL, MOCK_KV_MAP };

/* Largest max_tokens honoured; larger requests are cut to it. */
#define MOCK_MAX_TOKENS_CAP 100000

struct mock_opts {
    double speedup_ratio;            /* divides all model delays; 0 = no delay at all */
    unsigned block_size;             /* tokens per KV block */
    unsigned num_gpu_blocks;         /* KV blocks per data-parallel rank */
    unsigned max_num_seqs;           /* per rank: requests that run at once; the rest wait */
    unsigned max_num_batched_tokens; /* only reported in metrics */
    unsigned data_parallel_size;     /* ranks */
    unsigned token_interval_ms;      /* > 0: fixed gap per token instead of the decode model */
    unsigned stop_after;             /* > 0: the Nth token ends every request ("stop") */
    int prefill_interference;        /* prefills serialised per rank, stalling its decodes */
    /* --role: what part of a disaggregated request the engine is deployed for, only reported
     * (/metrics admit_mock_role_info): every engine serves both legs and whole requests, as
     * vLLM with a NixlConnector serves a request without kv_transfer_params whole */
    enum admit_load_role role;
    int no_prefix_caching;             /* --no-enable-prefix-caching (0, the default: cache on) */
    int prompt_tokens_details;         /* --enable-prompt-tokens-details: cached_tokens in usage */
    int details_if_cached;             /* --prompt-tokens-details-if-cached: ... only above 0 */
    unsigned tokenize_status;          /* --tokenize-status: /tokenize answers it (0: tokens) */
    int tokenize_hang;                 /* --tokenize-hang: /tokenize never answered */
    char model[128];                   /* model name served (and echoed when a request has none) */
    char served[MOCK_MAX_SERVED][128]; /* more names /v1/models lists (--served-model-name) */
    unsigned nserved;
    /* KV events (vLLM's --kv-events-config): off while kv_endpoint is empty */
    char kv_endpoint[MOCK_KV_ENDPOINT_MAX];        /* ZMQ PUB of rank 0; rank r at port + r */
    char kv_replay_endpoint[MOCK_KV_ENDPOINT_MAX]; /* ZMQ ROUTER of rank 0; "" = none */
    char kv_topic[MOCK_KV_ENDPOINT_MAX];           /* the first frame of every message */
    enum mock_kv_encoding kv_encoding;
    int kv_hash_bytes;        /* block hashes as 8 bytes, big-endian, instead of integers */
    unsigned kv_buffer_steps; /* batches kept for replay, per rank */
    struct hostport listen;   /* --listen, used by the program's main */
    enum log_level log_level; /* --log-level, used by the program's main */
};

/** fills o with the defaults (speedup 1, the MOCK_DEFAULT_* values, info logging) */
void mock_opts_defaults(struct mock_opts *o);
/** parses argv over o; 0 = run, 1 = --help/--version printed on stdout, -1 = err set */
int mock_opts_parse(struct mock_opts *o, int argc, char **argv, char *err, size_t errlen);
#endif
