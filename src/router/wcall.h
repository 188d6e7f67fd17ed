/* wcall: one POST from admit-router to a worker whose answer is wanted whole, not relayed: the
 * workers' /tokenize (tokenize.h) and the prefill leg of a disaggregated request (pdflow in
 * router.c).
 *
 * A call is one request on one connection of the worker's keep-alive pool (the one the
 * router's relayed requests to it use): written at once (a new connection's bytes wait in its
 * spill buffer while it connects), its answer read whole into the connection's buffer as the
 * engine pollers read theirs (http/hreply.h), the connection given back to the pool when the
 * answer left it fit for the next request. A kept connection found closed before a byte of the
 * request went out is replaced by a new one; one that broke after the request was written,
 * before any byte of the answer (an idle close crossing the request), is tried once more only
 * when the caller says the request may be sent twice (/tokenize changes nothing; a prefill
 * pins KV on its worker, and is never sent twice).
 *
 * Every call ends once: with its callback, or by wcall_cancel() (the client left), after which
 * nothing of it remains; the connection of a cancelled call is closed, so that the worker sees
 * the close and stops. Nothing blocks. */
#ifndef ADMIT_ROUTER_WCALL_H
#define ADMIT_ROUTER_WCALL_H

#include <stddef.h>

struct event_base;
struct upstream;
struct wcall;

/* How a call ended. */
enum wcall_end {
    WCALL_OK = 0,  /* a whole answer (any status) */
    WCALL_TIMEOUT, /* no whole answer within the deadline */
    WCALL_FAILED,  /* no connection, or it broke before the answer was whole */
    WCALL_INVALID, /* bytes that are no HTTP answer, or one past the body limit */
};

/* A call's end: with WCALL_OK the answer's status and its body[0 .. len), decoded, valid only
 * during the callback (else status 0, body NULL). */
typedef void (*wcall_cb)(void *arg, enum wcall_end end, int status, const char *body, size_t len);

/* What a call sends. */
struct wcall_req {
    const char *target;  /* "/tokenize", "/v1/chat/completions"... */
    const char *headers; /* extra field lines, each ending in CRLF ("" or NULL: none) */
    const char *body;    /* JSON, len bytes */
    size_t len;
    unsigned timeout_ms; /* the whole call's deadline */
    size_t body_max;     /* the largest answer body taken */
    int resend;          /* may be sent again after a kept connection broke (idempotent) */
};

/** starts a call to up's engine on base; cb(arg, ...) later, from the loop, unless cancelled.
 *  NULL when no connection could even start (then nothing remains and no cb comes) */
struct wcall *wcall_start(struct event_base *base, struct upstream *up, const struct wcall_req *rq,
                          wcall_cb cb, void *arg);
/** ends a call before its callback: its connection closed; NULL is a no-op */
void wcall_cancel(struct wcall *c);

#endif
