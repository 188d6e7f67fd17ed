/* mock_model: Dynamo mocker timing formulas and prompt token estimates. */
#include "mock_model.h"

#include <limits.h>
#include <math.h>
#include <string.h>

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

/* Counts saturate: a hostile body must not wrap a count around to a small number. */
static unsigned sat_add(unsigned a, unsigned b)
{
    return a > UINT_MAX - b ? UINT_MAX : a + b;
}

static unsigned string_tokens(const json_t *s)
{
    return mock_text_tokens(json_string_length(s));
}

/* A chat content: a string, or an array of parts of which only text parts count. */
static unsigned content_tokens(const json_t *content)
{
    unsigned n = 0;
    size_t i;
    const json_t *part;

    if (json_is_string(content))
        return string_tokens(content);
    if (!json_is_array(content))
        return 0;
    json_array_foreach(content, i, part)
    {
        const json_t *type = json_object_get(part, "type");
        const json_t *text = json_object_get(part, "text");

        if (!json_is_string(text))
            continue;
        if (type != NULL && !(json_is_string(type) && strcmp(json_string_value(type), "text") == 0))
            continue;
        n = sat_add(n, string_tokens(text));
    }
    return n;
}

static unsigned chat_tokens(const json_t *body)
{
    const json_t *messages = json_object_get(body, "messages");
    const json_t *msg;
    unsigned n = 0;
    size_t i;

    if (!json_is_array(messages))
        return 0;
    json_array_foreach(messages, i, msg)
    {
        if (!json_is_object(msg))
            continue;
        n = sat_add(n, MOCK_CHAT_MESSAGE_OVERHEAD);
        n = sat_add(n, content_tokens(json_object_get(msg, "content")));
    }
    return n;
}

/* One element of a prompt array: a text, a token id, or a list of token ids. Nesting stops
 * at this level, so no input can make the count recurse. */
static unsigned prompt_item_tokens(const json_t *item)
{
    const json_t *id;
    unsigned n = 0;
    size_t i;

    if (json_is_string(item))
        return string_tokens(item);
    if (json_is_integer(item))
        return 1;
    if (!json_is_array(item))
        return 0;
    json_array_foreach(item, i, id)
    {
        if (json_is_integer(id))
            n = sat_add(n, 1);
    }
    return n;
}

static unsigned completion_tokens(const json_t *body)
{
    const json_t *prompt = json_object_get(body, "prompt");
    const json_t *item;
    unsigned n = 0;
    size_t i;

    if (json_is_string(prompt))
        return string_tokens(prompt);
    if (!json_is_array(prompt))
        return 0;
    json_array_foreach(prompt, i, item) n = sat_add(n, prompt_item_tokens(item));
    return n;
}

unsigned mock_prompt_tokens(const json_t *body, enum mock_api api)
{
    if (!json_is_object(body))
        return 0;
    return api == MOCK_API_CHAT ? chat_tokens(body) : completion_tokens(body);
}
