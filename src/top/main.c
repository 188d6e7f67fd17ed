/* admit-top: subscribes to one or more admitd publishers and shows their load live.
 *
 *   admit-top tcp://gpu1:5557 tcp://gpu2:5557        a table, redrawn every second
 *   admit-top --json tcp://gpu1:5557                  one JSON line per message
 */
#include "admit/load.h"
#include "util/buf.h"
#include "util/log.h"
#include "pubsub/feed.h"
#include "pubsub/nngver.h"
#include "util/buildinfo.h"
#include "top.h"
#include "util/clock.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
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

/* What a received message updates: one JSON line or the table. */
struct sink {
    int json, stamp, bad;
    long count, got;
    struct admit_loadtab *tab;
};

static void on_message(void *arg, const void *msg, size_t len)
{
    struct sink *k = arg;
    int64_t recv_us = clock_mono_us(); /* first, so decoding does not count in the stamp */
    struct admit_load m;
    char err[256];

    if (admit_load_decode(msg, len, &m, err, sizeof err) != 0) {
        if (k->bad++ < 10)
            fprintf(stderr, "admit-top: dropped an invalid message: %s\n", err);
    } else if (k->json) {
        char out[ADMIT_LOAD_MSG_MAX];
        if (admit_load_to_json(&m, out, sizeof out) > 0) {
            if (k->stamp)
                printf("%lld ", (long long) recv_us);
            printf("%s\n", out);
        }
        fflush(stdout);
        if (k->count > 0 && ++k->got >= k->count)
            stop = 1;
    } else {
        admit_loadtab_update(k->tab, &m, clock_wall_ms());
    }
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
            "  --missed-heartbeats=K  staleness threshold (default 3)\n"
            "  --active-decode-blocks-threshold=F        the ROOM column: admit-router's\n"
            "  --active-prefill-tokens-threshold=N       busy thresholds, judged on what each\n"
            "  --active-prefill-tokens-threshold-frac=F  rank publishes (default: none, \"-\")\n"
            "  --help              print this help and exit\n"
            "  --version           print the version and exit\n");
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

/* One threshold option into th, checked as the router checks it. */
static int parse_threshold(int ch, const char *s, struct busy_thresholds *th, char *err,
                           size_t errlen)
{
    const char *name = ch == 'D'   ? "active-decode-blocks-threshold"
                       : ch == 'P' ? "active-prefill-tokens-threshold"
                                   : "active-prefill-tokens-threshold-frac";
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || (ch == 'P' && (v != floor(v) || v < 0))) {
        snprintf(err, errlen, "'%s' is not a valid value for --%s", s, name);
        return -1;
    }
    if (ch == 'D')
        th->active_decode_blocks_threshold = v;
    else if (ch == 'P')
        th->active_prefill_tokens_threshold = v >= 9e18 ? INT64_MAX : (int64_t) v;
    else
        th->active_prefill_tokens_threshold_frac = v;
    if (busy_thresholds_validate(th, err, errlen) != 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"stamp", no_argument, NULL, 's'},
        {"count", required_argument, NULL, 'c'},
        {"refresh-ms", required_argument, NULL, 'r'},
        {"iterations", required_argument, NULL, 'i'},
        {"missed-heartbeats", required_argument, NULL, 'm'},
        {"active-decode-blocks-threshold", required_argument, NULL, 'D'},
        {"active-prefill-tokens-threshold", required_argument, NULL, 'P'},
        {"active-prefill-tokens-threshold-frac", required_argument, NULL, 'F'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0}};
    long count = 0, refresh = 1000, iterations = 0, missed = 3, drawn = 0;
    int json = 0, stamp = 0, ch;
    struct feed *feed;
    struct sink sink;
    char err[256];
    int64_t next_draw;
    struct busy_thresholds th;

    log_set_ident("admit-top");
    busy_thresholds_unset(&th);
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
        case 'D':
        case 'P':
        case 'F':
            if (parse_threshold(ch, optarg, &th, err, sizeof err) != 0) {
                fprintf(stderr, "admit-top: error: %s\n", err);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V': {
            const struct buildinfo_lib libs[] = {{"nng", nngver_runtime()}};

            return buildinfo_print(stdout, "admit-top", libs, 1) == 0 ? 0 : 1;
        }
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
    if ((feed = feed_open(err, sizeof err)) == NULL) {
        fprintf(stderr, "admit-top: error: %s\n", err);
        return 1;
    }
    for (int i = optind; i < argc; i++) {
        if (feed_dial(feed, argv[i], err, sizeof err) != 0) {
            fprintf(stderr, "admit-top: error: %s\n", err);
            feed_free(feed);
            return 2;
        }
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    sink = (struct sink){.json = json, .stamp = stamp, .count = count};
    sink.tab = admit_loadtab_new((unsigned) missed);
    next_draw = clock_wall_ms() + refresh;
    while (!stop) {
        /* A bounded wait that a signal cuts short (see feed.h), then at most one message. */
        if (feed_wait(feed, 100) < 0)
            break;
        if (feed_recv(feed, on_message, &sink, err, sizeof err) < 0) {
            fprintf(stderr, "admit-top: %s\n", err);
            break;
        }
        if (!json && clock_wall_ms() >= next_draw) {
            struct buf b;

            buf_init(&b);
            top_render(sink.tab, clock_wall_ms(), &th, &b);
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
    admit_loadtab_free(sink.tab);
    fflush(stdout);
    feed_free(feed); /* its socket is left to the exit (see pubsub/nngclose.h) */
    return 0;
}
