/* mock_tok: 4-byte text pieces hashed to ids, and the chat template at the token level. */
#include "mock_tok.h"
#include "util/xmalloc.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a 32 offset bases: one for text pieces, another for role names, so that the role
 * "user" and the text piece "user" are different tokens. */
#define FNV_PIECE 2166136261u
#define FNV_ROLE  0x9747b28cu
#define FNV_PRIME 16777619u

/* The 62 characters after "tok" in generated pieces: token i ends in GEN_CHARS[i % 62]. */
static const char GEN_CHARS[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

static uint32_t fnv_id(uint32_t h, const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char) p[i]) * FNV_PRIME;
    return MOCK_TOK_FIRST_TEXT + h % (MOCK_TOK_VOCAB - MOCK_TOK_FIRST_TEXT);
}

uint32_t mock_tok_piece_id(const char *p, size_t len)
{
    return fnv_id(FNV_PIECE, p, len);
}

static void push(struct mock_toks *t, uint32_t id)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->ids = xrealloc(t->ids, t->cap * sizeof *t->ids);
    }
    t->ids[t->n++] = id;
}

void mock_tok_text(struct mock_toks *t, const char *text, size_t len)
{
    for (size_t i = 0; i < len; i += MOCK_TOK_PIECE)
        push(t, mock_tok_piece_id(text + i, len - i < MOCK_TOK_PIECE ? len - i : MOCK_TOK_PIECE));
}

static void tok_string(struct mock_toks *t, const json_t *s)
{
    mock_tok_text(t, json_string_value(s), json_string_length(s));
}

/* A chat content: a string, or an array of parts of which only text parts count, each its
 * own run of pieces. */
static void tok_content(struct mock_toks *t, const json_t *content)
{
    const json_t *part;
    size_t i;

    if (json_is_string(content))
        tok_string(t, content);
    if (!json_is_array(content))
        return;
    json_array_foreach(content, i, part)
    {
        const json_t *type = json_object_get(part, "type");
        const json_t *text = json_object_get(part, "text");

        if (!json_is_string(text))
            continue;
        if (type != NULL && !(json_is_string(type) && strcmp(json_string_value(type), "text") == 0))
            continue;
        tok_string(t, text);
    }
}

static void tok_header(struct mock_toks *t, const char *role, size_t len)
{
    push(t, MOCK_TOK_IM_START);
    push(t, fnv_id(FNV_ROLE, role, len));
    push(t, MOCK_TOK_NL);
}

void mock_tok_chat(struct mock_toks *t, const json_t *messages, int gen)
{
    const json_t *msg;
    size_t i;

    json_array_foreach(messages, i, msg)
    {
        const json_t *role = json_object_get(msg, "role");

        /* Anything but an object is no message; a message without a role has the empty one. */
        if (!json_is_object(msg))
            continue;
        if (json_is_string(role))
            tok_header(t, json_string_value(role), json_string_length(role));
        else
            tok_header(t, "", 0);
        tok_content(t, json_object_get(msg, "content"));
        push(t, MOCK_TOK_IM_END);
    }
    if (gen)
        tok_header(t, "assistant", strlen("assistant"));
}

/* One element of a prompt array: a text, a token id, or a list of token ids. Nesting stops
 * at this level, so no input can make the tokenizer recurse. */
static void tok_prompt_item(struct mock_toks *t, const json_t *item)
{
    const json_t *id;
    size_t i;

    if (json_is_string(item))
        tok_string(t, item);
    else if (json_is_integer(item))
        push(t, (uint32_t) json_integer_value(item));
    else if (json_is_array(item))
        json_array_foreach(item, i, id)
        {
            if (json_is_integer(id))
                push(t, (uint32_t) json_integer_value(id));
        }
}

void mock_tok_body(struct mock_toks *t, const json_t *body, enum mock_api api)
{
    const json_t *prompt = json_object_get(body, "prompt");
    const json_t *item;
    size_t i;

    if (!json_is_object(body))
        return;
    if (api == MOCK_API_CHAT) {
        const json_t *messages = json_object_get(body, "messages");

        if (json_is_array(messages))
            mock_tok_chat(t, messages, 1);
        return;
    }
    if (json_is_string(prompt))
        tok_string(t, prompt);
    else if (json_is_array(prompt))
        json_array_foreach(prompt, i, item) tok_prompt_item(t, item);
}

void mock_tok_gen_text(unsigned i, char out[MOCK_TOK_PIECE])
{
    memcpy(out, "tok", 3);
    out[3] = GEN_CHARS[i % (sizeof GEN_CHARS - 1)];
}

uint32_t mock_tok_gen_id(unsigned i)
{
    char p[MOCK_TOK_PIECE];

    mock_tok_gen_text(i, p);
    return mock_tok_piece_id(p, sizeof p);
}

void mock_toks_free(struct mock_toks *t)
{
    free(t->ids);
    memset(t, 0, sizeof *t);
}
