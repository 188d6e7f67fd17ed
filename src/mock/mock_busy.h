/* mock_busy: a data-parallel rank's prefill timeline, for --prefill-interference.
 *
 * A real engine runs one batch a step on each rank. Without chunked prefill (or for a prompt
 * within max_num_batched_tokens) a step that prefills a prompt is a step without decode
 * tokens: prefills on a rank run one after another, and every sequence decoding on the rank
 * waits for them to end before its next token. The timeline holds the end of the prefill work
 * reserved on the rank; since each reservation begins where the last ended, or now when the
 * rank is idle, the rank is prefilling exactly while the clock is before that end.
 *
 * Pure: the caller passes the clock (microseconds, monotonic), so every case can be
 * unit-tested exactly. */
#ifndef ADMIT_MOCK_BUSY_H
#define ADMIT_MOCK_BUSY_H

#include <stdint.h>

/* One rank's prefill timeline; all zero is an idle rank. */
struct mock_busy {
    uint64_t until_us; /* the end of the last prefill reserved on the rank */
};

/** reserves ms of prefill after the rank's reserved work (or from now when it is idle); sets
 * *start_us to when it begins and returns when it ends (now, reserving nothing, for ms <= 0) */
uint64_t mock_busy_reserve(struct mock_busy *b, uint64_t now_us, double ms, uint64_t *start_us);
/** when a decode token due now can come: now if the rank is not prefilling, else the end of
 * its prefill work */
uint64_t mock_busy_next(const struct mock_busy *b, uint64_t now_us);
/** gives back the reservation [start_us, end_us) of a request that left: only if it had not
 * begun and no other was reserved after it (a running prefill step is not interrupted) */
void mock_busy_cancel(struct mock_busy *b, uint64_t now_us, uint64_t start_us, uint64_t end_us);

#endif
