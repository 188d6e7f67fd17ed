/* admin: /metrics in Prometheus text format, /load as JSON, /admission, liveness and
 * readiness, answered through the HTTP engine's server (http/server.h). */
#include "daemon/admin.h"
#include "wire/httputil.h"
#include "wire/prom.h"
#include "util/xmalloc.h"
#include "http/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct admin {
    struct hsrv *srv;
    struct admin_hooks hooks;
    char token[128];
};

static void reply(struct http_reply *rep, int status, const char *ctype, const char *body,
                  size_t len)
{
    rep->status = status;
    rep->content_type = ctype;
    buf_append(&rep->body, body, len);
}

static void reply_error(struct http_reply *rep, int status, const char *msg)
{
    rep->status = status;
    httpu_error_field_json(&rep->body, msg);
}

/* Mutations: a matching bearer token when one is configured, else a loopback peer. */
static int authorised(struct admin *a, const struct http_req *req, int *status, const char **why)
{
    if (a->token[0] != '\0') {
        if (!httpu_bearer_ok(http_req_header(req, "Authorization"), a->token)) {
            *status = 401;
            *why = "a valid Authorization: Bearer token is required";
            return 0;
        }
        return 1;
    }
    if (!net_is_loopback(req->peer)) {
        *status = 403;
        *why = "changes are accepted only from loopback (set --admin-token to allow others)";
        return 0;
    }
    return 1;
}

static void on_admission(struct admin *a, const struct http_req *req, struct http_reply *rep)
{
    const char *ct = http_req_header(req, "Content-Type");
    const char *why;
    int status;

    if (req->method != HTTP_POST) {
        rep->status = a->hooks.admission(a->hooks.arg, NULL, 0, NULL, &rep->body);
        return;
    }
    if (!authorised(a, req, &status, &why)) {
        reply_error(rep, status, why);
        return;
    }
    if (!httpu_is_json(ct)) {
        reply_error(rep, 415, "the body must be application/json");
        return;
    }
    if (req->body_len > ADMIN_MAX_BODY) {
        reply_error(rep, 413, "the body is larger than 4096 bytes");
        return;
    }
    rep->status = a->hooks.admission(a->hooks.arg, req->body, req->body_len,
                                     req->peer[0] ? req->peer : "?", &rep->body);
}

static void on_admin_request(void *arg, const struct http_req *req, struct http_reply *rep)
{
    struct admin *a = arg;

    if (http_req_path_is(req, "/admission")) {
        on_admission(a, req, rep);
        return;
    }
    if (req->method == HTTP_POST) {
        reply_error(rep, 405, "only /admission accepts POST");
        return;
    }
    if (http_req_path_is(req, "/metrics")) {
        rep->content_type = PROM_CONTENT_TYPE;
        a->hooks.metrics(a->hooks.arg, &rep->body);
    } else if (http_req_path_is(req, "/load")) {
        a->hooks.load(a->hooks.arg, &rep->body);
    } else if (http_req_path_is(req, "/health")) {
        reply(rep, 200, "application/json", "{\"status\":\"ok\"}\n", 16);
    } else if (http_req_path_is(req, "/ready")) {
        if (a->hooks.ready(a->hooks.arg))
            reply(rep, 200, "application/json", "{\"status\":\"ready\"}\n", 19);
        else
            reply(rep, 503, "application/json",
                  "{\"status\":\"not ready\",\"reason\":\"engine not answering\"}\n", 55);
    } else {
        rep->status = 404;
        httpu_error_json(&rep->body, 404, "not_found_error",
                         "Not found: try /metrics, /load, /admission, /health or /ready");
    }
}

struct admin *admin_new(struct event_base *base, const struct admin_hooks *hooks, const char *token,
                        struct listen_stats *st)
{
    struct admin *a = xcalloc(1, sizeof *a);
    /* Read a little past ADMIN_MAX_BODY, so an oversized body gets our JSON 413. */
    struct hsrv_limits lim = {(1u << HTTP_GET) | (1u << HTTP_HEAD) | (1u << HTTP_POST),
                              16384,
                              64 * 1024,
                              30,
                              ADMIN_HEADER_TIMEOUT_S,
                              ADMIN_MAX_CONNS,
                              "metrics",
                              st};

    a->hooks = *hooks;
    snprintf(a->token, sizeof a->token, "%s", token);
    a->srv = hsrv_new(base, &lim, on_admin_request, a);
    return a;
}

int admin_bind(struct admin *a, const struct hostport *hp, char *bound, size_t boundlen, char *err,
               size_t errlen)
{
    return hsrv_bind(a->srv, hp, bound, boundlen, err, errlen);
}

void admin_free(struct admin *a)
{
    if (a == NULL)
        return;
    hsrv_free(a->srv);
    free(a);
}
