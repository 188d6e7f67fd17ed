/* engine_metrics: per-rank load of a vLLM or SGLang engine, from one /metrics scrape.
 *
 * admitd decides admission from how full each data-parallel rank of the engine is: requests
 * running and waiting, and KV cache in use. The engines publish these as Prometheus gauges
 * whose names and labels differ between engines and between their versions; this module
 * hides that behind one snapshot. It is pure (text in, struct out) so it can be unit-tested
 * against recorded scrapes and fuzzed.
 *
 * Ranks come from the `engine` label (vLLM) or `dp_rank` (SGLang); a sample without it
 * belongs to rank 0, one whose rank is not a decimal below ENGINE_MAX_RANKS is ignored.
 * Settings published without a rank label (vLLM's cache_config_info in some versions,
 * max_num_batched_tokens, SGLang's page_size) apply to every rank seen. The kind is vLLM if
 * any vLLM metric was recognised, else SGLang if any SGLang one was. */
#ifndef ADMIT_ENGINE_METRICS_H
#define ADMIT_ENGINE_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* Most data-parallel ranks tracked; higher ranks are ignored. */
#define ENGINE_MAX_RANKS 64
/* An int64 field the engine did not report; double fields use NaN instead. */
#define ENGINE_UNKNOWN (-1)

/* Which engine the metrics came from. */
enum engine_kind {
    ENGINE_KIND_UNKNOWN = 0,
    ENGINE_KIND_VLLM,
    ENGINE_KIND_SGLANG,
};

/* The load and KV geometry of one data-parallel rank. */
struct engine_rank {
    int present;                    /* any metric for this rank was seen */
    double kv_usage;                /* 0..1 fraction of KV cache in use, NaN if unknown */
    int64_t running, waiting;       /* requests; ENGINE_UNKNOWN if not reported */
    int64_t block_size;             /* tokens per KV block; ENGINE_UNKNOWN */
    int64_t num_gpu_blocks;         /* KV blocks of this rank; ENGINE_UNKNOWN */
    int64_t max_num_batched_tokens; /* ENGINE_UNKNOWN if not reported */
};

/* Everything learnt from one scrape. Ranks at or above nranks are all unknown. */
struct engine_snapshot {
    enum engine_kind kind;
    unsigned nranks; /* 1 + highest rank seen (0 if nothing recognised) */
    struct engine_rank ranks[ENGINE_MAX_RANKS];
    int malformed_lines;
};

/** parses one /metrics body; returns 0 if at least one known metric was found, -1 otherwise */
int engine_metrics_parse(const char *text, size_t len, struct engine_snapshot *out);

#endif
