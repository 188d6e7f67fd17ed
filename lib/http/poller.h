/* poller: GETs one URL of the engine on a timer and hands the answer to a callback.
 *
 * Used for the readiness probe (/health), the engine metrics scrape (/metrics) and the
 * engine's model list (/v1/models). One request at a time on its own keep-alive connection:
 * a slow answer delays the next poll rather than piling requests up, and nothing here can
 * block the event loop (but the address lookup at start and after a failed one). */
#ifndef ADMIT_POLLER_H
#define ADMIT_POLLER_H

#include "util/netaddr.h"

#include <stddef.h>

struct event_base;
struct poller;

/** one answer: status 0 means no HTTP answer at all (refused, timed out, broken, malformed,
 *  or a body over 8 MiB); body is NUL-terminated and valid only during the call */
typedef void (*poller_cb)(void *arg, int status, const char *body, size_t len);

/** polls url+path every interval_ms after the last answer (first poll at once); timeout_ms
 *  bounds each poll, from its connect (or its request, on a kept connection) to the last
 *  byte */
struct poller *poller_new(struct event_base *base, const struct http_url *url, const char *path,
                          unsigned interval_ms, unsigned timeout_ms, poller_cb cb, void *arg);
/** why the answer being handed over (or the last one) was no HTTP answer (status 0): "Connection
 *  refused", "no answer within 1000 ms"...; "" after an answer */
const char *poller_error(const struct poller *p);
/** polls now rather than at the next interval, unless a poll is in flight; NULL is a no-op */
void poller_kick(struct poller *p);
/** stops polling and frees, also with a poll in flight (its callback never comes), but not
 *  from inside its own callback; NULL is a no-op */
void poller_free(struct poller *p);

#endif
