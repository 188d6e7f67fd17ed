/* h1parse's rules for what the field lines say: the values of the framing fields (Content-
 * Length, Transfer-Encoding), Host, Connection and Expect, checked as each line completes, and
 * the verdicts of the whole head (a missing Host, the framing, persistence) at its end. */
#include "wire/h1parse.h"
#include "wire/h1parse_impl.h"

#include <string.h>

/* The largest Content-Length taken: what an off_t holds. */
#define CL_MAX ((uint64_t) INT64_MAX)

/* Content-Length = 1*DIGIT. A list of identical values, on one line or several, is taken
 * as that value (RFC 9110 8.6 allows it, HAProxy does it); the parser keeps the value, the
 * forwarder sends one. An empty member is no digit: refused. */
static const char *parse_cl(struct h1_str v, uint64_t *out)
{
    const char *at = v.p;
    struct h1_str e;
    int any = 0;

    while (h1_list_next(&at, v.p + v.len, &e)) {
        uint64_t n = 0;
        if (e.len == 0)
            return "invalid Content-Length";
        for (size_t i = 0; i < e.len; i++) {
            unsigned d = (unsigned char) e.p[i] - '0';
            if (d > 9)
                return "invalid Content-Length";
            if (n > (CL_MAX - d) / 10)
                return "Content-Length overflows";
            n = n * 10 + d;
        }
        if (any && n != *out)
            return "differing Content-Length values";
        *out = n;
        any = 1;
    }
    return NULL;
}

/* Transfer-Encoding's codings: how many are chunked, whether the last one is, and how many
 * others there are; NULL, or why the value is malformed. Empty members are skipped (RFC 9110
 * 5.6.1.2 says a recipient MUST); a coding with parameters is never chunked. */
static const char *parse_te(struct h1_str v, int *chunked, int *last, int *other)
{
    const char *at = v.p;
    struct h1_str e;

    *chunked = *last = *other = 0;
    while (h1_list_next(&at, v.p + v.len, &e)) {
        size_t n = 0, r;
        if (e.len == 0)
            continue;
        while (n < e.len && h1_is((unsigned char) e.p[n], H1_C_TCHAR))
            n++;
        for (r = n; r < e.len && (e.p[r] == ' ' || e.p[r] == '\t'); r++)
            ;
        if (n == 0 || (r < e.len && e.p[r] != ';'))
            return "malformed Transfer-Encoding";
        struct h1_str name = {e.p, n};
        *last = h1_ieq(name, "chunked");
        if (*last && r < e.len)
            return "malformed Transfer-Encoding";
        if (*last)
            (*chunked)++;
        else
            (*other)++;
    }
    return NULL;
}

static int on_host(struct h1_parser *p, const struct h1_header *h, size_t off)
{
    if (++p->_hosts > 1)
        return h1p_fail(p, 400, "more than one Host", off);
    for (size_t i = 0; i < h->value.len; i++) {
        if (!h1_is((unsigned char) h->value.p[i], H1_C_HOST))
            return h1p_fail(p, 400, "invalid Host", off);
    }
    return H1_AGAIN;
}

static int on_cl(struct h1_parser *p, const struct h1_header *h, size_t off)
{
    uint64_t v = 0;
    const char *why = parse_cl(h->value, &v);

    if (why == NULL && p->_has_cl && v != p->_cl)
        why = "differing Content-Length values";
    if (why == NULL && p->_tes)
        why = "Transfer-Encoding with Content-Length";
    if (why != NULL)
        return h1p_fail(p, 400, why, off);
    p->_has_cl = 1;
    p->_cl = v;
    return H1_AGAIN;
}

/* RFC 9112 6.1 and 6.3: one TE line, never on HTTP/1.0, never beside CL, chunked at most once.
 * What the codings mean for a request (not ending in chunked: 400; another coding: 501, we
 * decode none) is decided at the blank line: a second TE line would be refused first. */
static int on_te(struct h1_parser *p, const struct h1_header *h, size_t off)
{
    int chunked, last, other;
    const char *why = parse_te(h->value, &chunked, &last, &other);

    if (++p->_tes > 1)
        return h1p_fail(p, 400, "more than one Transfer-Encoding", off);
    if (p->minor == 0)
        return h1p_fail(p, 400, "Transfer-Encoding on HTTP/1.0", off);
    if (p->_has_cl)
        return h1p_fail(p, 400, "Transfer-Encoding with Content-Length", off);
    if (why != NULL)
        return h1p_fail(p, 400, why, off);
    if (chunked > 1)
        return h1p_fail(p, 400, "chunked applied more than once", off);
    p->_chunked = (uint8_t) last;
    p->_te_other = other > 0;
    return H1_AGAIN;
}

static void on_connection(struct h1_parser *p, struct h1_str v)
{
    const char *at = v.p;
    struct h1_str e;

    while (h1_list_next(&at, v.p + v.len, &e)) {
        if (h1_ieq(e, "close"))
            p->flags |= H1_F_CONN_CLOSE;
        else if (h1_ieq(e, "keep-alive"))
            p->flags |= H1_F_CONN_KEEP_ALIVE;
        else if (e.len > 0)
            p->flags |= H1_F_CONN_OTHER;
    }
}

/* RFC 9110 10.1.1: 100-continue is honoured on HTTP/1.1 only; other expectations are
 * reported so that the caller may answer 417. */
static void on_expect(struct h1_parser *p, struct h1_str v)
{
    const char *at = v.p;
    struct h1_str e;

    while (h1_list_next(&at, v.p + v.len, &e)) {
        if (h1_ieq(e, "100-continue"))
            p->flags |= p->minor >= 1 ? H1_F_EXPECT_CONTINUE : 0;
        else if (e.len > 0)
            p->flags |= H1_F_EXPECT_OTHER;
    }
}

/* A field line of a classified name, at off, is stored: the rules of its name. */
int h1p_field(struct h1_parser *p, const struct h1_header *h, size_t off)
{
    if (p->first[h->id] == 0)
        p->first[h->id] = (uint16_t) p->nhdr;
    switch (h->id) {
    case H1_H_HOST:
        return p->_resp ? H1_AGAIN : on_host(p, h, off);
    case H1_H_CONTENT_LENGTH:
        return on_cl(p, h, off);
    case H1_H_TRANSFER_ENCODING:
        return on_te(p, h, off);
    case H1_H_CONNECTION:
        on_connection(p, h->value);
        break;
    case H1_H_EXPECT:
        if (!p->_resp)
            on_expect(p, h->value);
        break;
    case H1_H_UPGRADE:
        p->flags |= H1_F_UPGRADE;
        break;
    default:
        break;
    }
    return H1_AGAIN;
}

/* The blank line arrived: the rules of the whole head, then framing and persistence. */
int h1p_finish(struct h1_parser *p, size_t end)
{
    p->head_len = end;
    if (!p->_resp && p->minor >= 1 && p->_hosts == 0)
        return h1p_fail(p, 400, "missing Host", end);
    if (!p->_resp && p->_tes && !p->_chunked)
        return h1p_fail(p, 400, "Transfer-Encoding does not end in chunked", end);
    if (!p->_resp && p->_tes && p->_te_other)
        return h1p_fail(p, 501, "unsupported transfer coding", end);
    if (p->_resp && (p->_req_head || p->status < 200 || p->status == 204 || p->status == 304))
        p->framing = H1_BODY_NONE;
    else if (p->_tes)
        p->framing = p->_chunked ? H1_BODY_CHUNKED : H1_BODY_UNTIL_CLOSE;
    else if (p->_has_cl)
        p->framing = H1_BODY_LENGTH;
    else
        p->framing = p->_resp ? H1_BODY_UNTIL_CLOSE : H1_BODY_NONE;
    if (p->framing == H1_BODY_LENGTH)
        p->content_length = p->_cl;
    /* RFC 9112 9.3: close wins; else HTTP/1.1 persists and HTTP/1.0 only on keep-alive. */
    if (p->flags & H1_F_CONN_CLOSE)
        p->keep_alive = 0;
    else
        p->keep_alive = p->minor >= 1 || (p->flags & H1_F_CONN_KEEP_ALIVE);
    if (p->framing == H1_BODY_UNTIL_CLOSE)
        p->keep_alive = 0;
    return H1_DONE;
}
