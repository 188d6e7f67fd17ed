/* buf: a growable byte string, the value type that pure modules write into.
 *
 * Pure code (Prometheus text, JSON error bodies) must not depend on libevent, so it renders
 * into a buf and the I/O glue copies the bytes into an evbuffer. The data is always
 * NUL-terminated so it can be printed or compared in tests. */
#ifndef ADMIT_BUF_H
#define ADMIT_BUF_H

#include <stddef.h>

struct buf {
    char *data; /* NUL-terminated; NULL until the first append */
    size_t len; /* bytes used, not counting the NUL */
    size_t cap; /* bytes allocated */
};

/** initialises an empty buffer (no allocation) */
void buf_init(struct buf *b);
/** releases the storage and leaves the buffer empty and reusable */
void buf_free(struct buf *b);
/** drops the contents but keeps the storage */
void buf_reset(struct buf *b);
/** appends n bytes */
void buf_append(struct buf *b, const void *p, size_t n);
/** appends a NUL-terminated string */
void buf_puts(struct buf *b, const char *s);
/** appends printf-formatted text */
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
