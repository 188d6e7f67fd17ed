/* loadsrc: gate + book + engine scrape -> per-rank load messages. */
#include "admission/loadsrc.h"

#include <math.h>

/* An engine integer field, or unknown. */
static int64_t known(int64_t v)
{
    return v >= 0 ? v : ADMIT_LOAD_UNKNOWN;
}

void loadsrc_fill(const struct loadsrc_in *in, struct admit_load *msgs, unsigned max, unsigned *n)
{
    unsigned ranks = book_ranks(in->book);

    if (ranks > max)
        ranks = max;
    for (unsigned r = 0; r < ranks; r++) {
        struct admit_load *m = &msgs[r];
        const struct book_rank *b = book_rank(in->book, r);
        const struct engine_rank *e = NULL;

        admit_load_init(m);
        if (in->engine != NULL && r < in->engine->nranks && in->engine->ranks[r].present)
            e = &in->engine->ranks[r];
        if (e != NULL) {
            m->kv_total_blocks = known(e->num_gpu_blocks);
            if (m->kv_total_blocks >= 0 && !isnan(e->kv_usage))
                m->kv_used_blocks = (int64_t) llround(e->kv_usage * (double) m->kv_total_blocks);
            m->max_num_batched_tokens = known(e->max_num_batched_tokens);
        }
        if (m->max_num_batched_tokens < 0 && in->fallback_max_batched_tokens > 0)
            m->max_num_batched_tokens = in->fallback_max_batched_tokens;
        /* The block size of the booking: the engine's when a scrape reported one, else
         * --block-size (worker.c configures the book with it). Known even without a fresh
         * scrape, since it is what active_decode_blocks was counted in. */
        m->kv_block_size = (int64_t) book_block_size(in->book);
        m->active_decode_blocks = (int64_t) b->decode_blocks;
        m->active_prefill_tokens = (int64_t) b->prefill_tokens;
        if (in->gate != NULL) {
            m->engine_requests = in->gate->slots_used;
            m->engine_request_limit = in->gate->limit;
            m->queued_requests = in->gate->queued;
            m->request_queue_limit = in->gate->queue_limit;
        } else {
            m->engine_requests = in->inflight_nocap;
            m->queued_requests = 0;
        }
        m->state = in->state;
        m->role = in->role;
        if (in->models != NULL)
            m->models = *in->models;
    }
    *n = ranks;
}
