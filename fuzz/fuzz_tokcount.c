/* libFuzzer harness for tokcount_body: any bytes must be survived, and the counts must keep
 * their invariants, for the whole input and for a prefix of it. */
#include "admission/tokcount.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ceil(bytes / 4), the text estimate at the default ratio. */
static uint64_t text_tokens(uint64_t bytes)
{
    return bytes / 4 + (bytes % 4 != 0);
}

static void check(const struct tokcount *t, size_t size)
{
    uint64_t overhead;

    if (t->id_tokens > t->tokens || t->text_bytes > size || t->id_tokens > size)
        abort();
    if ((t->exact != 0 && t->exact != 1) || (t->complete != 0 && t->complete != 1))
        abort();
    if (t->exact && (t->text_bytes != 0 || t->id_tokens == 0 || t->tokens != t->id_tokens))
        abort();
    /* what is left is 4 tokens per message, and a message takes at least "{}," */
    if (t->tokens < t->id_tokens + text_tokens(t->text_bytes))
        abort();
    overhead = t->tokens - t->id_tokens - text_tokens(t->text_bytes);
    if (overhead % 4 != 0 || overhead / 4 > size / 2)
        abort();
    if (t->exact != (t->text_bytes == 0 && overhead == 0 && t->id_tokens > 0))
        abort();
    if (t->complete && size == 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tokcount full, again, part, other;
    size_t cut = size ? data[0] % size : 0;
    char *prefix;

    tokcount_body((const char *) data, size, 4.0, &full);
    check(&full, size);
    tokcount_body((const char *) data, size, 4.0, &again);
    if (memcmp(&full, &again, sizeof full) != 0)
        abort();
    /* a prefix, copied to its own allocation so that any read past its end is caught */
    prefix = malloc(cut ? cut : 1);
    if (prefix == NULL)
        return 0;
    memcpy(prefix, data, cut);
    tokcount_body(prefix, cut, 4.0, &part);
    free(prefix);
    check(&part, cut);
    if (part.tokens > full.tokens || part.id_tokens > full.id_tokens ||
        part.text_bytes > full.text_bytes)
        abort();
    /* the ratio changes the estimate only */
    tokcount_body((const char *) data, size, 1.0, &other);
    if (other.id_tokens != full.id_tokens || other.text_bytes != full.text_bytes ||
        other.complete != full.complete || other.exact != full.exact ||
        other.tokens - other.text_bytes != full.tokens - text_tokens(full.text_bytes))
        abort();
    return 0;
}
