/* tokenize: admit-router's client of the workers' tokenizer (--tokenize), so that a text
 * request is keyed by the token ids its engine will see.
 *
 * An engine's KV events, and its prefix cache, are over token ids: the ids of a chat request
 * are those of its messages rendered by the model's chat template, which the router does not
 * have. vLLM serves its tokenizer and template as POST /tokenize ({"prompt": text} or
 * {"messages": [...], "add_generation_prompt": true} -> {"count", "max_model_len", "tokens"});
 * admitd passes it to the engine outside its gate (docs/admitd.md). A call here asks one worker
 * that through its admitd, on a connection of that worker's keep-alive pool (the one the
 * router's requests to it use), with a deadline of its own, and hands the ids to a callback.
 * Nothing blocks: the router holds the request meanwhile and resumes it from the callback.
 *
 * Every call ends once: with the callback (ids, or a failure the caller answers by keying the
 * text), or by tokz_cancel() (the client left), after which nothing of it remains. Each end is
 * counted by result, and the time a call added (from its start to its end, failures included;
 * a cancelled call added nothing) goes into a histogram. */
#ifndef ADMIT_ROUTER_TOKENIZE_H
#define ADMIT_ROUTER_TOKENIZE_H

#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct upstream;
struct tokz;
struct tokz_call;

/* How a call ended (the label of admit_router_tokenize_total). */
enum tokz_result {
    TOKZ_OK = 0,    /* the ids came */
    TOKZ_TIMEOUT,   /* no whole answer within the deadline */
    TOKZ_FAILED,    /* no connection, or it broke before the answer was whole */
    TOKZ_STATUS,    /* an answer other than 200 */
    TOKZ_INVALID,   /* a 200 whose body has no list of token ids */
    TOKZ_NO_WORKER, /* no routable worker serves the model */
    TOKZ_CANCELLED, /* the client left first */
    TOKZ__COUNT
};

/* A call's end: ids[0 .. n) (n at most the call's max_ids) and count, the prompt's tokens as
 * the answer says, when res is TOKZ_OK; valid only during the call. */
typedef void (*tokz_cb)(void *arg, enum tokz_result res, const uint64_t *ids, size_t n,
                        int64_t count);

/** the tokenizer client on base, with its counters */
struct tokz *tokz_new(struct event_base *base);
/** frees it; every call must have ended (NULL is fine) */
void tokz_free(struct tokz *tz);
/** writes to out the /tokenize body for a request body: its "prompt" (a string) or
 *  "messages" (with "add_generation_prompt": true unless the body says otherwise), its
 *  "model", and what else shapes the chat template's text (tools, chat_template_kwargs,
 *  continue_final_message, add_special_tokens); 0, or -1 when the body has no prompt that
 *  /tokenize takes (not JSON, a batch, token ids) */
int tokz_body(const char *body, size_t len, struct buf *out);
/** starts a call: POST /tokenize with body[0 .. len) to up's engine, at most timeout_ms, the
 *  first max_ids ids kept; cb(arg, ...) later, from the loop, unless cancelled. NULL when no
 *  connection could even start: then the call ended TOKZ_FAILED already (counted, no cb) */
struct tokz_call *tokz_start(struct tokz *tz, struct upstream *up, const char *body, size_t len,
                             unsigned timeout_ms, size_t max_ids, tokz_cb cb, void *arg);
/** ends a call before its callback (the client left): its connection closed, counted
 *  TOKZ_CANCELLED; NULL is a no-op */
void tokz_cancel(struct tokz_call *c);
/** counts a call that could not be made (TOKZ_NO_WORKER) */
void tokz_count(struct tokz *tz, enum tokz_result res);
/** appends the families admit_router_tokenize_total and admit_router_tokenize_seconds */
void tokz_render_metrics(const struct tokz *tz, struct buf *out);

#endif
