/* publish: sends load messages over nng's pub/sub protocol, by our own PUB (sppub.h) or
 * nng's.
 *
 * A message goes out for each rank whose load changed (changes within about a millisecond
 * are coalesced into one message) and for every rank on each heartbeat, so subscribers can
 * tell a quiet worker from a dead one. Publishing never blocks the event loop: either PUB
 * drops the oldest queued message for a slow subscriber, which is harmless for load messages
 * because each is a full snapshot. admitd relaying its engine's KV events sends kv_events
 * messages on the same PUB (pub_send_raw); those are not snapshots, so it lets subscribers
 * queue PUB_KV_QUEUE messages (pub_set_queue), and a reader that still loses some sees the
 * gap in their sequence and fetches a dump. */
#ifndef ADMIT_PUBLISH_H
#define ADMIT_PUBLISH_H

#include "admit/load.h"
#include "pubsub/sppub.h"

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct publisher;

/* Most ranks one publisher sends for. */
#define PUB_MAX_RANKS 64

/** fills msgs[0..*n), each started with admit_load_init, with the current load and state (the
 *  publisher sets worker_id, dp_rank, seq, ts_ms and heartbeat_ms); *n <= PUB_MAX_RANKS */
typedef void (*pub_fill_fn)(void *arg, struct admit_load *msgs, unsigned *n);

/* Which PUB sends the messages: the same bytes on the wire either way. */
enum pub_via {
    PUB_AUTO, /* ours (sppub.h), on the caller's loop: every tcp:// and ipc:// URL */
    PUB_NNG   /* nng's, with its threads (admitd --publisher=nng) */
};

/** listens on url; bound gets the URL with the real port; NULL with err on failure */
struct publisher *pub_new(struct event_base *base, const char *url, enum pub_via via,
                          const char *worker_id, unsigned heartbeat_ms, pub_fill_fn fill, void *arg,
                          char *bound, size_t boundlen, char *err, size_t errlen);
/* Messages queued per subscriber when kv_events are relayed: about 2 s of a busy engine's
 * events (a few hundred batches a second, each one or two messages). */
#define PUB_KV_QUEUE 4096

/** lets each subscriber queue up to n messages (ours: sppub_set_queue; nng's: its send buffer,
 *  NNG_OPT_SENDBUF, for pipes opened from now on); NULL is a no-op */
void pub_set_queue(struct publisher *p, unsigned n);
/** sends one message of len bytes (<= ADMIT_LOAD_MSG_MAX) as it is, at once (a kv_events
 *  message); 0, or -1 when p is NULL or the message is refused */
int pub_send_raw(struct publisher *p, const void *msg, size_t len);
/** something changed: publish the ranks that differ within about a millisecond */
void pub_changed(struct publisher *p);
/** publishes every rank now (used when the state changes, e.g. to draining) */
void pub_now(struct publisher *p);
/** the sequence number of the last message sent (0 before the first) */
int64_t pub_seq(const struct publisher *p);
/** messages sent so far */
uint64_t pub_sent(const struct publisher *p);
/** our PUB's counters into out: 0, or -1 when p is NULL or nng's (which shows none) */
int pub_get_stats(const struct publisher *p, struct sppub_stats *out);
/** closes the socket and frees; NULL is a no-op */
void pub_free(struct publisher *p);

#endif
