/* mock: an OpenAI-compatible fake LLM inference engine on evhttp.
 *
 * It serves /v1/chat/completions and /v1/completions with made-up tokens ("tok0 tok1 ...")
 * at the pace of a real engine: requests are spread round robin over data-parallel ranks,
 * each rank runs at most max_num_seqs at once and queues the rest, and prefill and decode
 * take the time the Dynamo mocker model gives them. /metrics exposes the vLLM gauges
 * admission control reads, plus counters that let tests prove what reached the engine
 * (the peak of concurrently running requests, cancellations).
 *
 * The engine is a library so admitd can run it in-process on its own event_base; the
 * admit-mock-engine program is a thin main around it. */
#ifndef ADMIT_MOCK_H
#define ADMIT_MOCK_H

#include "log.h"
#include "netaddr.h"

#include <stddef.h>

struct event_base;
struct mock_engine;

/* Defaults of struct mock_opts. */
#define MOCK_DEFAULT_BLOCK_SIZE             16
#define MOCK_DEFAULT_NUM_GPU_BLOCKS         16384
#define MOCK_DEFAULT_MAX_NUM_SEQS           256
#define MOCK_DEFAULT_MAX_NUM_BATCHED_TOKENS 8192
#define MOCK_DEFAULT_MODEL                  "mock-model"
#define MOCK_DEFAULT_LISTEN                 "127.0.0.1:8000"
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
    char model[128];                 /* model name served */
    struct hostport listen;          /* --listen, used by the program's main */
    enum log_level log_level;        /* --log-level, used by the program's main */
};

/** fills o with the defaults (speedup 1, the MOCK_DEFAULT_* values, info logging) */
void mock_opts_defaults(struct mock_opts *o);
/** parses argv over o; 0 = run, 1 = --help/--version printed on stdout, -1 = err set */
int mock_opts_parse(struct mock_opts *o, int argc, char **argv, char *err, size_t errlen);
/** creates an engine serving on base (no listener yet); allocation failure aborts */
struct mock_engine *mock_engine_new(struct event_base *base, const struct mock_opts *o);
/** listens on host:port (port 0 = ephemeral) and writes the real "host:port" into bound */
int mock_engine_bind(struct mock_engine *e, const char *host, int port, char *bound,
                     size_t boundlen, char *err, size_t errlen);
/** drops every request (in flight or waiting), timer, connection and listener; NULL is a no-op */
void mock_engine_free(struct mock_engine *e);

#endif
