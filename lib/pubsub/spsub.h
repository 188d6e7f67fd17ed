/* spsub: a load-message subscriber that speaks nng's SP wire protocol itself.
 *
 * One connection to one publisher (admitd's nng PUB socket, lib/pubsub/publish.c), read by
 * libevent in the loop's own thread: no nng socket, no nng thread, no queue between them.
 * At a fleet's rate (1,000 publishers x 10 msg/s) nng's SUB costs most of its CPU in its
 * own threads and the hand-over to the loop; this subscriber reads each message straight
 * from the kernel into the connection's buffer and passes it on from there.
 *
 * The wire (wire/spframe.h), as Debian's libnng 1.5.2 speaks it (checked against it, see
 * tests/unit/pubsub/test_spsub.c): each side sends the 8-byte SP header at once, 00 'S' 'P'
 * 00, its protocol big-endian (we send SUB0 0x0021; the peer's must be PUB0 0x0020, and PUB
 * hangs up on a peer that is not SUB0), 00 00; then PUB sends messages, tcp: 8-byte
 * big-endian length and body; ipc: 0x01, the length, the body. SUB sends nothing after its
 * header. As nng's SUB, the topic is matched here: a message that does not start with
 * "kv_metrics " is dropped (counted as filtered), the others reach the callback; those of
 * the "kv_events " topic (wire/kvmsg.h) reach a callback of their own when one is set
 * (spsub_set_events), and are filtered as any other topic's when none is.
 *
 * URLs (spsub_supported): tcp://A.B.C.D:PORT, tcp://[V6]:PORT and ipc://PATH. The host must
 * be numeric: resolving a name here would block the loop (getaddrinfo) or need a resolver
 * handed in, and the fleet's URLs are addresses already (discovery resolves its names with
 * evdns). A name (tcp://localhost:5557), tcp4://, tcp6://, tls+tcp://, ws:// and the rest
 * are left to nng by the caller (subscribe.h), which resolves on its own threads.
 *
 * Reconnecting, as nng's dialer does, after a refused connect, a reset, a close, a bad
 * header, a message over ADMIT_LOAD_MSG_MAX, or a connect or handshake not done within
 * 10 s (nng's negotiation deadline): the connection is closed and the next attempt waits,
 * uniformly at random, between half and all of the current backoff, which starts at 100 ms
 * and doubles with each attempt that does not bring a message, up to 2 s; the first message
 * of a session resets it. (nng 1.5.2's own defaults are NNG_OPT_RECONNMINT 1 s and
 * NNG_OPT_RECONNMAXT 0, no doubling, each wait drawn from [0, 1 s); ours start sooner and
 * back off from a peer that keeps failing, and the jitter spreads a fleet's reconnects.)
 *
 * Reading never spins: the descriptor is level-triggered, each wakeup reads until the
 * kernel has no more (a short read) or SPSUB_READS_PER_WAKEUP reads were made, so 1,000
 * connections share the loop fairly; what is left is read at the next wakeup. A wakeup is
 * the connection's own event by default, or a pass of a poller (spsub_set_poll, sppoll.h)
 * that reads the connections of a busy fleet in batches on a short timer. Each
 * connection has one buffer, one message at its largest plus its framing, allocated with
 * the subscription: nothing is allocated per message or per connect. */
#ifndef ADMIT_SPSUB_H
#define ADMIT_SPSUB_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct spsub;
struct sppoll;

/* The reconnect backoff's start and cap, and the deadline of a connect and handshake. */
#define SPSUB_RECONNECT_MIN_MS 100
#define SPSUB_RECONNECT_MAX_MS 2000
#define SPSUB_HANDSHAKE_MS     10000
/* Most reads of one connection per wakeup of the loop. */
#define SPSUB_READS_PER_WAKEUP 4

/** called for each message of the load topic; the bytes live only during the call, which
 *  may free the subscription (spsub_free) */
typedef void (*spsub_cb)(void *arg, const void *body, size_t len);
/** called (with the message callback's arg) when a session that was up ends: the publisher
 *  closed or reset the connection, broke the protocol, or sent what cannot be read; why says
 *  which. Not for connects that fail, nor when the subscription is freed. It must not free
 *  the subscription */
typedef void (*spsub_lost_cb)(void *arg, const char *why);

/* What a subscription has seen, for metrics. Counters only grow; connected is a gauge. */
struct spsub_stats {
    uint64_t messages;    /* messages passed to the callback */
    uint64_t events;      /* kv_events messages passed to theirs (spsub_set_events) */
    uint64_t bytes;       /* their bodies' bytes */
    uint64_t filtered;    /* messages of another topic, dropped */
    uint64_t oversized;   /* messages announced over ADMIT_LOAD_MSG_MAX: connection dropped */
    uint64_t bad_headers; /* peers that were not SP PUB0, or sent a bad ipc message type */
    uint64_t timeouts;    /* connects or handshakes not done within the deadline */
    uint64_t sessions;    /* handshakes completed */
    uint64_t reconnects;  /* connection attempts after the first */
    int connected;        /* 1 while a session is up (the peer's header seen) */
};

/* Timing, for tests that cannot wait for the defaults; 0 in a field keeps its value. */
struct spsub_timing {
    unsigned reconnect_min_ms, reconnect_max_ms, handshake_ms;
};

/** 1 when spsub can dial url itself, 0 when it is for nng (why in err, may be NULL) */
int spsub_supported(const char *url, char *err, size_t errlen);
/** follows the publisher at url, the first connect starting on the loop's next turn; NULL
 *  with err ("cannot subscribe to URL: why") when url is not supported */
struct spsub *spsub_new(struct event_base *base, const char *url, spsub_cb cb, void *arg, char *err,
                        size_t errlen);
/** passes the kv_events topic's messages to cb (with the message callback's arg) from now on
 *  (NULL: filtered, the default); the same rules as spsub_cb */
void spsub_set_events(struct spsub *s, spsub_cb cb);
/** tells cb of each session lost from now on (NULL: none, the default) */
void spsub_set_lost(struct spsub *s, spsub_lost_cb cb);
/** tells cb, once, when an attempt fails before any session was ever open: the publisher is
 *  unreachable from the start (NULL: none, the default); a session's loss is spsub_set_lost's */
void spsub_set_unreachable(struct spsub *s, spsub_lost_cb cb);
/** changes the timing; takes effect from the next wait or attempt */
void spsub_set_timing(struct spsub *s, const struct spsub_timing *t);
/** reads the connection in p's passes (sppoll.h) from now on, NULL: on each message, by an
 *  event of its own (the default); p must outlive s */
void spsub_set_poll(struct spsub *s, struct sppoll *p);
/** copies the counters into out */
void spsub_get_stats(const struct spsub *s, struct spsub_stats *out);
/** the URL followed */
const char *spsub_url(const struct spsub *s);
/** closes the connection at once (never blocks) and frees; NULL is a no-op */
void spsub_free(struct spsub *s);

#endif
