/* libFuzzer harness for the load message decoder: any bytes are survived, and whatever
 * decodes re-encodes, within ADMIT_LOAD_MSG_MAX, to a message that decodes to the same value.
 * kv_block_size (optional in v1) decodes to unknown or to a size from 1 to 2^53-1; models
 * (optional too) to unknown or to a list within its bounds, every name valid and listed once,
 * which the list itself agrees with (walking it finds n names in len bytes). */
#include "admit/load.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct admit_load m, again;
    char err[256], buf[ADMIT_LOAD_MSG_MAX * 2];
    int n;

    if (admit_load_decode(data, size, &m, err, sizeof err) != 0)
        return 0;
    if (m.kv_block_size != ADMIT_LOAD_UNKNOWN &&
        (m.kv_block_size < 1 || m.kv_block_size > ADMIT_LOAD_INT_MAX))
        abort();
    if (m.models.n != ADMIT_LOAD_UNKNOWN) {
        const struct admit_load_models *l = &m.models;
        unsigned seen = 0;
        size_t bytes = 0;

        if (l->n < 0 || l->n > ADMIT_LOAD_MODELS_MAX || l->json > ADMIT_LOAD_MODELS_JSON_MAX ||
            l->len > sizeof l->names)
            abort();
        for (const char *p = admit_load_models_next(l, NULL); p != NULL;
             p = admit_load_models_next(l, p)) {
            size_t len = strlen(p);
            if (len == 0 || len > ADMIT_LOAD_MODEL_NAME_MAX)
                abort();
            for (size_t i = 0; i < len; i++)
                if ((unsigned char) p[i] < 0x20)
                    abort();
            bytes += len + 1;
            seen++;
        }
        if (seen != (unsigned) l->n || bytes != l->len)
            abort();
    }
    n = admit_load_encode(&m, buf, sizeof buf);
    if (n < 0 || n > ADMIT_LOAD_MSG_MAX ||
        admit_load_decode(buf, (size_t) n, &again, err, sizeof err) != 0 ||
        memcmp(&m, &again, sizeof m) != 0)
        abort();
    return 0;
}
