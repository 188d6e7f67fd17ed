/* floor_bench: the least a process can spend receiving a fleet's load messages over TCP.
 *
 * What the router's intake is measured against (README "1,000 workers"): a reader that does
 * nothing but take the bytes. One TCP connection per publisher speaking nng's SP protocol
 * (an 8-byte header each way, then messages framed by wire/spframe), connected once at the
 * start and never again; each message is framed and counted, not decoded, and nothing else
 * runs in the process. Two ways of waiting, each woken every --batch-ms as the router's
 * poller (lib/pubsub/sppoll.c) is:
 *
 *   epoll   every connection in one epoll set; a pass is one epoll_wait that does not sleep
 *           and one recv per ready connection (what sppoll does, without libevent)
 *   uring   io_uring (when liburing was found at build time): one multishot recv per
 *           connection into a ring of provided buffers, with the completions' work deferred
 *           to the pass (IORING_SETUP_DEFER_TASKRUN), so a message costs no system call of
 *           its own and the process is not woken for it
 *
 * With --batch-ms 0 epoll sleeps in epoll_wait and uring in io_uring_enter, woken per message.
 *
 * After --warmup seconds it counts, over --seconds, the process's CPU (getrusage: what the
 * kernel charged to it, its receive work and the ACKs that receive work sends) and the
 * messages, and the host's TCP counters (/proc/net/snmp and netstat): segments sent and how
 * many were delayed ACKs, which the kernel sends from a timer and charges to no one in
 * particular. Those say whether a lower CPU figure is less work or the same work moved out
 * of the process. It prints one line of key=value pairs.
 *
 *   build-rel/tests/bench/floor_bench --mode epoll|uring --urls FILE
 *                                     [--batch-ms 2] [--warmup 3] [--seconds 10]
 *
 * FILE is fleetpub's: one `http://H:P=tcp://A:P` line per publisher (the part after the last
 * '='). tests/bench/fleet.py runs it beside the router. */
#include "benchproc.h"
#include "util/clock.h"
#include "wire/spframe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_LIBURING
#include <liburing.h>
#include <sys/mman.h>
#endif

#define MSG_MAX 65536
#define BUF_LEN 2048 /* one provided buffer, and the epoll mode's read size */

struct conn {
    int fd;
    struct spframe fr;
    size_t have;
    unsigned char buf[SPFRAME_PREFIX_MAX + MSG_MAX + 1];
};

static struct conn *conns;
static size_t nconn;
static uint64_t msgs;

/* Appends n bytes read from c and takes every whole message; -1 on a framing error. */
static int take(struct conn *c, const unsigned char *p, size_t n)
{
    struct spframe_unit u;
    enum spframe_result r;
    size_t off = 0;

    if (n > sizeof c->buf - c->have)
        return -1;
    memcpy(c->buf + c->have, p, n);
    c->have += n;
    while ((r = spframe_next(&c->fr, c->buf + off, c->have - off, &u)) == SPFRAME_MESSAGE ||
           r == SPFRAME_HELLO) {
        msgs += r == SPFRAME_MESSAGE;
        off += u.used;
    }
    if (r != SPFRAME_NEED)
        return -1;
    memmove(c->buf, c->buf + off, c->have - off);
    c->have -= off;
    return 0;
}

static int dial(struct conn *c, const char *url)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    unsigned char hello[SPFRAME_HELLO_LEN];
    char host[64];
    const char *colon;
    size_t hl;

    if (strncmp(url, "tcp://", 6) != 0 || (colon = strrchr(url, ':')) == NULL ||
        (hl = (size_t) (colon - url - 6)) >= sizeof host)
        return -1;
    memcpy(host, url + 6, hl);
    host[hl] = '\0';
    sa.sin_port = htons((uint16_t) atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    if ((c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        connect(c->fd, (struct sockaddr *) &sa, sizeof sa) != 0)
        return -1;
    spframe_hello(SPFRAME_PROTO_SUB0, hello);
    if (write(c->fd, hello, sizeof hello) != (ssize_t) sizeof hello)
        return -1;
    spframe_init(&c->fr, SPFRAME_TCP, SPFRAME_PROTO_PUB0, MSG_MAX);
    return fcntl(c->fd, F_SETFL, O_NONBLOCK);
}

/* Sleeps until the next multiple of ms since the first call: passes at a fixed rate, as
 * sppoll's timerfd gives, whatever a pass takes. */
static void next_pass(unsigned ms)
{
    static struct timespec at;

    if (at.tv_sec == 0)
        clock_gettime(CLOCK_MONOTONIC, &at);
    at.tv_nsec += (long) ms * 1000000L;
    while (at.tv_nsec >= 1000000000L) {
        at.tv_nsec -= 1000000000L;
        at.tv_sec++;
    }
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
}

/* The value of counter key on the line after the header line naming it, in a /proc/net file
 * of "Prefix: names" / "Prefix: values" pairs; -1 when absent. */
static long long net_counter(const char *file, const char *prefix, const char *key)
{
    char names[4096], vals[4096];
    long long v = -1;
    FILE *f = fopen(file, "r");

    if (f == NULL)
        return -1;
    while (fgets(names, sizeof names, f) && fgets(vals, sizeof vals, f)) {
        char *sn, *sv, *n = strtok_r(names, " \n", &sn), *val = strtok_r(vals, " \n", &sv);

        if (n == NULL || strcmp(n, prefix) != 0)
            continue;
        while ((n = strtok_r(NULL, " \n", &sn)) != NULL &&
               (val = strtok_r(NULL, " \n", &sv)) != NULL)
            if (strcmp(n, key) == 0)
                v = atoll(val);
    }
    fclose(f);
    return v;
}

struct sample {
    double t, cpu;
    uint64_t msgs;
    long long out_segs, delayed_acks;
};

static void sample(struct sample *s)
{
    s->t = clock_mono_s();
    s->cpu = cpu_s();
    s->msgs = msgs;
    s->out_segs = net_counter("/proc/net/snmp", "Tcp:", "OutSegs");
    s->delayed_acks = net_counter("/proc/net/netstat", "TcpExt:", "DelayedACKs");
}

/* Runs passes until warmup + seconds; the counts of the last seconds in *a (start), *b. */
typedef int (*pass_fn)(void *state, unsigned batch_ms);

static int run(pass_fn pass, void *state, unsigned batch_ms, double warmup, double seconds,
               struct sample *a, struct sample *b)
{
    double start = clock_mono_s();
    int warm = 0;

    for (;;) {
        if (pass(state, batch_ms) != 0)
            return -1;
        if (!warm && clock_mono_s() - start >= warmup) {
            sample(a);
            warm = 1;
        } else if (warm && clock_mono_s() - a->t >= seconds) {
            sample(b);
            return 0;
        }
    }
}

static int epoll_pass(void *state, unsigned batch_ms)
{
    static unsigned char buf[BUF_LEN];
    struct epoll_event ev[1024];
    int ep = *(int *) state, n;

    if (batch_ms > 0)
        next_pass(batch_ms);
    if ((n = epoll_wait(ep, ev, 1024, batch_ms > 0 ? 0 : 100)) < 0)
        return errno == EINTR ? 0 : -1;
    for (int k = 0; k < n; k++) {
        struct conn *c = &conns[ev[k].data.u32];
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);

        if (r > 0 && take(c, buf, (size_t) r) != 0)
            return -1;
        if (r == 0 || (r < 0 && errno != EAGAIN))
            return -1;
    }
    return 0;
}

static int epoll_setup(int *ep)
{
    if ((*ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
        return -1;
    for (size_t i = 0; i < nconn; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t) i};

        if (epoll_ctl(*ep, EPOLL_CTL_ADD, conns[i].fd, &ev) != 0)
            return -1;
    }
    return 0;
}

#ifdef HAVE_LIBURING
enum { NBUF = 8192, GROUP = 1 };

struct uring {
    struct io_uring ring;
    struct io_uring_buf_ring *br;
    unsigned char *bufs;
};

static void uring_arm(struct uring *u, size_t i)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);

    if (sqe == NULL) {
        io_uring_submit(&u->ring);
        sqe = io_uring_get_sqe(&u->ring);
    }
    io_uring_prep_recv_multishot(sqe, conns[i].fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = GROUP;
    io_uring_sqe_set_data64(sqe, i);
}

static int uring_pass(void *state, unsigned batch_ms)
{
    struct uring *u = state;
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;

    if (batch_ms > 0) {
        next_pass(batch_ms);
        io_uring_get_events(&u->ring);
    } else if (io_uring_submit_and_wait(&u->ring, 1) < 0 && errno != EINTR) {
        return -1;
    }
    io_uring_for_each_cqe(&u->ring, head, cqe)
    {
        size_t i = (size_t) cqe->user_data;

        seen++;
        if (cqe->res <= 0 && cqe->res != -ENOBUFS)
            return -1;
        if (cqe->res > 0) {
            unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
            unsigned char *b = u->bufs + (size_t) bid * BUF_LEN;

            if (take(&conns[i], b, (size_t) cqe->res) != 0)
                return -1;
            io_uring_buf_ring_add(u->br, b, BUF_LEN, (unsigned short) bid,
                                  io_uring_buf_ring_mask(NBUF), 0);
            io_uring_buf_ring_advance(u->br, 1);
        }
        if (!(cqe->flags & IORING_CQE_F_MORE))
            uring_arm(u, i);
    }
    io_uring_cq_advance(&u->ring, seen);
    io_uring_submit(&u->ring);
    return 0;
}

static int uring_setup(struct uring *u, char *err, size_t errlen)
{
    struct io_uring_params p = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                                         IORING_SETUP_CQSIZE,
                                .cq_entries = 4 * NBUF};
    struct io_uring_buf_reg reg = {.ring_entries = NBUF, .bgid = GROUP};
    int rv;

    if ((rv = io_uring_queue_init_params(4096, &u->ring, &p)) < 0) {
        snprintf(err, errlen, "io_uring_setup: %s", strerror(-rv));
        return -1;
    }
    u->br = mmap(NULL, NBUF * sizeof(struct io_uring_buf), PROT_READ | PROT_WRITE,
                 MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (u->br == MAP_FAILED || (u->bufs = malloc((size_t) NBUF * BUF_LEN)) == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    io_uring_buf_ring_init(u->br);
    reg.ring_addr = (unsigned long) u->br;
    if ((rv = io_uring_register_buf_ring(&u->ring, &reg, 0)) < 0) {
        snprintf(err, errlen, "io_uring_register_buf_ring: %s", strerror(-rv));
        return -1;
    }
    for (unsigned b = 0; b < NBUF; b++)
        io_uring_buf_ring_add(u->br, u->bufs + (size_t) b * BUF_LEN, BUF_LEN, (unsigned short) b,
                              io_uring_buf_ring_mask(NBUF), (int) b);
    io_uring_buf_ring_advance(u->br, NBUF);
    for (size_t i = 0; i < nconn; i++)
        uring_arm(u, i);
    io_uring_submit(&u->ring);
    return 0;
}
#endif

/* Follows every publisher of fleetpub's file; -1 when one cannot be followed, or none is
 * named. */
static int load_urls(const char *path)
{
    size_t n;
    char **urls = read_urls(path, &n);

    if ((conns = calloc(n ? n : 1, sizeof *conns)) == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (dial(&conns[nconn], urls[i]) != 0) {
            fprintf(stderr, "floor_bench: %s: cannot follow: %s\n", urls[i], strerror(errno));
            return -1;
        }
        conns[nconn++].have = 0;
    }
    return nconn > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *mode = "epoll", *path = NULL;
    double warmup = 3, seconds = 10;
    unsigned batch_ms = 2;
    struct sample a, b;
    char err[160] = "";
    int ep = -1, rv;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--mode") == 0)
            mode = argv[i + 1];
        else if (strcmp(argv[i], "--urls") == 0)
            path = argv[i + 1];
        else if (strcmp(argv[i], "--batch-ms") == 0)
            batch_ms = (unsigned) atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--warmup") == 0)
            warmup = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[i + 1]);
        else
            path = NULL, i = argc;
    }
    if (path == NULL || (strcmp(mode, "epoll") != 0 && strcmp(mode, "uring") != 0)) {
        fprintf(stderr, "floor_bench: --mode epoll|uring --urls FILE [--batch-ms MS] "
                        "[--warmup S] [--seconds S]\n");
        return 2;
    }
    if (load_urls(path) != 0) {
        fprintf(stderr, "floor_bench: %s: no publisher followed\n", path);
        return 1;
    }
    if (strcmp(mode, "epoll") == 0) {
        rv = epoll_setup(&ep) == 0 ? run(epoll_pass, &ep, batch_ms, warmup, seconds, &a, &b) : -1;
    } else {
#ifdef HAVE_LIBURING
        static struct uring u;

        rv = uring_setup(&u, err, sizeof err) == 0
                 ? run(uring_pass, &u, batch_ms, warmup, seconds, &a, &b)
                 : -1;
#else
        snprintf(err, sizeof err, "built without liburing (liburing-dev)");
        rv = -1;
#endif
    }
    if (rv != 0) {
        fprintf(stderr, "floor_bench: %s: %s\n", mode, err[0] ? err : strerror(errno));
        return 1;
    }
    double dt = b.t - a.t, dc = b.cpu - a.cpu;
    uint64_t dm = b.msgs - a.msgs;
    long long segs = b.out_segs - a.out_segs, dacks = b.delayed_acks - a.delayed_acks;

    printf("mode=%s batch_ms=%u publishers=%zu msgs_per_s=%.0f cpu_pct=%.2f us_per_msg=%.2f "
           "host_segs_per_msg=%.2f delayed_acks_per_msg=%.2f\n",
           mode, batch_ms, nconn, (double) dm / dt, 100.0 * dc / dt,
           dm ? 1e6 * dc / (double) dm : 0.0, dm ? (double) segs / (double) dm : 0.0,
           dm ? (double) dacks / (double) dm : 0.0);
    return 0;
}
