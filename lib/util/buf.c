/* buf: growable string; doubling growth keeps appends amortised O(1). */
#include "util/buf.h"
#include "util/xmalloc.h"

#include <stdlib.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void buf_init(struct buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void buf_free(struct buf *b)
{
    free(b->data);
    buf_init(b);
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

static void buf_reserve(struct buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    size_t cap = b->cap ? b->cap : 64;

    if (need <= b->cap)
        return;
    while (cap < need)
        cap *= 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
}

void buf_append(struct buf *b, const void *p, size_t n)
{
    buf_reserve(b, n);
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void buf_puts(struct buf *b, const char *s)
{
    buf_append(b, s, strlen(s));
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    buf_reserve(b, (size_t) n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t) n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t) n;
}

void buf_pool_init(struct buf_pool *p)
{
    p->n = 0;
    p->lent = 0;
}

struct buf *buf_pool_take(struct buf_pool *p)
{
    struct buf *b;

    if (p->n > 0) {
        b = p->spare[--p->n];
    } else {
        b = xmalloc(sizeof *b);
        buf_init(b);
    }
    p->lent++;
    return b;
}

void buf_pool_give(struct buf_pool *p, struct buf *b)
{
    p->lent--;
    if (b->cap > BUF_POOL_KEEP_BYTES)
        buf_free(b); /* one huge head must not pin its memory for ever */
    buf_reset(b);
    if (p->n < BUF_POOL_KEEP) {
        p->spare[p->n++] = b;
        return;
    }
    buf_free(b);
    free(b);
}

void buf_pool_free(struct buf_pool *p)
{
    while (p->n > 0) {
        struct buf *b = p->spare[--p->n];

        buf_free(b);
        free(b);
    }
}
