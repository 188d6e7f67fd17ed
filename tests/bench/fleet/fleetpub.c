/* fleetpub: load messages for a simulated fleet of admitd workers, from one process.
 *
 * Opens one load publisher (lib/pubsub/publish.h, the code admitd runs) per simulated worker,
 * each on its own PUB socket (ours, as admitd's default; --publisher nng for nng's), and lets each
 * send its heartbeat: one message of one rank every 1000 / --rate ms, encoded by
 * lib/admission/load.c as admitd's are, with a load that moves (KV blocks, booked prefill and
 * decode, slots and queue) so that no two messages in a row are alike. The publishers are started
 * one after another over one heartbeat interval, so their messages are spread over it as a real
 * fleet's are, not sent in one burst.
 *
 * It writes one `http://HTTP=PUB_URL` line per worker to --out (the --worker syntax of
 * admit-router; HTTP is --http, a port no test sends requests to unless it runs something
 * there), prints `ready N` on stdout once every publisher listens, and runs until SIGTERM or
 * SIGINT, then prints what it sent on stderr. Built by default as a bench (never a test).
 *
 *   build-rel/tests/bench/fleetpub [--workers 1000] [--rate 10] [--out FILE]
 *                                  [--ipc DIR] [--http HOST:PORT] [--prefix sim-]
 *                                  [--publisher auto|nng]
 *                                  [--kv-rate 0] [--kv-keys 16] [--kv-blocks 1000]
 *
 * --ipc DIR publishes on ipc://DIR/w0000... instead of tcp://127.0.0.1:(a free port).
 *
 * --kv-rate R adds the KV events admitd relays (docs/load-message.md, "The kv_events topic"):
 * each worker sends R kv_events messages a second on its publisher, each storing --kv-keys new
 * blocks (keys drawn from the worker's number and a counter) and, once it holds --kv-blocks,
 * removing as many of its oldest: a cache that turns over at a steady size. The block dump a
 * router fetches (GET /admitd/kv_blocks) is served on one HTTP port on every address
 * (printed as `kv-http PORT`): the address a connection came to names the worker, as
 * tests/bench/fleet.py lays them out (worker i at 127.0.(i / 250).(i % 250 + 1)). The server
 * is the least HTTP/1.1 that a router's fetch needs (a bench speaks no more: the layers keep
 * evhttp to the mock engine): it reads a request head, whatever it asks, answers the dump with
 * `Connection: close`, and closes; its reads and writes block, for a bench on loopback.
 *
 * tests/bench/fleet.py drives it. */
#include "admit/load.h"
#include "pubsub/publish.h"
#include "util/clock.h"
#include "wire/kvmsg.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <event2/event.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sim {
    uint64_t rng;
    int64_t kv_used;
    struct publisher *pub;
    uint64_t kv_lo, kv_hi; /* the blocks held: keys of counters kv_lo .. kv_hi */
    uint64_t kv_seq;       /* the last kv_events message's sequence */
    struct event *kv_timer;
};

static struct {
    unsigned workers, rate, kv_rate, kv_keys, kv_blocks;
    const char *out, *ipc, *http, *prefix;
    enum pub_via via;
} opt = {1000, 10, 0, 16, 1000, NULL, NULL, "127.0.0.1:9", "sim-", PUB_AUTO};

static uint64_t kv_events_sent, kv_dumps;

static struct sim *sims;
static unsigned started;
static FILE *out;
static struct event_base *base;

static uint64_t next_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* A load that wanders: KV use up and down within the rank's blocks, the rest derived. */
static void fill(void *arg, struct admit_load *m, unsigned *n)
{
    struct sim *s = arg;
    int64_t step = (int64_t) (next_rand(&s->rng) % 257) - 128;

    s->kv_used += step;
    if (s->kv_used < 0)
        s->kv_used = -s->kv_used;
    if (s->kv_used > 16384)
        s->kv_used = 2 * 16384 - s->kv_used;
    admit_load_init(&m[0]);
    m[0].kv_used_blocks = s->kv_used;
    m[0].kv_total_blocks = 16384;
    m[0].kv_block_size = 16;
    m[0].active_decode_blocks = s->kv_used / 2;
    m[0].active_prefill_tokens = (int64_t) (next_rand(&s->rng) % 4096);
    m[0].max_num_batched_tokens = 8192;
    m[0].engine_requests = (int64_t) (next_rand(&s->rng) % 9);
    m[0].engine_request_limit = 8;
    m[0].queued_requests = (int64_t) (next_rand(&s->rng) % 17);
    m[0].request_queue_limit = 16;
    *n = 1;
}

/* The key of worker i's block number c (any well-spread function will do). */
static uint64_t kv_key(unsigned i, uint64_t c)
{
    uint64_t x = ((uint64_t) i << 40 ^ c) * 0x9e3779b97f4a7c15ULL;

    return x ^ x >> 31;
}

/* Encodes op for worker i over its blocks lo .. lo + n (n <= KVM_KEYS_MAX) into out. */
static size_t kv_encode(unsigned i, enum kvm_op op, uint64_t seq, uint64_t lo, unsigned n,
                        unsigned char *buf)
{
    uint64_t keys[KVM_KEYS_MAX];
    struct kvm_msg m = {.op = op, .block_size = 16, .n = n, .epoch = i + 1, .seq = seq};

    for (unsigned k = 0; k < n; k++)
        keys[k] = kv_key(i, lo + k);
    return kvm_encode(&m, keys, buf, KVM_MSG_MAX);
}

/* One kv_events message of a worker: blocks stored, or (once it holds --kv-blocks) its oldest
 * removed, in turn. */
static void kv_tick(evutil_socket_t fd, short what, void *arg)
{
    struct sim *s = arg;
    unsigned i = (unsigned) (s - sims), n = opt.kv_keys;
    unsigned char msg[KVM_MSG_MAX];
    size_t len;

    (void) fd;
    (void) what;
    if (s->kv_hi - s->kv_lo >= opt.kv_blocks) {
        len = kv_encode(i, KVM_REMOVED, ++s->kv_seq, s->kv_lo, n, msg);
        s->kv_lo += n;
    } else {
        len = kv_encode(i, KVM_STORED, ++s->kv_seq, s->kv_hi, n, msg);
        s->kv_hi += n;
    }
    pub_send_raw(s->pub, msg, len);
    kv_events_sent++;
}

/* Writes all of len bytes to fd (blocking); 0, or -1. */
static int write_all(int fd, const void *p, size_t len)
{
    const char *q = p;

    while (len > 0) {
        ssize_t w = write(fd, q, len);

        if (w <= 0)
            return -1;
        q += w, len -= (size_t) w;
    }
    return 0;
}

/* One connection to the dumps' port: the snapshot of the worker it came to (its address), as
 * records of a u32 length and a kv_events message, all at the worker's last sequence. */
static void kv_dump(int fd)
{
    struct sockaddr_in sin;
    socklen_t sl = sizeof sin;
    struct timeval tv = {2, 0};
    unsigned char msg[KVM_MSG_MAX], *body;
    char head[512], req[2048];
    size_t got = 0, blen = 0;
    uint32_t a, i;
    struct sim *s;

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while (got < sizeof req - 1) { /* the request's head; its content is never asked for */
        ssize_t r = read(fd, req + got, sizeof req - 1 - got);

        if (r <= 0)
            return;
        got += (size_t) r;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n") != NULL)
            break;
    }
    if (getsockname(fd, (struct sockaddr *) &sin, &sl) != 0 || sin.sin_family != AF_INET)
        return;
    a = ntohl(sin.sin_addr.s_addr);
    i = (a >> 8 & 0xff) * 250 + (a & 0xff) - 1;
    if ((a >> 24) != 127 || (a & 0xff) == 0 || i >= started) {
        static const char nf[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                                 "Connection: close\r\n\r\n";

        write_all(fd, nf, sizeof nf - 1);
        return;
    }
    s = &sims[i];
    body = malloc(((s->kv_hi - s->kv_lo) / KVM_KEYS_MAX + 1) * (4 + KVM_MSG_MAX));
    if (body == NULL)
        return;
    for (uint64_t lo = s->kv_lo;;) {
        unsigned n = s->kv_hi - lo < KVM_KEYS_MAX ? (unsigned) (s->kv_hi - lo) : KVM_KEYS_MAX;
        size_t len = kv_encode(i, KVM_SNAPSHOT, s->kv_seq, lo, n, msg);
        uint32_t be = htonl((uint32_t) len);

        memcpy(body + blen, &be, 4);
        memcpy(body + blen + 4, msg, len);
        blen += 4 + len;
        lo += n;
        if (lo >= s->kv_hi)
            break;
    }
    snprintf(head, sizeof head,
             "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n",
             blen);
    if (write_all(fd, head, strlen(head)) == 0 && write_all(fd, body, blen) == 0)
        kv_dumps++;
    free(body);
}

static void kv_accept(evutil_socket_t lfd, short what, void *arg)
{
    int fd = accept(lfd, NULL, NULL);

    (void) what;
    (void) arg;
    if (fd < 0)
        return; /* out of descriptors: a bench sized for what it runs, not a daemon */
    kv_dump(fd);
    close(fd);
}

static void start_one(evutil_socket_t fd, short what, void *arg)
{
    unsigned i = started++;
    char url[512], bound[512], id[ADMIT_LOAD_WORKER_ID_MAX + 1], err[256];

    (void) fd;
    (void) what;
    (void) arg;
    if (opt.ipc != NULL)
        snprintf(url, sizeof url, "ipc://%s/w%04u", opt.ipc, i);
    else
        snprintf(url, sizeof url, "tcp://127.0.0.1:0");
    snprintf(id, sizeof id, "%s%04u", opt.prefix, i);
    sims[i].rng = 0x9e3779b97f4a7c15ULL * (i + 1);
    sims[i].kv_used = (int64_t) (next_rand(&sims[i].rng) % 16384);
    sims[i].pub = pub_new(base, url, opt.via, id, 1000 / opt.rate, fill, &sims[i], bound,
                          sizeof bound, err, sizeof err);
    if (sims[i].pub == NULL) {
        fprintf(stderr, "fleetpub: worker %u: %s\n", i, err);
        exit(1);
    }
    if (opt.kv_rate) {
        struct timeval tv = {0, (suseconds_t) (1000000 / opt.kv_rate)};

        pub_set_queue(sims[i].pub, PUB_KV_QUEUE); /* as admitd's, when it relays KV events */
        sims[i].kv_timer = event_new(base, -1, EV_PERSIST, kv_tick, &sims[i]);
        event_add(sims[i].kv_timer, &tv);
    }
    fprintf(out, "http://%s=%s\n", opt.http, bound);
    if (started == opt.workers) {
        fclose(out);
        printf("ready %u\n", opt.workers);
        fflush(stdout);
    }
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void) sig;
    (void) what;
    (void) arg;
    event_base_loopbreak(base);
}

static unsigned uint_arg(const char *flag, const char *v, unsigned lo, unsigned hi)
{
    char *end;
    unsigned long x = strtoul(v, &end, 10);

    if (*v == '\0' || *end != '\0' || x < lo || x > hi) {
        fprintf(stderr, "fleetpub: %s takes %u..%u\n", flag, lo, hi);
        exit(2);
    }
    return (unsigned) x;
}

int main(int argc, char **argv)
{
    struct event *sigterm, *sigint, **timers;
    struct timespec t0;
    uint64_t sent = 0;
    double secs;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (v == NULL) {
            fprintf(stderr, "fleetpub: %s needs a value (see the head of fleetpub.c)\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--workers") == 0)
            opt.workers = uint_arg(a, v, 1, 100000);
        else if (strcmp(a, "--rate") == 0)
            opt.rate = uint_arg(a, v, 1, 1000);
        else if (strcmp(a, "--out") == 0)
            opt.out = v;
        else if (strcmp(a, "--ipc") == 0)
            opt.ipc = v;
        else if (strcmp(a, "--http") == 0)
            opt.http = v;
        else if (strcmp(a, "--prefix") == 0)
            opt.prefix = v;
        else if (strcmp(a, "--kv-rate") == 0)
            opt.kv_rate = uint_arg(a, v, 0, 1000);
        else if (strcmp(a, "--kv-keys") == 0)
            opt.kv_keys = uint_arg(a, v, 1, KVM_KEYS_MAX);
        else if (strcmp(a, "--kv-blocks") == 0)
            opt.kv_blocks = uint_arg(a, v, 1, 1u << 24);
        else if (strcmp(a, "--publisher") == 0 && (strcmp(v, "auto") == 0 || strcmp(v, "nng") == 0))
            opt.via = strcmp(v, "nng") == 0 ? PUB_NNG : PUB_AUTO;
        else {
            fprintf(stderr, "fleetpub: unknown option %s\n", a);
            return 2;
        }
    }
    out = opt.out != NULL ? fopen(opt.out, "w") : stdout;
    if (out == NULL) {
        perror(opt.out);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    base = event_base_new();
    sims = calloc(opt.workers, sizeof *sims);
    timers = calloc(opt.workers, sizeof *timers);
    if (base == NULL || sims == NULL || timers == NULL)
        return 1;
    if (opt.kv_rate) { /* the dumps' server, on every address (see the head of the file) */
        struct sockaddr_in sin = {.sin_family = AF_INET};
        socklen_t sl = sizeof sin;
        int lfd = socket(AF_INET, SOCK_STREAM, 0);

        if (lfd < 0 || bind(lfd, (struct sockaddr *) &sin, sizeof sin) != 0 ||
            listen(lfd, 1024) != 0 || getsockname(lfd, (struct sockaddr *) &sin, &sl) != 0) {
            fprintf(stderr, "fleetpub: no listener for the dumps\n");
            return 1;
        }
        event_add(event_new(base, lfd, EV_READ | EV_PERSIST, kv_accept, NULL), NULL);
        printf("kv-http %u\n", ntohs(sin.sin_port));
        fflush(stdout);
    }
    /* Worker i starts i/N of a heartbeat interval in: the fleet's messages are spread out. */
    for (unsigned i = 0; i < opt.workers; i++) {
        uint64_t us = (uint64_t) i * 1000000ULL / opt.rate / opt.workers;
        struct timeval tv = {(time_t) (us / 1000000), (suseconds_t) (us % 1000000)};

        timers[i] = evtimer_new(base, start_one, NULL);
        evtimer_add(timers[i], &tv);
    }
    sigterm = evsignal_new(base, SIGTERM, on_signal, NULL);
    sigint = evsignal_new(base, SIGINT, on_signal, NULL);
    evsignal_add(sigterm, NULL);
    evsignal_add(sigint, NULL);
    clock_mono(&t0);
    event_base_dispatch(base);
    secs = clock_seconds_since(&t0);
    for (unsigned i = 0; i < started; i++)
        sent += pub_sent(sims[i].pub);
    fprintf(stderr, "fleetpub: %u workers sent %llu messages in %.1f s (%.0f/s)\n", started,
            (unsigned long long) sent, secs, secs > 0 ? (double) sent / secs : 0.0);
    if (opt.kv_rate)
        fprintf(stderr, "fleetpub: %llu kv_events messages, %llu dumps served\n",
                (unsigned long long) kv_events_sent, (unsigned long long) kv_dumps);
    /* The publishers' sockets are left to the exit (lib/pubsub/nngclose.h). */
    for (unsigned i = 0; i < started; i++)
        pub_free(sims[i].pub);
    for (unsigned i = 0; i < opt.workers; i++) {
        event_free(timers[i]);
        if (sims[i].kv_timer != NULL)
            event_free(sims[i].kv_timer);
    }
    event_free(sigterm);
    event_free(sigint);
    event_base_free(base);
    free(timers);
    free(sims);
    return 0;
}
