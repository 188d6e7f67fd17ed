/* subscribe: receives load messages from one publisher on the event loop.
 *
 * Two ways, behind one API (sub_opts.via). spsub (spsub.h): nng's wire protocol spoken on
 * the loop's own thread, for the URLs spsub_supported() takes (tcp:// with a numeric host,
 * ipc://), its connections read in passes of the base's poller (sppoll.h) every batch_ms.
 * nng's SUB, for every other URL (a host name, which nng resolves on its threads; tls+tcp://,
 * ws://, ...) or for all of them (SUB_NNG): the subscribers of one event base share one SUB
 * socket, each with its own dialer; its receive descriptor is watched with a level-triggered
 * libevent event and drained without blocking, and each message goes to the subscriber whose
 * dialer received it. Either way a router follows many workers from its one thread, and the
 * dial is non-blocking: a publisher that is not up yet is retried in the background. With
 * SUB_AUTO and no URL for nng, nng is never called, and none of its threads runs. */
#ifndef ADMIT_SUBSCRIBE_H
#define ADMIT_SUBSCRIBE_H

#include "pubsub/spsub.h"

#include <stddef.h>

struct event_base;
struct subscriber;

/* Which subscriber reads a URL. */
enum sub_via {
    SUB_AUTO, /* spsub for the URLs it takes, nng for the rest */
    SUB_NNG   /* nng for every URL (the fallback, and the comparison in benches) */
};

/* How sub_new subscribes; NULL there: SUB_AUTO, read every SPPOLL_DEFAULT_MS. */
struct sub_opts {
    enum sub_via via;
    unsigned batch_ms; /* spsub: read in passes this often (1..SPPOLL_MAX_MS); 0: on each
                          message */
};

/** called for each message received; the bytes live only during the call */
typedef void (*sub_cb)(void *arg, const void *msg, size_t len);
/** called when the publisher's connection, which was up, is lost (spsub_lost_cb) */
typedef void (*sub_lost_cb)(void *arg, const char *why);

/** dials url and subscribes to the load topic, as o says (NULL: the defaults); NULL with err
 *  on failure */
struct subscriber *sub_new(struct event_base *base, const char *url, const struct sub_opts *o,
                           sub_cb cb, void *arg, char *err, size_t errlen);
/** passes the kv_events topic's messages (wire/kvmsg.h) to cb (with sub_new's arg) from now
 *  on; without it they are dropped (nng's: subscribed on the shared socket at the first
 *  call, then dropped by the demux for subscribers that did not ask) */
void sub_set_events(struct subscriber *s, sub_cb cb);
/** tells cb (with sub_new's arg) of each lost connection: spsub's at once; nng's SUB does
 *  not say, so with it a publisher gone is noticed by its silence alone */
void sub_set_lost(struct subscriber *s, sub_lost_cb cb);
/** tells cb, once, when the publisher cannot be reached before any session was open
 *  (spsub_set_unreachable; nng's SUB does not say) */
void sub_set_unreachable(struct subscriber *s, sub_lost_cb cb);
/** 1 when s reads through spsub, 0 through nng */
int sub_is_sp(const struct subscriber *s);
/** what s has received: spsub's counters; for nng only messages and bytes (nng keeps the
 *  rest to itself) */
void sub_get_stats(const struct subscriber *s, struct spsub_stats *out);
/** stops receiving and frees, leaving an nng dialer to the exit (see nngclose.h); NULL is
 *  a no-op */
void sub_free(struct subscriber *s);
/** stops receiving (nothing more reaches cb, not even messages already queued), closes this
 *  subscriber's connection (spsub: at once) or nng dialer, never the shared socket
 *  (nngc_dialer_close: waiting at most timeout_ms, a close that takes longer is left to the
 *  exit) and frees: for a publisher that leaves while the program runs; NULL is a no-op */
void sub_close(struct subscriber *s, int timeout_ms);

#endif
