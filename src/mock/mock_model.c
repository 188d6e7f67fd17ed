/* mock_model: Dynamo mocker timing formulas and prompt token counts. */
#include "mock_model.h"

#include <limits.h>
#include <math.h>

/* Dynamo mocker's prefill fit: quadratic in prompt length (attention), in ms. */
#define PREFILL_A 4.209989e-7
#define PREFILL_B 0.01518344
#define PREFILL_C 16.50142

/* Dynamo mocker's decode fit: one step as a function of KV cache fill, in ms. */
#define DECODE_A      (-25.74)
#define DECODE_B      54.01
#define DECODE_C      5.74
#define DECODE_MIN_MS 1.0

double mock_prefill_ms(unsigned prompt_tokens, double speedup)
{
    double t = (double) prompt_tokens;

    /* !(speedup > 0) also catches NaN: "no delay" is the only safe reading of it. */
    if (prompt_tokens == 0 || !(speedup > 0))
        return 0.0;
    return (PREFILL_A * t * t + PREFILL_B * t + PREFILL_C) / speedup;
}

double mock_decode_ms(double u, double speedup)
{
    double ms;

    if (!(speedup > 0))
        return 0.0;
    if (!(u > 0)) /* negative or NaN */
        u = 0.0;
    else if (u > 1)
        u = 1.0;
    ms = DECODE_A * u * u + DECODE_B * u + DECODE_C;
    if (ms < DECODE_MIN_MS)
        ms = DECODE_MIN_MS;
    return ms / speedup;
}

unsigned mock_text_tokens(size_t bytes)
{
    size_t t = bytes / 4 + (bytes % 4 != 0);

    return t > UINT_MAX ? UINT_MAX : (unsigned) t;
}

unsigned mock_blocks_for(unsigned tokens, unsigned block_size)
{
    if (block_size == 0)
        block_size = 1;
    return tokens / block_size + (tokens % block_size != 0);
}

unsigned mock_prompt_tokens(const json_t *body, enum mock_api api)
{
    struct mock_toks t = {0};
    size_t n;

    mock_tok_body(&t, body, api);
    n = t.n;
    mock_toks_free(&t);
    return n > UINT_MAX ? UINT_MAX : (unsigned) n;
}
