/* intake_bench: what receiving a fleet's load messages costs, by how the sockets are laid out.
 *
 * Two ways of following N publishers from one libevent loop, as admit-router does:
 *
 *   per-socket  one nng SUB socket per publisher, each socket's receive descriptor watched
 *               by its own level-triggered event and drained without blocking (what
 *               lib/pubsub/subscribe.c did before the shared socket);
 *   shared      one SUB socket dialing every publisher, one event, and a demux: each message
 *               is received as an nng_msg, its pipe's dialer names the publisher it came from
 *               (nng_msg_get_pipe + nng_pipe_dialer), found in a hash table of dialer ids.
 *
 *   native      no nng on the receiving side: one TCP connection per publisher, speaking
 *               the SP protocol nng's PUB speaks (an 8-byte header each way, then messages
 *               of an 8-byte big-endian length and the body), read by libevent in the loop's
 *               own thread. tcp:// only, and no reconnection: a measure of what nng's
 *               threads cost, not a subscriber to ship.
 *
 * Each way each message is copied out and decoded (admit_load_decode) as the router does,
 * unless --no-decode. After --warmup seconds the process's CPU (utime + stime of all its
 * threads, nng's included: getrusage) and the messages received are counted over --seconds;
 * it prints one line of key=value pairs: the mode, publishers, publishers heard, messages/s,
 * CPU as a percentage of one core, CPU per message, RSS (VmRSS), threads and descriptors.
 *
 *   build-rel/tests/bench/intake_bench --mode shared|per-socket|native --urls FILE
 *                                      [--warmup 3] [--seconds 20] [--no-decode]
 *
 * FILE has one publisher a line, a bare URL or fleetpub's `http://H:P=PUB_URL` (the part
 * after the last '='). tests/bench/fleet.py runs both modes against tests/bench/fleetpub. */
#include "admit/load.h"
#include "benchproc.h"
#include "util/clock.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <event2/event.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

struct source {
    uint64_t msgs;
    nng_socket sock; /* per-socket mode */
    struct event *ev;
    int fd; /* native mode: the connection, its header seen, and what is read of a message */
    int hello;
    size_t have;
    char buf[8 + ADMIT_LOAD_MSG_MAX + 1];
};

static struct source *src;
static size_t nsrc;
static int decode = 1;
static uint64_t total, bad, unknown;

/* shared mode: the socket, and dialer id -> source by open addressing */
static nng_socket shared_sock;
static int *map_id;
static size_t *map_src;
static size_t map_cap;

static void take(struct source *s, const char *buf, size_t len)
{
    struct admit_load m;
    char err[128];

    s->msgs++;
    total++;
    if (decode && admit_load_decode(buf, len, &m, err, sizeof err) != 0)
        bad++;
}

static void map_put(int id, size_t i)
{
    size_t h = (size_t) id * 2654435761u % map_cap;

    while (map_id[h] != 0)
        h = (h + 1) % map_cap;
    map_id[h] = id;
    map_src[h] = i;
}

static struct source *map_get(int id)
{
    size_t h = (size_t) id * 2654435761u % map_cap;

    while (map_id[h] != 0) {
        if (map_id[h] == id)
            return &src[map_src[h]];
        h = (h + 1) % map_cap;
    }
    return NULL;
}

static void on_one(evutil_socket_t fd, short what, void *arg)
{
    struct source *s = arg;

    (void) fd;
    (void) what;
    for (;;) {
        char buf[ADMIT_LOAD_MSG_MAX + 1];
        size_t n = sizeof buf;

        if (nng_recv(s->sock, buf, &n, NNG_FLAG_NONBLOCK) != 0)
            return;
        take(s, buf, n < sizeof buf ? n : sizeof buf);
    }
}

static void on_shared(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    (void) arg;
    for (;;) {
        nng_msg *msg;
        struct source *s;
        char buf[ADMIT_LOAD_MSG_MAX + 1];
        size_t n;

        if (nng_recvmsg(shared_sock, &msg, NNG_FLAG_NONBLOCK) != 0)
            return;
        s = map_get(nng_dialer_id(nng_pipe_dialer(nng_msg_get_pipe(msg))));
        n = nng_msg_len(msg);
        if (n > sizeof buf)
            n = sizeof buf;
        memcpy(buf, nng_msg_body(msg), n);
        nng_msg_free(msg);
        if (s == NULL)
            unknown++;
        else
            take(s, buf, n);
    }
}

/* native: read what is there, take each whole message; a message too long, a wrong header
 * or a closed connection ends the run (the bench has no reconnection). */
static void on_native(evutil_socket_t fd, short what, void *arg)
{
    struct source *s = arg;
    ssize_t n = read(fd, s->buf + s->have, sizeof s->buf - s->have);

    (void) what;
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        fprintf(stderr, "intake_bench: a publisher closed its connection\n");
        exit(1);
    }
    s->have += (size_t) n;
    for (;;) {
        uint64_t len = 0;

        if (!s->hello) {
            if (s->have < 8)
                return;
            /* "\0SP\0", then the peer's protocol: PUB is 0x20 */
            if (memcmp(s->buf, "\0SP\0\0\x20", 6) != 0) {
                fprintf(stderr, "intake_bench: not an SP publisher\n");
                exit(1);
            }
            s->hello = 1;
            memmove(s->buf, s->buf + 8, s->have - 8);
            s->have -= 8;
            continue;
        }
        if (s->have < 8)
            return;
        for (int i = 0; i < 8; i++)
            len = len << 8 | (unsigned char) s->buf[i];
        if (len > ADMIT_LOAD_MSG_MAX) {
            fprintf(stderr, "intake_bench: a message of %llu bytes\n", (unsigned long long) len);
            exit(1);
        }
        if (s->have < 8 + len)
            return;
        /* SUB filters on its side: the topic prefix, as the nng modes subscribe. */
        if (len >= sizeof ADMIT_LOAD_TOPIC &&
            memcmp(s->buf + 8, ADMIT_LOAD_TOPIC " ", sizeof ADMIT_LOAD_TOPIC) == 0)
            take(s, s->buf + 8, (size_t) len);
        memmove(s->buf, s->buf + 8 + len, s->have - 8 - len);
        s->have -= 8 + len;
    }
}

static void native_connect(struct event_base *base, struct source *s, const char *url)
{
    /* the SUB side's header: SP version 0, protocol SUB (0x21) */
    static const char hello[8] = {0, 'S', 'P', 0, 0, 0x21, 0, 0};
    struct sockaddr_in sa = {0};
    char host[256];
    int port, one = 1;

    if (sscanf(url, "tcp://%255[^:]:%d", host, &port) != 2) {
        fprintf(stderr, "intake_bench: native mode takes tcp://HOST:PORT, not %s\n", url);
        exit(2);
    }
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t) port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
        (s->fd = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
        connect(s->fd, (struct sockaddr *) &sa, sizeof sa) != 0 ||
        write(s->fd, hello, sizeof hello) != (ssize_t) sizeof hello) {
        fprintf(stderr, "intake_bench: cannot connect to %s: %s\n", url, strerror(errno));
        exit(1);
    }
    setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    evutil_make_socket_nonblocking(s->fd);
    s->ev = event_new(base, s->fd, EV_READ | EV_PERSIST, on_native, s);
    event_add(s->ev, NULL);
}

static void die(const char *what, const char *url, int rv)
{
    fprintf(stderr, "intake_bench: %s %s: %s\n", what, url, nng_strerror(rv));
    exit(1);
}

static void subscribe(nng_socket s, const char *url)
{
    int rv =
        nng_socket_set(s, NNG_OPT_SUB_SUBSCRIBE, ADMIT_LOAD_TOPIC " ", sizeof ADMIT_LOAD_TOPIC);

    if (rv != 0)
        die("cannot subscribe for", url, rv);
}

static long count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    long n = 0;

    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n - 2;
}

int main(int argc, char **argv)
{
    const char *mode = "shared", *path = NULL;
    double warmup = 3, seconds = 20, c0, c1, t0, t1;
    char **urls = NULL;
    struct event_base *base;
    struct event *ev = NULL;
    uint64_t m0, heard = 0;
    int rv, fd;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-decode") == 0)
            decode = 0;
        else if (i + 1 < argc && strcmp(argv[i], "--mode") == 0)
            mode = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--urls") == 0)
            path = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0)
            warmup = atof(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "intake_bench: bad argument %s (see the head of the source)\n",
                    argv[i]);
            return 2;
        }
    }
    if (path == NULL || (strcmp(mode, "shared") != 0 && strcmp(mode, "per-socket") != 0 &&
                         strcmp(mode, "native") != 0)) {
        fprintf(stderr, "intake_bench: --mode shared|per-socket|native --urls FILE\n");
        return 2;
    }
    urls = read_urls(path, &nsrc);
    src = calloc(nsrc, sizeof *src);
    base = event_base_new();
    if (src == NULL || base == NULL)
        return 1;
    if (strcmp(mode, "shared") == 0) {
        map_cap = 4 * nsrc + 1;
        map_id = calloc(map_cap, sizeof *map_id);
        map_src = calloc(map_cap, sizeof *map_src);
        if ((rv = nng_sub0_open(&shared_sock)) != 0)
            die("cannot open", "a socket", rv);
        subscribe(shared_sock, "all");
        /* One queue for the whole fleet: room for most of a heartbeat's messages. */
        nng_socket_set_int(shared_sock, NNG_OPT_RECVBUF, 8192);
        for (size_t i = 0; i < nsrc; i++) {
            nng_dialer d;

            if ((rv = nng_dial(shared_sock, urls[i], &d, NNG_FLAG_NONBLOCK)) != 0)
                die("cannot dial", urls[i], rv);
            map_put(nng_dialer_id(d), i);
        }
        if ((rv = nng_socket_get_int(shared_sock, NNG_OPT_RECVFD, &fd)) != 0)
            die("no receive descriptor for", "the socket", rv);
        ev = event_new(base, fd, EV_READ | EV_PERSIST, on_shared, NULL);
        event_add(ev, NULL);
    } else if (strcmp(mode, "native") == 0) {
        for (size_t i = 0; i < nsrc; i++)
            native_connect(base, &src[i], urls[i]);
    } else {
        for (size_t i = 0; i < nsrc; i++) {
            if ((rv = nng_sub0_open(&src[i].sock)) != 0)
                die("cannot open a socket for", urls[i], rv);
            subscribe(src[i].sock, urls[i]);
            if ((rv = nng_dial(src[i].sock, urls[i], NULL, NNG_FLAG_NONBLOCK)) != 0)
                die("cannot dial", urls[i], rv);
            if ((rv = nng_socket_get_int(src[i].sock, NNG_OPT_RECVFD, &fd)) != 0)
                die("no receive descriptor for", urls[i], rv);
            src[i].ev = event_new(base, fd, EV_READ | EV_PERSIST, on_one, &src[i]);
            event_add(src[i].ev, NULL);
        }
    }
    run_for(base, warmup);
    c0 = cpu_s();
    t0 = clock_mono_s();
    m0 = total;
    run_for(base, seconds);
    c1 = cpu_s();
    t1 = clock_mono_s();
    for (size_t i = 0; i < nsrc; i++)
        heard += src[i].msgs > 0;
    printf("mode=%s publishers=%zu heard=%llu msgs_per_s=%.0f cpu_pct=%.2f us_per_msg=%.2f "
           "rss_kib=%ld threads=%ld fds=%ld bad=%llu unknown=%llu\n",
           mode, nsrc, (unsigned long long) heard, (double) (total - m0) / (t1 - t0),
           100.0 * (c1 - c0) / (t1 - t0),
           total > m0 ? 1e6 * (c1 - c0) / (double) (total - m0) : 0.0, status_field("VmRSS"),
           status_field("Threads"), count_fds(), (unsigned long long) bad,
           (unsigned long long) unknown);
    fflush(stdout);
    /* No nng teardown: as the programs, the sockets are left to the exit. */
    _Exit(0);
}
