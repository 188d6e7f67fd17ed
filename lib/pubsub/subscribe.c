/* subscribe: spsub where it can, else one nng SUB socket per event base, a dialer per
 * subscriber, a demux by dialer.
 *
 * The choice is made per URL at sub_new (subscribe.h): with SUB_AUTO a URL spsub_supported()
 * takes gets an spsub, read in the passes of the base's poller (sppoll.h; one per base, held
 * by each subscriber that uses it), and nothing of nng is touched for it. Measured at 1,000
 * publishers of 10 messages/s (tests/bench/fleet/spsub_bench.c, README "Load intake"), that
 * costs a fifth of nng's CPU per message, in one thread instead of fourteen. Closing one is
 * immediate and never blocks: its connection is closed, and the poller forgets it even in
 * the middle of a pass, so nothing more of it reaches the callback, and a new subscriber
 * with the same argument has a connection of its own. What follows is the nng side.
 *
 * Every subscriber of an event base shares one SUB socket: sub_new adds a dialer to it, and
 * the socket's one receive descriptor is watched by one level-triggered event. Each message
 * is handed to the subscriber whose dialer's pipe carried it (nng_msg_get_pipe, then
 * nng_pipe_dialer), found in a table of dialer ids. Measured against one socket per
 * subscriber at 1,000 publishers of 10 messages/s (tests/bench/fleet/intake_bench.c), the
 * shared socket takes the same CPU or less, a quarter less memory and a third of the
 * descriptors (one per connection, instead of a connection and a notification pipe each).
 *
 * The shared queue is as deep as nng allows (SUB_RECVBUF), so a loop busy for a moment does
 * not lose one worker's message to another's burst; a message older than that is dropped,
 * which a snapshot protocol can afford. A message whose pipe is gone by the time it is read
 * (its publisher hung up just after sending, or its dialer was closed), or whose dialer was
 * freed, is dropped: its publisher's next message says the same and more.
 *
 * A subscriber closed while the program runs (sub_close: admit-router's worker that left the
 * fleet) leaves the table at once and then closes its own dialer only, with a deadline
 * (nngc_dialer_close), never the shared socket. Its messages still queued are dropped by the
 * demux: its id is no longer in the table, nng does not hand a closed dialer's id to another
 * until its 31-bit ids wrap, and once the pipe is reaped its messages name no dialer at all.
 * So a worker slot reused at once (a new subscriber with the same callback argument) hears
 * only its own dialer. */
#include "pubsub/subscribe.h"
#include "admit/load.h"
#include "util/log.h"
#include "pubsub/nngclose.h"
#include "pubsub/nngrecv.h"
#include "pubsub/sppoll.h"
#include "wire/kvmsg.h"
#include "util/xmalloc.h"

#include <event2/event.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* How long closing a socket that could not be set up may take (see nngclose.h). */
#define SUB_CLOSE_MS 500
/* Messages the shared socket holds for the loop: nng's largest receive buffer. */
#define SUB_RECVBUF 8192

struct subscriber {
    struct spsub *sp;    /* spsub's, or NULL: nng's (the rest) */
    struct sppoll *poll; /* the poller sp is read by (NULL: an event of its own) */
    struct shared *sh;
    nng_dialer dialer;
    int id; /* the dialer's id, the demux key */
    char *url;
    sub_cb cb;
    sub_cb events; /* the kv_events topic's (sub_set_events); NULL: dropped */
    void *arg;
    uint64_t msgs, bytes; /* what the demux handed on */
    uint64_t nevents;     /* ... of them, kv_events messages */
};

/* The SUB socket of one event base. */
struct shared {
    struct event_base *base;
    nng_socket sock;
    struct event *ev;
    size_t refs;
    int events; /* subscribed to the kv_events topic too (a subscriber asked) */
    /* dialer id -> subscriber, open addressing; id 0 (never a dialer's) is an empty slot,
     * TOMBSTONE a freed one */
    int *ids;
    struct subscriber **subs;
    size_t cap, used; /* used counts tombstones too */
    struct shared *next;
};

#define TOMBSTONE (-1)

/* The sockets by event base. Subscribers are made and freed on their base's thread; the
 * lock covers a program with loops on several threads. */
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shared *shared_list;

static size_t slot_of(const struct shared *sh, int id)
{
    return ((size_t) (unsigned) id * 2654435761u) % sh->cap;
}

static struct subscriber *demux(const struct shared *sh, int id)
{
    if (id <= 0 || sh->cap == 0)
        return NULL;
    for (size_t h = slot_of(sh, id);; h = (h + 1) % sh->cap) {
        if (sh->ids[h] == 0)
            return NULL;
        if (sh->ids[h] == id)
            return sh->subs[h];
    }
}

static void map_insert(struct shared *sh, int id, struct subscriber *s);
static void shared_put(struct shared *sh);

/* Keeps the table under half full, tombstones included, rebuilding it without them. */
static void map_reserve(struct shared *sh)
{
    int *ids = sh->ids;
    struct subscriber **subs = sh->subs;
    size_t cap = sh->cap;

    if (2 * (sh->used + 1) <= sh->cap)
        return;
    sh->cap = cap < 16 ? 32 : 4 * sh->refs + 32;
    sh->ids = xcalloc(sh->cap, sizeof *sh->ids);
    sh->subs = xcalloc(sh->cap, sizeof *sh->subs);
    sh->used = 0;
    for (size_t h = 0; h < cap; h++)
        if (ids[h] > 0)
            map_insert(sh, ids[h], subs[h]);
    free(ids);
    free(subs);
}

static void map_insert(struct shared *sh, int id, struct subscriber *s)
{
    size_t h = slot_of(sh, id);

    while (sh->ids[h] > 0)
        h = (h + 1) % sh->cap;
    if (sh->ids[h] == 0)
        sh->used++;
    sh->ids[h] = id;
    sh->subs[h] = s;
}

static void map_remove(struct shared *sh, int id)
{
    for (size_t h = slot_of(sh, id); sh->ids[h] != 0; h = (h + 1) % sh->cap)
        if (sh->ids[h] == id) {
            sh->ids[h] = TOMBSTONE;
            sh->subs[h] = NULL;
            return;
        }
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct shared *sh = arg;

    (void) fd;
    (void) what;
    /* Held for the loop: a callback may free the base's last subscriber. */
    pthread_mutex_lock(&shared_mu);
    sh->refs++;
    pthread_mutex_unlock(&shared_mu);
    for (;;) {
        char buf[NNGRECV_BUF];
        size_t len;
        nng_dialer from;
        struct subscriber *s;

        if (nngrecv_from(sh->sock, buf, &len, &from) != 0)
            break; /* EAGAIN: drained */
        if ((s = demux(sh, nng_dialer_id(from))) == NULL)
            continue;
        /* the socket takes both topics once one subscriber asked for kv_events */
        if (len >= KVM_TOPIC_LEN && memcmp(buf, KVM_TOPIC, KVM_TOPIC_LEN) == 0) {
            if (s->events != NULL) {
                s->nevents++;
                s->events(s->arg, buf, len);
            }
            continue;
        }
        s->msgs++;
        s->bytes += len;
        s->cb(s->arg, buf, len);
    }
    pthread_mutex_lock(&shared_mu);
    shared_put(sh);
    pthread_mutex_unlock(&shared_mu);
}

/* The base's shared socket, opened on first use; NULL with err when it cannot be. */
static struct shared *shared_get(struct event_base *base, char *err, size_t errlen)
{
    struct shared *sh;
    int rv, fd;

    for (sh = shared_list; sh != NULL; sh = sh->next)
        if (sh->base == base)
            return sh;
    sh = xcalloc(1, sizeof *sh);
    if ((rv = nng_sub0_open(&sh->sock)) != 0) {
        snprintf(err, errlen, "cannot open a subscriber: %s", nng_strerror(rv));
        free(sh);
        return NULL;
    }
    /* The topic with its separating space, without the NUL: a prefix match on the body. */
    if ((rv = nng_socket_set(sh->sock, NNG_OPT_SUB_SUBSCRIBE, ADMIT_LOAD_TOPIC " ",
                             sizeof ADMIT_LOAD_TOPIC)) != 0 ||
        (rv = nng_socket_set_int(sh->sock, NNG_OPT_RECVBUF, SUB_RECVBUF)) != 0 ||
        (rv = nng_socket_get_int(sh->sock, NNG_OPT_RECVFD, &fd)) != 0) {
        snprintf(err, errlen, "cannot open a subscriber: %s", nng_strerror(rv));
        nngc_close(sh->sock, SUB_CLOSE_MS);
        free(sh);
        return NULL;
    }
    sh->base = base;
    sh->ev = event_new(base, fd, EV_READ | EV_PERSIST, on_readable, sh);
    if (sh->ev == NULL)
        fatal("event_new failed");
    event_add(sh->ev, NULL);
    sh->next = shared_list;
    shared_list = sh;
    return sh;
}

/* The last subscriber of a base is gone: its event goes (before the base does), its socket
 * stays open, to the exit (see nngclose.h). */
static void shared_put(struct shared *sh)
{
    struct shared **pp;

    if (--sh->refs > 0)
        return;
    for (pp = &shared_list; *pp != sh; pp = &(*pp)->next)
        ;
    *pp = sh->next;
    event_free(sh->ev);
    free(sh->ids);
    free(sh->subs);
    free(sh);
}

/* One more dialer on the base's shared socket. */
static struct subscriber *nng_new(struct event_base *base, const char *url, sub_cb cb, void *arg,
                                  char *err, size_t errlen)
{
    struct subscriber *s;
    struct shared *sh;
    int rv;

    pthread_mutex_lock(&shared_mu);
    if ((sh = shared_get(base, err, errlen)) == NULL) {
        pthread_mutex_unlock(&shared_mu);
        return NULL;
    }
    s = xcalloc(1, sizeof *s);
    s->sh = sh;
    s->cb = cb;
    s->arg = arg;
    sh->refs++;
    /* Non-blocking: a publisher that is not up yet is retried in the background. */
    if ((rv = nng_dial(sh->sock, url, &s->dialer, NNG_FLAG_NONBLOCK)) != 0) {
        snprintf(err, errlen, "cannot subscribe to %s: %s", url, nng_strerror(rv));
        shared_put(sh);
        pthread_mutex_unlock(&shared_mu);
        free(s);
        return NULL;
    }
    s->id = nng_dialer_id(s->dialer);
    map_reserve(sh);
    map_insert(sh, s->id, s);
    pthread_mutex_unlock(&shared_mu);
    s->url = xstrdup(url);
    return s;
}

/* An spsub, read by the base's poller when o asks for passes. */
static struct subscriber *sp_new(struct event_base *base, const char *url, const struct sub_opts *o,
                                 sub_cb cb, void *arg, char *err, size_t errlen)
{
    struct subscriber *s = xcalloc(1, sizeof *s);

    if (o->batch_ms > 0 && (s->poll = sppoll_get(base, o->batch_ms, err, errlen)) == NULL) {
        free(s);
        return NULL;
    }
    if ((s->sp = spsub_new(base, url, cb, arg, err, errlen)) == NULL) {
        sppoll_put(s->poll);
        free(s);
        return NULL;
    }
    spsub_set_poll(s->sp, s->poll);
    s->url = xstrdup(url);
    s->cb = cb;
    s->arg = arg;
    return s;
}

struct subscriber *sub_new(struct event_base *base, const char *url, const struct sub_opts *o,
                           sub_cb cb, void *arg, char *err, size_t errlen)
{
    static const struct sub_opts defaults = {SUB_AUTO, SPPOLL_DEFAULT_MS};

    if (o == NULL)
        o = &defaults;
    if (o->via == SUB_AUTO && spsub_supported(url, NULL, 0))
        return sp_new(base, url, o, cb, arg, err, errlen);
    return nng_new(base, url, cb, arg, err, errlen);
}

void sub_set_events(struct subscriber *s, sub_cb cb)
{
    int rv;

    if (s->sp != NULL) {
        spsub_set_events(s->sp, cb);
        return;
    }
    s->events = cb;
    pthread_mutex_lock(&shared_mu);
    if (cb != NULL && !s->sh->events) {
        /* the topic with its space, as the load topic's: a prefix match on the body */
        if ((rv = nng_socket_set(s->sh->sock, NNG_OPT_SUB_SUBSCRIBE, KVM_TOPIC, KVM_TOPIC_LEN)) ==
            0)
            s->sh->events = 1;
        else
            log_warn("cannot subscribe to the kv_events topic: %s", nng_strerror(rv));
    }
    pthread_mutex_unlock(&shared_mu);
}

void sub_set_lost(struct subscriber *s, sub_lost_cb cb)
{
    if (s->sp != NULL)
        spsub_set_lost(s->sp, cb);
}

void sub_set_unreachable(struct subscriber *s, sub_lost_cb cb)
{
    if (s->sp != NULL)
        spsub_set_unreachable(s->sp, cb);
}

int sub_is_sp(const struct subscriber *s)
{
    return s->sp != NULL;
}

void sub_get_stats(const struct subscriber *s, struct spsub_stats *out)
{
    if (s->sp != NULL) {
        spsub_get_stats(s->sp, out);
        return;
    }
    memset(out, 0, sizeof *out);
    out->messages = s->msgs;
    out->bytes = s->bytes;
    out->events = s->nevents;
}

/* An spsub goes at once, its connection closed (from its own callback too: spsub.h). */
static void sp_free(struct subscriber *s)
{
    spsub_free(s->sp);
    sppoll_put(s->poll);
    free(s->url);
    free(s);
}

void sub_free(struct subscriber *s)
{
    if (s == NULL)
        return;
    if (s->sp != NULL) {
        sp_free(s);
        return;
    }
    pthread_mutex_lock(&shared_mu);
    map_remove(s->sh, s->id);
    shared_put(s->sh);
    pthread_mutex_unlock(&shared_mu);
    /* The dialer is not closed: see nngclose.h, "at exit". Until then what it receives has
     * no subscriber and is dropped. */
    free(s->url);
    free(s);
}

void sub_close(struct subscriber *s, int timeout_ms)
{
    nng_dialer d;

    if (s == NULL)
        return;
    if (s->sp != NULL) {
        sp_free(s);
        return;
    }
    d = s->dialer;
    /* Out of the demux table first, on the loop's thread: what the dialer's pipe still has
     * queued on the shared socket is dropped, never handed to whatever reuses s->arg. Then
     * only the dialer goes (its pipe with it); the socket stays for the others. */
    sub_free(s);
    if (nngc_dialer_close(d, timeout_ms) != 0)
        log_warn("closing a load subscriber's dialer took over %d ms: left to the exit",
                 timeout_ms);
}
