/* admin: /metrics in Prometheus text format, /load as JSON, liveness and readiness. */
#include "admin.h"
#include "httputil.h"
#include "prom.h"
#include "xmalloc.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct admin {
    struct evhttp *http;
    struct admin_hooks hooks;
    struct buf scratch; /* reused across requests */
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

static int is_path(const char *uri, const char *path)
{
    size_t n = strlen(path);

    return strncmp(uri, path, n) == 0 && (uri[n] == '\0' || uri[n] == '?');
}

static void on_admin_request(struct evhttp_request *req, void *arg)
{
    struct admin *a = arg;
    const char *uri = evhttp_request_get_uri(req);

    buf_reset(&a->scratch);
    if (is_path(uri, "/metrics")) {
        a->hooks.metrics(a->hooks.arg, &a->scratch);
        reply(req, 200, PROM_CONTENT_TYPE, a->scratch.data, a->scratch.len);
    } else if (is_path(uri, "/load")) {
        a->hooks.load(a->hooks.arg, &a->scratch);
        reply(req, 200, "application/json", a->scratch.data, a->scratch.len);
    } else if (is_path(uri, "/health")) {
        reply(req, 200, "application/json", "{\"status\":\"ok\"}\n", 16);
    } else if (is_path(uri, "/ready")) {
        if (a->hooks.ready(a->hooks.arg))
            reply(req, 200, "application/json", "{\"status\":\"ready\"}\n", 19);
        else
            reply(req, 503, "application/json",
                  "{\"status\":\"not ready\",\"reason\":\"engine not answering\"}\n", 55);
    } else {
        httpu_error_json(&a->scratch, 404, "not_found_error",
                         "Not found: try /metrics, /load, /health or /ready");
        reply(req, 404, "application/json", a->scratch.data, a->scratch.len);
    }
}

struct admin *admin_new(struct event_base *base, const struct admin_hooks *hooks)
{
    struct admin *a = xcalloc(1, sizeof *a);

    a->hooks = *hooks;
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
