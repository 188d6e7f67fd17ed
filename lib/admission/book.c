/* book: per-rank sums of booked requests, kept exact by adding and removing each
 * request's own contribution. */
#include "admission/book.h"
#include "util/xmalloc.h"

#include <stdlib.h>

struct book {
    unsigned nranks, block_size;
    struct book_rank ranks[BOOK_MAX_RANKS];
    struct book_req *head; /* every booked request, for recomputation */
};

static uint64_t blocks_for(uint64_t tokens, unsigned bs)
{
    return tokens / bs + (tokens % bs != 0);
}

struct book *book_new(unsigned nranks, unsigned block_size)
{
    struct book *b = xcalloc(1, sizeof *b);

    b->nranks = 1;
    b->block_size = 16;
    book_configure(b, nranks, block_size);
    return b;
}

void book_free(struct book *b)
{
    free(b);
}

/* Adds (sign 1) or removes (sign -1) r's contribution to its rank. */
static void account(struct book *b, struct book_req *r, int sign)
{
    struct book_rank *k = &b->ranks[r->_rank];
    uint64_t tokens = r->_prompt + r->_output;

    if (sign > 0) {
        r->_blocks = blocks_for(tokens, b->block_size);
        k->requests++;
        k->tokens += tokens;
        k->decode_blocks += r->_blocks;
        if (r->_prefilling)
            k->prefill_tokens += r->_prompt;
    } else {
        k->requests--;
        k->tokens -= tokens;
        k->decode_blocks -= r->_blocks;
        if (r->_prefilling)
            k->prefill_tokens -= r->_prompt;
    }
}

void book_configure(struct book *b, unsigned nranks, unsigned block_size)
{
    struct book_req *r;

    if (nranks < 1)
        nranks = 1;
    if (nranks > BOOK_MAX_RANKS)
        nranks = BOOK_MAX_RANKS;
    if (block_size < 1)
        block_size = 1;
    if (nranks == b->nranks && block_size == b->block_size)
        return;
    for (r = b->head; r != NULL; r = r->_next)
        account(b, r, -1);
    b->nranks = nranks;
    b->block_size = block_size;
    for (r = b->head; r != NULL; r = r->_next) {
        if (r->_rank >= nranks)
            r->_rank = nranks - 1;
        account(b, r, 1);
    }
}

unsigned book_admit(struct book *b, struct book_req *r, uint64_t prompt_tokens)
{
    unsigned best = 0;

    for (unsigned i = 1; i < b->nranks; i++)
        if (b->ranks[i].tokens < b->ranks[best].tokens ||
            (b->ranks[i].tokens == b->ranks[best].tokens &&
             b->ranks[i].requests < b->ranks[best].requests))
            best = i;
    r->_rank = best;
    r->_prompt = prompt_tokens;
    r->_output = 0;
    r->_prefilling = 1;
    r->_booked = 1;
    r->_prev = NULL;
    r->_next = b->head;
    if (b->head != NULL)
        b->head->_prev = r;
    b->head = r;
    account(b, r, 1);
    return best;
}

void book_first_byte(struct book *b, struct book_req *r)
{
    if (!r->_booked || !r->_prefilling)
        return;
    b->ranks[r->_rank].prefill_tokens -= r->_prompt;
    r->_prefilling = 0;
}

void book_output(struct book *b, struct book_req *r, uint64_t n)
{
    if (!r->_booked || n == 0)
        return;
    account(b, r, -1);
    r->_output += n;
    account(b, r, 1);
}

void book_release(struct book *b, struct book_req *r)
{
    if (!r->_booked)
        return;
    account(b, r, -1);
    if (r->_prev != NULL)
        r->_prev->_next = r->_next;
    else
        b->head = r->_next;
    if (r->_next != NULL)
        r->_next->_prev = r->_prev;
    r->_prev = r->_next = NULL;
    r->_booked = 0;
}

const struct book_rank *book_rank(const struct book *b, unsigned rank)
{
    return &b->ranks[rank < b->nranks ? rank : b->nranks - 1];
}

unsigned book_ranks(const struct book *b)
{
    return b->nranks;
}

unsigned book_block_size(const struct book *b)
{
    return b->block_size;
}
