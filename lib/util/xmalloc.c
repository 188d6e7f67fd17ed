/* xmalloc: the one place where allocation failure is handled (by aborting, or for a
 * request's buffers by saying so). */
#include "util/xmalloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

void fatal(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fputs("fatal: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (p == NULL)
        fatal("out of memory allocating %zu bytes", n);
    return p;
}

/* Huge pages are 2 MiB on x86-64 and arm64 (4 KiB base pages). */
#define XMALLOC_HUGE ((size_t) 2 << 20)

void *xmalloc_huge(size_t n)
{
    void *p;

    if (n < XMALLOC_HUGE)
        return xmalloc(n);
    if (posix_memalign(&p, XMALLOC_HUGE, n) != 0)
        fatal("out of memory allocating %zu bytes", n);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* a hint (without it, or with THP "never", 4 KiB pages), for the whole huge pages only:
     * the part past the last one stays in small pages, so that what is resident is n */
    (void) madvise(p, n & ~(XMALLOC_HUGE - 1), MADV_HUGEPAGE);
#endif
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);

    if (p == NULL)
        fatal("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);

    if (q == NULL)
        fatal("out of memory reallocating %zu bytes", n);
    return q;
}

void *try_realloc(void *p, size_t n)
{
    return realloc(p, n ? n : 1);
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = xmalloc(len + 1);

    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}
