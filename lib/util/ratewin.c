/* ratewin: a ring of per-second counters. */
#include "util/ratewin.h"

#include <math.h>
#include <string.h>

void ratewin_init(struct ratewin *w)
{
    memset(w, 0, sizeof *w);
    for (int i = 0; i < RATEWIN_SECONDS; i++)
        w->second[i] = -1;
}

void ratewin_add(struct ratewin *w, int64_t now_ms)
{
    int64_t s = now_ms / 1000;
    int i = (int) (s % RATEWIN_SECONDS);

    if (w->second[i] != s) {
        w->second[i] = s;
        w->count[i] = 0;
    }
    w->count[i]++;
}

double ratewin_rate(const struct ratewin *w, int64_t now_ms)
{
    int64_t s = now_ms / 1000;
    uint64_t sum = 0;

    for (int i = 0; i < RATEWIN_SECONDS; i++)
        if (w->second[i] > s - RATEWIN_SECONDS && w->second[i] <= s)
            sum += w->count[i];
    return (double) sum / RATEWIN_SECONDS;
}

unsigned retry_after_estimate(unsigned queued, double rate)
{
    double t;

    /* No slot freed in the whole window: at least that long, not a guess at "forever"
     * (a worker that has just started has no history either). */
    if (!(rate > 0))
        return RATEWIN_SECONDS;
    t = ceil(((double) queued + 1.0) / rate);
    if (t < RETRY_AFTER_MIN)
        return RETRY_AFTER_MIN;
    if (t > RETRY_AFTER_MAX)
        return RETRY_AFTER_MAX;
    return (unsigned) t;
}
