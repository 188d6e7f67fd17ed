/* subscribe: receives load messages from one publisher on the event loop (nng SUB).
 *
 * The subscribers of one event base share one SUB socket, each with its own dialer; its
 * receive descriptor is watched with a level-triggered libevent event and drained without
 * blocking, and each message goes to the subscriber whose dialer received it, so a router
 * follows many workers from its one thread. The dial is non-blocking: a publisher that is
 * not up yet is retried in the background. */
#ifndef ADMIT_SUBSCRIBE_H
#define ADMIT_SUBSCRIBE_H

#include <stddef.h>

struct event_base;
struct subscriber;

/** called for each message received; the bytes live only during the call */
typedef void (*sub_cb)(void *arg, const void *msg, size_t len);

/** dials url and subscribes to the load topic; NULL with err on failure */
struct subscriber *sub_new(struct event_base *base, const char *url, sub_cb cb, void *arg,
                           char *err, size_t errlen);
/** stops receiving and frees, leaving its dialer to the exit (see nngclose.h); NULL is a
 *  no-op */
void sub_free(struct subscriber *s);
/** stops receiving (nothing more reaches cb, not even messages already queued), closes this
 *  subscriber's dialer, never the shared socket (nngc_dialer_close: waiting at most
 *  timeout_ms, a close that takes longer is left to the exit) and frees: for a publisher
 *  that leaves while the program runs; NULL is a no-op */
void sub_close(struct subscriber *s, int timeout_ms);

#endif
