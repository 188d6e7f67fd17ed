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

/* Scratch buffers lent for one use at a time (a head being built, an error body) instead of
 * one buffer shared by every user: code that calls out while it holds one (a hook that may
 * start another request) cannot have its bytes overwritten, because a nested user takes a
 * buffer of its own. In steady state nothing is allocated: the pool keeps what is given back
 * (BUF_POOL_KEEP buffers, each at most BUF_POOL_KEEP_BYTES of storage). */
#define BUF_POOL_KEEP       8
#define BUF_POOL_KEEP_BYTES (64 * 1024)

struct buf_pool {
    struct buf *spare[BUF_POOL_KEEP];
    unsigned n;
    unsigned lent; /* taken and not given back: for tests and leak checks */
};

/** an empty pool (no allocation) */
void buf_pool_init(struct buf_pool *p);
/** lends an empty buffer, kept from an earlier use or new; never one already lent */
struct buf *buf_pool_take(struct buf_pool *p);
/** takes a lent buffer back (emptied; its storage trimmed when it grew large) */
void buf_pool_give(struct buf_pool *p, struct buf *b);
/** frees the buffers kept (a buffer still lent is its borrower's to give back or free) */
void buf_pool_free(struct buf_pool *p);

#endif
