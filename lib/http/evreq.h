/* evreq: the seam's view of an evhttp request. Private to lib/http: only the engine's own
 * modules (proxy, server) build requests from evhttp's. */
#ifndef ADMIT_EVREQ_H
#define ADMIT_EVREQ_H

#include "http/httpreq.h"

#include <stddef.h>

struct evhttp_request;

/** fills r from req: method, target, the body (made contiguous), the peer and the header
 *  lookup; r stays valid while req lives and its input buffer is left alone */
void evreq_view(struct evhttp_request *req, struct http_req *r);
/** answers req with status, its reason phrase, a body (none for HEAD) and, unless date is
 *  NULL (evhttp then adds its own), that Date header */
void evreq_reply(struct evhttp_request *req, int status, const char *content_type, const char *body,
                 size_t len, const char *date);

#endif
