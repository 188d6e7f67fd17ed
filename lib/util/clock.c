/* clock: the monotonic and wall clocks (see clock.h). */
#include "util/clock.h"

#include <sys/time.h>

double clock_mono_s(void)
{
    static const struct timespec zero;
    struct timespec ts;

    clock_mono(&ts);
    return clock_seconds_between(&zero, &ts);
}

double clock_seconds_between(const struct timespec *a, const struct timespec *b)
{
    return (double) (b->tv_sec - a->tv_sec) + (double) (b->tv_nsec - a->tv_nsec) / 1e9;
}

double clock_seconds_since(const struct timespec *t0)
{
    struct timespec now;

    clock_mono(&now);
    return clock_seconds_between(t0, &now);
}

int64_t clock_wall_ms(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (int64_t) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}
