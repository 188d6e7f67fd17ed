/* server: local answers on admitd's own HTTP/1.1 connections (hconn), through the seam's
 * request and reply types. */
#include "http/server.h"
#include "util/xmalloc.h"
#include "http/hconn.h"

#include <stdlib.h>

struct hsrv {
    struct hlisten *l;
    hsrv_handler handler;
    void *arg;
    struct http_reply rep; /* its body buffer is reused across requests */
};

static void on_request(void *arg, struct hconn *c, const struct http_req *r)
{
    struct hsrv *s = arg;

    buf_reset(&s->rep.body);
    s->rep.status = 200;
    s->rep.content_type = "application/json";
    s->handler(s->arg, r, &s->rep);
    if (hc_reply(c, s->rep.status, s->rep.content_type, s->rep.body.data ? s->rep.body.data : "",
                 s->rep.body.len, NULL, 0) != 0)
        hc_abort(c);
    else
        hc_end(c, 1);
}

/* Every answer is whole before the handler returns: no request is ever left in progress. */
static void on_gone(void *arg, struct hconn *c, void *owner)
{
    (void) arg;
    (void) c;
    (void) owner;
}

struct hsrv *hsrv_new(struct event_base *base, const struct hsrv_limits *lim, hsrv_handler h,
                      void *arg)
{
    struct hsrv *s = xcalloc(1, sizeof *s);
    struct hc_limits hl = {lim->methods,
                           lim->max_header_bytes,
                           lim->max_body_bytes,
                           lim->timeout_s * 1000,
                           lim->header_timeout_s * 1000,
                           lim->max_conns,
                           lim->name,
                           lim->stats};
    struct hc_ops ops = {on_request, on_gone, NULL, NULL};

    s->handler = h;
    s->arg = arg;
    buf_init(&s->rep.body);
    s->l = hl_new(base, &hl, &ops, s);
    return s;
}

int hsrv_bind(struct hsrv *s, const struct hostport *hp, char *bound, size_t boundlen, char *err,
              size_t errlen)
{
    return hl_bind(s->l, hp, bound, boundlen, err, errlen);
}

void hsrv_free(struct hsrv *s)
{
    if (s == NULL)
        return;
    hl_free(s->l);
    buf_free(&s->rep.body);
    free(s);
}
