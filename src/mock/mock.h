/* mock: an OpenAI-compatible fake LLM inference engine on evhttp.
 *
 * It serves /v1/chat/completions and /v1/completions with made-up tokens ("tok0tok1...")
 * at the pace of a real engine: requests are spread round robin over data-parallel ranks,
 * each rank runs at most max_num_seqs at once and queues the rest, and prefill and decode
 * take the time the Dynamo mocker model gives them, prefill only for the prompt tokens not
 * found in the rank's prefix cache (mock_kvcache); /tokenize shows the ids (mock_tok).
 * /metrics exposes the vLLM gauges admission control reads, plus counters that let tests
 * prove what reached the engine (the peak of concurrently running requests, cancellations).
 *
 * The engine is a library so admitd can run it in-process on its own event_base; the
 * admit-mock-engine program is a thin main around it. */
#ifndef ADMIT_MOCK_H
#define ADMIT_MOCK_H

#include "mock_opts.h"

#include <stddef.h>

struct event_base;
struct mock_engine;

/** creates an engine serving on base (no listener yet); allocation failure aborts */
struct mock_engine *mock_engine_new(struct event_base *base, const struct mock_opts *o);
/** listens on host:port (port 0 = ephemeral) and writes the real "host:port" into bound */
int mock_engine_bind(struct mock_engine *e, const char *host, int port, char *bound,
                     size_t boundlen, char *err, size_t errlen);
/** drops every request (in flight or waiting), timer, connection and listener; NULL is a no-op */
void mock_engine_free(struct mock_engine *e);

#endif
