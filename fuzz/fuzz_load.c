/* libFuzzer harness for the load message decoder: any bytes are survived, and whatever
 * decodes re-encodes to a message that decodes to the same value. */
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
    n = admit_load_encode(&m, buf, sizeof buf);
    if (n < 0 || admit_load_decode(buf, (size_t) n, &again, err, sizeof err) != 0 ||
        memcmp(&m, &again, sizeof m) != 0)
        abort();
    return 0;
}
