/* optdiff: two readings of a daemon's settings compared, for a reload (SIGHUP).
 *
 * A reload parses every source again (config/opt.h) into a fresh struct and applies what may
 * change while the daemon runs. Some settings cannot change: a listener is bound once, a
 * connection pool is sized once. Each daemon lists its settings of either sort in a table of
 * struct opt_field, and opt_fields_diff says which of them changed: each one that needs a
 * restart is named in the log as such and gets the running value back in the new struct, so
 * that the new struct is what keeps running (and the next reload is compared with what
 * runs, not with a value that never took effect); each live one is named as changed. The
 * rule lives here once, for admitd and admit-router alike.
 *
 * Fields are compared byte for byte. That is exact for what the option engine fills: it
 * parses into a zeroed struct (padding stays zero) and the same text gives the same bytes
 * (a None is always the same NAN). Pointers (OPT_LIST) are not fields for this: their
 * owners compare the items. */
#ifndef ADMIT_OPTDIFF_H
#define ADMIT_OPTDIFF_H

#include "config/opt.h"

#include <stddef.h>

/* One setting: the name the log gives it and where it is in the daemon's struct. */
struct opt_field {
    const char *name;
    size_t off, size;
};

/* A row named as its member, and one with a name of its own (the config key, when the member
 * is called otherwise). */
#define OPT_FIELD(type, member)                                                                    \
    {                                                                                              \
#member, OPT_AT(type, member)                                                              \
    }
#define OPT_FIELD_AS(name, type, member)                                                           \
    {                                                                                              \
        name, OPT_AT(type, member)                                                                 \
    }

/* What a change of the fields of a table means. */
enum opt_diff {
    OPT_DIFF_LIVE,   /* applied by the daemon: logged as changed */
    OPT_DIFF_RESTART /* not applied: logged as needing a restart, the running value kept */
};

/** compares the fields f[0..n) of cur (what runs) and next (just read); returns how many
 *  differ. Each one that does is named in the log, and with OPT_DIFF_RESTART it gets cur's
 *  value back in next */
size_t opt_fields_diff(const struct opt_field *f, size_t n, const void *cur, void *next,
                       enum opt_diff how);

#endif
