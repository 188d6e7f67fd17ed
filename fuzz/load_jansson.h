/* load_jansson: the load message decoder admitd had before lib/admission/load_decode.c, on jansson,
 * kept as the oracle that the fuzz harness and the benchmark hold the new one against. It is
 * frozen: what it accepts and the errors it gives are what the new decoder must reproduce. */
#ifndef ADMIT_FUZZ_LOAD_JANSSON_H
#define ADMIT_FUZZ_LOAD_JANSSON_H

#include "admit/load.h"

#include <stddef.h>

/** admit_load_decode() as it was: parses the whole text with jansson, then checks the fields */
int load_jansson_decode(const void *data, size_t len, struct admit_load *out, char *err,
                        size_t errlen);

#endif
