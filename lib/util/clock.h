/* clock: the clocks every module reads, written once.
 *
 * Durations, deadlines and timestamps that are compared are on CLOCK_MONOTONIC, which no
 * administrator's date change moves; only stamps meant for people and for other hosts (the
 * load message's published_at, admit-top's wall times) read the wall clock. */
#ifndef ADMIT_CLOCK_H
#define ADMIT_CLOCK_H

#include <stdint.h>
#include <time.h>

/* The three readings of the monotonic clock are inline: they run on every request, and a
 * call into another file cost more than the vDSO read itself. */

/** the monotonic clock into *ts (a stamp to measure from) */
static inline void clock_mono(struct timespec *ts)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
}

/** the monotonic clock in milliseconds */
static inline int64_t clock_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/** the monotonic clock in microseconds */
static inline int64_t clock_mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
/** the monotonic clock in seconds, to the nanosecond (the benches' stopwatch) */
double clock_mono_s(void);
/** seconds from a to b (negative when b is earlier) */
double clock_seconds_between(const struct timespec *a, const struct timespec *b);
/** seconds from t0 to now on the monotonic clock */
double clock_seconds_since(const struct timespec *t0);
/** the wall clock (Unix time) in milliseconds */
int64_t clock_wall_ms(void);

#endif
