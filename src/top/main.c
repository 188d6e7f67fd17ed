/* admit-top: subscribes to one or more admitd publishers and shows their load live.
 *
 *   admit-top tcp://gpu1:5557 tcp://gpu2:5557        a table, redrawn every second
 *   admit-top --json tcp://gpu1:5557                  one JSON line per message
 */
#include "admit/load.h"
#include "core/buf.h"
#include "core/log.h"
#include "pubsub/nngclose.h"
#include "top.h"

#include <errno.h>
#include <getopt.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void) sig;
    stop = 1;
}

static int64_t now_ms(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (int64_t) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* Receive stamps for --stamp: the clock Python's time.monotonic() reads too. */
static int64_t mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: admit-top [--json [--stamp]] [--count=N] [--refresh-ms=MS] "
            "[--missed-heartbeats=K]\n"
            "                 [--iterations=N] URL...\n\n"
            "Subscribes to admitd load publishers (their --publish URL, e.g. tcp://host:5557)\n"
            "and shows each worker's and rank's load: slots used/N, queued/Q, KV blocks used\n"
            "/total, booked decode blocks and prefill tokens, and the age of the last message.\n"
            "A row is STALE after K missed heartbeats (default 3).\n\n"
            "  --json              print every valid message as one JSON line instead\n"
            "  --count=N           exit after N messages (with --json)\n"
            "  --stamp             with --json, start each line with the receive time on\n"
            "                      CLOCK_MONOTONIC in microseconds and a space (benchmarks)\n"
            "  --refresh-ms=MS     table refresh interval (default 1000)\n"
            "  --iterations=N      exit after N table refreshes\n"
            "  --missed-heartbeats=K  staleness threshold (default 3)\n");
}

static int parse_count(const char *s, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                             {"stamp", no_argument, NULL, 's'},
                                             {"count", required_argument, NULL, 'c'},
                                             {"refresh-ms", required_argument, NULL, 'r'},
                                             {"iterations", required_argument, NULL, 'i'},
                                             {"missed-heartbeats", required_argument, NULL, 'm'},
                                             {"help", no_argument, NULL, 'h'},
                                             {"version", no_argument, NULL, 'V'},
                                             {NULL, 0, NULL, 0}};
    long count = 0, refresh = 1000, iterations = 0, missed = 3, got = 0, drawn = 0;
    int json = 0, stamp = 0, ch, rv, bad = 0, recv_fd = -1;
    nng_socket sock;
    struct admit_loadtab *tab;
    int64_t next_draw;

    log_set_ident("admit-top");
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        long *dst = ch == 'c' ? &count : ch == 'r' ? &refresh : ch == 'i' ? &iterations : &missed;
        switch (ch) {
        case 'j':
            json = 1;
            break;
        case 's':
            stamp = 1;
            break;
        case 'c':
        case 'r':
        case 'i':
        case 'm':
            if (parse_count(optarg, dst) != 0 || (ch == 'r' && *dst < 10)) {
                fprintf(stderr, "admit-top: error: '%s' is not a valid number for --%s\n", optarg,
                        longopts[ch == 'c'   ? 2
                                 : ch == 'r' ? 3
                                 : ch == 'i' ? 4
                                             : 5]
                            .name);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("admit-top %s\n", ADMIT_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "admit-top: error: name at least one publisher URL\n");
        usage(stderr);
        return 2;
    }
    if ((rv = nng_sub0_open(&sock)) != 0 ||
        (rv = nng_socket_set(sock, NNG_OPT_SUB_SUBSCRIBE, ADMIT_LOAD_TOPIC " ",
                             sizeof ADMIT_LOAD_TOPIC)) != 0 ||
        (rv = nng_socket_get_int(sock, NNG_OPT_RECVFD, &recv_fd)) != 0) {
        fprintf(stderr, "admit-top: error: cannot open a subscriber: %s\n", nng_strerror(rv));
        return 1;
    }
    for (int i = optind; i < argc; i++) {
        /* Non-blocking dial: a publisher that is not up yet is retried in the background. */
        if ((rv = nng_dial(sock, argv[i], NULL, NNG_FLAG_NONBLOCK)) != 0) {
            fprintf(stderr, "admit-top: error: cannot dial %s: %s\n", argv[i], nng_strerror(rv));
            nngc_close(sock, 500);
            nngc_finish(2, 500);
            return 2;
        }
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    tab = admit_loadtab_new((unsigned) missed);
    next_draw = now_ms() + refresh;
    while (!stop) {
        char *msg = NULL;
        size_t len = 0;
        struct admit_load m;
        char err[256];

        /* Wait on the receive descriptor with poll(), never inside nng_recv: nng 1.5.2 can
         * block there past NNG_OPT_RECVTIMEO, and poll() returns on a signal. */
        struct pollfd pfd = {recv_fd, POLLIN, 0};
        if (poll(&pfd, 1, 100) < 0 && errno != EINTR)
            break;
        rv = nng_recv(sock, &msg, &len, NNG_FLAG_ALLOC | NNG_FLAG_NONBLOCK);
        if (rv == 0) {
            int64_t recv_us = mono_us();

            if (admit_load_decode(msg, len, &m, err, sizeof err) != 0) {
                if (bad++ < 10)
                    fprintf(stderr, "admit-top: dropped an invalid message: %s\n", err);
            } else if (json) {
                char out[ADMIT_LOAD_MSG_MAX];
                if (admit_load_to_json(&m, out, sizeof out) > 0) {
                    if (stamp)
                        printf("%lld ", (long long) recv_us);
                    printf("%s\n", out);
                }
                fflush(stdout);
                if (count > 0 && ++got >= count)
                    stop = 1;
            } else {
                admit_loadtab_update(tab, &m, now_ms());
            }
            nng_free(msg, len);
        } else if (rv != NNG_EAGAIN && rv != NNG_ETIMEDOUT) {
            fprintf(stderr, "admit-top: receive failed: %s\n", nng_strerror(rv));
            break;
        }
        if (!json && now_ms() >= next_draw) {
            struct buf b;

            buf_init(&b);
            top_render(tab, now_ms(), &b);
            /* Clear the screen only on a terminal, so output can be piped and read. */
            fputs(isatty(1) ? "\033[H\033[2J" : "\n", stdout);
            fputs(b.data, stdout);
            fflush(stdout);
            buf_free(&b);
            next_draw += refresh;
            if (iterations > 0 && ++drawn >= iterations)
                stop = 1;
        }
    }
    admit_loadtab_free(tab);
    fflush(stdout);
    if (nngc_close(sock, 500) != 0)
        fprintf(stderr, "admit-top: closing the subscriber did not finish (nng 1.5.2); "
                        "exiting anyway\n");
    nngc_finish(0, 500);
    return 0;
}
