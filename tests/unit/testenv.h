/* testenv: what the option tests share: a fake environment, argv from a list of strings,
 * files to read, and a list as one string to compare.
 *
 * The engine takes the environment through a lookup function precisely so that tests can
 * feed a table; these helpers are that table and the other fixtures around it. */
#ifndef ADMIT_TESTENV_H
#define ADMIT_TESTENV_H

#include "core/opt.h"

#include <stdarg.h>
#include <stddef.h>

/** makes pairs (name, value, ..., NULL) the fake environment; NULL: nothing is set */
void testenv_set(const char *const *pairs);
/** the lookup to give the parsers: the value of name in the fake environment, or NULL */
const char *testenv_get(const char *name);
/** argv[0] = prog, then the strings of ap up to a NULL (at most max - 2); returns argc */
int testenv_args(char **argv, int max, char *prog, va_list ap);
/** writes text to path, or to a new temporary file when path is "" (its name then goes into
 *  path, which has room for 64 bytes); the test fails if that cannot be done */
void testenv_write(char *path, const char *text);
/** the items of l joined by commas, in buf */
const char *testenv_join(const struct opt_list *l, char *buf, size_t len);

#endif
