/* pdbody: the bodies of vLLM's disaggregated prefill/decode flow (NixlConnector's proxy
 * protocol, as vLLM's toy proxy speaks it), for admit-router's disaggregated requests.
 *
 * The prefill leg is the client's body with kv_transfer_params {"do_remote_decode": true, the
 * rest null}, stream false, max_tokens 1 (and max_completion_tokens 1 when the body has it), and
 * no stream_options, min_tokens or min_completion_tokens; a client that asked for one token
 * asks for no transfer (its prefill is its answer). The prefill worker answers a whole
 * completion with a top-level kv_transfer_params (where its KV waits); the decode leg is the
 * client's body again with that value in kv_transfer_params, as the answer gave it. A prefill
 * answer that finished on its one token (a stop, or the client asked for one token) is the
 * client's answer; a streaming client then gets it as the SSE stream the engine would have
 * sent. Pure: JSON in, JSON out; network input is checked, never trusted. */
#ifndef ADMIT_ROUTER_PDBODY_H
#define ADMIT_ROUTER_PDBODY_H

#include "util/buf.h"

#include <stddef.h>

/* What a client's request asks, as the flow needs it. */
struct pd_facts {
    int stream;        /* "stream": true */
    int include_usage; /* "stream_options": {"include_usage": true} */
    int one_token;     /* max_tokens or max_completion_tokens is 1: the prefill is the answer */
    int chat;          /* has "messages" (chat completions), else completions */
};

/* What a prefill answer is. */
enum pd_answer {
    PD_HANDOFF, /* a kv_transfer_params object: the decode leg goes on with it */
    PD_DONE,    /* finished: it is the client's answer */
    PD_INVALID, /* not an answer the flow can use (no object, no choices, length without params) */
};

/** the prefill leg's body of a client's body into out, and the client's facts; 0, or -1 when
 *  the body is not a JSON object (out unchanged) */
int pd_prefill_body(const char *body, size_t len, struct buf *out, struct pd_facts *facts);
/** the decode leg's body into out: the client's body with kv_transfer_params set to the JSON
 *  value params[0 .. plen) (pd_answer_read()'s, copied as it is); 0, or -1 when the body is
 *  not a JSON object (out unchanged) */
int pd_decode_body(const char *body, size_t len, const char *params, size_t plen, struct buf *out);
/** pd_prefill_body() through a jansson tree (what it does past the scanner's limits); the
 *  same body, members in the same order (for the tests that hold the two paths together) */
int pd_prefill_body_tree(const char *body, size_t len, struct buf *out, struct pd_facts *facts);
/** pd_decode_body() through a jansson tree, the same way */
int pd_decode_body_tree(const char *body, size_t len, const char *params, size_t plen,
                        struct buf *out);
/** reads a prefill answer: PD_HANDOFF with its kv_transfer_params (compact JSON) in params,
 *  PD_DONE when it finished (a finish_reason other than "length", or f->one_token), else
 *  PD_INVALID */
enum pd_answer pd_answer_read(const char *ans, size_t len, const struct pd_facts *f,
                              struct buf *params);
/** the SSE stream of a finished answer (chat.completion.chunk or text_completion events, a
 *  usage event when asked, then [DONE]) into out; 0, or -1 when it is not a completion */
int pd_answer_sse(const char *ans, size_t len, const struct pd_facts *f, struct buf *out);

#endif
