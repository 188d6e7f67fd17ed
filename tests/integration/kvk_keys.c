/* kvk_keys: the router's block keys of token ids (lib/admission/kvkeys: kvk_ids with the seed
 * kvk_seed(model, "")), for tests that check what admitd relays against what a router computes.
 *
 * Reads lines "MODEL BLOCK_SIZE ID ID ..." on stdin and writes, per line, the keys of the ids'
 * full blocks in decimal, separated by spaces. */
#include "admission/kvkeys.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS (1 << 16)

int main(void)
{
    static char line[1 << 20];
    static uint64_t ids[MAX_IDS], keys[MAX_IDS];

    while (fgets(line, sizeof line, stdin) != NULL) {
        char *save = NULL, *model = strtok_r(line, " \r\n", &save), *t;
        char *bs = strtok_r(NULL, " \r\n", &save);
        struct kvk_params p = {0};
        size_t n = 0, k;

        if (model == NULL || bs == NULL)
            return 2;
        p.seed = kvk_seed(model, strlen(model), "", 0);
        p.block_tokens = (unsigned) strtoul(bs, NULL, 10);
        while ((t = strtok_r(NULL, " \r\n", &save)) != NULL && n < MAX_IDS)
            ids[n++] = strtoull(t, NULL, 10);
        k = kvk_ids(&p, ids, n, keys, MAX_IDS);
        for (size_t i = 0; i < k; i++)
            printf("%s%" PRIu64, i ? " " : "", keys[i]);
        printf("\n");
    }
    fflush(stdout);
    return 0;
}
