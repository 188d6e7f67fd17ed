/* mock_busy: a data-parallel rank's prefill timeline (see mock_busy.h). */
#include "mock_busy.h"

/* Longest single reservation, as the scheduler's longest timer: 1e9 ms. */
#define BUSY_MAX_MS 1e9

uint64_t mock_busy_reserve(struct mock_busy *b, uint64_t now_us, double ms, uint64_t *start_us)
{
    uint64_t start = b->until_us > now_us ? b->until_us : now_us;

    *start_us = start;
    /* !(ms > 0) also catches NaN: no prefill to compute occupies nothing, not even a queue
     * place (a decode leg whose whole prompt was transferred) */
    if (!(ms > 0))
        return now_us;
    if (ms > BUSY_MAX_MS)
        ms = BUSY_MAX_MS;
    b->until_us = start + (uint64_t) (ms * 1000);
    return b->until_us;
}

uint64_t mock_busy_next(const struct mock_busy *b, uint64_t now_us)
{
    return b->until_us > now_us ? b->until_us : now_us;
}

void mock_busy_cancel(struct mock_busy *b, uint64_t now_us, uint64_t start_us, uint64_t end_us)
{
    /* A later reservation began at end_us: moving it is not worth modelling, the gap stays. */
    if (b->until_us == end_us && start_us > now_us)
        b->until_us = start_us;
}
