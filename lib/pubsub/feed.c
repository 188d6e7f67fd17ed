/* feed: one nng SUB socket dialing several publishers, waited on with poll(). */
#include "pubsub/feed.h"
#include "admit/load.h"
#include "util/xmalloc.h"
#include "pubsub/nngclose.h"
#include "pubsub/nngrecv.h"

#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

/* How long feed_open waits to close a socket it could not set up (see nngclose.h). */
#define FEED_SETUP_CLOSE_MS 500

struct feed {
    nng_socket sock;
    int recv_fd; /* NNG_OPT_RECVFD, owned by the socket */
};

struct feed *feed_open(char *err, size_t errlen)
{
    struct feed *f = xcalloc(1, sizeof *f);
    int rv;

    if ((rv = nng_sub0_open(&f->sock)) != 0) {
        snprintf(err, errlen, "cannot open a subscriber: %s", nng_strerror(rv));
        free(f);
        return NULL;
    }
    /* The topic with its separating space, without the NUL: a prefix match on the body. */
    if ((rv = nng_socket_set(f->sock, NNG_OPT_SUB_SUBSCRIBE, ADMIT_LOAD_TOPIC " ",
                             sizeof ADMIT_LOAD_TOPIC)) != 0 ||
        (rv = nng_socket_get_int(f->sock, NNG_OPT_RECVFD, &f->recv_fd)) != 0) {
        snprintf(err, errlen, "cannot open a subscriber: %s", nng_strerror(rv));
        nngc_close(f->sock, FEED_SETUP_CLOSE_MS);
        free(f);
        return NULL;
    }
    return f;
}

int feed_dial(struct feed *f, const char *url, char *err, size_t errlen)
{
    int rv;

    /* Non-blocking: a publisher that is not up yet is retried in the background, so a
     * feed started before its publishers still hears them once they come up. */
    if ((rv = nng_dial(f->sock, url, NULL, NNG_FLAG_NONBLOCK)) != 0) {
        snprintf(err, errlen, "cannot dial %s: %s", url, nng_strerror(rv));
        return -1;
    }
    return 0;
}

int feed_fd(const struct feed *f)
{
    return f->recv_fd;
}

int feed_wait(const struct feed *f, int timeout_ms)
{
    struct pollfd pfd = {f->recv_fd, POLLIN, 0};
    int rc = poll(&pfd, 1, timeout_ms);

    /* A signal ends the wait early on purpose: the caller's handler may have asked to stop. */
    if (rc < 0)
        return errno == EINTR ? 0 : -1;
    return rc > 0;
}

int feed_recv(struct feed *f, feed_cb cb, void *arg, char *err, size_t errlen)
{
    char buf[NNGRECV_BUF];
    size_t len;
    int rv = nngrecv(f->sock, buf, &len);

    if (rv == NNG_EAGAIN || rv == NNG_ETIMEDOUT)
        return 0;
    if (rv != 0) {
        snprintf(err, errlen, "receive failed: %s", nng_strerror(rv));
        return -1;
    }
    cb(arg, buf, len);
    return 1;
}

void feed_free(struct feed *f)
{
    /* The socket is not closed: see nngclose.h, "at exit". */
    free(f);
}
