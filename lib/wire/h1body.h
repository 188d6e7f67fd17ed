/* h1body: one message's body as it arrives, whatever delimits it (RFC 9112 6.3).
 *
 * A parsed head says how its body ends (h1parse's framing: none, a Content-Length, the
 * chunked coding, or the close); this is the one place that turns that into "these bytes
 * are body, those are the next message's, and the body is whole". The client connection
 * (a request's body), the engine pollers and the proxy's relay (a response's) all read
 * bodies through it. Incremental like the parsers: feed the bytes as they come, split
 * anywhere; a chunked body is decoded as it goes (h1chunk), in place if the caller likes.
 * Pure: no allocation, no I/O. */
#ifndef ADMIT_H1BODY_H
#define ADMIT_H1BODY_H

#include "wire/h1chunk.h"
#include "wire/h1parse.h"

#include <stddef.h>
#include <stdint.h>

/* One body being read; fill it with h1b_init. */
struct h1_body {
    enum h1_framing framing; /* the head's */
    uint64_t left;           /* H1_BODY_LENGTH: bytes still to come */
    uint64_t got;            /* data bytes taken so far */
    uint64_t max;            /* data bytes allowed */
    int err_status;          /* on H1_ERROR: as h1chunk's (413: over max) */
    const char *err_reason;  /* ... a static string saying why */
    struct h1_chunked ck;    /* H1_BODY_CHUNKED: the decoder */
};

/** sets b up for the body of the head p parsed (H1_DONE), of at most max data bytes
 *  (UINT64_MAX: no limit); returns 0, or -1 when its Content-Length is over max */
int h1b_init(struct h1_body *b, const struct h1_parser *p, uint64_t max);
/** takes body bytes from src[0..n), eof when the peer closed after them (it ends a body
 *  delimited by the close; a close inside any other body is the caller's to judge): the
 *  data goes to dst (dst <= src: it may overlap, so a body is decoded in place), *len bytes
 *  of it, and *used is how many bytes of src were taken (those after are the next
 *  message's); returns H1_DONE when the body is whole, H1_AGAIN for more, H1_ERROR for a
 *  broken chunked coding or a body over max (err_status, err_reason) */
int h1b_take(struct h1_body *b, const char *src, size_t n, int eof, char *dst, size_t *used,
             size_t *len);

#endif
