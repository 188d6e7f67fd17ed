/* opt_value: one option's value into its field, private to the opt module, which is two
 * files: opt_value.c (each kind's syntax, range and message: "src: 'raw' must be ...") and
 * opt.c (the sources in their order, the file, the flags, --help). */
#ifndef ADMIT_OPT_IMPL_H
#define ADMIT_OPT_IMPL_H

#include "config/opt.h"

#include <stddef.h>

/** the field size a kind needs, or 0 when any size works (text, custom) */
size_t opt_kind_size(enum opt_kind k);
/** frees a list's items and empties it */
void opt_list_clear(struct opt_list *l);
/** appends the comma-separated items of raw to l, each checked by the option's hook; 0, or
 *  -1 with err ("src: ...") */
int opt_list_add(const struct opt_def *d, void *obj, struct opt_list *l, const char *raw,
                 const char *src, char *err, size_t errlen);
/** converts one raw value into its field of obj; src names where it came from, for err; 0,
 *  or -1 with err */
int opt_apply(const struct opt_def *d, void *obj, const char *raw, const char *src, char *err,
              size_t errlen);

#endif
