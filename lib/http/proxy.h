/* proxy: the client-facing HTTP server that forwards requests to an engine and streams the
 * replies back.
 *
 * It owns each exchange (a struct pxreq: one client request and, once forwarded, one engine
 * request), streams the engine's reply chunk by chunk with backpressure, notices clients that
 * hang up at every stage, answers what it must answer itself (bad framing, draining, engine
 * failures) and ends every exchange exactly once.
 *
 * What may go to the engine, and when, is not its business. That is decided above the seam,
 * in admitd's own types (http/httpreq.h), by two sets of hooks:
 *   - admission (lib/daemon/admission.c, the gate's wiring): lets a request through, holds it
 *     (the proxy keeps watching the client until it is let through or answered), or answers
 *     it; books what it sends; releases it when the exchange ends;
 *   - route (admit-router): picks the engine per request, answers some requests itself, and
 *     hears about engines that refused with their overload answer.
 * Neither hook set sees a socket or an evhttp type, so the HTTP code can change underneath. */
#ifndef ADMIT_PROXY_H
#define ADMIT_PROXY_H

#include "util/netaddr.h"
#include "http/httpreq.h"

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct listen_stats;
struct proxy;
struct pxreq;
struct upstream;

/* How a request ended; each request is counted exactly once. */
enum outcome {
    OUT_OK = 0,         /* response delivered to the client completely */
    OUT_REJECTED,       /* overload answer: slots and queue full */
    OUT_CANCELLED,      /* the client left first */
    OUT_UNAVAILABLE,    /* engine unreachable: 503 */
    OUT_TIMEOUT,        /* engine silent too long: 504 (or a cut stream) */
    OUT_UPSTREAM_ERROR, /* engine broke the response (or sent garbage) */
    OUT_BAD_REQUEST,    /* refused by admitd itself (bad request target) */
    OUT_QUEUE_TIMEOUT,  /* overload answer: waited longer than --queue-timeout-ms */
    OUT_DRAINING,       /* 503: arrived while the worker was draining */
    OUT__COUNT
};

/* Where a client was when it left. */
enum cancel_stage {
    STAGE_QUEUED = 0, /* waiting for a slot */
    STAGE_WAITING,    /* in a slot (or passing through), before the reply started */
    STAGE_STREAMING,  /* while the reply was being sent */
    STAGE__COUNT
};

/* What went wrong talking to the engine. */
enum upstream_error {
    UERR_CONNECT = 0, /* connection refused or not established */
    UERR_TIMEOUT,     /* silent past --upstream-timeout-ms */
    UERR_BROKEN,      /* connection lost in the middle of a response */
    UERR_INVALID,     /* unparseable response */
    UERR__COUNT
};

/* The proxy's counts, in the owner's storage (proxy_new): a plain struct of numbers that
 * the proxy bumps and the daemon's metrics show. */
struct proxy_stats {
    uint64_t outcomes[OUT__COUNT];
    uint64_t cancelled[STAGE__COUNT];
    uint64_t upstream_errors[UERR__COUNT];
};

/* The proxy's settings. The proxy keeps the pointer: fields marked live are read at use. */
struct proxy_opts {
    unsigned client_timeout_ms;   /* client idle while sending, between requests, not reading */
    unsigned max_header_bytes;    /* larger request header blocks: 400 */
    unsigned max_body_bytes;      /* larger request bodies: 413 */
    unsigned upstream_timeout_ms; /* engine silent this long: 504, or a cut stream */
    unsigned upstream_keepalive;  /* idle engine connections kept for reuse */
    unsigned stream_buffer_bytes; /* live: unsent reply bytes above which the engine is not read */
    int access_log;               /* live: one log line per finished request */
    unsigned client_header_timeout_ms; /* a request head not whole this long: 408 */
    unsigned max_client_connections;   /* open client connections at most (0: automatic) */
};

/* What admission decides for a request that passed the proxy's own checks. */
enum px_verdict {
    PX_FORWARD,  /* to the engine now */
    PX_WAIT,     /* held: the hook calls proxy_forward() or proxy_answer*() later */
    PX_ANSWERED, /* the hook answered it with proxy_answer*() */
};

/* The admission hooks (all optional but arrive and finish go together). The per-exchange
 * state of `size` bytes is zeroed at arrival and lives until finish returns. */
struct proxy_admission {
    /* every request, first of all (counters); r is the request */
    void (*begin)(void *arg, struct pxreq *x, const struct http_req *r);
    /* a request that passed the checks (framing, target, not draining): what to do with it */
    enum px_verdict (*arrive)(void *arg, struct pxreq *x, const struct http_req *r);
    /* a held request's deadline (proxy_wait_deadline) passed: answer it */
    void (*expired)(void *arg, struct pxreq *x);
    /* the request is about to reach an engine for the first time: book it; returns 1 to be
     * told of the reply's progress through output() */
    int (*forwarding)(void *arg, struct pxreq *x, const struct http_req *r);
    /* reply body bytes went to the client; first for the first ones; tokens: SSE events */
    void (*output)(void *arg, struct pxreq *x, int first, unsigned tokens);
    /* optional: the same reply body bytes (the body, not its framing), after output() */
    void (*body)(void *arg, struct pxreq *x, const char *data, size_t n);
    /* the exchange ended with outcome o (already counted): release what it holds */
    void (*finish)(void *arg, struct pxreq *x, enum outcome o);
    /* seconds for the Retry-After of the proxy's own 503 answers */
    int (*retry_after)(void *arg);
    size_t size;
    /* of the state's size bytes, the first zeroed bytes are zeroed at arrival (0: all): what
     * lies past them the hooks write before they read */
    size_t zeroed;
    void *arg;
};

/* Router mode: the engine is chosen per request among several (admit-router). */
struct proxy_route {
    /* picks an engine for exchange x (its admission state is the router's to use, when the
     * router brings its own admission hooks); exclude is the one that just refused (or
     * NULL); NULL when none can take the request, with the status to answer and its message
     * written into msg (msglen bytes, the caller's: no buffer is shared across calls), and
     * busy = 1 when that is an overload answer (every engine busy) rather than "none
     * available" */
    struct upstream *(*pick)(void *arg, struct pxreq *x, const struct http_req *r,
                             const struct upstream *exclude, int *status, char *msg, size_t msglen,
                             int *busy);
    /* the engine answered with its overload status before anything was sent */
    void (*overloaded)(void *arg, struct upstream *up);
    /* a second engine refused too: its overload answer goes to the client */
    void (*refused)(void *arg, const struct http_req *r);
    /* optional: the engine refused the connection, or a connection to it was found closed,
     * before any byte of the request went out (why says which: "Connection refused"...); the
     * request goes on to another engine once (pick with exclude), as after an overload answer */
    void (*unreachable)(void *arg, struct upstream *up, const char *why);
    /* optional: the engine pick chose for x sent a reply head (it is reachable); per reply,
     * so it must be cheap, and it must not end x */
    void (*answered)(void *arg, struct pxreq *x);
    void *arg;
};

/** creates the proxy on base, forwarding to upstream (NULL in router mode); not bound yet;
 *  it counts into st, and its client listener into client */
struct proxy *proxy_new(struct event_base *base, const struct proxy_opts *o,
                        const struct http_url *upstream, struct proxy_stats *st,
                        struct listen_stats *client);
/** binds the client listener; writes the bound "host:port" into bound; 0 or -1 with err */
int proxy_bind(struct proxy *px, const struct hostport *hp, char *bound, size_t boundlen, char *err,
               size_t errlen);
/* Answers a request the daemon handles itself: fills rep and returns 1, else 0. */
typedef int (*proxy_local_fn)(void *arg, const struct http_req *r, struct http_reply *rep);

/** installs the daemon's own answers (admitd's GET /admitd/kv_blocks, admit-router's
 *  /busy_threshold), tried on every request before admission's verdict, in either mode */
void proxy_set_local(struct proxy *px, proxy_local_fn local, void *arg);
/** installs the admission hooks; before any request arrives */
void proxy_set_admission(struct proxy *px, const struct proxy_admission *a);
/** switches to router mode: every request goes to the engine r->pick chooses */
void proxy_set_route(struct proxy *px, const struct proxy_route *r);
/** number of exchanges alive (held, at an engine, or passing through) */
unsigned proxy_active(const struct proxy *px);
/** true while proxy_cancel_all or proxy_free ends every exchange: let nothing new through */
int proxy_closing(const struct proxy *px);
/** stops taking work: new requests get 503 with msg (static storage); the rest go on */
void proxy_drain(struct proxy *px, const char *msg);
/** ends every exchange at once: one still held by admission is answered 503 (the drain's
 *  message), the others are cut; returns how many there were, and in *held (when not NULL)
 *  how many of them were answered */
unsigned proxy_cancel_all(struct proxy *px, unsigned *held);
/** aborts every exchange and frees everything (the hooks' owners must still be alive) */
void proxy_free(struct proxy *px);

/** the name of an outcome, in the access log and the metrics ("ok", "rejected", ...) */
const char *proxy_outcome_name(enum outcome o);

/** the admission's per-exchange state (proxy_admission.size bytes, max_align_t aligned) */
void *pxreq_state(struct pxreq *x);
/** the exchange whose admission state this is */
struct pxreq *pxreq_of_state(void *state);
/** records how long admission held the request: X-Admitd-Queue-Wait-Ms and the access log */
void pxreq_set_queue_wait(struct pxreq *x, double seconds);
/** a held request: call the expired hook after ms unless it goes on or ends first */
void proxy_wait_deadline(struct pxreq *x, unsigned ms);
/** the engine gets body[0 .. len) instead of the client's body (admit-router's decode leg of
 *  a disaggregated request); the caller keeps it valid until the exchange ends */
void pxreq_set_body(struct pxreq *x, const char *body, size_t len);
/** a held request's deadline (proxy_wait_deadline) is off: it waits on something else now */
void proxy_wait_clear(struct pxreq *x);
/** a held request goes on to the engine */
void proxy_forward(struct pxreq *x);
/** answers with a JSON body (Retry-After when retry_after > 0, X-Admitd-Reason when reason is
 *  not NULL) and ends the exchange with outcome o */
void proxy_answer(struct pxreq *x, int status, const char *json, size_t len, int retry_after,
                  const char *reason, enum outcome o);
/** answers with body[0 .. len) of content_type and the field lines fields (each ending in
 *  CRLF; NULL none), X-Admitd-Reason when reason is not NULL (admit-router: a disaggregated
 *  request's prefill answer, which finished it), and ends the exchange with outcome o */
void proxy_answer_as(struct pxreq *x, int status, const char *content_type, const char *body,
                     size_t len, const char *fields, const char *reason, enum outcome o);
/** the same with an OpenAI-shaped error body of the given type and message */
void proxy_answer_error(struct pxreq *x, int status, const char *type, const char *msg,
                        int retry_after, const char *reason, enum outcome o);

#endif
