/* mock_model: the timing model and token accounting of the mock engine.
 *
 * Pure: no sockets and no event loop, so every number the engine derives from a request
 * (how long prefill takes, how long a decode step takes, how many tokens a prompt holds,
 * how many KV blocks that is) can be unit-tested exactly. The delay formulas are the ones
 * NVIDIA Dynamo's mocker fits to a real engine. */
#ifndef ADMIT_MOCK_MODEL_H
#define ADMIT_MOCK_MODEL_H

#include "mock_tok.h"

#include <jansson.h>
#include <stddef.h>

/** prefill time in ms for prompt_tokens to compute (the uncached ones); 0 for none or speedup <= 0
 */
double mock_prefill_ms(unsigned prompt_tokens, double speedup);
/** time of one decode step in ms at KV fill fraction u (clamped to [0,1]); 0 if speedup <= 0 */
double mock_decode_ms(double u, double speedup);
/** estimated tokens of a text of the given byte length: ceil(bytes / 4) */
unsigned mock_text_tokens(size_t bytes);
/** prompt tokens of a parsed request body as mock_tok gives them; any JSON shape is accepted */
unsigned mock_prompt_tokens(const json_t *body, enum mock_api api);
/** KV blocks needed to hold tokens: ceil(tokens / block_size) (block_size 0 counts as 1) */
unsigned mock_blocks_for(unsigned tokens, unsigned block_size);

#endif
