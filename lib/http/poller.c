/* poller: periodic GET with the answer's status and body. */
#include "http/poller.h"
#include "core/xmalloc.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdlib.h>
#include <string.h>

/* Largest body handed over; a bigger answer counts as a failure (a metrics page is KBs). */
#define POLLER_MAX_BODY (8 * 1024 * 1024)

struct poller {
    struct evhttp_connection *evcon;
    struct evhttp_request *req; /* in flight, or NULL */
    struct event *timer;
    struct timeval interval;
    char *path;
    char hostport[NETADDR_HOST_MAX + 8];
    poller_cb cb;
    void *arg;
};

static void on_poll_done(struct evhttp_request *req, void *arg)
{
    struct poller *p = arg;
    int status = req ? evhttp_request_get_response_code(req) : 0;
    struct evbuffer *in = req ? evhttp_request_get_input_buffer(req) : NULL;
    size_t len = in ? evbuffer_get_length(in) : 0;

    p->req = NULL;
    if (status == 0 || len > POLLER_MAX_BODY) {
        p->cb(p->arg, 0, "", 0);
    } else {
        evbuffer_add(in, "", 1); /* NUL-terminate for the callback */
        p->cb(p->arg, status, (const char *) evbuffer_pullup(in, -1), len);
    }
    evtimer_add(p->timer, &p->interval);
}

static void on_poll_error(enum evhttp_request_error err, void *arg)
{
    struct poller *p = arg;

    if (err != EVREQ_HTTP_REQUEST_CANCEL)
        p->req = NULL; /* the done callback follows with NULL */
}

static void on_poll_timer(evutil_socket_t fd, short what, void *arg)
{
    struct poller *p = arg;
    struct evhttp_request *req = evhttp_request_new(on_poll_done, p);

    (void) fd;
    (void) what;
    if (req == NULL)
        fatal("evhttp_request_new failed");
    evhttp_request_set_error_cb(req, on_poll_error);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Host", p->hostport);
    p->req = req;
    if (evhttp_make_request(p->evcon, req, EVHTTP_REQ_GET, p->path) != 0) {
        p->req = NULL;
        evhttp_request_free(req);
        p->cb(p->arg, 0, "", 0);
        evtimer_add(p->timer, &p->interval);
    }
}

struct poller *poller_new(struct event_base *base, const struct http_url *url, const char *path,
                          unsigned interval_ms, unsigned timeout_ms, poller_cb cb, void *arg)
{
    struct poller *p = xcalloc(1, sizeof *p);
    struct timeval timeout = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};

    p->cb = cb;
    p->arg = arg;
    p->path = xstrdup(path);
    strcpy(p->hostport, url->hostport);
    p->interval.tv_sec = interval_ms / 1000;
    p->interval.tv_usec = (interval_ms % 1000) * 1000;
    p->evcon = evhttp_connection_base_new(base, NULL, url->host, (unsigned short) url->port);
    if (p->evcon == NULL)
        fatal("evhttp_connection_base_new failed");
    evhttp_connection_set_timeout_tv(p->evcon, &timeout);
    p->timer = evtimer_new(base, on_poll_timer, p);
    if (p->timer == NULL)
        fatal("evtimer_new failed");
    event_active(p->timer, EV_TIMEOUT, 0); /* poll at once, not after one interval */
    return p;
}

void poller_kick(struct poller *p)
{
    if (p == NULL || p->req != NULL)
        return;
    evtimer_del(p->timer);
    event_active(p->timer, EV_TIMEOUT, 0);
}

void poller_free(struct poller *p)
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
