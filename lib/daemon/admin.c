/* admin: /metrics in Prometheus text format, /load as JSON, liveness and readiness. */
#include "daemon/admin.h"
#include "core/httputil.h"
#include "http/netsock.h"
#include "core/prom.h"
#include "core/xmalloc.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct admin {
    struct evhttp *http;
    struct admin_hooks hooks;
    char token[128];
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

static void reply_error(struct evhttp_request *req, struct buf *b, int status, const char *msg)
{
    buf_reset(b);
    httpu_error_field_json(b, msg);
    reply(req, status, "application/json", b->data, b->len);
}

/* Mutations: a matching bearer token when one is configured, else a loopback peer. */
static int authorised(struct admin *a, struct evhttp_request *req, const char *peer, int *status,
                      const char **why)
{
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");

    if (a->token[0] != '\0') {
        if (!httpu_bearer_ok(h, a->token)) {
            *status = 401;
            *why = "a valid Authorization: Bearer token is required";
            return 0;
        }
        return 1;
    }
    if (!net_is_loopback(peer)) {
        *status = 403;
        *why = "changes are accepted only from loopback (set --admin-token to allow others)";
        return 0;
    }
    return 1;
}

static void on_admission(struct admin *a, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    const char *ct = evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type");
    char *peer = NULL;
    ev_uint16_t port = 0;
    const char *why;
    int status;
    size_t len;

    if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
        status = a->hooks.admission(a->hooks.arg, NULL, 0, NULL, &a->scratch);
        reply(req, status, "application/json", a->scratch.data, a->scratch.len);
        return;
    }
    evhttp_connection_get_peer(evcon, &peer, &port);
    if (!authorised(a, req, peer ? peer : "", &status, &why)) {
        reply_error(req, &a->scratch, status, why);
        return;
    }
    if (ct == NULL || strncasecmp(ct, "application/json", 16) != 0) {
        reply_error(req, &a->scratch, 415, "the body must be application/json");
        return;
    }
    len = evbuffer_get_length(in);
    if (len > ADMIN_MAX_BODY) {
        reply_error(req, &a->scratch, 413, "the body is larger than 4096 bytes");
        return;
    }
    status = a->hooks.admission(a->hooks.arg, len ? (const char *) evbuffer_pullup(in, -1) : "",
                                len, peer ? peer : "?", &a->scratch);
    reply(req, status, "application/json", a->scratch.data, a->scratch.len);
}

static void on_admin_request(struct evhttp_request *req, void *arg)
{
    struct admin *a = arg;
    const char *uri = evhttp_request_get_uri(req);

    buf_reset(&a->scratch);
    if (is_path(uri, "/admission")) {
        on_admission(a, req);
        return;
    }
    if (evhttp_request_get_command(req) == EVHTTP_REQ_POST) {
        reply_error(req, &a->scratch, 405, "only /admission accepts POST");
        return;
    }
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
                         "Not found: try /metrics, /load, /admission, /health or /ready");
        reply(req, 404, "application/json", a->scratch.data, a->scratch.len);
    }
}

struct admin *admin_new(struct event_base *base, const struct admin_hooks *hooks, const char *token)
{
    struct admin *a = xcalloc(1, sizeof *a);

    a->hooks = *hooks;
    snprintf(a->token, sizeof a->token, "%s", token);
    buf_init(&a->scratch);
    a->http = evhttp_new(base);
    if (a->http == NULL)
        fatal("evhttp_new failed");
    evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST);
    evhttp_set_max_headers_size(a->http, 16384);
    /* Read a little past the limit, so an oversized body gets our JSON 413. */
    evhttp_set_max_body_size(a->http, 64 * 1024);
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
