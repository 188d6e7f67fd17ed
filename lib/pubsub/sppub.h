/* sppub: an SP PUB0 listener on libevent, speaking nng's wire protocol itself.
 *
 * What admitd publishes its load on by default (pubsub/publish.c): the framing of
 * wire/spframe.h on tcp:// and ipc://, read by nng's SUB and by our own (spsub) alike, with
 * no nng thread and no allocation per message. Everything happens on the caller's loop:
 *
 * - A subscriber is accepted, our header goes out at once, and its header must arrive within
 *   SPPUB_HANDSHAKE_MS and say SUB0. Only then does it get messages (as nng's PUB: a message
 *   sent before a subscriber is open is not kept for it).
 * - A message goes to every open subscriber as it is sent, in one sendmsg each. What a
 *   subscriber's kernel does not take is queued whole for it (a copy of its own length), up
 *   to the publisher's queue length, SPPUB_QUEUE messages unless sppub_set_queue says more;
 *   past that the oldest not yet started is dropped (nng's PUB drops the oldest too). A load
 *   message is a full snapshot, so the newest matter; a kv_events message is not, and a
 *   reader that sees a gap in its sequence fetches a dump, so admitd relaying KV events
 *   queues more (PUB_KV_QUEUE, pubsub/publish.h). A slow subscriber costs a bounded amount of
 *   memory and never delays the others.
 * - A SUB0 peer never sends after its header (nng's PUB closes a pipe that does): a byte
 *   more, a hang-up or an error drops the subscriber.
 * - At most SPPUB_PEERS_MAX subscribers at once; one more is accepted and closed at once.
 * - Accepting is net/acceptor's, as for every listener: out of descriptors, it pauses (and
 *   says so once) rather than spin. */
#ifndef ADMIT_SPPUB_H
#define ADMIT_SPPUB_H

#include "admit/load.h"

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct sppub;

/* Messages queued for one subscriber that is behind, at most (nng's PUB0 queue depth), unless
 * sppub_set_queue says more. */
#define SPPUB_QUEUE 16
/* The longest queue sppub_set_queue takes (nng's NNG_OPT_SENDBUF maximum). */
#define SPPUB_QUEUE_MAX 8192
/* Queued messages written by one sendmsg at most. */
#define SPPUB_IOV 64
/* The longest message sent: a load message's. */
#define SPPUB_MSG_MAX ADMIT_LOAD_MSG_MAX
/* How long a subscriber has to send its header. */
#define SPPUB_HANDSHAKE_MS 10000
/* Subscribers at once (routers and monitors: a handful per worker). */
#define SPPUB_PEERS_MAX 256

/* Counters, for /metrics and tests. */
struct sppub_stats {
    unsigned subscribers; /* open now */
    uint64_t accepted;    /* connections accepted */
    uint64_t refused;     /* connections closed at once: SPPUB_PEERS_MAX reached */
    uint64_t bad_peers;   /* dropped for a wrong header, a byte after it, or no header in time */
    uint64_t dropped;     /* messages a slow subscriber's queue had no room for */
};

/** listens on url (tcp://HOST:PORT, HOST a name, an address, "*" or empty for all; or
 *  ipc://PATH, a stale socket file replaced); bound gets the URL with the real port; NULL
 *  with err on failure */
struct sppub *sppub_new(struct event_base *base, const char *url, char *bound, size_t boundlen,
                        char *err, size_t errlen);
/** sends msg to every open subscriber, or queues it for those that are behind; never blocks;
 *  0, or -1 when len is over SPPUB_MSG_MAX */
int sppub_send(struct sppub *p, const void *msg, size_t len);
/** messages queued per subscriber at most, from now on (SPPUB_QUEUE .. SPPUB_QUEUE_MAX) */
void sppub_set_queue(struct sppub *p, unsigned n);
/** how long subscribers accepted from now on have to send their header (tests) */
void sppub_set_handshake_ms(struct sppub *p, unsigned ms);
/** the counters so far */
void sppub_get_stats(const struct sppub *p, struct sppub_stats *out);
/** closes every subscriber and the listener (an ipc socket file is removed) and frees;
 *  NULL is a no-op */
void sppub_free(struct sppub *p);

#endif
