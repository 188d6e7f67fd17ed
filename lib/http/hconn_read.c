/* hconn_read: a request out of a connection's buffer: its head parsed, checked and its body
 * read (decoded in place when chunked), then handed to the owner whole as a struct http_req
 * whose strings are slices of that buffer. Part of the hconn module (hconn_impl.h). */
#include "util/xmalloc.h"
#include "http/hconn_impl.h"

#include <string.h>

/* Bytes read past a request whose length is known, before it is answered (a pipelined one). */
#define HC_READ_AHEAD 4096

static const char continue_line[] = "HTTP/1.1 100 Continue\r\n\r\n";

static enum http_method seam_method(enum h1_method m)
{
    switch (m) {
    case H1_M_GET:
        return HTTP_GET;
    case H1_M_HEAD:
        return HTTP_HEAD;
    case H1_M_POST:
        return HTTP_POST;
    case H1_M_PUT:
        return HTTP_PUT;
    case H1_M_DELETE:
        return HTTP_DELETE;
    case H1_M_OPTIONS:
        return HTTP_OPTIONS;
    case H1_M_PATCH:
        return HTTP_PATCH;
    default:
        return HTTP_OTHER;
    }
}

static const char *header_of(const struct http_req *r, const char *name)
{
    const struct hconn *c = r->_impl;
    const struct h1_header *h = h1_find(&c->hp, name);

    return h != NULL ? h->value.p : NULL;
}

/* The head is parsed: what the request may be, and how its body is delimited. 0 if it was
 * refused. */
static int check_head(struct hconn *c)
{
    struct h1_parser *p = &c->hp;
    enum http_method m = seam_method(p->method);

    if (m == HTTP_OTHER || !(c->l->lim.methods & (1u << m))) {
        hc_refuse(c, m == HTTP_OTHER ? 501 : 405,
                  m == HTTP_OTHER ? "this method is not supported" : "this method is not allowed");
        return 0;
    }
    if (p->flags & H1_F_EXPECT_OTHER) {
        hc_refuse(c, 417, "the only expectation supported is 100-continue");
        return 0;
    }
    c->body_at = c->raw_at = c->req_len = p->head_len;
    if (h1b_init(&c->body, p, c->l->lim.max_body_bytes) != 0) {
        hc_refuse(c, 413, "body too large");
        return 0;
    }
    if (p->framing == H1_BODY_LENGTH)
        c->req_len += (size_t) p->content_length; /* known now: the read limit follows it */
    c->state = HC_BODY;
    return 1;
}

/* 1 when the body is whole, 0 for more bytes, -1 when it was refused. */
static int read_body(struct hconn *c, char *base, size_t have)
{
    size_t used = 0, len = 0;
    /* Decoded in place: a chunked body's data moves down over the chunk lines before it. */
    int rv = h1b_take(&c->body, base + c->raw_at, have - c->raw_at, 0,
                      base + c->body_at + c->body_len, &used, &len);

    if (rv == H1_ERROR) {
        hc_refuse(c, c->body.err_status, c->body.err_reason);
        return -1;
    }
    c->raw_at += used;
    c->body_len += len;
    if (rv == H1_DONE) {
        c->req_len = c->raw_at;
        return 1;
    }
    return 0;
}

/* Parses the head in base[0..have) from its first byte, in the listener's slots, and on
 * H1_DONE moves the slots into the connection's own. A parse never spans two calls (the
 * slots are shared), so a head that comes in pieces is parsed again from the start, but
 * only when a piece ends a line: the bytes are looked at O(lines) times, not O(reads). */
static int parse_head(struct hconn *c, const char *base, size_t have)
{
    struct h1_parser *p = &c->hp;
    int rv;

    h1_req_init(p, c->l->slots, HC_MAX_HEADERS, c->l->lim.max_header_bytes);
    rv = h1_parse(p, base, have);
    c->hp_base = base;
    if (rv != H1_DONE)
        return rv;
    if (p->nhdr > HC_INLINE_HEADERS && c->hdr_big == NULL &&
        (c->hdr_big = try_realloc(NULL, HC_MAX_HEADERS * sizeof *c->hdr_big)) == NULL) {
        p->err_status = 500;
        p->err_reason = "no room for the request's header lines";
        return H1_ERROR;
    }
    p->hdr = p->nhdr > HC_INLINE_HEADERS ? c->hdr_big : c->hdr;
    memcpy(p->hdr, c->l->slots, p->nhdr * sizeof *p->hdr);
    return rv;
}

/* Hands the whole request to the owner. */
static void deliver(struct hconn *c, char *base)
{
    struct h1_parser *p = &c->hp;
    struct http_req *r = &c->req;

    if (base != c->hp_base) {
        /* The buffer moved while the body came: the slices are re-made (one rescan). */
        if (parse_head(c, base, c->body_at) != H1_DONE)
            fatal("a head parsed once did not parse again");
    }
    /* The strings the seam promises NUL-terminated, terminated in place: the byte after the
     * target is its SP, after a value its CR or trailing whitespace. */
    ((char *) p->target.p)[p->target.len] = '\0';
    for (size_t i = 0; i < p->nhdr; i++)
        ((char *) p->hdr[i].value.p)[p->hdr[i].value.len] = '\0';
    memset(r, 0, sizeof *r);
    r->method = seam_method(p->method);
    r->target = p->target.p;
    r->body = c->body_len > 0 ? base + c->body_at : "";
    r->body_len = c->body_len;
    r->peer = c->peer;
    r->http_minor = p->minor;
    r->_header = header_of;
    r->_impl = c;
    c->state = HC_BUSY;
    c->stalled = 0;
    c->l->ops.request(c->l->arg, c, r);
}

void hc_process(struct hconn *c)
{
    c->in_process = 1;
    while (c->state == HC_HEAD || c->state == HC_BODY) {
        char *base = c->io.in.p + c->io.in.off;
        size_t have = c->io.in.len - c->io.in.off;
        int rv;

        if (c->state == HC_HEAD) {
            if (have == 0)
                break;
            if (have < c->l->lim.max_header_bytes &&
                memchr(base + c->scanned, '\n', have - c->scanned) == NULL) {
                c->scanned = have; /* no line ended: nothing new to judge */
                break;
            }
            c->scanned = have;
            rv = parse_head(c, base, have);
            if (rv == H1_AGAIN)
                break;
            if (rv == H1_ERROR) {
                hc_refuse(c, c->hp.err_status, c->hp.err_reason);
                break;
            }
            if (!check_head(c))
                break;
        }
        rv = read_body(c, base, have);
        if (rv < 0)
            break;
        if (rv == 0) {
            if ((c->hp.flags & H1_F_EXPECT_CONTINUE) && !c->sent_continue) {
                struct iovec v = {(void *) continue_line, sizeof continue_line - 1};

                c->sent_continue = 1;
                if (ioc_writev(&c->io, &v, 1) != 0) {
                    hc_close(c);
                    break;
                }
            }
            /* The buffer grows as the body comes (ioc_fill), not to what it announced:
             * an announced 32 MiB that never comes costs nothing. */
            break;
        }
        /* Room to read while this one is answered, to see a hang-up or keep a small
         * pipelined request (the buffer cannot move then, so it moves now if it must;
         * deliver re-makes the slices). */
        if (iob_try_reserve(&c->io.in, 256) != 0) {
            hc_refuse(c, 500, "no room to read while the request is answered");
            break;
        }
        deliver(c, c->io.in.p + c->io.in.off);
    }
    c->in_process = 0;
}

size_t hc_read_max(const struct hconn *c)
{
    if (c->state == HC_HEAD)
        return (size_t) c->l->lim.max_header_bytes + 1;
    if (c->hp.framing == H1_BODY_LENGTH)
        return c->req_len + HC_READ_AHEAD;
    return c->req_len + c->l->lim.max_body_bytes + HC_READ_AHEAD;
}
