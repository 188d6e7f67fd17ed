/* kvk_keys: the router's exact block keys (lib/admission/kvkeys) of token-id prompts, for the
 * tests that play admitd's kv_events publisher (test_router_kv_events.py): what an engine's
 * events would carry for the blocks of those prompts, as admitd relays them.
 *
 * Usage: kvk_keys MODEL BLOCK_TOKENS; reads one prompt per line of stdin, its token ids in
 * decimal separated by spaces, and writes one line per prompt: the keys of its full blocks in
 * decimal, separated by spaces (kvk_seed(MODEL, no salt), then kvk_ids). */
#include "admission/kvkeys.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 65536

int main(int argc, char **argv)
{
    static uint64_t ids[MAX_IDS], keys[MAX_IDS];
    static char line[1 << 20];
    struct kvk_params p = {0};

    if (argc != 3) {
        fprintf(stderr, "usage: kvk_keys MODEL BLOCK_TOKENS < prompts\n");
        return 2;
    }
    p.seed = kvk_seed(argv[1], strlen(argv[1]), "", 0);
    p.block_tokens = (unsigned) strtoul(argv[2], NULL, 10);
    while (fgets(line, sizeof line, stdin) != NULL) {
        size_t n = 0, k;
        char *s = line, *end;

        for (;;) {
            unsigned long long v = strtoull(s, &end, 10);

            if (end == s || n == MAX_IDS)
                break;
            ids[n++] = v;
            s = end;
        }
        k = kvk_ids(&p, ids, n, keys, MAX_IDS);
        for (size_t i = 0; i < k; i++)
            printf(i ? " %" PRIu64 : "%" PRIu64, keys[i]);
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
