/* top: the table admit-top prints, rendered from a load table. Pure, so tests can read it. */
#ifndef ADMIT_TOP_H
#define ADMIT_TOP_H

#include "admit/load.h"
#include "util/buf.h"
#include "admission/busy.h"

#include <stdint.h>

/** renders one row per (worker, rank) with a header line, as of now_ms; ROOM is has_room()
 *  of each rank's published load, as its latch keeps it (admission/loadtab.h), under th ("-"
 *  when th sets no threshold) */
void top_render(const struct admit_loadtab *t, int64_t now_ms, const struct busy_thresholds *th,
                struct buf *out);

#endif
