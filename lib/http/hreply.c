/* hreply: an answer read whole into a read buffer (see hreply.h). */
#include "http/hreply.h"

/* What one read may hold beyond the body's limit: the chunk lines still to be decoded. */
#define HREPLY_SLACK (64 * 1024)

void hreply_init(struct hreply *h, enum h1_method req, size_t head_max, uint64_t body_max)
{
    h->head_max = head_max;
    h->body_max = body_max;
    h->req = req;
    h->head_done = 0;
    h->keep = 0;
    h->blen = 0;
    h->err = NULL;
}

size_t hreply_read_max(const struct hreply *h)
{
    if (!h->head_done)
        return h->head_max + HREPLY_SLACK;
    if (h->rp.framing == H1_BODY_LENGTH)
        return (size_t) h->rp.content_length;
    return (size_t) h->body_max + HREPLY_SLACK;
}

/* Parses the head, past any 1xx interim answers, and sets the body up. */
static int take_head(struct hreply *h, struct iobuf *in)
{
    size_t used;
    int rv = h1_parse_final(&h->rp, h->slots, HREPLY_HEADERS, h->head_max, h->req, in->p + in->off,
                            in->len - in->off, &used);

    in->off += used;
    if (rv == H1_ERROR)
        h->err = h->rp.err_reason;
    if (rv != H1_DONE)
        return rv;
    if (h1b_init(&h->body, &h->rp, h->body_max) != 0) {
        h->err = "Content-Length over the limit";
        return H1_ERROR;
    }
    h->keep = h->rp.keep_alive;
    h->head_done = 1;
    return H1_DONE;
}

int hreply_take(struct hreply *h, struct iobuf *in)
{
    char *body;
    size_t held, used = 0, len = 0;
    int rv;

    if (!h->head_done && (rv = take_head(h, in)) != H1_DONE)
        return rv;
    /* The bytes after the body taken so far are all new: a chunked body's chunk lines go as
     * it is decoded, in place. Bytes past the body's end were not asked for: the connection
     * is not kept. */
    body = in->p + in->off;
    held = in->len - in->off;
    rv = h1b_take(&h->body, body + h->blen, held - h->blen, 0, body + h->blen, &used, &len);
    if (rv == H1_DONE)
        h->keep &= h->blen + used == held;
    else if (rv == H1_ERROR)
        h->err = h->body.err_reason;
    h->blen += len;
    in->len = in->off + h->blen;
    return rv;
}

int hreply_eof(struct hreply *h)
{
    if (!h->head_done || h->rp.framing != H1_BODY_UNTIL_CLOSE)
        return 0;
    h->keep = 0;
    return 1;
}
