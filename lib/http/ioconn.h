/* ioconn: a non-blocking socket with its two events embedded, an input buffer and an output
 * spill buffer: the I/O under both sides of admitd's HTTP/1.1 path.
 *
 * Writes are eager: ioc_writev() writes at once, and only what the kernel did not take is
 * copied into the spill buffer, with the write event armed until it drains. So a reply that
 * fits the socket costs one system call and no epoll_ctl, where a bufferevent costs two
 * epoll_ctl calls and a loop pass per write. The read event is registered once and stays
 * (level-triggered): the owner reads when told, and turns reading off only to stop a peer
 * (backpressure) or because its buffer is full.
 *
 * Invariant: the spill buffer is empty unless the write event is armed, so bytes leave in
 * the order they were given. */
#ifndef ADMIT_IOCONN_H
#define ADMIT_IOCONN_H

#include <event2/event_struct.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Bytes p[off..len) are held; p[len..cap) is free. */
struct iobuf {
    char *p;
    size_t off, len, cap;
};

struct ioconn;

/* EV_READ: the socket is readable (or has hung up); EV_WRITE: the spill buffer drained, a
 * write failed (err is set), or a connect finished (check ioc_connect_error). */
typedef void (*ioc_cb)(struct ioconn *io, short what);

struct ioconn {
    int fd;
    struct event rev, wev;
    struct iobuf in, out;
    unsigned char reading, writing; /* rev, wev armed */
    int err;                        /* a write failed with this errno: the peer is gone */
    unsigned progress;              /* counts the spill buffer's writes (write timeouts) */
    int filled;                     /* the last read took all the room it was given */
    ioc_cb cb;
};

/** sets io up on fd (buffers kept from an earlier use stay): no event armed yet */
void ioc_init(struct ioconn *io, struct event_base *base, int fd, ioc_cb cb);
/** arms (on) or disarms the read event */
void ioc_read(struct ioconn *io, int on);
/** arms the write event to hear when a connect in progress completes */
void ioc_await_connect(struct ioconn *io);
/** a non-blocking connect to addr (TCP_NODELAY) set up on io, read event armed and, while it
 *  is in progress (*in_progress 1, when not NULL), the write event too (writes wait in the
 *  spill buffer); 0, or -1 with errno and io untouched */
int ioc_connect(struct ioconn *io, struct event_base *base, const struct sockaddr *addr,
                socklen_t len, ioc_cb cb, int *in_progress);
/** 0 once a connect finished well, or the errno it failed with */
int ioc_connect_error(struct ioconn *io);
/** reads once into in, up to max bytes held; the buffer may grow or move its bytes to the
 *  front only if may_move (otherwise only its free tail is used, and pointers into it stay
 *  valid); it grows by doubling as reads fill it, never past what max bytes held take;
 *  >0 bytes read, 0 at EOF, -1 with errno (EAGAIN: nothing now; ENOBUFS: no room; ENOMEM:
 *  the buffer could not grow, and is as it was) */
ssize_t ioc_fill(struct ioconn *io, size_t max, int may_move);
/** writes the iovecs now, spilling what the socket did not take (order kept); 0, or -1 with
 *  errno when the peer is gone, or ENOMEM when the spill buffer could not grow (either way
 *  nothing more can be written) */
int ioc_writev(struct ioconn *io, const struct iovec *iov, int n);
/** bytes given to ioc_writev and not yet taken by the kernel */
size_t ioc_pending(const struct ioconn *io);
/** disarms both events, closes the fd and empties the buffers (their storage stays) */
void ioc_close(struct ioconn *io);
/** frees the buffers' storage (after ioc_close) */
void ioc_release(struct ioconn *io);
/** frees the storage of a buffer that holds nothing and has grown past cap bytes: a burst
 *  must not pin its memory in a connection kept (or pooled) for later */
void ioc_trim(struct ioconn *io, size_t cap);
/** drops the held bytes before in.off and moves the rest to the front */
void iob_compact(struct iobuf *b);
/** makes room for at least n more bytes after len (doubling); 0, or -1 with errno ENOMEM and
 *  b as it was: the fallible path of per-request buffers */
int iob_try_reserve(struct iobuf *b, size_t n);
/** iob_try_reserve for buffers that are not a request's: failure aborts */
void iob_reserve(struct iobuf *b, size_t n);

#endif
