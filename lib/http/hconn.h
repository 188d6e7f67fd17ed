/* hconn: the server side of admitd's HTTP/1.1 path: a listener and its client connections,
 * on raw libevent events with no evhttp and no bufferevent.
 *
 * A connection reads and parses requests with the strict parser of the pure wire layer
 * (wire/h1parse, wire/h1body), hands each whole request (head and body) to its owner as a
 * struct http_req whose strings are slices of the connection's own buffer, and writes the
 * owner's answer eagerly. Requests are answered one at a time and in order: bytes of a
 * pipelined request that arrive while one is being answered are read (so a hang-up behind
 * them is seen at once) but parsed only once the answer before has been written. Anything
 * the parser refuses is answered here (400, 413, 414, 431, 501, 505, in OpenAI's error
 * shape), and the connection closes after it; so does a head not whole in time (408) and a
 * request whose buffers cannot be had (500): a failed allocation costs that request, never
 * the process. A connection's input buffer grows with the bytes that arrive, never with
 * what a request announces.
 *
 * A connection that is to close after its answer is closed gracefully: its sending side is
 * shut down, whatever the client still sends is read and thrown away for a short while,
 * then it is closed. A plain close with unread bytes would send a reset that can destroy
 * the answer before the client reads it. */
#ifndef ADMIT_HCONN_H
#define ADMIT_HCONN_H

#include "wire/h1parse.h"
#include "net/acceptor.h"
#include "util/netaddr.h"
#include "http/httpreq.h"

#include <stddef.h>
#include <sys/uio.h>

struct event_base;
struct hconn;
struct hlisten;

/* A listener's limits. */
struct hc_limits {
    unsigned methods;          /* bit (1 << enum http_method) per method served; others 405 */
    unsigned max_header_bytes; /* a larger head: 431 (414 while still in the request line) */
    unsigned max_body_bytes;   /* a larger body: 413 */
    unsigned timeout_ms;       /* idle before or inside a request, or not reading an answer */
    /* A request head not whole this long after it began (its first byte; on a new
     * connection, the accept) gets 408 and the connection closes; one that never began is
     * closed without an answer. 0: no deadline. Idle time between keep-alive requests is
     * timeout_ms's alone. */
    unsigned header_timeout_ms;
    unsigned max_conns; /* open connections at most: accepting pauses there (0: automatic) */
    const char *name;   /* the listener's name in the log and the metrics ("client") */
    struct listen_stats *stats; /* its counts (NULL: kept by the listener) */
};

/* What the owner of the requests hears. Every callback may answer or end the request. */
struct hc_ops {
    /* a whole request: answer it now or later (hc_write, hc_end, hc_reply); r and every
     * string in it stay valid until hc_end or hc_abort */
    void (*request)(void *arg, struct hconn *c, const struct http_req *r);
    /* the client left (FIN, reset, timeout, a failed write) before hc_end: the owner ends its
     * request, and the connection is closed when this returns (calling hc_abort is allowed) */
    void (*gone)(void *arg, struct hconn *c, void *owner);
    /* what hc_write could not send at once has been sent (for backpressure) */
    void (*drained)(void *arg, struct hconn *c, void *owner);
    /* the parser refused a request with this status (it is answered and the connection
     * closes): for counters; optional */
    void (*refused)(void *arg, int status);
};

/** a listener on base; requests go to ops with arg; nothing listens before hl_bind; a
 *  max_conns of 0 takes acc_auto_cap()'s */
struct hlisten *hl_new(struct event_base *base, const struct hc_limits *lim,
                       const struct hc_ops *ops, void *arg);
/** listens on hp; writes the bound "host:port" (the real port when 0 was asked); 0 or -1 */
int hl_bind(struct hlisten *l, const struct hostport *hp, char *bound, size_t boundlen, char *err,
            size_t errlen);
/** closes the listener and every connection (owners must have ended their requests), frees */
void hl_free(struct hlisten *l);
/** the Date header value of answers made now, rendered once a second */
const char *hl_date(struct hlisten *l);

/** ties the request being answered to its owner's state (passed back to gone and drained) */
void hc_set_owner(struct hconn *c, void *owner);
/** the parsed head of the request being answered: the field lines for forwarding */
const struct h1_parser *hc_head(const struct hconn *c);
/** writes at once what the socket takes and keeps the rest (order kept); 0, or -1 when the
 *  client is gone: the owner then ends its request and calls hc_abort */
int hc_write(struct hconn *c, const struct iovec *iov, int n);
/** bytes written and not yet taken by the client's socket */
size_t hc_pending(const struct hconn *c);
/** the answer is complete: once it is written, the next request is read (keep != 0 and the
 *  client wants the connection kept) or the connection closes gracefully */
void hc_end(struct hconn *c, int keep);
/** closes the connection now, with no more output (a broken answer, a client gone); the
 *  request ends with it */
void hc_abort(struct hconn *c);
/** writes a whole reply: the status line, Date, Content-Type and Content-Length, the extra
 *  header lines (each ending in CRLF, or NULL), Connection: close when close (or the client
 *  asked it), the body (none for HEAD); hc_end follows. 0, or -1 as hc_write */
int hc_reply(struct hconn *c, int status, const char *content_type, const char *body, size_t len,
             const char *extra, int close);

#endif
