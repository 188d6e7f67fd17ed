/* h1chunk: a strict, zero-copy, incremental decoder of the chunked transfer coding
 * (RFC 9112 7.1).
 *
 * Fed the body's bytes as they arrive, split anywhere, it hands back the chunk data as
 * slices of those same bytes and says where the message ends; the bytes after the end are
 * the next message's. Chunk lines are checked byte by byte: the size is 1*HEXDIG (no "0x",
 * no sign, at most 16 digits), extensions follow the grammar (token or quoted-string values,
 * whitespace only where BWS allows it) and are skipped, every line ends in CRLF, every
 * chunk's data is followed by CRLF. Trailer fields are checked with the head's field rules
 * (h1tok) and dropped: nothing of admitd reads them, a request's body is forwarded with a
 * Content-Length, and a response's data is relayed in chunks of admitd's own.
 *
 * Its callers read bodies through wire/h1body, which decodes a chunked one with
 * h1c_decode, in place. */
#ifndef ADMIT_H1CHUNK_H
#define ADMIT_H1CHUNK_H

#include "wire/h1tok.h"

#include <stddef.h>
#include <stdint.h>

/* Bytes of chunk extensions a message may carry, all chunk lines together (400 past it):
 * they are read and thrown away, so they must not cost unbounded work (CVE-2024-22019). */
#define H1C_MAX_EXT 4096
/* Bytes of the trailer section (431 past it). */
#define H1C_MAX_TRAILER 8192
/* Hex digits of a chunk size, leading zeros included: 16 fill a uint64_t. */
#define H1C_MAX_DIGITS 16

/* One chunked body being decoded; fill it with h1c_init. The fields starting with '_' are
 * the decoder's. */
struct h1_chunked {
    uint64_t size;          /* the current chunk's size */
    uint64_t left;          /* its data bytes still to come */
    uint64_t total;         /* the sizes of the chunks so far */
    uint64_t chunks;        /* chunks so far, the last (0) one included */
    int err_status;         /* on H1_ERROR: 400, 413 (over max_body) or 431 (trailers) */
    const char *err_reason; /* ... a static string saying why */
    /* private */
    uint64_t _max;
    size_t _ext, _trailer;
    uint8_t _state, _digits;
};

/** prepares c for a body of at most max_body data bytes (UINT64_MAX: no limit) */
void h1c_init(struct h1_chunked *c, uint64_t max_body);
/** decodes from buf[0..n): H1_DATA with *data a slice of buf, H1_AGAIN when all n bytes were
 *  taken, H1_DONE at the end of the message, or H1_ERROR; *used is how many bytes were
 *  taken (with H1_ERROR, the offset of the byte that decided it) */
int h1c_feed(struct h1_chunked *c, const char *buf, size_t n, size_t *used, struct h1_str *data);
/** decodes src[0..n) as h1c_feed does, moving the data to dst (dst <= src: it may overlap, so
 *  a body is decoded in place); returns H1_AGAIN (all n bytes taken), H1_DONE or H1_ERROR,
 *  with *used as h1c_feed's and *len the data bytes now at dst */
int h1c_decode(struct h1_chunked *c, const char *src, size_t n, char *dst, size_t *used,
               size_t *len);

#endif
