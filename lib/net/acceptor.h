/* acceptor: taking connections from a listening socket on a libevent loop, for every
 * listener of the daemons (the HTTP listeners of lib/http, the load publisher of
 * lib/pubsub), so that they all obey one rule when the process runs out of descriptors.
 *
 * The watch on a listening socket is level-triggered: it fires for as long as a connection
 * waits in the backlog. When accept4 fails for want of a descriptor or of memory (EMFILE,
 * ENFILE, ENOBUFS, ENOMEM) the connection stays there, and a loop that simply tried again
 * would spin at 100 % of a core. So the watch is taken off and put back 100 ms later (HAProxy
 * pauses its listeners the same way), or at once when one of the acceptor's own connections
 * closes and frees a descriptor. One warning when the pausing starts, one line once every
 * waiting connection has been taken: never a line per failure.
 *
 * An acceptor may also have a cap on its open connections (HAProxy's maxconn): at the cap
 * the watch is off, and new connections wait in the kernel's backlog until one closes. The
 * owner says when a connection it was given closes (acc_closed); that is what the count,
 * the cap and the early end of a pause go by. */
#ifndef ADMIT_ACCEPTOR_H
#define ADMIT_ACCEPTOR_H

#include <stdint.h>
#include <sys/socket.h>

struct event_base;
struct acceptor;

/* Connections taken per wakeup, so that a burst does not starve the rest of the loop. */
#define ACC_PER_WAKEUP 16
/* How long accepting rests when the process is out of descriptors or memory. */
#define ACC_PAUSE_MS 100
/* Descriptors the automatic cap leaves to everything but client connections: listeners,
 * the publisher and its subscribers, the engine pollers, the metrics listener's own
 * connections, the log, a resolver. */
#define ACC_FD_RESERVE 128
/* The automatic cap's bounds. */
#define ACC_CAP_MIN 16
#define ACC_CAP_MAX 1000000

/* One listener's connections, kept by the listener itself (the acceptor accepting them,
 * http/hconn reading them) and shown by the daemon's metrics: a plain struct, so nothing
 * copies them. */
struct listen_stats {
    unsigned conns;         /* open now */
    uint64_t accept_pauses; /* 100 ms pauses: no descriptor (or memory) to accept with */
    uint64_t cap_reached;   /* times the connection cap stopped accepting */
    uint64_t head_timeouts; /* request heads not whole within the head deadline */
    uint64_t oom_refusals;  /* requests refused (500) for want of memory for their buffers */
};

/* A connection just accepted (non-blocking, close-on-exec): the callee owns fd, and calls
 * acc_closed when it closes it. */
typedef void (*acc_fn)(void *arg, int fd, const struct sockaddr *sa, socklen_t salen);

/** watches the listening socket lfd (non-blocking; the acceptor owns and closes it) on base;
 *  name is what the log calls it ("client listener 127.0.0.1:8080"); st gets the counts
 *  (NULL: kept inside); allocation failure aborts */
struct acceptor *acc_new(struct event_base *base, int lfd, const char *name, acc_fn fn, void *arg,
                         struct listen_stats *st);
/** open connections at most (0: no cap); the watch follows at once */
void acc_set_cap(struct acceptor *a, unsigned cap);
/** the open connections' cap, 0 when there is none */
unsigned acc_cap(const struct acceptor *a);
/** a connection given by fn was closed: below the cap accepting resumes, and a pause for
 *  want of descriptors ends at once */
void acc_closed(struct acceptor *a);
/** 1 from a failure for want of descriptors or memory until the backlog is next found
 *  empty (the warning and the recovery line are said at those two moments) */
int acc_starved(const struct acceptor *a);
/** the counts (those of st when one was given) */
const struct listen_stats *acc_stats(const struct acceptor *a);
/** the cap that leaves room under the open-file limit (RLIMIT_NOFILE's soft value): half of
 *  what ACC_FD_RESERVE leaves, since each client connection may hold an engine connection
 *  too, within [ACC_CAP_MIN, ACC_CAP_MAX] */
unsigned acc_auto_cap(void);
/** stops watching, closes the listening socket and frees; NULL is a no-op */
void acc_free(struct acceptor *a);

#endif
