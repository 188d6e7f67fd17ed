/* spsub_bench: what receiving a fleet's load messages costs, nng's SUB against spsub.
 *
 * Follows N publishers from one libevent loop, as admit-router does, in each of these ways:
 *
 *   sub     lib/pubsub/subscribe.c's nng side (sub_new per publisher, SUB_NNG): the
 *           router's intake with --subscriber=nng;
 *   shared  one nng SUB socket dialing every publisher, its receive descriptor watched by
 *           one event, each message's publisher found from its pipe's dialer (nng_recvmsg,
 *           nng_msg_get_pipe, nng_pipe_dialer, a hash of dialer ids): the shared layout;
 *   spsub   lib/pubsub/spsub.c: no nng, one connection per publisher read in the loop, an
 *           event each (read on every message);
 *   batch   spsub read in passes of lib/pubsub/sppoll.c, every --batch-ms (default
 *           SPPOLL_DEFAULT_MS).
 *
 * No message is decoded: what is measured is the intake alone. Each mode runs in a child
 * process of its own, one after another (so nng's threads of one mode never run during
 * another, and each child's getrusage is its own): after --warmup seconds, the process's
 * CPU (utime + stime of all its threads) and the messages received are counted over
 * --seconds. Then one table: per mode the publishers heard, messages/s, CPU as a percentage
 * of one core, CPU per message, threads, RSS, and how old a message is when it reaches the
 * callback (this clock less its ts_ms, the publisher's clock when it sent it: the mean, and
 * the 99th percentile; ms, from ms stamps, so each value is up to 1 ms high, the mean about
 * 0.5), and for batch the poller's passes per second.
 *
 *   build-rel/tests/bench/fleetpub --workers 1000 --rate 10 --out /tmp/fleet.txt &
 *   build-rel/tests/bench/spsub_bench --urls /tmp/fleet.txt [--modes sub,shared,spsub]
 *                                     [--warmup 3] [--seconds 10] [--batch-ms 2]
 *
 * FILE has one publisher a line, a bare URL or fleetpub's `http://H:P=PUB_URL` (the part
 * after the last '=' is taken). fleetpub --ipc DIR makes ipc:// publishers. */
#include "admit/load.h"
#include "benchproc.h"
#include "pubsub/spsub.h"
#include "pubsub/sppoll.h"
#include "pubsub/subscribe.h"
#include "util/clock.h"

#include <dirent.h>
#include <event2/event.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct source {
    uint64_t msgs;
};

static struct source *src;
static char **urls;
static size_t nsrc;
static uint64_t total, unknown;
static unsigned batch_ms = SPPOLL_DEFAULT_MS;
/* Message ages while measuring, in 0.1 ms buckets (the last one: 100 ms and over). */
#define AGE_BUCKETS 1001
static uint64_t age_hist[AGE_BUCKETS];
static double age_sum;
static uint64_t age_n;
static int measuring;
static struct sppoll *bench_poll; /* batch mode's */

/* shared mode: the socket, and dialer id -> source by open addressing */
static nng_socket shared_sock;
static int *map_id;
static size_t *map_src, map_cap;

/* The message's age: now less its ts_ms (an integer after "ts_ms":). */
static void note_age(const void *msg, size_t len)
{
    char body[ADMIT_LOAD_MSG_MAX + 1];
    const char *p;
    struct timeval tv;
    double age;
    size_t b;

    if (len > ADMIT_LOAD_MSG_MAX)
        return;
    memcpy(body, msg, len);
    body[len] = '\0';
    if ((p = strstr(body, "\"ts_ms\":")) == NULL)
        return;
    gettimeofday(&tv, NULL);
    age = (double) tv.tv_sec * 1e3 + tv.tv_usec / 1e3 - (double) strtoll(p + 8, NULL, 10);
    b = age < 0 ? 0 : age >= 100 ? AGE_BUCKETS - 1 : (size_t) (age * 10);
    age_hist[b]++;
    age_sum += age;
    age_n++;
}

static double age_p99(void)
{
    uint64_t seen = 0;

    for (size_t b = 0; b < AGE_BUCKETS; b++)
        if ((seen += age_hist[b]) * 100 >= age_n * 99)
            return (double) (b + 1) / 10;
    return 0;
}

static void take(void *arg, const void *msg, size_t len)
{
    struct source *s = arg;

    s->msgs++;
    total++;
    if (measuring)
        note_age(msg, len);
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
    for (size_t h = (size_t) id * 2654435761u % map_cap; map_id[h] != 0; h = (h + 1) % map_cap)
        if (map_id[h] == id)
            return &src[map_src[h]];
    return NULL;
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
        memcpy(buf, nng_msg_body(msg), n); /* as the router copies it out */
        nng_msg_free(msg);
        if (s == NULL)
            unknown++;
        else
            take(s, buf, n);
    }
}

static void die(const char *what, const char *url, int rv)
{
    fprintf(stderr, "spsub_bench: %s %s: %s\n", what, url, nng_strerror(rv));
    exit(1);
}

static void start_shared(struct event_base *base)
{
    struct event *ev;
    int rv, fd;

    map_cap = 4 * nsrc + 1;
    map_id = calloc(map_cap, sizeof *map_id);
    map_src = calloc(map_cap, sizeof *map_src);
    if (map_id == NULL || map_src == NULL)
        exit(1);
    if ((rv = nng_sub0_open(&shared_sock)) != 0)
        die("cannot open", "a socket", rv);
    if ((rv = nng_socket_set(shared_sock, NNG_OPT_SUB_SUBSCRIBE, ADMIT_LOAD_TOPIC " ",
                             sizeof ADMIT_LOAD_TOPIC)) != 0)
        die("cannot subscribe", "the socket", rv);
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
}

static void start(struct event_base *base, const char *mode)
{
    char err[256];

    if (strcmp(mode, "shared") == 0) {
        start_shared(base);
        return;
    }
    static const struct sub_opts nng_opts = {SUB_NNG, 0};
    struct sppoll *poll = NULL;

    if (strcmp(mode, "batch") == 0 &&
        (poll = sppoll_get(base, batch_ms, err, sizeof err)) == NULL) {
        fprintf(stderr, "spsub_bench: %s\n", err);
        exit(1);
    }
    for (size_t i = 0; i < nsrc; i++) {
        struct spsub *sp = NULL;
        void *h = strcmp(mode, "sub") != 0
                      ? (void *) (sp = spsub_new(base, urls[i], take, &src[i], err, sizeof err))
                      : (void *) sub_new(base, urls[i], &nng_opts, take, &src[i], err, sizeof err);

        if (h == NULL) {
            fprintf(stderr, "spsub_bench: %s\n", err);
            exit(1);
        }
        if (poll != NULL)
            spsub_set_poll(sp, poll);
    }
    bench_poll = poll;
}

/* One mode, in this (child) process: writes its table row to out and exits. */
static void measure(const char *mode, double warmup, double seconds, int out)
{
    struct event_base *base = event_base_new();
    double c0, c1, t0, t1;
    uint64_t m0, heard = 0;
    unsigned long long p0 = 0, p1 = 0, ready;
    char row[256];
    int n;

    if (base == NULL)
        exit(1);
    start(base, mode);
    run_for(base, warmup);
    if (bench_poll != NULL)
        sppoll_counts(bench_poll, &p0, &ready);
    c0 = cpu_s();
    t0 = clock_mono_s();
    m0 = total;
    measuring = 1;
    run_for(base, seconds);
    c1 = cpu_s();
    t1 = clock_mono_s();
    if (bench_poll != NULL)
        sppoll_counts(bench_poll, &p1, &ready);
    for (size_t i = 0; i < nsrc; i++)
        heard += src[i].msgs > 0;
    n = snprintf(
        row, sizeof row, "%-8s %10zu %7llu %9.0f %8.2f %9.2f %8ld %9ld %7llu %8.2f %8.1f %8.0f\n",
        mode, nsrc, (unsigned long long) heard, (double) (total - m0) / (t1 - t0),
        100.0 * (c1 - c0) / (t1 - t0), total > m0 ? 1e6 * (c1 - c0) / (double) (total - m0) : 0.0,
        status_field("Threads"), status_field("VmRSS"), (unsigned long long) unknown,
        age_n > 0 ? age_sum / (double) age_n : 0.0, age_p99(), (double) (p1 - p0) / (t1 - t0));
    if (write(out, row, (size_t) n) != n)
        exit(1);
    /* No teardown: nng's sockets are left to the exit, as the programs leave them. */
    _exit(0);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    char modes[256] = "sub,shared,spsub";
    double warmup = 3, seconds = 10;

    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--urls") == 0)
            path = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--modes") == 0)
            snprintf(modes, sizeof modes, "%s", argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0)
            warmup = atof(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--batch-ms") == 0)
            batch_ms = (unsigned) atoi(argv[++i]);
        else {
            fprintf(stderr, "spsub_bench: bad argument %s (see the head of the source)\n", argv[i]);
            return 2;
        }
    }
    if (path == NULL) {
        fprintf(stderr, "spsub_bench: --urls FILE [--modes sub,shared,spsub,batch]\n");
        return 2;
    }
    urls = read_urls(path, &nsrc);
    src = calloc(nsrc, sizeof *src);
    if (src == NULL)
        return 1;
    printf("%-8s %10s %7s %9s %8s %9s %8s %9s %7s %8s %8s %8s\n", "mode", "publishers", "heard",
           "msgs/s", "cpu_%", "us/msg", "threads", "rss_kib", "unknown", "age_ms", "age_p99",
           "passes/s");
    fflush(stdout);
    for (char *save = NULL, *m = strtok_r(modes, ",", &save); m != NULL;
         m = strtok_r(NULL, ",", &save)) {
        int fds[2], status;
        char row[256];
        ssize_t n;
        pid_t pid;

        if (strcmp(m, "sub") != 0 && strcmp(m, "shared") != 0 && strcmp(m, "spsub") != 0 &&
            strcmp(m, "batch") != 0) {
            fprintf(stderr, "spsub_bench: no mode %s (sub, shared, spsub, batch)\n", m);
            return 2;
        }
        if (pipe(fds) != 0 || (pid = fork()) < 0)
            return 1;
        if (pid == 0) {
            close(fds[0]);
            measure(m, warmup, seconds, fds[1]);
        }
        close(fds[1]);
        n = read(fds[0], row, sizeof row - 1);
        close(fds[0]);
        waitpid(pid, &status, 0);
        if (n <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "spsub_bench: mode %s failed\n", m);
            return 1;
        }
        row[n] = '\0';
        fputs(row, stdout);
        fflush(stdout);
    }
    return 0;
}
