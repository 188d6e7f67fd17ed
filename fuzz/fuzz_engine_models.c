/* libFuzzer harness for the engine's GET /v1/models answer: any bytes are survived; an answer
 * that parses gives a list within a load message's bounds (or unknown, when it does not fit),
 * which encodes into a load message that decodes to the same list. */
#include "admission/engine_models.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct admit_load_models l;
    struct admit_load m, back;
    char err[192], buf[ADMIT_LOAD_MSG_MAX];
    enum engine_models_result r;
    int n;

    memset(&l, 0x5a, sizeof l);
    r = engine_models_parse((const char *) data, size, &l, err, sizeof err);
    if (r == ENGINE_MODELS_INVALID)
        return 0;
    if ((r == ENGINE_MODELS_TOO_MANY) != (l.n == ADMIT_LOAD_UNKNOWN))
        abort();
    if (l.n > ADMIT_LOAD_MODELS_MAX || l.json > ADMIT_LOAD_MODELS_JSON_MAX)
        abort();
    admit_load_init(&m);
    strcpy(m.worker_id, "w");
    m.models = l;
    n = admit_load_encode(&m, buf, sizeof buf);
    if (n < 0 || admit_load_decode(buf, (size_t) n, &back, err, sizeof err) != 0 ||
        !admit_load_models_equal(&l, &back.models))
        abort();
    return 0;
}
