/* ratewin: how fast slots free up, for an honest Retry-After.
 *
 * A fixed Retry-After of 1 s is wrong for LLM traffic, where a slot may be held by a stream
 * for minutes: clients come back at once and are refused again. admitd counts slot releases
 * over the last RATEWIN_SECONDS seconds and estimates when a newcomer would get in: the
 * queue ahead of it, plus itself, divided by that rate. Pure: the caller passes the time. */
#ifndef ADMIT_RATEWIN_H
#define ADMIT_RATEWIN_H

#include <stdint.h>

/* The window the release rate is measured over. */
#define RATEWIN_SECONDS 10
/* The documented range of an estimated Retry-After, in seconds. */
#define RETRY_AFTER_MIN 1
#define RETRY_AFTER_MAX 60

/* One-second buckets, a ring indexed by second. */
struct ratewin {
    int64_t second[RATEWIN_SECONDS];
    uint32_t count[RATEWIN_SECONDS];
};

/** empties the window */
void ratewin_init(struct ratewin *w);
/** counts one event at now_ms */
void ratewin_add(struct ratewin *w, int64_t now_ms);
/** events per second over the last RATEWIN_SECONDS seconds as of now_ms */
double ratewin_rate(const struct ratewin *w, int64_t now_ms);
/** seconds until a newcomer behind `queued` waiters would likely get a slot, clamped to
 *  [RETRY_AFTER_MIN, RETRY_AFTER_MAX]; a rate of zero gives RATEWIN_SECONDS */
unsigned retry_after_estimate(unsigned queued, double rate);

#endif
