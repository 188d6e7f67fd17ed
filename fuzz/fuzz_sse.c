/* libFuzzer harness for the SSE event counter: the count of a stream does not depend on
 * where it was split into chunks. */
#include "wire/sse.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sse_counter whole, split;
    size_t cut = size ? data[0] % size : 0;

    sse_init(&whole);
    sse_feed(&whole, (const char *) data, size);
    sse_init(&split);
    sse_feed(&split, (const char *) data, cut);
    sse_feed(&split, (const char *) data + cut, size - cut);
    if (whole.events != split.events || whole.events > size / 2 + 1)
        abort();
    return 0;
}
