/* proxy_impl: one exchange (struct pxreq) and the proxy itself, private to the proxy module,
 * which is three files: proxy.c owns arrival, the client side and the end of an exchange;
 * proxy_forward.c sends the request to the engine and handles engine failures;
 * proxy_relay.c reads the engine's reply and relays it to the client.
 *
 * Life of an exchange:
 *
 *   arrive --admission--> HELD --forward--> UPSTREAM --reply head--> STREAMING --engine
 *   done--> finished (the client connection writes the rest and goes on)
 *
 * and from any state a failure or a client hang-up finishes it early. px_finish() is the one
 * end: it counts the outcome once, stops the deadline, gives the client connection back (or
 * closes it) and calls the admission's finish hook (which releases the gate ticket and the
 * booking). An exchange is recycled when it is finished and no call that might re-enter it
 * is still on the stack (refs).
 *
 * The client connection (hconn) reads the client all along, so a hang-up is seen at every
 * stage, queued included, and a pipelined request waits in its buffer for its turn. */
#ifndef ADMIT_PROXY_IMPL_H
#define ADMIT_PROXY_IMPL_H

#include "util/buf.h"
#include "wire/h1body.h"
#include "wire/h1parse.h"
#include "wire/sse.h"
#include "http/proxy.h"

#include <event2/event_struct.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <time.h>

struct hconn;
struct hlisten;
struct uconn;

/* Field lines an engine's reply head may have. */
#define PX_RESP_HEADERS 64
/* The largest reply head an engine may send (they send a few hundred bytes). */
#define PX_RESP_HEAD_MAX (32 * 1024)

enum xstate {
    X_HELD,      /* admission holds it */
    X_UPSTREAM,  /* engine request sent, no reply head yet */
    X_STREAMING, /* reply started, body flowing */
    X_FLUSHING,  /* the engine is done; the client has not taken the last bytes yet */
};

/* What px_finish does with the client connection (if it is still there). */
enum px_client_end {
    PX_END_ABORT = 0, /* close it now: its reply cannot be completed */
    PX_END_CLOSE,     /* the reply is complete: close after it is written */
    PX_END_KEEP,      /* the reply is complete: read the next request after it */
};

struct pxreq {
    struct proxy *px;
    struct hconn *c;      /* the client's connection; NULL once it is given back */
    struct http_req req;  /* the request, in the client connection's buffer */
    const char *fwd_body; /* not NULL: the body the engine gets instead (pxreq_set_body) */
    size_t fwd_len;
    struct event deadline; /* while held, if admission set one */
    int deadline_on;
    struct event later; /* a connect that failed at once, reported from the loop */
    int later_on;
    struct upstream *up; /* the engine chosen for this request */
    struct uconn *uc;    /* its connection while the exchange uses it */
    int conn_err;        /* the errno of a connect that could not even start */
    enum xstate state;
    double queue_wait_s; /* how long admission held it */
    int has_wait;        /* ... and admission said so: the reply shows it */
    struct sse_counter sse_count;
    int count_tokens;  /* admission wants output(): SSE events are counted */
    int forwarded;     /* the forwarding hook ran (once per exchange) */
    int got_body;      /* the engine sent a first body byte */
    int retry_pending; /* router: the engine said overloaded; its reply is dropped */
    int retried;       /* router: already moved to a second engine */
    int status;        /* status sent to the client (0 until one is) */
    int sse;
    int paused; /* engine reads stopped: the client is behind */
    int refs;
    int finished;
    uint64_t bytes;          /* body bytes passed to the client */
    struct timespec t_first; /* first body byte from the engine */
    struct timespec t_arrive;
    /* the engine's reply */
    struct h1_parser rp;
    struct h1_body body;    /* ... its body being read */
    int out_chunked;        /* the client gets the body in chunks */
    int keep_client;        /* the client connection may be kept after this reply */
    int reusable;           /* the engine connection can carry another request */
    enum px_client_end end; /* what px_finish does with the client connection */
    TAILQ_ENTRY(pxreq) link;
    struct pxreq *next_spare;
    max_align_t adm_state[]; /* the admission's proxy_admission.size bytes */
};

struct proxy {
    struct event_base *base;
    const struct proxy_opts *o;
    struct proxy_stats *st; /* the counts, the owner's */
    struct hlisten *l;
    struct upstream *up; /* NULL in router mode */
    TAILQ_HEAD(pxreq_list, pxreq) live;
    unsigned nlive;
    struct pxreq *spare; /* finished exchanges kept for reuse */
    int closing;
    struct proxy_admission adm;
    struct proxy_route route; /* router mode when route.pick is set */
    proxy_local_fn local;     /* the daemon's own answers (proxy_set_local); NULL: none */
    void *local_arg;
    int draining;          /* new requests get 503; the rest finish */
    const char *drain_msg; /* what those 503s say (static storage) */
    /* Request and reply heads and error bodies are built in buffers lent from here, one per
     * use: never in one buffer that every exchange shares. A head is built, then hooks run
     * (an admission hook may start another exchange, which builds a head of its own), then
     * it is written: a shared buffer would send one client another's request. */
    struct buf_pool bufs;
    /* The engine replies' field lines: a reply head is parsed whole in one call and its
     * fields are read in that call only, before any hook runs (px_relay), so one set serves
     * every exchange. */
    struct h1_header rslots[PX_RESP_HEADERS];
};

/** the Retry-After of the proxy's own 503s (the admission's, or 1) */
int px_retry_after(struct proxy *px);
/** ends the exchange with outcome o (idempotent), then gives the client connection back as
 *  x->end says; see above */
void px_finish(struct pxreq *x, enum outcome o);
/** drops a reference taken around a call that may end x; recycles it when finished */
void px_unhold(struct pxreq *x);
/** ends the exchange and closes the client connection (its reply cannot be completed) */
void px_close_client(struct pxreq *x, enum outcome o);
/** sends the request to the engine (or the one route.pick chooses) */
void px_start_upstream(struct pxreq *x);
/** closes the engine connection, if any: the engine sees it close and stops */
void px_cancel_upstream(struct pxreq *x);
/** the engine connection has something to read: the reply's head, then its body */
void px_relay(struct pxreq *x);
/** an engine failure: a clean answer if nothing was sent, else a visibly broken reply */
void px_upstream_failed(struct pxreq *x, enum upstream_error e);
/** true for a field a proxy does not pass on: hop-by-hop (RFC 9110 7.6.1) or named in the
 *  message's Connection field */
int px_hop_by_hop(const struct h1_parser *p, const struct h1_header *h);
/** the client drained what it had not taken: read the engine again */
void px_client_drained(struct pxreq *x);

#endif
