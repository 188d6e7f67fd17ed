/* upstream: keep-alive connections to the engine.
 *
 * Opening a TCP connection per request costs a handshake and, worse, leaves TIME_WAIT
 * sockets behind at thousands of requests per second. The pool keeps idle evhttp
 * connections and hands them out again. Idle ones are closed after a short time, below the
 * 5 s keep-alive of uvicorn (vLLM, SGLang), so admitd rarely reuses one the engine is about
 * to close. Every connection gets TCP_NODELAY, since SSE events are small writes. */
#ifndef ADMIT_UPSTREAM_H
#define ADMIT_UPSTREAM_H

#include "core/netaddr.h"

#include <event2/http.h>

struct event_base;
struct upstream;
struct uconn;

/** creates a pool for one engine; timeout_ms bounds connect and silence on a connection */
struct upstream *upstream_new(struct event_base *base, const struct http_url *url,
                              unsigned timeout_ms, unsigned max_idle, unsigned idle_ms);
/** closes every connection, idle or not; callers must have finished their requests */
void upstream_free(struct upstream *u);
/** takes an idle connection, or a new one */
struct uconn *upstream_get(struct upstream *u);
/** the evhttp connection of a pooled connection */
struct evhttp_connection *uconn_evcon(struct uconn *c);
/** sends req on c (ownership of req passes to libevent); returns 0 or -1 */
int uconn_request(struct uconn *c, struct evhttp_request *req, enum evhttp_cmd_type cmd,
                  const char *uri);
/** gives a connection back after its request ended; kept if the pool has room */
void upstream_put(struct upstream *u, struct uconn *c);
/** the Host header value for requests to this engine */
const char *upstream_hostport(const struct upstream *u);
/** number of idle connections now (for tests and metrics) */
unsigned upstream_idle_count(const struct upstream *u);

#endif
