/* probe: periodic engine health check. */
#include "probe.h"
#include "log.h"
#include "xmalloc.h"

#include <event2/event.h>
#include <event2/http.h>
#include <stdlib.h>
#include <string.h>

struct probe {
    struct event_base *base;
    struct evhttp_connection *evcon;
    struct evhttp_request *req; /* in flight, or NULL */
    struct event *timer;
    struct timeval interval;
    char *path;
    char hostport[NETADDR_HOST_MAX + 8];
    int *ready;
};

static void probe_set(struct probe *p, int ready)
{
    if (ready != *p->ready)
        log_info("engine at %s is %s", p->hostport, ready ? "ready" : "not ready");
    *p->ready = ready;
}

static void on_probe_done(struct evhttp_request *req, void *arg)
{
    struct probe *p = arg;
    int code = req ? evhttp_request_get_response_code(req) : 0;

    p->req = NULL;
    probe_set(p, code >= 200 && code < 300);
    evtimer_add(p->timer, &p->interval);
}

static void on_probe_error(enum evhttp_request_error err, void *arg)
{
    struct probe *p = arg;

    if (err == EVREQ_HTTP_REQUEST_CANCEL)
        return; /* probe_free cancelled it */
    p->req = NULL;
}

static void on_probe_timer(evutil_socket_t fd, short what, void *arg)
{
    struct probe *p = arg;
    struct evhttp_request *req = evhttp_request_new(on_probe_done, p);

    (void) fd;
    (void) what;
    if (req == NULL)
        fatal("evhttp_request_new failed");
    evhttp_request_set_error_cb(req, on_probe_error);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Host", p->hostport);
    p->req = req;
    if (evhttp_make_request(p->evcon, req, EVHTTP_REQ_GET, p->path) != 0) {
        p->req = NULL;
        evhttp_request_free(req);
        probe_set(p, 0);
        evtimer_add(p->timer, &p->interval);
    }
}

struct probe *probe_new(struct event_base *base, const struct http_url *url, const char *path,
                        unsigned interval_ms, int *ready)
{
    struct probe *p = xcalloc(1, sizeof *p);
    struct timeval timeout;

    p->base = base;
    p->ready = ready;
    p->path = xstrdup(path);
    strcpy(p->hostport, url->hostport);
    p->interval.tv_sec = interval_ms / 1000;
    p->interval.tv_usec = (interval_ms % 1000) * 1000;
    /* A probe slower than its own interval (at least a second) counts as a failure. */
    timeout = p->interval;
    if (timeout.tv_sec < 1)
        timeout.tv_sec = 1;
    p->evcon = evhttp_connection_base_new(base, NULL, url->host, (unsigned short) url->port);
    if (p->evcon == NULL)
        fatal("evhttp_connection_base_new failed");
    evhttp_connection_set_timeout_tv(p->evcon, &timeout);
    p->timer = evtimer_new(base, on_probe_timer, p);
    if (p->timer == NULL)
        fatal("evtimer_new failed");
    event_active(p->timer, EV_TIMEOUT, 0); /* probe at once, not after one interval */
    return p;
}

void probe_free(struct probe *p)
{
    if (p == NULL)
        return;
    if (p->req != NULL)
        evhttp_cancel_request(p->req);
    event_free(p->timer);
    evhttp_connection_free(p->evcon);
    free(p->path);
    free(p);
}
