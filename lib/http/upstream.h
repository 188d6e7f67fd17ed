/* upstream: connections to one engine, and the pool of idle keep-alive ones.
 *
 * Opening a TCP connection per request costs a handshake and, worse, leaves TIME_WAIT
 * sockets behind at thousands of requests per second. The pool keeps idle connections and
 * hands them out again, most recently used first. Idle ones are closed after a short time,
 * below the 5 s keep-alive of uvicorn (vLLM, SGLang), so admitd rarely reuses one the engine
 * is about to close; an idle connection the engine closes, or on which it sends anything, is
 * dropped at once. Connects are non-blocking, and every connection gets TCP_NODELAY, since
 * SSE events are small writes.
 *
 * The module moves bytes and keeps time; what the bytes mean (HTTP) is the proxy's. */
#ifndef ADMIT_UPSTREAM_H
#define ADMIT_UPSTREAM_H

#include "util/netaddr.h"
#include "http/ioconn.h"

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

struct event_base;
struct evdns_base;
struct upstream;
struct uconn;

/* What a connection in use tells its user. */
enum uc_event {
    UC_READABLE,       /* bytes (or an EOF, or an error) to read with uconn_fill */
    UC_DRAINED,        /* what uconn_write could not send at once has been sent */
    UC_CONNECT_FAILED, /* the connect was refused or failed (errno in uconn_error) */
    UC_WRITE_FAILED,   /* the engine is gone: a write failed */
    UC_TIMEOUT,        /* the engine was silent for the timeout (or did not accept in it) */
};

typedef void (*uconn_cb)(void *arg, enum uc_event ev);

/** a pool for one engine; timeout_ms bounds connecting and silence; the address is looked up
 *  now (and again at the next connect if that fails): a name with dns's evdns, without
 *  waiting (until its answer is in, a connect fails at once with EHOSTUNREACH), or with
 *  getaddrinfo, blocking, when dns is NULL (admitd's engine, at start) */
struct upstream *upstream_new(struct event_base *base, const struct http_url *url,
                              struct evdns_base *dns, unsigned timeout_ms, unsigned max_idle,
                              unsigned idle_ms);
/** closes every idle connection and frees; connections in use must have been given back */
void upstream_free(struct upstream *u);
/** an idle connection (*reused = 1) or a new one, connecting; its events go to cb with arg
 *  and its silence timer runs; NULL with errno when no connect could even start */
struct uconn *upstream_get(struct upstream *u, uconn_cb cb, void *arg, int *reused);
/** writes now what the socket takes, the rest later, in order; 0, or -1 when the engine is
 *  gone */
int uconn_write(struct uconn *c, const struct iovec *iov, int n);
/** reads once into the connection's buffer (held bytes may move to the front); as ioc_fill */
ssize_t uconn_fill(struct uconn *c, size_t max);
/** the connection's read buffer: the bytes read and not yet consumed */
struct iobuf *uconn_in(struct uconn *c);
/** stops (1) or resumes (0) reading: backpressure from a slow client */
void uconn_pause(struct uconn *c, int paused);
/** restarts the silence timer (the engine sent something) */
void uconn_touch(struct uconn *c);
/** the errno of a failed connect */
int uconn_error(const struct uconn *c);
/** gives back a connection whose exchange ended cleanly (nothing unread): kept for reuse if
 *  the pool has room, else closed */
void upstream_put(struct upstream *u, struct uconn *c);
/** closes a connection (the engine sees it close and stops working on the request) */
void uconn_drop(struct uconn *c);
/** the Host header value for requests to this engine */
const char *upstream_hostport(const struct upstream *u);
/** number of idle connections now (for tests and metrics) */
unsigned upstream_idle_count(const struct upstream *u);

/** 1 when the engine's address is known; else 0, with a lookup started unless one runs or
 *  the last failed less than a second ago */
int upstream_resolved(struct upstream *u);
/** name lookups started on any pool's resolver since the process began: an evdns base that
 *  ever had one cannot be freed without possibly losing what evdns allocated for it (its
 *  answers and cancels come from the loop) */
unsigned upstream_lookups_started(void);

#endif
