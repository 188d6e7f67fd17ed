/* loadtab: what the admission layer adds to the public load table (admit/load.h) for our own
 * programs.
 *
 * Each entry also keeps the monitor's latch (admission/busy.h): every message the table keeps is
 * noted in it, so admit-top judges a rank's room by the same memory as admit-router's monitor
 * (a message with a signal unknown does not release a rank that signal marked busy). */
#ifndef ADMIT_LOADTAB_H
#define ADMIT_LOADTAB_H

#include "admit/load.h"
#include "admission/busy.h"

#include <stddef.h>

/** the latch of the i-th entry of t, in admit_loadtab_at()'s order; NULL when i is out of
 *  range */
const struct busy_latch *loadtab_latch_at(const struct admit_loadtab *t, size_t i);

#endif
