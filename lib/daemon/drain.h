/* drain: the graceful stop shared by admitd and admit-router.
 *
 * Once started, the proxy answers new requests 503 (with Connection: close) and lets the
 * ones in flight finish; the event loop is broken when none is left, or when the timeout
 * runs out, after cancelling what remains (counted in metrics.drain_cancelled). The owner
 * reports every change of the proxy's load with drain_check(). */
#ifndef ADMIT_DRAIN_H
#define ADMIT_DRAIN_H

struct event_base;
struct metrics;
struct proxy;
struct drain;

/** a drain for px on base, not started; cancellations are counted in m */
struct drain *drain_new(struct event_base *base, struct proxy *px, struct metrics *m);
/** starts draining: new requests get 503 with msg (static storage); 0, or 1 when a drain was
 *  already under way (a second signal: the caller exits at once) */
int drain_start(struct drain *d, const char *msg, unsigned timeout_ms);
/** true once drain_start has been called */
int drain_active(const struct drain *d);
/** call on every load change: ends the loop when a drain is on and nothing is in flight */
void drain_check(struct drain *d);
/** frees the drain (not the proxy); NULL is a no-op */
void drain_free(struct drain *d);

#endif
