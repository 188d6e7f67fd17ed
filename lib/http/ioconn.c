/* ioconn: eager writes, one read per readiness, events embedded in the connection. */
#include "http/ioconn.h"
#include "util/xmalloc.h"
#include "http/netsock.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A read is worth a system call only with this much room; below it the buffer grows or its
 * bytes move to the front. */
#define IOC_MIN_READ 512
/* The first allocation of a buffer: a typical LLM request head and body fit, and so does an
 * engine's reply head with its first events. Every open request holds two. */
#define IOC_FIRST_CAP 1024
/* A buffer whose reads keep filling it grows, up to this: large replies are read in large
 * pieces, while the many connections that carry small ones (SSE events, short answers) keep
 * small buffers. */
#define IOC_GROW_MAX (64 * 1024)

void iob_compact(struct iobuf *b)
{
    if (b->off == 0)
        return;
    memmove(b->p, b->p + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
}

/* Gives b exactly cap bytes of storage (cap >= b->len); 0, or -1 with b as it was. */
static int iob_resize(struct iobuf *b, size_t cap)
{
    char *p = try_realloc(b->p, cap);

    if (p == NULL)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int iob_try_reserve(struct iobuf *b, size_t n)
{
    size_t cap = b->cap ? b->cap : IOC_FIRST_CAP;

    if (b->cap - b->len >= n)
        return 0;
    while (cap - b->len < n)
        cap *= 2;
    if (iob_resize(b, cap) != 0) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

void iob_reserve(struct iobuf *b, size_t n)
{
    if (iob_try_reserve(b, n) != 0)
        fatal("out of memory growing a buffer by %zu bytes", n);
}

/* Room for the next read into in, which may move. Its bytes go to the front when the free
 * tail is small; it doubles when that is not enough, or when the last read filled it (up to
 * IOC_GROW_MAX): so it grows with the bytes that arrive, never with what a peer announces,
 * and never past what max bytes held take (from where they start). 0, or -1 with errno
 * ENOMEM and the buffer as it was. */
static int make_room(struct ioconn *io, size_t max)
{
    struct iobuf *b = &io->in;
    size_t top, cap;

    if (b->cap - b->len < IOC_MIN_READ)
        iob_compact(b);
    if (b->cap - b->len >= IOC_MIN_READ && !(io->filled && b->cap < IOC_GROW_MAX))
        return 0;
    io->filled = 0;
    top = max > SIZE_MAX - b->off ? SIZE_MAX : b->off + max;
    cap = b->cap ? b->cap * 2 : IOC_FIRST_CAP;
    if (cap > top)
        cap = top;
    if (cap <= b->cap)
        return 0; /* as large as max needs: the read takes the room there is */
    if (iob_resize(b, cap) != 0) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

static void on_event(evutil_socket_t fd, short what, void *arg)
{
    struct ioconn *io = arg;

    (void) fd;
    if (what & EV_WRITE) {
        if (io->out.len > io->out.off) {
            ssize_t n =
                send(io->fd, io->out.p + io->out.off, io->out.len - io->out.off, MSG_NOSIGNAL);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return;
            if (n < 0) {
                /* The peer is gone (or the connect failed): drop what it will never read. */
                io->err = errno;
                io->out.off = io->out.len = 0;
            } else {
                io->progress++;
                io->out.off += (size_t) n;
                if (io->out.off < io->out.len)
                    return;
                io->out.off = io->out.len = 0;
            }
        }
        event_del(&io->wev);
        io->writing = 0;
        io->cb(io, EV_WRITE);
        return;
    }
    io->cb(io, EV_READ);
}

void ioc_init(struct ioconn *io, struct event_base *base, int fd, ioc_cb cb)
{
    io->fd = fd;
    io->cb = cb;
    io->reading = io->writing = 0;
    io->err = 0;
    io->filled = 0;
    io->in.off = io->in.len = 0;
    io->out.off = io->out.len = 0;
    event_assign(&io->rev, base, fd, EV_READ | EV_PERSIST, on_event, io);
    event_assign(&io->wev, base, fd, EV_WRITE | EV_PERSIST, on_event, io);
}

void ioc_read(struct ioconn *io, int on)
{
    if (on && !io->reading)
        event_add(&io->rev, NULL);
    else if (!on && io->reading)
        event_del(&io->rev);
    io->reading = (unsigned char) (on != 0);
}

void ioc_await_connect(struct ioconn *io)
{
    if (!io->writing) {
        event_add(&io->wev, NULL);
        io->writing = 1;
    }
}

int ioc_connect(struct ioconn *io, struct event_base *base, const struct sockaddr *addr,
                socklen_t len, ioc_cb cb, int *in_progress)
{
    int pending = 0, fd = net_connect(addr, len, &pending);

    if (fd < 0)
        return -1;
    ioc_init(io, base, fd, cb);
    ioc_read(io, 1);
    if (pending)
        ioc_await_connect(io);
    if (in_progress != NULL)
        *in_progress = pending;
    return 0;
}

int ioc_connect_error(struct ioconn *io)
{
    int err = 0;
    socklen_t len = sizeof err;

    if (getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        return errno;
    return err;
}

ssize_t ioc_fill(struct ioconn *io, size_t max, int may_move)
{
    struct iobuf *b = &io->in;
    size_t held = b->len - b->off, room;
    ssize_t n;

    if (held >= max) {
        errno = ENOBUFS;
        return -1;
    }
    if (may_move && make_room(io, max) != 0)
        return -1;
    room = b->cap - b->len;
    if (room > max - held)
        room = max - held;
    if (room == 0) {
        errno = ENOBUFS;
        return -1;
    }
    do
        n = recv(io->fd, b->p + b->len, room, 0);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
        b->len += (size_t) n;
        io->filled = (size_t) n == room;
    }
    return n;
}

/* Keeps what the socket did not take, behind what waits already. 0, or -1 with errno
 * ENOMEM when its memory could not be had: those bytes are lost, so the connection can take
 * no more (err is set, and the owner ends it as if the peer had gone). */
static int spill(struct ioconn *io, const struct iovec *iov, int n, size_t skip)
{
    /* What was sent goes, once it is at least half the buffer (so each byte moves at most
     * once on average): a client that reads about as fast as it is written to never drains
     * the buffer, which would otherwise grow with the whole stream. */
    if (io->out.off > 0 && io->out.off >= io->out.len / 2)
        iob_compact(&io->out);
    for (int i = 0; i < n; i++) {
        const char *p = iov[i].iov_base;
        size_t len = iov[i].iov_len;

        if (skip >= len) {
            skip -= len;
            continue;
        }
        p += skip;
        len -= skip;
        skip = 0;
        if (iob_try_reserve(&io->out, len) != 0) {
            io->err = ENOMEM;
            io->out.off = io->out.len = 0;
            return -1;
        }
        memcpy(io->out.p + io->out.len, p, len);
        io->out.len += len;
    }
    if (!io->writing) {
        event_add(&io->wev, NULL);
        io->writing = 1;
    }
    return 0;
}

int ioc_writev(struct ioconn *io, const struct iovec *iov, int n)
{
    size_t total = 0;
    ssize_t w;

    if (io->fd < 0 || io->err != 0) {
        errno = io->fd < 0 ? EPIPE : io->err;
        return -1;
    }
    if (io->writing) {
        /* Bytes wait already (or a connect is in progress): these go behind them. */
        return spill(io, iov, n, 0);
    }
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (total == 0)
        return 0;
    {
        struct msghdr mh = {.msg_iov = (struct iovec *) (size_t) iov, .msg_iovlen = (size_t) n};
        do
            w = sendmsg(io->fd, &mh, MSG_NOSIGNAL);
        while (w < 0 && errno == EINTR);
    }
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            io->err = errno;
            return -1;
        }
        w = 0;
    }
    if ((size_t) w < total)
        return spill(io, iov, n, (size_t) w);
    return 0;
}

size_t ioc_pending(const struct ioconn *io)
{
    return io->out.len - io->out.off;
}

void ioc_close(struct ioconn *io)
{
    if (io->fd < 0)
        return;
    if (io->reading)
        event_del(&io->rev);
    if (io->writing)
        event_del(&io->wev);
    io->reading = io->writing = 0;
    close(io->fd);
    io->fd = -1;
    io->in.off = io->in.len = 0;
    io->out.off = io->out.len = 0;
}

void ioc_release(struct ioconn *io)
{
    free(io->in.p);
    free(io->out.p);
    memset(&io->in, 0, sizeof io->in);
    memset(&io->out, 0, sizeof io->out);
}

void ioc_trim(struct ioconn *io, size_t cap)
{
    if (io->in.cap > cap && io->in.off == io->in.len) {
        free(io->in.p);
        memset(&io->in, 0, sizeof io->in);
    }
    if (io->out.cap > cap && io->out.off == io->out.len) {
        free(io->out.p);
        memset(&io->out, 0, sizeof io->out);
    }
}
