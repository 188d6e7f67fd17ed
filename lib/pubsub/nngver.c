/* nngver: the run-time version of nng (see pubsub/nngver.h). */
#include "pubsub/nngver.h"

#include <nng/nng.h>

const char *nngver_runtime(void)
{
    return nng_version();
}
