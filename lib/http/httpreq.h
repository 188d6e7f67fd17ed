/* httpreq: the request and the local answer, in admitd's own types: the HTTP seam.
 *
 * Everything above the HTTP engine (the gate's wiring, admit-router's selection and its
 * /busy_threshold, the admin listener) sees a request only through struct http_req and
 * answers one only through struct http_reply. Neither names a libevent type, so the engine
 * underneath could change without touching its users, and did: admitd's own HTTP/1.1 path
 * (hconn) replaced evhttp behind it. */
#ifndef ADMIT_HTTPREQ_H
#define ADMIT_HTTPREQ_H

#include "util/buf.h"

#include <stddef.h>

/* The methods the engine distinguishes; anything else is HTTP_OTHER. */
enum http_method {
    HTTP_GET = 0,
    HTTP_HEAD,
    HTTP_POST,
    HTTP_PUT,
    HTTP_DELETE,
    HTTP_OPTIONS,
    HTTP_PATCH,
    HTTP_OTHER
};

/* A request as its users see it. Filled by the engine; every pointer stays valid until the
 * request has been answered (for a proxied request: until its exchange ends). */
struct http_req {
    enum http_method method;
    const char *target; /* the request-target as sent ("/v1/models?x=1"), NUL-terminated */
    const char *body;   /* body_len bytes, not NUL-terminated; "" when there is no body */
    size_t body_len;    /* the whole body: the engine reads it before handing the request on */
    const char *peer;   /* the client's numeric address ("127.0.0.1", "::1"); "" if unknown */
    int http_minor;     /* 0 for HTTP/1.0, 1 for HTTP/1.1 */
    /* private: the engine's header lookup and its request */
    const char *(*_header)(const struct http_req *r, const char *name);
    const void *_impl;
};

/* An answer given without an engine. The server owns the body buffer and empties it for
 * every request; a handler fills status, content type and body. */
struct http_reply {
    int status;               /* 200 unless set */
    const char *content_type; /* "application/json" unless set; static storage */
    struct buf body;
};

/** the value of the request's first header called name (case-insensitive), or NULL */
const char *http_req_header(const struct http_req *r, const char *name);
/** true when the target's path is exactly path ("/x" matches "/x" and "/x?q", not "/xy") */
int http_req_path_is(const struct http_req *r, const char *path);
/** the method's name ("GET"), "OTHER" for HTTP_OTHER */
const char *http_method_name(enum http_method m);
/** true for GET, HEAD and OPTIONS: methods that only read */
int http_method_is_safe(enum http_method m);
/** true for the engine's tokenizer, vLLM's POST /tokenize and POST /detokenize (a query
 *  allowed): no inference, so neither admitd's gate nor the router's queue holds it */
int http_req_is_tokenizer(const struct http_req *r);

#endif
