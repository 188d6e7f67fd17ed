/* engine_models: the engine's model names, from its OpenAI-compatible GET /v1/models.
 *
 * admitd scrapes that endpoint now and then and sends the names in its load messages (the
 * `models` field, include/admit/load.h), so that a router knows which workers serve which
 * model. The answer is OpenAI's list shape, {"object":"list","data":[{"id":"NAME",...},...]}:
 * every entry's `id` is a name a request may put in its `model` (vLLM lists its served model
 * names and its LoRA adapters that way, SGLang the same). Pure: text in, list out, so it can
 * be unit-tested and fuzzed. */
#ifndef ADMIT_ENGINE_MODELS_H
#define ADMIT_ENGINE_MODELS_H

#include "admit/load.h"

#include <stddef.h>

/* What engine_models_parse() found. */
enum engine_models_result {
    ENGINE_MODELS_OK = 0,      /* out is the engine's list (known; duplicates listed once) */
    ENGINE_MODELS_TOO_MANY,    /* an answer, but its names do not fit a load message's bounds
                                  (or one cannot be sent): out is unknown, "accepts any" */
    ENGINE_MODELS_INVALID = -1 /* not such an answer: out is untouched, err says why */
};

/** parses one /v1/models answer body (len bytes) into out */
enum engine_models_result engine_models_parse(const char *body, size_t len,
                                              struct admit_load_models *out, char *err,
                                              size_t errlen);

#endif
