/* testenv: what the option tests share: a fake environment, argv from a list of strings,
 * files to read, and a list as one string to compare; and, for the tests of what a failed
 * allocation does, a limit on memory.
 *
 * The engine takes the environment through a lookup function precisely so that tests can
 * feed a table; these helpers are that table and the other fixtures around it. */
#ifndef ADMIT_TESTENV_H
#define ADMIT_TESTENV_H

#include "config/opt.h"

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

/* Making allocations fail. Under ASan (which cannot bear an address-space limit) the test
 * binary states a largest allocation with TESTENV_ALLOCATION_LIMIT(MB) at file scope (no
 * semicolon: ASan reads it before main, and then any larger malloc returns NULL); elsewhere
 * testenv_memory_cap limits the address space (RLIMIT_AS) for as long as a test needs. */
#if defined(__SANITIZE_ADDRESS__)
#define TESTENV_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESTENV_ASAN 1
#endif
#endif
#ifndef TESTENV_ASAN
#define TESTENV_ASAN 0
#endif
#if TESTENV_ASAN
#define TESTENV_ALLOCATION_LIMIT(mb)                                                               \
    const char *__asan_default_options(void);                                                      \
    const char *__asan_default_options(void)                                                       \
    {                                                                                              \
        return "allocator_may_return_null=1:max_allocation_size_mb=" #mb;                          \
    }
#else
#define TESTENV_ALLOCATION_LIMIT(mb)
#endif

/** without ASan: the address space may grow by at most bytes from now on (RLIMIT_AS's soft
 *  value); under ASan nothing (see TESTENV_ALLOCATION_LIMIT) */
void testenv_memory_cap(size_t bytes);
/** lifts testenv_memory_cap's limit */
void testenv_memory_uncap(void);

#endif
