/* probe: asks the engine "are you there?" on a timer, for /ready.
 *
 * A GET of the engine's health path every interval on its own connection; 2xx means ready.
 * The probe never overlaps itself: a slow answer delays the next probe. */
#ifndef ADMIT_PROBE_H
#define ADMIT_PROBE_H

#include "netaddr.h"

struct event_base;
struct probe;

/** starts probing url+path every interval_ms; *ready is kept up to date (0 or 1) */
struct probe *probe_new(struct event_base *base, const struct http_url *url, const char *path,
                        unsigned interval_ms, int *ready);
/** stops probing and frees */
void probe_free(struct probe *p);

#endif
