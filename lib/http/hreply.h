/* hreply: one HTTP/1.1 answer read whole into a connection's read buffer, for the clients
 * that want it whole (the engine pollers, admit-router's /tokenize calls) rather than
 * relayed as it comes (the proxy).
 *
 * The caller reads the socket into its iobuf (at most hreply_read_max() bytes held) and calls
 * hreply_take() after each read: the head is parsed past any 1xx interim answers, then the
 * body is taken through h1body, a chunked one decoded in place, until it is whole. Then the
 * body is the blen bytes at in->p + in->off, and keep says whether the connection may carry
 * another request (the answer allows it and nothing came past its end). No allocation. */
#ifndef ADMIT_HREPLY_H
#define ADMIT_HREPLY_H

#include "http/ioconn.h"
#include "wire/h1body.h"
#include "wire/h1parse.h"

#include <stddef.h>
#include <stdint.h>

/* Field lines an answer's head may have. */
#define HREPLY_HEADERS 64

/* One answer being read. */
struct hreply {
    struct h1_parser rp; /* its head, once head_done (rp.status, rp.framing...) */
    struct h1_body body;
    struct h1_header slots[HREPLY_HEADERS];
    size_t head_max;   /* bytes its head may take */
    uint64_t body_max; /* data bytes its body may have */
    enum h1_method req;
    int head_done;
    int keep;        /* with H1_DONE: the connection may carry the next request */
    size_t blen;     /* body bytes held, decoded, at in->p + in->off */
    const char *err; /* with H1_ERROR: why (a static string) */
};

/** sets h up for the answer to a request of method req: a head of head_max bytes at most, a
 *  body of body_max data bytes at most */
void hreply_init(struct hreply *h, enum h1_method req, size_t head_max, uint64_t body_max);
/** the most bytes the read buffer should hold after the next read */
size_t hreply_read_max(const struct hreply *h);
/** takes what the last read added to in: H1_DONE when the answer is whole (body and keep
 *  set), H1_AGAIN for more, H1_ERROR when it is no answer h takes (err says why) */
int hreply_take(struct hreply *h, struct iobuf *in);
/** the peer closed the connection: 1 when that ends the body (one delimited by the close:
 *  the answer is whole, keep 0), else 0 (the answer broke) */
int hreply_eof(struct hreply *h);

#endif
