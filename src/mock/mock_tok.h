/* mock_tok: the mock engine's deterministic tokenizer and its one chat template.
 *
 * Pure: text to token ids, with no vocabulary file. A text is cut into pieces of 4 bytes
 * (the last may be shorter), each piece's id a stable hash of its bytes, so that a text of
 * N bytes is ceil(N / 4) tokens: the estimate admitd and the router use, and the fixed-size
 * text pieces llm-d hashes. A chat is rendered through one template at the token level:
 *
 *   per message:        <|im_start|> ROLE <nl> content-pieces... <|im_end|>
 *   generation prompt:  <|im_start|> ROLE(assistant) <nl>
 *
 * Each message's content starts a new piece, so turn k+1's tokens begin with exactly turn k's
 * prompt tokens followed by its answer's tokens, as a real chat template gives. The engine's
 * generated text is made of 4-byte pieces ("tok0", "tok1", ...), so its text tokenizes back to
 * exactly the ids generated. See docs/mock-engine.md. */
#ifndef ADMIT_MOCK_TOK_H
#define ADMIT_MOCK_TOK_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes per text piece, and so per token. */
#define MOCK_TOK_PIECE 4
/* Ids are below this (Qwen2's vocabulary size); ids under MOCK_TOK_FIRST_TEXT are special. */
#define MOCK_TOK_VOCAB 151936
/* Special ids of the chat template. */
#define MOCK_TOK_IM_START   1
#define MOCK_TOK_IM_END     2
#define MOCK_TOK_NL         3
#define MOCK_TOK_FIRST_TEXT 16

/* A growing array of token ids. */
struct mock_toks {
    uint32_t *ids;
    size_t n, cap;
};

/* The two request shapes the engine serves. */
enum mock_api {
    MOCK_API_CHAT = 0,    /* /v1/chat/completions: messages[] */
    MOCK_API_COMPLETIONS, /* /v1/completions: prompt */
};

/** id of one text piece (1 to MOCK_TOK_PIECE bytes): a stable hash, >= MOCK_TOK_FIRST_TEXT */
uint32_t mock_tok_piece_id(const char *p, size_t len);
/** appends the ids of text (len bytes, any bytes) to t */
void mock_tok_text(struct mock_toks *t, const char *text, size_t len);
/** appends the ids of messages[] rendered through the template (+ generation prompt if gen) */
void mock_tok_chat(struct mock_toks *t, const json_t *messages, int gen);
/** appends the prompt ids of a request body of the given api (any JSON shape: unknown parts add
 * nothing); chat bodies get the generation prompt */
void mock_tok_body(struct mock_toks *t, const json_t *body, enum mock_api api);
/** the text of generated token i: exactly MOCK_TOK_PIECE bytes, no NUL, written to out */
void mock_tok_gen_text(unsigned i, char out[MOCK_TOK_PIECE]);
/** the id of generated token i: the id its text tokenizes to */
uint32_t mock_tok_gen_id(unsigned i);
/** frees t's array and empties it */
void mock_toks_free(struct mock_toks *t);

#endif
