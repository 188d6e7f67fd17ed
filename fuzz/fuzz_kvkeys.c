/* libFuzzer harness for kvk_body: any bytes must be survived, and the keys must keep their
 * rules: at most cap, the same twice, a smaller cap gives their beginning, and a prefix of
 * the body (copied to its own allocation, so a read past its end is caught) gives a prefix of
 * them, as the chain promises (a cut body's blocks are a cut prompt's). */
#include "admission/kvkeys.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* tiny blocks, so that short inputs make many keys; the block size from the first byte */
    struct kvk_params p = {kvk_seed("m", 1, "", 0), 1 + (size ? data[0] % 4 : 0), 0};
    uint64_t full[CAP], again[CAP], part[CAP];
    size_t n, m, cut = size ? data[size - 1] % size : 0;
    int exact, exact2;
    char *prefix;

    n = kvk_body(&p, (const char *) data, size, full, CAP, &exact);
    if (n > CAP || (exact != 0 && exact != 1))
        abort();
    if (kvk_body(&p, (const char *) data, size, again, CAP, &exact2) != n || exact2 != exact ||
        memcmp(full, again, n * sizeof *full) != 0)
        abort();
    if (n > 1 && (kvk_body(&p, (const char *) data, size, again, n - 1, NULL) != n - 1 ||
                  memcmp(full, again, (n - 1) * sizeof *full) != 0))
        abort();
    prefix = malloc(cut ? cut : 1);
    if (prefix == NULL)
        return 0;
    memcpy(prefix, data, cut);
    m = kvk_body(&p, prefix, cut, part, CAP, NULL);
    free(prefix);
    if (m > n || memcmp(full, part, m * sizeof *full) != 0)
        abort();
    return 0;
}
