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
 *
 * --ipc DIR publishes on ipc://DIR/w0000... instead of tcp://127.0.0.1:(a free port).
 * tests/bench/fleet.py drives it. */
#include "admit/load.h"
#include "pubsub/publish.h"
#include "util/clock.h"

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
};

static struct {
    unsigned workers, rate;
    const char *out, *ipc, *http, *prefix;
    enum pub_via via;
} opt = {1000, 10, NULL, NULL, "127.0.0.1:9", "sim-", PUB_AUTO};

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
    /* The publishers' sockets are left to the exit (lib/pubsub/nngclose.h). */
    for (unsigned i = 0; i < started; i++)
        pub_free(sims[i].pub);
    for (unsigned i = 0; i < opt.workers; i++)
        event_free(timers[i]);
    event_free(sigterm);
    event_free(sigint);
    event_base_free(base);
    free(timers);
    free(sims);
    return 0;
}
