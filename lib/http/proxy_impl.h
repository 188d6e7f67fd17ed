/* proxy_impl: one exchange (struct pxreq) and the proxy itself, private to the proxy module,
 * which is two files: proxy.c owns arrival, the client side and the end of an exchange;
 * proxy_forward.c owns the engine side.
 *
 * Life of an exchange:
 *
 *   arrive --admission--> HELD --forward--> UPSTREAM --headers--> STREAMING --engine done-->
 *   FLUSHING --last byte written--> finished
 *
 * and from any state a failure or a client hang-up finishes it early. px_finish() is the one
 * end: it counts the outcome once, stops the hang-up watch and the deadline, detaches from
 * the client connection and calls the admission's finish hook (which releases the gate
 * ticket and the booking). An exchange is freed when it is finished and no call that might
 * re-enter it is still on the stack (refs).
 *
 * Who notices a client hang-up: while HELD or UPSTREAM evhttp reads nothing from the client,
 * so a cwatch does; once the reply has started, evhttp itself does and fires the connection's
 * close callback. */
#ifndef ADMIT_PROXY_IMPL_H
#define ADMIT_PROXY_IMPL_H

#include "core/sse.h"
#include "http/proxy.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/time.h>
#include <time.h>

struct evhttp;
struct evhttp_connection;
struct evhttp_request;
struct event;
struct event_base;
struct cwatch;
struct uconn;

enum xstate {
    X_HELD,      /* admission holds it */
    X_UPSTREAM,  /* engine request sent, no reply headers yet */
    X_STREAMING, /* reply started, body flowing */
    X_FLUSHING,  /* engine finished; last bytes on their way to the client */
    X_BROKEN     /* engine broke mid-stream; an error event is flushing, then we close */
};

struct pxreq {
    struct proxy *px;
    struct evhttp_request *creq;
    struct evhttp_connection *cevcon; /* NULL once libevent is freeing it */
    struct http_req req;              /* the seam's view of creq */
    struct cwatch *watch;
    struct event *deadline; /* while held, if admission set one */
    struct upstream *up;    /* the engine chosen for this request */
    struct uconn *uc;
    struct evhttp_request *ureq; /* owned by libevent; NULL once it is gone */
    enum xstate state;
    enum upstream_error uerr;
    enum outcome broken_outcome;
    int has_uerr;
    double queue_wait_s; /* how long admission held it */
    int has_wait;        /* ... and admission said so: the reply shows it */
    struct sse_counter sse_count;
    int count_tokens;        /* admission wants output(): SSE events are counted */
    int forwarded;           /* the forwarding hook ran (once per exchange) */
    int got_body;            /* the engine sent a first body byte */
    int retry_pending;       /* router: the engine said overloaded; nothing sent yet */
    int retried;             /* router: already moved to a second engine */
    int status;              /* status sent to the client (0 until one is) */
    uint64_t bytes;          /* body bytes passed to the client */
    struct timespec t_first; /* first body byte from the engine */
    int paused;              /* engine reads stopped: the client is behind */
    int sse;
    int refs;
    int finished;
    struct timespec t_arrive;
    TAILQ_ENTRY(pxreq) link;
    max_align_t adm_state[]; /* the admission's proxy_admission.size bytes */
};

struct proxy {
    struct event_base *base;
    const struct proxy_opts *o;
    struct metrics *m;
    struct evhttp *http;
    struct upstream *up; /* NULL in router mode */
    TAILQ_HEAD(pxreq_list, pxreq) live;
    unsigned nlive;
    int closing;
    struct timeval client_tv;
    time_t date_at; /* the second date[] was rendered for */
    char date[32];
    struct proxy_admission adm;
    struct proxy_route route; /* router mode when route.pick is set */
    int draining;             /* new requests get 503; the rest finish */
    const char *drain_msg;    /* what those 503s say (static storage) */
};

/** the Date header of the proxy's own answers, rendered once a second */
const char *px_date(struct proxy *px);
/** the Retry-After of the proxy's own 503s (the admission's, or 1) */
int px_retry_after(struct proxy *px);
/** ends the exchange with outcome o (idempotent); see above */
void px_finish(struct pxreq *x, enum outcome o);
/** drops a reference taken around a call that may end x; frees it when finished */
void px_unhold(struct pxreq *x);
/** ends the exchange and closes the client connection (its reply cannot be completed) */
void px_close_client(struct pxreq *x, enum outcome o);
/** the hang-up watch's callback: the client left before the reply started */
void px_on_client_gone(void *arg);
/** the client's socket */
int px_client_fd(struct evhttp_connection *c);
/** sends the request to the engine (or the one route.pick chooses) */
void px_start_upstream(struct pxreq *x);
/** cancels the engine request, if any: the engine sees its connection close and stops */
void px_cancel_upstream(struct pxreq *x);

#endif
