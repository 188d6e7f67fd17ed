/* libFuzzer harness for the HTTP/1.1 head parser. The input is parsed as a request and as a
 * response, whole and split at an offset taken from the input; both runs must agree to the
 * byte. An accepted head must hold only what the grammar allows (slices inside the head,
 * token names, values without CTL or outer whitespace, framing that matches its fields),
 * and written out again canonically it must parse to the same message. */
#include "wire/h1parse.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 12
#define MAX   1024

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
    int rc;
    struct h1_parser p;
    struct h1_header hdr[SLOTS];
};

static void parse(const char *buf, size_t split, size_t size, int resp, struct run *r)
{
    memset(r, 0, sizeof *r);
    if (resp)
        h1_resp_init(&r->p, r->hdr, SLOTS, MAX, resp == 2 ? H1_M_HEAD : H1_M_GET);
    else
        h1_req_init(&r->p, r->hdr, SLOTS, MAX);
    r->rc = h1_parse(&r->p, buf, split);
    if (r->rc == H1_AGAIN)
        r->rc = h1_parse(&r->p, buf, size);
}

static int same_str(struct h1_str a, struct h1_str b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static void agree(const struct run *a, const struct run *b)
{
    if (a->rc != b->rc || a->p.err_reason != b->p.err_reason || a->p.err_off != b->p.err_off)
        abort();
    if (a->rc != H1_DONE)
        return;
    if (a->p.head_len != b->p.head_len || a->p.framing != b->p.framing ||
        a->p.content_length != b->p.content_length || a->p.keep_alive != b->p.keep_alive ||
        a->p.flags != b->p.flags || a->p.nhdr != b->p.nhdr || a->p.status != b->p.status ||
        !same_str(a->p.target, b->p.target) || memcmp(a->p.first, b->p.first, sizeof a->p.first))
        abort();
    if (memcmp(a->hdr, b->hdr, a->p.nhdr * sizeof a->hdr[0]) != 0)
        abort();
}

static int inside(struct h1_str s, const char *buf, size_t len)
{
    return s.p >= buf && s.p + s.len <= buf + len;
}

/* What an accepted head must be, whatever the input. */
static void check(const struct run *r, const char *buf, size_t size, int kind)
{
    const struct h1_parser *p = &r->p;
    size_t cl = 0, te = 0, host = 0;

    if (r->rc == H1_ERROR && (p->err_reason == NULL || p->err_status < 400 || p->keep_alive))
        abort();
    if (r->rc != H1_DONE)
        return;
    if (p->head_len < 4 || p->head_len > size || p->head_len > MAX || p->nhdr > SLOTS ||
        memcmp(buf + p->head_len - 4, "\r\n\r\n", 4) != 0)
        abort();
    for (size_t i = 0; i < p->nhdr; i++) {
        const struct h1_header *h = &r->hdr[i];
        if (!inside(h->name, buf, p->head_len) || !inside(h->value, buf, p->head_len) ||
            h->name.len == 0 || h->name.p[h->name.len] != ':' ||
            h->name.p + h->line_len > buf + p->head_len)
            abort();
        for (size_t k = 0; k < h->name.len; k++)
            if (!h1_is((unsigned char) h->name.p[k], H1_C_TCHAR))
                abort();
        for (size_t k = 0; k < h->value.len; k++)
            if (!h1_is((unsigned char) h->value.p[k], H1_C_VALUE))
                abort();
        if (h->value.len > 0 &&
            (h->value.p[0] == ' ' || h->value.p[0] == '\t' || h->value.p[h->value.len - 1] == ' ' ||
             h->value.p[h->value.len - 1] == '\t'))
            abort();
        cl += h->id == H1_H_CONTENT_LENGTH;
        te += h->id == H1_H_TRANSFER_ENCODING;
        host += h->id == H1_H_HOST;
        if (h->id != H1_H_OTHER && h1_get(p, h->id) > h)
            abort();
    }
    /* Never both framings, never two TE; a request on 1.1 has exactly one Host. */
    if ((cl && te) || te > 1 || (!kind && p->minor >= 1 && host != 1))
        abort();
    if ((p->framing == H1_BODY_CHUNKED && te != 1) || (p->framing == H1_BODY_LENGTH && cl == 0))
        abort();
    if (!kind && (p->framing == H1_BODY_UNTIL_CLOSE || (p->framing == H1_BODY_NONE && (cl || te))))
        abort();
    if ((p->flags & H1_F_CONN_CLOSE) && p->keep_alive)
        abort();
}

/* The head written canonically (single spaces, "name: value", CRLF) parses to the same. */
static void round_trip(const struct run *r, int kind)
{
    char out[2 * MAX];
    size_t n = 0;
    struct run again;
    const struct h1_parser *p = &r->p;

    if (r->rc != H1_DONE)
        return;
    if (kind)
        n += (size_t) snprintf(out, sizeof out, "HTTP/1.%d %03d %.*s\r\n", p->minor, p->status,
                               (int) p->reason.len, p->reason.p);
    else
        n += (size_t) snprintf(out, sizeof out, "%.*s %.*s HTTP/1.%d\r\n", (int) p->method_str.len,
                               p->method_str.p, (int) p->target.len, p->target.p, p->minor);
    for (size_t i = 0; i < p->nhdr; i++)
        n += (size_t) snprintf(out + n, sizeof out - n, "%.*s: %.*s\r\n", (int) r->hdr[i].name.len,
                               r->hdr[i].name.p, (int) r->hdr[i].value.len, r->hdr[i].value.p);
    n += (size_t) snprintf(out + n, sizeof out - n, "\r\n");
    if (n >= sizeof out || n > MAX)
        return; /* the canonical form may be longer than the limit; nothing to compare */
    parse(out, n, n, kind, &again);
    if (again.rc != H1_DONE || again.p.framing != p->framing ||
        again.p.content_length != p->content_length || again.p.keep_alive != p->keep_alive ||
        again.p.flags != p->flags || again.p.nhdr != p->nhdr || again.p.method != p->method)
        abort();
    for (size_t i = 0; i < p->nhdr; i++)
        if (!same_str(again.hdr[i].name, r->hdr[i].name) ||
            !same_str(again.hdr[i].value, r->hdr[i].value) || again.hdr[i].id != r->hdr[i].id)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *) data;
    size_t split = 0;
    struct run whole, part;

    for (size_t i = 0; i < size; i++)
        split = split * 31 + data[i];
    split = size ? split % (size + 1) : 0;
    for (int kind = 0; kind < 3; kind++) {
        parse(buf, size, size, kind, &whole);
        check(&whole, buf, size, kind);
        round_trip(&whole, kind);
        parse(buf, split, size, kind, &part);
        agree(&whole, &part);
    }
    return 0;
}
