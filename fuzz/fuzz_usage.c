/* libFuzzer harness for usage: an engine's answer, any bytes: cached_tokens read from its
 * tail is one of the three answers, and the tail kept as the answer passes, cut at a point
 * the input picks, is the answer's last USAGE_TAIL bytes and reads the same. */
#include "wire/usage.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *) data;
    size_t cut = size ? data[0] % size : 0, keep = size < USAGE_TAIL ? size : USAGE_TAIL;
    struct usage_tail t;
    int64_t whole;

    whole = usage_cached_tokens(s + size - keep, keep);
    if (whole < 0 && whole != USAGE_CACHED_NONE && whole != USAGE_CACHED_UNSAID)
        abort();
    usage_tail_reset(&t);
    usage_tail_add(&t, s, cut);
    usage_tail_add(&t, s + cut, size - cut);
    if (t.len != keep || memcmp(t.b, s + size - keep, keep) != 0)
        abort();
    if (usage_cached_tokens(t.b, t.len) != whole)
        abort();
    return 0;
}
