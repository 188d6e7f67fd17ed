/* libFuzzer harness for the load message decoder: any bytes are survived, and whatever
 * decodes re-encodes, within ADMIT_LOAD_MSG_MAX, to a message that decodes to the same value.
 * kv_block_size (optional in v1) decodes to unknown or to a size from 1 to 2^53-1. */
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
    n = admit_load_encode(&m, buf, sizeof buf);
    if (n < 0 || n > ADMIT_LOAD_MSG_MAX ||
        admit_load_decode(buf, (size_t) n, &again, err, sizeof err) != 0 ||
        memcmp(&m, &again, sizeof m) != 0)
        abort();
    return 0;
}
