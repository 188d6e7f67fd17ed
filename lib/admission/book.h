/* book: what admitd has let into the engine, per data-parallel rank.
 *
 * Engines report KV usage late (on their own scrape cycle) and do not report the prompts
 * they have not started on. admitd knows both at once, because every request passes
 * through it: it books each admitted request's prompt tokens until the first output byte
 * (active prefill), and the KV blocks its prompt and output so far occupy (active decode).
 *
 * Which rank serves a request is the engine's choice and invisible to admitd; the book
 * assigns each request to the rank with the fewest booked tokens, which is what an engine's
 * own data-parallel balancer does to first order. Pure: no sockets, no clocks. */
#ifndef ADMIT_BOOK_H
#define ADMIT_BOOK_H

#include <stdint.h>

/* Most ranks the book tracks. */
#define BOOK_MAX_RANKS 64

/* A caller-embedded booking; fields starting with '_' are private. */
struct book_req {
    struct book_req *_prev, *_next;
    unsigned _rank;
    uint64_t _prompt, _output, _blocks;
    int _booked, _prefilling;
};

/* Sums for one rank. */
struct book_rank {
    uint64_t requests;       /* booked requests */
    uint64_t prefill_tokens; /* prompt tokens of requests before their first output byte */
    uint64_t decode_blocks;  /* sum of ceil((prompt + output) / block_size) */
    uint64_t tokens;         /* prompt + output tokens, the balancing key */
};

struct book;

/** creates a book for nranks (1..BOOK_MAX_RANKS) and a KV block size (>= 1) */
struct book *book_new(unsigned nranks, unsigned block_size);
/** frees the book; bookings still in it are forgotten */
void book_free(struct book *b);
/** changes the block size (recomputes every booking) and the rank count (bookings on a rank
 *  that no longer exists move to the last one) */
void book_configure(struct book *b, unsigned nranks, unsigned block_size);
/** books a request with its prompt tokens on the least-booked rank; returns the rank */
unsigned book_admit(struct book *b, struct book_req *r, uint64_t prompt_tokens);
/** the first output byte arrived: its prompt no longer counts as prefill */
void book_first_byte(struct book *b, struct book_req *r);
/** n more output tokens */
void book_output(struct book *b, struct book_req *r, uint64_t n);
/** removes the booking (idempotent; an unbooked request is a no-op) */
void book_release(struct book *b, struct book_req *r);
/** the sums of one rank (rank < book_ranks) */
const struct book_rank *book_rank(const struct book *b, unsigned rank);
/** number of ranks */
unsigned book_ranks(const struct book *b);
/** the block size in use */
unsigned book_block_size(const struct book *b);

#endif
