/* server: local answers on evhttp, through the seam's request and reply types. */
#include "http/server.h"
#include "core/xmalloc.h"
#include "http/evreq.h"
#include "http/netsock.h"

#include <event2/http.h>
#include <stdlib.h>

struct hsrv {
    struct evhttp *http;
    hsrv_handler handler;
    void *arg;
    struct http_reply rep; /* its body buffer is reused across requests */
};

static const enum evhttp_cmd_type ev_methods[] = {
    [HTTP_GET] = EVHTTP_REQ_GET,       [HTTP_HEAD] = EVHTTP_REQ_HEAD,
    [HTTP_POST] = EVHTTP_REQ_POST,     [HTTP_PUT] = EVHTTP_REQ_PUT,
    [HTTP_DELETE] = EVHTTP_REQ_DELETE, [HTTP_OPTIONS] = EVHTTP_REQ_OPTIONS,
    [HTTP_PATCH] = EVHTTP_REQ_PATCH,
};

static void on_request(struct evhttp_request *req, void *arg)
{
    struct hsrv *s = arg;
    struct http_req r;

    evreq_view(req, &r);
    buf_reset(&s->rep.body);
    s->rep.status = 200;
    s->rep.content_type = "application/json";
    s->handler(s->arg, &r, &s->rep);
    evreq_reply(req, s->rep.status, s->rep.content_type, s->rep.body.data, s->rep.body.len, NULL);
}

struct hsrv *hsrv_new(struct event_base *base, const struct hsrv_limits *lim, hsrv_handler h,
                      void *arg)
{
    struct hsrv *s = xcalloc(1, sizeof *s);
    ev_uint16_t allowed = 0;

    for (size_t m = 0; m < sizeof ev_methods / sizeof ev_methods[0]; m++)
        if (lim->methods & (1u << m))
            allowed |= (ev_uint16_t) ev_methods[m];
    s->handler = h;
    s->arg = arg;
    buf_init(&s->rep.body);
    s->http = evhttp_new(base);
    if (s->http == NULL)
        fatal("evhttp_new failed");
    evhttp_set_allowed_methods(s->http, allowed);
    evhttp_set_max_headers_size(s->http, lim->max_header_bytes);
    evhttp_set_max_body_size(s->http, lim->max_body_bytes);
    evhttp_set_timeout(s->http, (int) lim->timeout_s);
    evhttp_set_default_content_type(s->http, NULL);
    evhttp_set_gencb(s->http, on_request, s);
    return s;
}

int hsrv_bind(struct hsrv *s, const struct hostport *hp, char *bound, size_t boundlen, char *err,
              size_t errlen)
{
    return net_evhttp_bind(s->http, hp, bound, boundlen, err, errlen);
}

void hsrv_free(struct hsrv *s)
{
    if (s == NULL)
        return;
    evhttp_free(s->http);
    buf_free(&s->rep.body);
    free(s);
}
