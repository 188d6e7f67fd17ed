/* h1body: the body-framing switch, once for every reader of HTTP/1 bodies. */
#include "wire/h1body.h"

#include <string.h>

int h1b_init(struct h1_body *b, const struct h1_parser *p, uint64_t max)
{
    /* Field by field rather than a memset of the whole: the chunked decoder inside is set
     * up only for a chunked body, and this runs for every request and every reply. */
    b->framing = p->framing;
    b->left = b->got = 0;
    b->max = max;
    b->err_status = 0;
    b->err_reason = NULL;
    switch (p->framing) {
    case H1_BODY_LENGTH:
        if (p->content_length > max)
            return -1;
        b->left = p->content_length;
        break;
    case H1_BODY_CHUNKED:
        h1c_init(&b->ck, max);
        break;
    case H1_BODY_NONE:
    case H1_BODY_UNTIL_CLOSE:
        break;
    }
    return 0;
}

/* The bytes are data as they stand: moved down to dst when it is not where they are. */
static void take_as_is(struct h1_body *b, const char *src, size_t n, char *dst, size_t *used,
                       size_t *len)
{
    if (dst != src)
        memmove(dst, src, n);
    b->got += n;
    *used = *len = n;
}

int h1b_take(struct h1_body *b, const char *src, size_t n, int eof, char *dst, size_t *used,
             size_t *len)
{
    int rv;

    *used = *len = 0;
    switch (b->framing) {
    case H1_BODY_NONE:
        return H1_DONE;
    case H1_BODY_LENGTH:
        take_as_is(b, src, n < b->left ? n : (size_t) b->left, dst, used, len);
        b->left -= *len;
        return b->left == 0 ? H1_DONE : H1_AGAIN;
    case H1_BODY_UNTIL_CLOSE:
        take_as_is(b, src, n, dst, used, len);
        if (b->got > b->max) {
            b->err_status = 413;
            b->err_reason = "body too large";
            return H1_ERROR;
        }
        return eof ? H1_DONE : H1_AGAIN;
    case H1_BODY_CHUNKED:
        rv = h1c_decode(&b->ck, src, n, dst, used, len);
        b->got += *len;
        if (rv == H1_ERROR) {
            b->err_status = b->ck.err_status;
            b->err_reason = b->ck.err_reason;
        }
        return rv;
    }
    return H1_ERROR;
}
