/* optdiff: settings compared across a reload (see optdiff.h). */
#include "config/optdiff.h"
#include "util/log.h"

#include <string.h>

size_t opt_fields_diff(const struct opt_field *f, size_t n, const void *cur, void *next,
                       enum opt_diff how)
{
    size_t changed = 0;

    for (size_t i = 0; i < n; i++) {
        const char *was = (const char *) cur + f[i].off;
        char *now = (char *) next + f[i].off;

        if (memcmp(was, now, f[i].size) == 0)
            continue;
        changed++;
        if (how == OPT_DIFF_LIVE) {
            log_info("reload: %s changed", f[i].name);
            continue;
        }
        log_warn("reload: %s changed; it takes effect after a restart", f[i].name);
        memcpy(now, was, f[i].size);
    }
    return changed;
}
