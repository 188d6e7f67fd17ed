/* xmalloc: allocation that never returns NULL, and the one that may.
 *
 * admitd treats running out of memory as fatal: a daemon that limps on after a failed
 * malloc loses requests in ways nobody can reason about, so every allocation goes through
 * here and aborts with a message instead of growing a NULL check at every call site. The
 * one exception is memory one request asks for (its buffers grow with what a client sends):
 * try_realloc's failure refuses that request alone (http/ioconn, http/hconn) rather than
 * losing every request in flight. */
#ifndef ADMIT_XMALLOC_H
#define ADMIT_XMALLOC_H

#include <stddef.h>
#include <stdnoreturn.h>

/** prints "fatal: <msg>" on stderr and aborts */
noreturn void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/** malloc that aborts on failure; xmalloc(0) returns a valid pointer */
void *xmalloc(size_t n);
/** xmalloc for a large table read at random (free() frees it): aligned to and, where the
    system allows, backed by huge pages, whose TLB covers it where 4 KiB pages miss */
void *xmalloc_huge(size_t n);
/** calloc that aborts on failure */
void *xcalloc(size_t count, size_t size);
/** realloc that aborts on failure */
void *xrealloc(void *p, size_t n);
/** realloc that may fail: NULL with p untouched (for a request's own buffers only) */
void *try_realloc(void *p, size_t n);
/** strdup that aborts on failure */
char *xstrdup(const char *s);
/** copies at most n bytes of s into a new NUL-terminated string */
char *xstrndup(const char *s, size_t n);

#endif
