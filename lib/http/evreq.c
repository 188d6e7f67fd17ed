/* evreq: the seam's request type filled from evhttp's, and answers sent through evhttp. */
#include "http/evreq.h"
#include "core/httputil.h"
#include "core/xmalloc.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <stdint.h>
#include <string.h>

static const char *ev_header(const struct http_req *r, const char *name)
{
    struct evhttp_request *req = (struct evhttp_request *) (uintptr_t) r->_impl;

    return evhttp_find_header(evhttp_request_get_input_headers(req), name);
}

static enum http_method ev_method(enum evhttp_cmd_type cmd)
{
    switch (cmd) {
    case EVHTTP_REQ_GET:
        return HTTP_GET;
    case EVHTTP_REQ_HEAD:
        return HTTP_HEAD;
    case EVHTTP_REQ_POST:
        return HTTP_POST;
    case EVHTTP_REQ_PUT:
        return HTTP_PUT;
    case EVHTTP_REQ_DELETE:
        return HTTP_DELETE;
    case EVHTTP_REQ_OPTIONS:
        return HTTP_OPTIONS;
    case EVHTTP_REQ_PATCH:
        return HTTP_PATCH;
    default:
        return HTTP_OTHER;
    }
}

void evreq_view(struct evhttp_request *req, struct http_req *r)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    const char *uri = evhttp_request_get_uri(req);
    char *peer = NULL;
    ev_uint16_t port = 0;

    memset(r, 0, sizeof *r);
    r->method = ev_method(evhttp_request_get_command(req));
    r->target = uri != NULL ? uri : "";
    r->body_len = evbuffer_get_length(in);
    /* One contiguous body, read in place by whoever needs it (token count, model name). */
    r->body = r->body_len > 0 ? (const char *) evbuffer_pullup(in, -1) : "";
    if (c != NULL)
        evhttp_connection_get_peer(c, &peer, &port);
    r->peer = peer != NULL ? peer : "";
    r->http_minor = req->minor;
    r->_header = ev_header;
    r->_impl = req;
}

void evreq_reply(struct evhttp_request *req, int status, const char *content_type, const char *body,
                 size_t len, const char *date)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);

    /* Straight into the request's own output buffer: no evbuffer of ours to allocate.
     * evhttp 2.1 would send a body even to HEAD, which breaks the connection's framing. */
    if (evhttp_request_get_command(req) != EVHTTP_REQ_HEAD && len > 0)
        evbuffer_add(evhttp_request_get_output_buffer(req), body, len);
    if (date != NULL)
        evhttp_add_header(h, "Date", date);
    evhttp_add_header(h, "Content-Type", content_type);
    evhttp_send_reply(req, status, httpu_reason(status), NULL);
}

static const enum evhttp_cmd_type ev_methods[] = {
    [HTTP_GET] = EVHTTP_REQ_GET,       [HTTP_HEAD] = EVHTTP_REQ_HEAD,
    [HTTP_POST] = EVHTTP_REQ_POST,     [HTTP_PUT] = EVHTTP_REQ_PUT,
    [HTTP_DELETE] = EVHTTP_REQ_DELETE, [HTTP_OPTIONS] = EVHTTP_REQ_OPTIONS,
    [HTTP_PATCH] = EVHTTP_REQ_PATCH,
};

struct evhttp *evreq_server(struct event_base *base, unsigned methods, unsigned max_header_bytes,
                            unsigned max_body_bytes, const struct timeval *timeout,
                            void (*cb)(struct evhttp_request *, void *), void *arg)
{
    struct evhttp *http = evhttp_new(base);
    ev_uint16_t allowed = 0;

    if (http == NULL)
        fatal("evhttp_new failed");
    for (size_t m = 0; m < sizeof ev_methods / sizeof ev_methods[0]; m++)
        if (methods & (1u << m))
            allowed |= (ev_uint16_t) ev_methods[m];
    evhttp_set_allowed_methods(http, allowed);
    evhttp_set_max_headers_size(http, max_header_bytes);
    evhttp_set_max_body_size(http, max_body_bytes);
    evhttp_set_timeout_tv(http, timeout);
    evhttp_set_default_content_type(http, NULL);
    evhttp_set_gencb(http, cb, arg);
    return http;
}
