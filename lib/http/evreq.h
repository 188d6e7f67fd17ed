/* evreq: the seam's view of an evhttp request. Private to lib/http: only the engine's own
 * modules (proxy, server) build requests from evhttp's. */
#ifndef ADMIT_EVREQ_H
#define ADMIT_EVREQ_H

#include "http/httpreq.h"

#include <stddef.h>

struct event_base;
struct evhttp;
struct evhttp_request;
struct timeval;

/* Every method the seam names: GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH. */
#define EVREQ_ALL_METHODS 0x7fu

/** fills r from req: method, target, the body (made contiguous), the peer and the header
 *  lookup; r stays valid while req lives and its input buffer is left alone */
void evreq_view(struct evhttp_request *req, struct http_req *r);
/** answers req with status, its reason phrase, a body (none for HEAD) and, unless date is
 *  NULL (evhttp then adds its own), that Date header */
void evreq_reply(struct evhttp_request *req, int status, const char *content_type, const char *body,
                 size_t len, const char *date);

/** an evhttp server on base calling cb for every request: methods is a bit (1 << enum
 *  http_method) per method accepted (others get 405/501), then the header, body and idle
 *  limits; no default Content-Type. Allocation failure aborts */
struct evhttp *evreq_server(struct event_base *base, unsigned methods, unsigned max_header_bytes,
                            unsigned max_body_bytes, const struct timeval *timeout,
                            void (*cb)(struct evhttp_request *, void *), void *arg);

#endif
