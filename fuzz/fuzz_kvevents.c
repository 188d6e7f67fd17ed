/* libFuzzer harness for kvevents: any bytes as a KV-event payload. Whatever the verdict, no
 * crash and no leak; a decoded batch is consistent (every event's hashes and token ids inside
 * what was filled, a GPU store's ids block_size per block, strings inside the payload); arrays
 * of the payload's length never come back KVE_EFULL; and arrays cut to what the batch used
 * give the same batch again, while one entry fewer of any gives KVE_EFULL. */
#include "admission/kvevents.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct kve_decoder *dec;

static int inside(const char *s, size_t n, const uint8_t *data, size_t size)
{
    return s == NULL || ((const uint8_t *) s >= data && (const uint8_t *) s + n <= data + size);
}

static void check(const struct kve_out *o, const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < o->n_events; i++) {
        const struct kve_event *e = &o->events[i];

        if ((size_t) e->hash_first + e->n_hashes > o->n_hashes ||
            (size_t) e->token_first + e->n_tokens > o->n_tokens)
            abort();
        if (e->n_plain > (e->kind == KVE_STORED ? e->n_hashes : 0))
            abort();
        if (e->kind == KVE_STORED &&
            (e->block_size == 0 ||
             (uint64_t) e->n_tokens != (uint64_t) e->n_hashes * e->block_size))
            abort();
        if (!inside(e->lora_name, e->lora_name_len, data, size) ||
            !inside(e->spec_kind, e->spec_kind_len, data, size))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n = size ? size : 1;
    struct kve_event *ev = calloc(n, sizeof(*ev));
    uint64_t *hs = calloc(n, sizeof(*hs));
    uint32_t *ts = calloc(n, sizeof(*ts));
    struct kve_out o = {.events = ev,
                        .events_cap = n,
                        .hashes = hs,
                        .hashes_cap = n,
                        .tokens = ts,
                        .tokens_cap = n};
    char err[128];
    int rv;

    if (dec == NULL)
        dec = kve_decoder_new(); /* one for the run, as a subscriber keeps one */
    rv = kve_decode(dec, data, size, &o, err, sizeof err);
    if (rv == KVE_EFULL || (rv != KVE_OK && (o.n_events || o.n_hashes || o.n_tokens)))
        abort();
    if (rv == KVE_OK) {
        struct kve_out a = o, cut;

        check(&o, data, size);
        a.events_cap = o.n_events;
        a.hashes_cap = o.n_hashes;
        a.tokens_cap = o.n_tokens;
        if (kve_decode(dec, data, size, &a, err, sizeof err) != KVE_OK ||
            a.n_events != o.n_events || a.unknown_fields != o.unknown_fields ||
            a.other_medium_blocks != o.other_medium_blocks)
            abort();
        for (int k = 0; k < 3; k++) {
            size_t *cap = k == 0 ? &cut.events_cap : k == 1 ? &cut.hashes_cap : &cut.tokens_cap;

            cut = a;
            if (*cap == 0)
                continue;
            (*cap)--;
            if (kve_decode(dec, data, size, &cut, err, sizeof err) != KVE_EFULL || cut.n_events)
                abort();
        }
    }
    free(ev);
    free(hs);
    free(ts);
    return 0;
}
