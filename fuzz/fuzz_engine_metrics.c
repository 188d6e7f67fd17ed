/* libFuzzer harness for the Prometheus text parser and the vLLM/SGLang extraction: any
 * bytes are survived, and every extracted value is in range. */
#include "admission/engine_metrics.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct engine_snapshot s;

    engine_metrics_parse((const char *) data, size, &s);
    if (s.nranks > ENGINE_MAX_RANKS || s.malformed_lines < 0)
        abort();
    for (unsigned i = 0; i < s.nranks; i++) {
        const struct engine_rank *r = &s.ranks[i];
        if (!isnan(r->kv_usage) && (r->kv_usage < 0 || r->kv_usage > 1))
            abort();
        if (r->running < ENGINE_UNKNOWN || r->waiting < ENGINE_UNKNOWN ||
            r->block_size < ENGINE_UNKNOWN || r->num_gpu_blocks < ENGINE_UNKNOWN ||
            r->max_num_batched_tokens < ENGINE_UNKNOWN)
            abort();
    }
    return 0;
}
