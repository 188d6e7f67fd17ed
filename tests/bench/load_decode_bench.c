/* load_decode_bench: what reading one load message costs, the jansson decoder against the
 * single-pass one that replaced it.
 *
 * admit-router follows every worker's load messages: 1,000 workers at 10 a second make 10,000
 * messages a second, and intake is to stay under 5 % of one core, 5 µs a message all in. This
 * times admit_load_decode() (lib/admission/load_decode.c) beside load_jansson_decode() (the decoder
 * before it, kept as the fuzzing oracle in fuzz/load_jansson.c) on the messages a router gets:
 *
 *   1 rank    a worker's message as admitd writes it (docs/load-message.md), two model names
 *   8 ranks   the 8 messages of a worker of 8 data-parallel ranks (one message per rank,
 *             other numbers in each), decoded in turn
 *   64 names  one with the longest list of models a message may hold (64 names)
 *
 * Rounds alternate old, new, old, new... on one pinned core, each about --ms of CPU time long,
 * so drift falls on both alike; the table gives medians, in ns of CPU time per message. Before
 * timing, both must decode every message to the same struct. The new decoder must allocate nothing:
 * malloc, calloc and realloc are wrapped at link time and counted, and a count other than 0 in its
 * loops exits 1; the old one's allocations per message are printed beside, for what they are.
 * Timings are printed, never asserted; it is built by default and is not a test.
 *
 *   meson setup build-rel --buildtype=release && ninja -C build-rel tests/bench/load_decode_bench
 *   build-rel/tests/bench/load_decode_bench [--cpu N] [--rounds N] [--ms N] [--iters N]
 *                                           [--only old|new] [--message 1|8|64]
 *
 * --cpu (or ADMIT_BENCH_CPU) is the core to pin to, 0 by default; --rounds the rounds of each
 * decoder (7); --ms the length of one round (20); --iters fixes the messages a round instead
 * of timing, and --only keeps one decoder and --message one row (1 rank, 8 ranks, 64 names),
 * for valgrind --tool=callgrind, whose instruction counts per message are steadier than
 * timings on a shared machine and say where the time goes. */
#include "../../fuzz/load_jansson.h"
#include "admit/load.h"
#include "benchutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUNDS 99
#define MAX_MSGS   8

typedef int (*decoder)(const void *data, size_t len, struct admit_load *out, char *err,
                       size_t errlen);

/* jansson's allocations, made from a shared library the link-time wrapping does not reach, go
 * through here, where malloc is the wrapped one. */
static void *jansson_malloc(size_t n)
{
    return malloc(n);
}

/* One kind of message: up to MAX_MSGS of them, decoded in turn. */
struct kind {
    const char *name;
    int n;
    char msg[MAX_MSGS][ADMIT_LOAD_MSG_MAX];
    size_t len[MAX_MSGS];
};

/* A rank's message of a busy worker, as admitd writes it (the example of
 * docs/load-message.md), its numbers varied by rank; models is the list's JSON. */
static void add(struct kind *k, int rank, const char *models)
{
    int n = snprintf(k->msg[k->n], sizeof k->msg[k->n],
                     "kv_metrics {\"v\":1,\"worker_id\":\"gpu-7:8080\",\"dp_rank\":%d,\"seq\":%d,"
                     "\"ts_ms\":%lld,\"state\":\"serving\",\"heartbeat_ms\":1000,"
                     "\"kv_used_blocks\":%d,\"kv_total_blocks\":16384,\"kv_block_size\":16,"
                     "\"active_decode_blocks\":%d,\"active_prefill_tokens\":%d,"
                     "\"max_num_batched_tokens\":8192,\"engine_requests\":4,"
                     "\"engine_request_limit\":4,\"queued_requests\":3,\"request_queue_limit\":16,"
                     "\"models\":%s}",
                     rank, 1812 + rank, 1795974940958LL + rank, 412 + 37 * rank, 398 + 29 * rank,
                     2210 + 101 * rank, models);

    if (n < 0 || n > ADMIT_LOAD_MSG_MAX) {
        fprintf(stderr, "load_decode_bench: a message does not fit\n");
        exit(1);
    }
    k->len[k->n++] = (size_t) n;
}

static void make_kinds(struct kind *k)
{
    static const char two[] = "[\"meta-llama/Llama-3.1-8B-Instruct\",\"sql-lora\"]";
    char list[ADMIT_LOAD_MODELS_JSON_MAX + 1];
    size_t n = 0;

    k[0].name = "1 rank";
    add(&k[0], 0, two);
    k[1].name = "8 ranks";
    for (int r = 0; r < 8; r++)
        add(&k[1], r, two);
    k[2].name = "64 names"; /* the most a list holds: 4 bytes each, to fit its 512 */
    for (int i = 0; i < ADMIT_LOAD_MODELS_MAX; i++)
        n += (size_t) snprintf(list + n, sizeof list - n, "%c\"m-%02d\"", i ? ',' : '[', i);
    snprintf(list + n, sizeof list - n, "]");
    add(&k[2], 0, list);
}

/* Both decoders must read every message, to the same struct, which admitd's encoder writes
 * back byte for byte (so the text is what admitd sends). */
static void check(const struct kind *k)
{
    struct admit_load a, b;
    char err[256], again[ADMIT_LOAD_MSG_MAX];

    for (int i = 0; i < k->n; i++) {
        if (admit_load_decode(k->msg[i], k->len[i], &a, err, sizeof err) != 0 ||
            load_jansson_decode(k->msg[i], k->len[i], &b, err, sizeof err) != 0 ||
            memcmp(&a, &b, sizeof a) != 0 ||
            admit_load_encode(&a, again, sizeof again) != (int) k->len[i] ||
            memcmp(again, k->msg[i], k->len[i]) != 0) {
            fprintf(stderr, "load_decode_bench: the decoders disagree on %s: %s\n", k->name, err);
            exit(1);
        }
    }
}

/* Decodes n messages of k, in turn; the sum of a field, so the work cannot be dropped. */
static long run(decoder d, const struct kind *k, long n)
{
    struct admit_load m;
    char err[256];
    long sum = 0;

    for (long i = 0; i < n; i++) {
        int j = (int) (i % k->n);
        if (d(k->msg[j], k->len[j], &m, err, sizeof err) != 0)
            abort();
        sum += m.seq;
    }
    return sum;
}

/* One round: ns of CPU time per message, over iters messages, or over as many as ms of CPU
 * time allows. CPU time, not the wall clock: on a shared machine the time other processes get
 * is not the decoder's (it is what "5 % of one core" counts). */
static double round_ns(decoder d, const struct kind *k, double ms, long iters, long *sum,
                       unsigned long *allocs, long *msgs)
{
    unsigned long a0 = bench_allocs();
    double t0 = bench_cpu_s(), t = t0;
    long n = 0;

    if (iters > 0) {
        *sum += run(d, k, iters);
        n = iters;
        t = bench_cpu_s();
    } else {
        while (t - t0 < ms / 1000.0) { /* batches of 256: the clock is read rarely */
            *sum += run(d, k, 256);
            n += 256;
            t = bench_cpu_s();
        }
    }
    *allocs += bench_allocs() - a0;
    *msgs += n;
    return (t - t0) * 1e9 / (double) n;
}

static void usage(void)
{
    fprintf(stderr, "usage: load_decode_bench [--cpu N] [--rounds N] [--ms N] [--iters N] "
                    "[--only old|new] [--message 1|8|64]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static struct kind kinds[3];
    static const decoder decoders[2] = {load_jansson_decode, admit_load_decode};
    const char *cpu = NULL;
    int rounds = 7, only = -1, message = 0;
    long iters = 0, sum = 0;
    double ms = 20, t[2][MAX_ROUNDS];
    unsigned long before;

    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            usage();
        if (strcmp(argv[i], "--cpu") == 0)
            cpu = v;
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = atoi(v);
        else if (strcmp(argv[i], "--ms") == 0)
            ms = atof(v);
        else if (strcmp(argv[i], "--iters") == 0)
            iters = atol(v);
        else if (strcmp(argv[i], "--only") == 0 && (strcmp(v, "old") == 0 || strcmp(v, "new") == 0))
            only = strcmp(v, "new") == 0;
        else if (strcmp(argv[i], "--message") == 0 &&
                 (atoi(v) == 1 || atoi(v) == 8 || atoi(v) == 64))
            message = atoi(v);
        else
            usage();
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || !(ms > 0) || iters < 0)
        usage();
    bench_pin("load_decode_bench", cpu);
    json_set_alloc_funcs(jansson_malloc, free);
    make_kinds(kinds);
    /* The counter must see jansson's allocations, or the new decoder's 0 would mean nothing. */
    before = bench_allocs();
    check(&kinds[0]);
    if (bench_allocs() == before) {
        fprintf(stderr, "load_decode_bench: the allocation counter sees nothing (no --wrap?)\n");
        return 1;
    }
    printf("%-9s %6s %12s %12s %9s %14s\n", "message", "bytes", "old ns/msg", "new ns/msg",
           "speed-up", "old allocs/msg");
    for (int k = 0; k < 3; k++) {
        unsigned long allocs[2] = {0, 0};
        long msgs[2] = {0, 0};
        double med[2] = {0, 0};
        size_t bytes = 0;

        if (message != 0 && message != (k == 0 ? 1 : k == 1 ? 8 : 64))
            continue;
        check(&kinds[k]);
        for (int i = 0; i < kinds[k].n; i++)
            bytes += kinds[k].len[i];
        for (int r = 0; r < rounds; r++)
            for (int d = 0; d < 2; d++)
                if (only < 0 || only == d)
                    t[d][r] =
                        round_ns(decoders[d], &kinds[k], ms, iters, &sum, &allocs[d], &msgs[d]);
        for (int d = 0; d < 2; d++)
            if (only < 0 || only == d)
                med[d] = bench_median(t[d], rounds);
        printf("%-9s %6zu %12.0f %12.0f %8.1fx %14.1f\n", kinds[k].name,
               bytes / (size_t) kinds[k].n, med[0], med[1],
               med[0] > 0 && med[1] > 0 ? med[0] / med[1] : 0.0,
               msgs[0] ? (double) allocs[0] / (double) msgs[0] : 0.0);
        if (allocs[1] != 0) {
            fprintf(stderr, "load_decode_bench: the new decoder allocated %lu times\n", allocs[1]);
            return 1;
        }
    }
    return sum == 0; /* never: every message has a seq */
}
