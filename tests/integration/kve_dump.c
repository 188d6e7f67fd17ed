/* kve_dump: our KV events decoder (lib/admission/kvevents) over payloads a test captured.
 *
 * Reads one payload per line of stdin, in hex, and writes one JSON line per payload: the
 * batch as kve_decode reads it ({"rank", "events": [{"kind", "hashes", "parent",
 * "block_size", "extra", "tokens"}]}), or {"error": MESSAGE}. test_mock_kv_events.py compares it
 * with what Python's msgpack reads from the same bytes. */
#include "admission/kvevents.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void dump(struct kve_decoder *d, const unsigned char *p, size_t n)
{
    struct kve_event *ev = calloc(n + 1, sizeof *ev);
    uint64_t *h = calloc(n + 1, sizeof *h);
    uint32_t *t = calloc(n + 1, sizeof *t);
    struct kve_out o = {.events = ev,
                        .events_cap = n + 1,
                        .hashes = h,
                        .hashes_cap = n + 1,
                        .tokens = t,
                        .tokens_cap = n + 1};
    char err[256];

    if (ev == NULL || h == NULL || t == NULL)
        abort();
    if (kve_decode(d, p, n, &o, err, sizeof err) != KVE_OK) {
        printf("{\"error\": \"%s\"}\n", err);
    } else {
        printf("{\"rank\": %" PRId64 ", \"events\": [", o.dp_rank);
        for (size_t i = 0; i < o.n_events; i++) {
            const struct kve_event *e = &ev[i];
            const char *kind[] = {"BlockStored", "BlockRemoved", "AllBlocksCleared"};

            printf("%s{\"kind\": \"%s\", \"hashes\": [", i ? ", " : "", kind[e->kind]);
            for (uint32_t k = 0; k < e->n_hashes; k++)
                printf("%s%" PRIu64, k ? ", " : "", h[e->hash_first + k]);
            printf("]");
            if (e->kind == KVE_STORED) {
                if (e->has_parent)
                    printf(", \"parent\": %" PRIu64, e->parent);
                else
                    printf(", \"parent\": null");
                printf(", \"block_size\": %" PRIu32 ", \"extra\": %d, \"tokens\": [", e->block_size,
                       e->has_extra_keys);
                for (uint32_t k = 0; k < e->n_tokens; k++)
                    printf("%s%" PRIu32, k ? ", " : "", t[e->token_first + k]);
                printf("]");
            }
            printf("}");
        }
        printf("]}\n");
    }
    free(ev);
    free(h);
    free(t);
}

int main(void)
{
    struct kve_decoder *d = kve_decoder_new();
    static char line[1 << 22];
    static unsigned char buf[1 << 21];

    while (fgets(line, sizeof line, stdin) != NULL) {
        size_t n = strcspn(line, "\r\n") / 2;

        for (size_t i = 0; i < n; i++) {
            unsigned v;

            if (sscanf(line + 2 * i, "%2x", &v) != 1)
                return 2;
            buf[i] = (unsigned char) v;
        }
        dump(d, buf, n);
    }
    kve_decoder_free(d);
    fflush(stdout);
    return 0;
}
