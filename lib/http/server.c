/* server: local answers on evhttp, through the seam's request and reply types. */
#include "http/server.h"
#include "core/xmalloc.h"
#include "http/evreq.h"
#include "http/netsock.h"

#include <event2/http.h>
#include <stdlib.h>
#include <sys/time.h>

struct hsrv {
    struct evhttp *http;
    hsrv_handler handler;
    void *arg;
    struct http_reply rep; /* its body buffer is reused across requests */
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
    struct timeval idle = {lim->timeout_s, 0};

    s->handler = h;
    s->arg = arg;
    buf_init(&s->rep.body);
    s->http = evreq_server(base, lim->methods, lim->max_header_bytes, lim->max_body_bytes, &idle,
                           on_request, s);
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
