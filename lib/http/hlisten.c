/* hlisten: the listening socket (its accepting is net/acceptor's: the pause when descriptors
 * run out, the connection cap), the pool of connection structs, and the answers made here
 * (their head and Date). Reading requests on a connection is hconn_read.c's, answering them
 * hconn.c's. */
#include "wire/httputil.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "http/hconn_impl.h"
#include "http/netsock.h"
#include "net/acceptor.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Closed connections kept for reuse: enough for a burst of reconnects, bounded for memory. */
#define HL_MAX_SPARE 1024
/* A pooled connection keeps buffers up to this size (the first ones are 1 KiB). */
#define HL_KEEP_BUFFER 4096

static void on_accept(void *arg, int fd, const struct sockaddr *sa, socklen_t salen)
{
    struct hlisten *l = arg;

    (void) salen;
    net_set_nodelay(fd);
    hc_start(l, fd, sa);
}

/* A common timeout of ms (O(1) to arm), or NULL for 0. */
static const struct timeval *common_ms(struct event_base *base, unsigned ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    return ms > 0 ? event_base_init_common_timeout(base, &tv) : NULL;
}

struct hlisten *hl_new(struct event_base *base, const struct hc_limits *lim,
                       const struct hc_ops *ops, void *arg)
{
    struct hlisten *l = xcalloc(1, sizeof *l);

    l->base = base;
    l->lim = *lim;
    l->ops = *ops;
    l->arg = arg;
    l->st = lim->stats != NULL ? lim->stats : &l->own_st;
    l->idle_tv = common_ms(base, lim->timeout_ms);
    /* A deadline no shorter than the idle timeout never fires first: no timer for it. */
    l->head_tv =
        lim->header_timeout_ms < lim->timeout_ms ? common_ms(base, lim->header_timeout_ms) : NULL;
    LIST_INIT(&l->live);
    LIST_INIT(&l->spare);
    return l;
}

int hl_bind(struct hlisten *l, const struct hostport *hp, char *bound, size_t boundlen, char *err,
            size_t errlen)
{
    int fd = net_listen(hp, err, errlen);
    unsigned cap = l->lim.max_conns;
    char name[160];

    if (fd < 0)
        return -1;
    if (net_local_name(fd, bound, boundlen) != 0)
        snprintf(bound, boundlen, "%s:%d", hp->host, hp->port);
    snprintf(name, sizeof name, "%s listener %s", l->lim.name ? l->lim.name : "HTTP", bound);
    if (cap == 0) {
        cap = acc_auto_cap();
        log_info("%s: at most %u connections at once (from the open-file limit)", name, cap);
    }
    l->acc = acc_new(l->base, fd, name, on_accept, l, l->st);
    acc_set_cap(l->acc, cap);
    return 0;
}

void hc_start(struct hlisten *l, int fd, const struct sockaddr *sa)
{
    struct hconn *c = LIST_FIRST(&l->spare);

    if (c != NULL) {
        LIST_REMOVE(c, link);
        l->nspare--;
    } else {
        /* Not zeroed as a whole: the header slots are written before they are read. */
        c = xmalloc(sizeof *c);
        memset(c, 0, offsetof(struct hconn, hdr));
    }
    c->l = l;
    ioc_init(&c->io, l->base, fd, NULL);
    LIST_INSERT_HEAD(&l->live, c, link);
    c->peer[0] = '\0';
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *) (const void *) sa)->sin_addr, c->peer,
                  sizeof c->peer);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *) (const void *) sa)->sin6_addr, c->peer,
                  sizeof c->peer);
    hc_begin(c);
}

/* Back to the pool (the connection is closed). Buffers that grew are given back to the
 * system: one huge request or slow reader must not pin its memory for ever. */
void hc_recycle(struct hconn *c)
{
    struct hlisten *l = c->l;

    LIST_REMOVE(c, link);
    if (l->nspare >= HL_MAX_SPARE) {
        hc_destroy(c);
        return;
    }
    ioc_trim(&c->io, HL_KEEP_BUFFER);
    LIST_INSERT_HEAD(&l->spare, c, link);
    l->nspare++;
}

void hl_free(struct hlisten *l)
{
    struct hconn *c;

    if (l == NULL)
        return;
    while ((c = LIST_FIRST(&l->live)) != NULL)
        hc_close(c); /* recycles it: off the live list (and tells the acceptor) */
    acc_free(l->acc);
    while ((c = LIST_FIRST(&l->spare)) != NULL) {
        LIST_REMOVE(c, link);
        hc_destroy(c);
    }
    buf_free(&l->head);
    free(l);
}

const char *hl_date(struct hlisten *l)
{
    time_t now = time(NULL);

    if (now != l->date_at) {
        l->date_at = now;
        httpu_date(now, l->date);
    }
    return l->date;
}

/* Appends the decimal digits of v. */
static void put_uint(struct buf *b, unsigned long long v)
{
    char d[24];

    buf_append(b, d, httpu_fmt_uint(d, v));
}

int hc_reply(struct hconn *c, int status, const char *content_type, const char *body, size_t len,
             const char *extra, int close)
{
    struct buf *h = &c->l->head;
    struct iovec v[2];
    int head_only = c->hp.method == H1_M_HEAD;

    buf_reset(h);
    buf_append(h, "HTTP/1.1 ", 9);
    put_uint(h, (unsigned) status);
    buf_append(h, " ", 1);
    buf_puts(h, httpu_reason(status));
    buf_append(h, "\r\nDate: ", 8);
    buf_append(h, hl_date(c->l), HTTPU_DATE_LEN - 1);
    buf_append(h, "\r\nContent-Type: ", 16);
    buf_puts(h, content_type);
    buf_append(h, "\r\nContent-Length: ", 18);
    put_uint(h, len);
    buf_append(h, "\r\n", 2);
    if (extra != NULL)
        buf_puts(h, extra);
    if (close || !c->hp.keep_alive)
        buf_append(h, "Connection: close\r\n", 19);
    else if (c->hp.minor == 0)
        buf_append(h, "Connection: keep-alive\r\n", 24);
    buf_append(h, "\r\n", 2);
    v[0].iov_base = h->data;
    v[0].iov_len = h->len;
    v[1].iov_base = (void *) (size_t) body;
    v[1].iov_len = head_only ? 0 : len;
    return hc_write(c, v, 2);
}
