/* admin: /metrics in Prometheus text format, liveness and readiness. */
#include "admin.h"
#include "httputil.h"
#include "proxy.h"
#include "xmalloc.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct admin {
    struct evhttp *http;
    struct proxy *px;
    struct metrics *m;
    const char *version;
    struct buf scratch; /* reused across scrapes */
};

static void reply(struct evhttp_request *req, int status, const char *ctype, const char *body,
                  size_t len)
{
    struct evbuffer *b = evbuffer_new();

    if (b == NULL)
        fatal("evbuffer_new failed");
    evbuffer_add(b, body, len);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    evhttp_send_reply(req, status, httpu_reason(status), b);
    evbuffer_free(b);
}

static void on_admin_request(struct evhttp_request *req, void *arg)
{
    struct admin *a = arg;
    const char *uri = evhttp_request_get_uri(req);
    size_t plen = strcspn(uri, "?");

    if (plen == 8 && strncmp(uri, "/metrics", 8) == 0) {
        struct gate_stats st;
        struct metrics_view v = {a->m, proxy_gate_stats(a->px, &st), a->version};

        buf_reset(&a->scratch);
        metrics_render(&v, &a->scratch);
        reply(req, 200, PROM_CONTENT_TYPE, a->scratch.data, a->scratch.len);
    } else if (plen == 7 && strncmp(uri, "/health", 7) == 0) {
        reply(req, 200, "application/json", "{\"status\":\"ok\"}\n", 16);
    } else if (plen == 6 && strncmp(uri, "/ready", 6) == 0) {
        if (a->m->engine_ready)
            reply(req, 200, "application/json", "{\"status\":\"ready\"}\n", 19);
        else
            reply(req, 503, "application/json",
                  "{\"status\":\"not ready\",\"reason\":\"engine not answering\"}\n", 55);
    } else {
        struct buf b;

        buf_init(&b);
        httpu_error_json(&b, 404, "not_found_error", "Not found: try /metrics, /health or /ready");
        reply(req, 404, "application/json", b.data, b.len);
        buf_free(&b);
    }
}

struct admin *admin_new(struct event_base *base, struct proxy *px, struct metrics *m,
                        const char *version)
{
    struct admin *a = xcalloc(1, sizeof *a);

    a->px = px;
    a->m = m;
    a->version = version;
    buf_init(&a->scratch);
    a->http = evhttp_new(base);
    if (a->http == NULL)
        fatal("evhttp_new failed");
    evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_max_headers_size(a->http, 16384);
    evhttp_set_max_body_size(a->http, 0);
    evhttp_set_timeout(a->http, 30);
    evhttp_set_default_content_type(a->http, NULL);
    evhttp_set_gencb(a->http, on_admin_request, a);
    return a;
}

int admin_bind(struct admin *a, const struct hostport *hp, char *bound, size_t boundlen, char *err,
               size_t errlen)
{
    return net_evhttp_bind(a->http, hp, bound, boundlen, err, errlen);
}

void admin_free(struct admin *a)
{
    if (a == NULL)
        return;
    evhttp_free(a->http);
    buf_free(&a->scratch);
    free(a);
}
