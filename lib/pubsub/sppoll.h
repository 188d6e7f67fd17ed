/* sppoll: reads many quiet sockets in batches, on a short timer, instead of on each message.
 *
 * A fleet's load messages come one TCP segment each, 10,000 a second from 1,000 publishers,
 * each alone on its connection. Watched one event per socket, every message is a wakeup of
 * the loop (an epoll_wait that sleeps and returns one descriptor) and a dispatch through
 * libevent. A poller holds the sockets of one event base in an epoll set of its own, which
 * the loop does not watch while messages flow: every interval a timer takes all that became
 * readable since, in one epoll_wait that does not sleep, and calls each socket's callback.
 * One wakeup then reads tens of messages. When a pass finds nothing (a quiet fleet), the
 * loop watches the set's descriptor again, so the first message after a silence is read at
 * once and only messages of a busy fleet wait, each at most one interval (tests/bench/
 * fleet/spsub_bench.c measures both sides; README, "Load intake").
 *
 * Level-triggered: a socket read only in part (a reader's per-wakeup budget) is ready at the
 * next pass. Linux only (epoll), as the rest of the loop's sockets are. */
#ifndef ADMIT_SPPOLL_H
#define ADMIT_SPPOLL_H

#include <stddef.h>

struct event_base;
struct sppoll;

/* The interval of a base's poller by default, and its largest: what a message may wait. */
#define SPPOLL_DEFAULT_MS 2
#define SPPOLL_MAX_MS     10

/* One watched descriptor; the caller's, embedded in what it reads for (no allocation), its
 * fd -1 before the first sppoll_add. */
struct sppoll_reg {
    int fd;                /* -1 while not watched */
    void (*cb)(void *arg); /* fd is readable: read it (it may call sppoll_del, or free arg) */
    void *arg;
};

/** the base's poller, made on first use and shared (counted), its interval set to ms (1 to
 *  SPPOLL_MAX_MS; the latest given wins); NULL with err when epoll cannot be had */
struct sppoll *sppoll_get(struct event_base *base, unsigned ms, char *err, size_t errlen);
/** lets go of a poller from sppoll_get; the last one frees it (nothing may be watched) */
void sppoll_put(struct sppoll *p);
/** watches fd for reading: reg->cb(reg->arg) from a pass while it is readable; 0, or -1
 *  with errno */
int sppoll_add(struct sppoll *p, struct sppoll_reg *reg, int fd);
/** stops watching reg's descriptor (before it is closed); safe from a callback, and for a
 *  reg not watched */
void sppoll_del(struct sppoll *p, struct sppoll_reg *reg);
/** passes made so far, and descriptors found ready in them (for tests and benches) */
void sppoll_counts(const struct sppoll *p, unsigned long long *passes, unsigned long long *ready);

#endif
