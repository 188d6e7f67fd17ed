/* subscribe: nng SUB socket + RECVFD watched by libevent. */
#include "pubsub/subscribe.h"
#include "admit/load.h"
#include "core/log.h"
#include "pubsub/nngclose.h"
#include "pubsub/nngrecv.h"
#include "core/xmalloc.h"

#include <event2/event.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <stdio.h>
#include <stdlib.h>

/* How long closing a socket that could not be set up may take (see nngclose.h). */
#define SUB_CLOSE_MS 500

struct subscriber {
    nng_socket sock;
    nng_dialer dialer;
    struct event *ev;
    char *url;
    sub_cb cb;
    void *arg;
};

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct subscriber *s = arg;

    (void) fd;
    (void) what;
    for (;;) {
        char buf[NNGRECV_BUF];
        size_t len;

        if (nngrecv(s->sock, buf, &len) != 0)
            return; /* EAGAIN: drained */
        s->cb(s->arg, buf, len);
    }
}

struct subscriber *sub_new(struct event_base *base, const char *url, sub_cb cb, void *arg,
                           char *err, size_t errlen)
{
    struct subscriber *s = xcalloc(1, sizeof *s);
    int rv, fd;

    s->cb = cb;
    s->arg = arg;
    if ((rv = nng_sub0_open(&s->sock)) != 0) {
        snprintf(err, errlen, "cannot open a subscriber: %s", nng_strerror(rv));
        free(s);
        return NULL;
    }
    if ((rv = nng_socket_set(s->sock, NNG_OPT_SUB_SUBSCRIBE, ADMIT_LOAD_TOPIC " ",
                             sizeof ADMIT_LOAD_TOPIC)) != 0 ||
        (rv = nng_dial(s->sock, url, &s->dialer, NNG_FLAG_NONBLOCK)) != 0 ||
        (rv = nng_socket_get_int(s->sock, NNG_OPT_RECVFD, &fd)) != 0) {
        snprintf(err, errlen, "cannot subscribe to %s: %s", url, nng_strerror(rv));
        nngc_close(s->sock, SUB_CLOSE_MS);
        free(s);
        return NULL;
    }
    s->url = xstrdup(url);
    s->ev = event_new(base, fd, EV_READ | EV_PERSIST, on_readable, s);
    if (s->ev == NULL)
        fatal("event_new failed");
    event_add(s->ev, NULL);
    return s;
}

void sub_free(struct subscriber *s)
{
    if (s == NULL)
        return;
    event_free(s->ev);
    /* Neither the dialer nor the socket is closed: see nngclose.h, "at exit". */
    free(s->url);
    free(s);
}

void sub_close(struct subscriber *s, int timeout_ms)
{
    nng_socket sock;

    if (s == NULL)
        return;
    sock = s->sock;
    sub_free(s);
    if (nngc_close(sock, timeout_ms) != 0)
        log_warn("closing a load subscriber took over %d ms: left to the exit", timeout_ms);
}
