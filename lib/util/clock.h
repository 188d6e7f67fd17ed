/* clock: the clocks every module reads, written once.
 *
 * Durations, deadlines and timestamps that are compared are on CLOCK_MONOTONIC, which no
 * administrator's date change moves; only stamps meant for people and for other hosts (the
 * load message's published_at, admit-top's wall times) read the wall clock. */
#ifndef ADMIT_CLOCK_H
#define ADMIT_CLOCK_H

#include <stdint.h>
#include <time.h>

/** the monotonic clock into *ts (a stamp to measure from) */
void clock_mono(struct timespec *ts);
/** the monotonic clock in milliseconds */
int64_t clock_mono_ms(void);
/** the monotonic clock in microseconds */
int64_t clock_mono_us(void);
/** the monotonic clock in seconds, to the nanosecond (the benches' stopwatch) */
double clock_mono_s(void);
/** seconds from a to b (negative when b is earlier) */
double clock_seconds_between(const struct timespec *a, const struct timespec *b);
/** seconds from t0 to now on the monotonic clock */
double clock_seconds_since(const struct timespec *t0);
/** the wall clock (Unix time) in milliseconds */
int64_t clock_wall_ms(void);

#endif
