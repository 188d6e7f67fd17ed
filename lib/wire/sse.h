/* sse: counts the events of a server-sent-events stream as it passes through.
 *
 * admitd books output tokens from the engine's SSE stream (one data event per token, as
 * vLLM and SGLang send them) without buffering or parsing JSON: a byte-at-a-time state
 * machine that survives any split of the stream into chunks and any bytes. The terminal
 * `data: [DONE]` is not a token. */
#ifndef ADMIT_SSE_H
#define ADMIT_SSE_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of a line remembered to recognise "data:" and "[DONE]". */
#define SSE_HEAD 16

/* Counter state; zero it with sse_init. */
struct sse_counter {
    uint64_t events;     /* data events seen, [DONE] excluded */
    uint64_t line_len;   /* bytes of the current line so far */
    char head[SSE_HEAD]; /* its first bytes */
    uint8_t event_data;  /* the current event has a data line */
    uint8_t event_done;  /* ... and it was [DONE] */
    uint8_t last_cr;     /* previous byte was CR (so a following LF ends nothing) */
};

/** resets a counter */
void sse_init(struct sse_counter *c);
/** feeds the next bytes of the stream; returns how many new events they completed */
unsigned sse_feed(struct sse_counter *c, const char *p, size_t n);

#endif
