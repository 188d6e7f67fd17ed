/* admission: admitd's gate wired to the proxy, and the load it books.
 *
 * Sits above the HTTP seam and speaks only the proxy's hooks (http/proxy.h): it decides, for
 * every request the proxy hands it, whether it goes to the engine now, waits in the gate's
 * queue, or is refused at once with the overload answer; it books the prompt tokens and KV
 * blocks of what it lets in (admission/book.h) and releases both when the exchange ends, which
 * dispatches the next waiter in the same call. GET, HEAD and OPTIONS never take a slot.
 * Without a cap (N unset) nothing waits: requests go straight through and are still booked.
 *
 * Every change of the load it knows (slots, queue, bookings, and the end of any exchange) is
 * reported through the change callback: the worker publishes it, the drain checks it. */
#ifndef ADMIT_ADMISSION_H
#define ADMIT_ADMISSION_H

#include "admit/gate.h"
#include "admission/book.h"
#include "daemon/metrics.h"

struct admission;
struct proxy;

/* The settings admission reads. It keeps the pointer: fields marked live are read at use. */
struct admission_opts {
    unsigned engine_request_limit; /* N at start; 0 = no cap, and it stays so */
    unsigned request_queue_limit;  /* Q at start (admission_set_limits changes both) */
    unsigned queue_timeout_ms;     /* live: a request waiting longer is refused; 0 = never */
    unsigned retry_after_s;        /* live: Retry-After of refusals; 0 = estimate it */
    int overload_status;           /* live after admission_reconfigure */
    double chars_per_token;        /* live: prompt text per token, for the booking */
    unsigned nranks, block_size;   /* the book's shape at start (book_configure changes it) */
};

/** wires admission into px (before px takes requests); counts into m */
struct admission *admission_new(struct proxy *px, struct metrics *m,
                                const struct admission_opts *o);
/** frees it; the proxy must have been freed first (its exchanges release into the gate) */
void admission_free(struct admission *a);
/** calls cb whenever the load changes, or an exchange ends */
void admission_set_change_cb(struct admission *a, void (*cb)(void *arg), void *arg);
/** current gate occupancy into st; NULL when there is no cap */
const struct gate_stats *admission_gate_stats(const struct admission *a, struct gate_stats *st);
/** the book of admitted load (the caller may reconfigure ranks and block size) */
struct book *admission_book(struct admission *a);
/** changes N and/or Q live (0 keeps a value); -1 when there is no cap */
int admission_set_limits(struct admission *a, unsigned n, unsigned q);
/** re-reads what is derived from the options (the overload answer's status) */
void admission_reconfigure(struct admission *a);
/** the Retry-After of a refusal now: the configured one, or an estimate from releases */
int admission_retry_after(struct admission *a);

#endif
