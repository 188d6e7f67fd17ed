/* libFuzzer harness for kvk_body: any bytes must be survived, and the keys must keep their
 * rules: at most cap, the same twice, a smaller cap gives their beginning, and a prefix of
 * the body (copied to its own allocation, so a read past its end is caught) gives a prefix of
 * them, as the chain promises (a cut body's blocks are a cut prompt's).
 *
 * kvk_salt, the body's top-level "cache_salt", is held against jansson: on every text jansson
 * reads as an object, the salt is the string jansson has under that key (the last of several,
 * as jansson keeps it), or none when it has none, null, another type or an empty string. */
#include "admission/kvkeys.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 64
/* Small, so that a salt that does not fit decoded is given as written now and then. */
#define SALT_CAP 8

static void check_salt(const uint8_t *data, size_t size)
{
    char buf[SALT_CAP];
    size_t n;
    const char *body = (const char *) data;
    const char *salt = kvk_salt(body, size, buf, sizeof buf, &n);
    json_t *root, *v;

    if (salt == NULL ? n != 0
                     : n == 0 || !((salt >= body && salt + n <= body + size) ||
                                   (salt == buf && n <= sizeof buf)))
        abort();
    root = json_loadb(body, size, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return;
    }
    v = json_object_get(root, "cache_salt");
    if (!json_is_string(v) || json_string_length(v) == 0) {
        if (salt != NULL)
            abort();
    } else if (salt == NULL) {
        abort();
    } else if (salt == buf || memchr(salt, '\\', n) == NULL) {
        /* decoded, or written without escapes: jansson's string exactly */
        if (n != json_string_length(v) || memcmp(salt, json_string_value(v), n) != 0)
            abort();
    } else if (json_string_length(v) <= sizeof buf) {
        abort(); /* as written though it fitted decoded */
    }
    json_decref(root);
}

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
    check_salt(data, size);
    return 0;
}
