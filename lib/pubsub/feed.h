/* feed: a load-message feed from several publishers, for programs without an event loop.
 *
 * One nng SUB socket, subscribed to the load topic, dialing any number of publishers. The
 * dials are non-blocking: a publisher that is not up yet is retried in the background. The
 * caller waits with feed_wait (or polls feed_fd among its own descriptors) and then takes
 * messages with feed_recv, which never blocks.
 *
 * The bounded wait lives here, next to the nng code, because the reason for it is nng's:
 * 1.5.2 can block inside nng_recv past NNG_OPT_RECVTIMEO, so a feed never waits there. It
 * waits in poll() on the receive descriptor instead, which also returns when a signal
 * arrives, so a caller's stop flag set by a handler is seen at once. No nng type appears in
 * this header: programs that use a feed include no nng header. */
#ifndef ADMIT_FEED_H
#define ADMIT_FEED_H

#include <stddef.h>

struct feed;

/** called for each message received; the bytes live only during the call */
typedef void (*feed_cb)(void *arg, const void *msg, size_t len);

/** opens a feed subscribed to the load topic, dialing nothing yet; NULL with err on failure */
struct feed *feed_open(char *err, size_t errlen);
/** dials url without waiting for it to answer; 0, or -1 with err ("cannot dial URL: why") */
int feed_dial(struct feed *f, const char *url, char *err, size_t errlen);
/** the descriptor that polls readable (POLLIN) when a message may be waiting */
int feed_fd(const struct feed *f);
/** waits at most timeout_ms for a message; 1 when one may be waiting, 0 on timeout or a
 *  signal, -1 when poll() failed (errno says why) */
int feed_wait(const struct feed *f, int timeout_ms);
/** takes one message without blocking and passes it to cb; 1 when one was delivered, 0 when
 *  none was waiting, -1 with err ("receive failed: why") when the socket failed */
int feed_recv(struct feed *f, feed_cb cb, void *arg, char *err, size_t errlen);
/** frees f when the program ends; its socket is left to the exit (nngclose.h); NULL: no-op */
void feed_free(struct feed *f);

#endif
