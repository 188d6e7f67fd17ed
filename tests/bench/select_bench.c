/* select_bench: what admit-router's choice of a worker costs per request, by fleet size.
 *
 * Times select-and-book-and-release, the work every request does in the router
 * (sel_pick + sel_book + sel_first_token + sel_release), at 8 to 10,000 workers of 1 and 4
 * ranks, with the reject thresholds off and on. "On" sets all three loose enough that workers
 * are mostly eligible, over published and booked load that is random but fixed, so the pass
 * does the monitor's skip and the projection's checks for real. A third column ("model")
 * is "on" for a request whose model three workers in four serve: sel_pick_in with a bitset,
 * as admit-router passes it (src/router/model_table.h); off and on pass none, as for a request
 * without a model or one every worker takes. Rounds alternate off, on, off,
 * on... on one pinned core so drift falls on both alike; the table gives medians.
 *
 * Part 2 puts the class gate (admission/classq.h) in front, at 512 and 4,096 workers of 1 rank:
 * each admission is queued in one of four classes and dispatched by the queue, whose ready()
 * is a selection under the class thresholds and whose go() is the selection and booking of
 * part 1, then released; side by side with part 1's plain select-and-book (gate_table()).
 *
 * Part 3 (select_kv.c) is what prefix-aware selection will add: a 2,048-token chat body's
 * block keys, their lookup in the prefix index and the insert of the decision, at 512, 4,096
 * and 10,000 workers, with the index's bytes per block.
 *
 * It also checks that a selection allocates nothing: malloc, calloc and realloc are wrapped
 * at link time (-Wl,--wrap=...) and counted, and a count other than 0 during the timed loops
 * (of either part) exits 1. Timings are printed, never asserted; it is built by default and
 * is not a test.
 *
 *   meson setup build-rel --buildtype=release && ninja -C build-rel tests/bench/select_bench
 *   build-rel/tests/bench/select_bench [--cpu N] [--rounds N] [--ms N] [--workers N]
 *                                      [--ranks N] [--iters N] [--part 1|2|3]
 *
 * --cpu (or ADMIT_BENCH_CPU) is the core to pin to, 0 by default; --rounds the rounds of each
 * kind (7); --ms the length of one round (20); --workers and --ranks keep one row of the
 * table, and --iters fixes the requests a round instead of timing a trial, so that two builds
 * under valgrind --tool=cachegrind do the same work (instructions and misses per request are
 * steadier than timings on a shared machine); --part keeps one part (all by default). */
#include "benchutil.h"
#include "select_kv.h"
#include "admission/busy.h"
#include "admission/classq.h"
#include "router/select.h"
#include "util/clock.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the fleet ------------------------------------------------------------------------ */

#define BENCH_MAX_ROUNDS      99
#define BENCH_PROMPTS         1024 /* a power of two: the loop indexes with a mask */
#define BENCH_NOW_MS          1000 /* every worker was heard at 0 and lives until 3000 */
#define BENCH_BOOKED_PER_RANK 4

static const int bench_workers[] = {8, 64, 512, 1024, 4096, 10000};
static const unsigned bench_ranks[] = {1, 4};

/* Dynamo's published figures, for reference (µs per selection), as the issue quotes them. */
static const char *dynamo_figure(int workers)
{
    switch (workers) {
    case 512:
        return "68.1 / 72.4";
    case 1024:
        return "21.5 (default policy)";
    case 4096:
        return "476.4 / 527.8";
    case 10000:
        return "~300 (custom policy, no filter)";
    default:
        return "-";
    }
}

static uint32_t bench_rand(uint32_t *x)
{
    /* xorshift32: the same fleet on every run and machine */
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

struct fleet {
    struct sel *s;
    struct sel_booking *held; /* the booked load the fleet carries during the timing */
    size_t nheld;
    int workers;
    unsigned ranks;
    int full; /* workers full by what they publish, under the "on" thresholds */
};

/* Published load: mostly below the loose thresholds (KV 0..85 % used, prefill 0..85 % of the
 * budget), every 16th worker full on every rank so the monitor has something to skip. Booked
 * load: 0 to 4 requests a rank of up to 2,000 prompt tokens, so the projection is checked for
 * real and now and then says no. */
static void fleet_make(struct fleet *f, int workers, unsigned ranks,
                       const struct busy_thresholds *on)
{
    uint32_t x = 2463534242u ^ (uint32_t) (workers * 31 + (int) ranks);

    memset(f, 0, sizeof *f);
    f->workers = workers;
    f->ranks = ranks;
    f->s = sel_new(3, 16);
    f->held = calloc((size_t) workers * ranks * BENCH_BOOKED_PER_RANK, sizeof *f->held);
    if (f->held == NULL) {
        fprintf(stderr, "select_bench: out of memory\n");
        exit(2);
    }
    for (int w = 0; w < workers; w++) {
        sel_add_worker(f->s);
        for (unsigned r = 0; r < ranks; r++) {
            struct admit_load m;

            admit_load_init(&m);
            snprintf(m.worker_id, sizeof m.worker_id, "bench-%d", w);
            m.dp_rank = r;
            m.heartbeat_ms = 1000;
            m.kv_total_blocks = 1000;
            m.kv_block_size = (w % 5 == 0) ? 32 : 16; /* two block sizes in the fleet */
            m.max_num_batched_tokens = 8192;
            m.kv_used_blocks = bench_rand(&x) % 850;
            m.active_decode_blocks = bench_rand(&x) % 850;
            m.active_prefill_tokens = bench_rand(&x) % 7000;
            m.engine_requests = bench_rand(&x) % 64;
            if (w % 16 == 7)
                m.kv_used_blocks = 950;
            sel_message(f->s, w, &m, 0);
        }
    }
    for (int w = 0; w < workers; w++)
        for (unsigned r = 0; r < ranks; r++) {
            unsigned n = bench_rand(&x) % (BENCH_BOOKED_PER_RANK + 1);

            for (unsigned k = 0; k < n; k++) {
                int64_t prompt = bench_rand(&x) % 2001;

                sel_book(f->s, &f->held[f->nheld++], w, r, prompt);
                if (bench_rand(&x) % 2)
                    sel_first_token(f->s, &f->held[f->nheld - 1]);
            }
        }
    for (int w = 0; w < workers; w++)
        f->full += sel_published_full(f->s, w, on);
}

static void fleet_free(struct fleet *f)
{
    for (size_t i = 0; i < f->nheld; i++)
        sel_release(f->s, &f->held[i]);
    free(f->held);
    sel_free(f->s);
}

/* ---- timing --------------------------------------------------------------------------- */

static int64_t prompts[BENCH_PROMPTS];

/* What a timed loop does per request: select-and-book alone (run_select), or through the
 * class gate first (run_gated). */
struct bench_kind {
    long (*run)(const struct bench_kind *k, long n); /* n requests; how many were booked */
    struct sel *s;
    const struct busy_thresholds *t; /* the reject thresholds */
    struct gate_bench *gate;         /* the class gate (run_gated only) */
    const uint64_t *eligible;        /* the workers the request's model may go to; NULL: all */
};

/* n requests, each chosen, booked, past its first token and ended; returns how many found a
 * worker. The fleet is left as it was (but for whose turn it is). */
static long run_select(const struct bench_kind *k, long n)
{
    struct sel *s = k->s;
    const struct busy_thresholds *t = k->t;
    long ok = 0;

    for (long i = 0; i < n; i++) {
        struct sel_booking b = {0};
        int64_t prompt = prompts[i & (BENCH_PROMPTS - 1)];
        int w;
        unsigned r;

        if (sel_pick_in(s, BENCH_NOW_MS, prompt, t, -1, -1, k->eligible, &w, &r) == SEL_OK) {
            sel_book(s, &b, w, r, prompt);
            sel_first_token(s, &b);
            sel_release(s, &b);
            ok++;
        }
    }
    return ok;
}

/* ---- the class gate --------------------------------------------------------------------- */

/* Four classes as in Dynamo's sample policy file (quanta 4096/1024 and 2048/512, limits of
 * 128 to 1024 a worker), two of each order, so that both the list and the heap are timed. */
#define BENCH_CLASSES 4

static const struct classq_def bench_classes[BENCH_CLASSES] = {{4096, CLASSQ_FCFS, 128},
                                                               {1024, CLASSQ_WSPT, 256},
                                                               {2048, CLASSQ_FCFS, 512},
                                                               {512, CLASSQ_WSPT, 1024}};

/* A request as the router would hold one while it is queued, dispatched and served. */
struct gate_req {
    struct classq_entry qe;
    struct sel_booking b;
    int64_t prompt;
};

struct gate_bench {
    struct classq *q;
    struct sel *s;
    const struct busy_thresholds *class_t;  /* the class thresholds ready() judges under */
    const struct busy_thresholds *reject_t; /* the router-wide ones go() selects under */
    unsigned routable;
    classq_ready_fn ready;
    classq_go_fn go;
    long held, refused, lost; /* left queued (no room), queue full, no worker at go() */
};

static struct gate_req *gate_req_of(const struct classq_entry *e)
{
    return (struct gate_req *) ((const char *) e - offsetof(struct gate_req, qe));
}

/* The class gate's question: does some worker have room for the head under its class's
 * thresholds? */
static int gate_ready(void *arg, int cls, const struct classq_entry *head)
{
    struct gate_bench *g = arg;
    int w;
    unsigned r;

    (void) cls; /* one set of class thresholds for all four classes */
    return sel_pick(g->s, BENCH_NOW_MS, gate_req_of(head)->prompt, g->class_t, -1, -1, &w, &r) ==
           SEL_OK;
}

/* The dispatch: select under the reject thresholds and book, at once. */
static void gate_go(void *arg, struct classq_entry *e)
{
    struct gate_bench *g = arg;
    struct gate_req *rq = gate_req_of(e);
    int w;
    unsigned r;

    if (sel_pick(g->s, BENCH_NOW_MS, rq->prompt, g->reject_t, -1, -1, &w, &r) == SEL_OK)
        sel_book(g->s, &rq->b, w, r, rq->prompt);
    else
        g->lost++;
}

/* The queue, its heaps grown once here so that the timed loops never allocate. */
static void gate_make(struct gate_bench *g, struct sel *s, const struct busy_thresholds *class_t,
                      const struct busy_thresholds *reject_t, unsigned routable)
{
    struct classq_entry e[BENCH_CLASSES];

    memset(g, 0, sizeof *g);
    memset(e, 0, sizeof e);
    g->q = classq_new(bench_classes, BENCH_CLASSES);
    g->s = s;
    g->class_t = class_t;
    g->reject_t = reject_t;
    g->routable = routable;
    g->ready = gate_ready;
    g->go = gate_go;
    for (int c = 0; c < BENCH_CLASSES; c++)
        classq_push(g->q, c, &e[c], 1, routable);
    for (int c = 0; c < BENCH_CLASSES; c++)
        classq_remove(g->q, &e[c]);
}

static int bare_ready(void *arg, int cls, const struct classq_entry *head)
{
    (void) arg;
    (void) cls;
    (void) head;
    return 1;
}

static void bare_go(void *arg, struct classq_entry *e)
{
    (void) arg;
    (void) e;
}

/* n requests, each queued in its class (in turn), dispatched by the queue (ready() then
 * go()), past its first token and ended; returns how many the queue dispatched. A request
 * the gate held (no room under its class's thresholds) is taken out again, as a timeout
 * would. With the bare callbacks (ready() always yes, go() nothing) it times the queue
 * alone, so that what the gate adds to the selections is its own number. */
static long run_gated(const struct bench_kind *k, long n)
{
    struct gate_bench *g = k->gate;
    long ok = 0;

    for (long i = 0; i < n; i++) {
        struct gate_req rq = {0};

        rq.prompt = prompts[i & (BENCH_PROMPTS - 1)];
        if (classq_push(g->q, (int) (i % BENCH_CLASSES), &rq.qe, rq.prompt, g->routable) != 0) {
            g->refused++;
            continue;
        }
        classq_dispatch(g->q, g->ready, g->go, g);
        if (classq_queued(&rq.qe)) {
            classq_remove(g->q, &rq.qe);
            g->held++;
            continue;
        }
        if (rq.b.booked) {
            sel_first_token(g->s, &rq.b);
            sel_release(g->s, &rq.b);
        }
        ok++;
    }
    return ok;
}

/* One timed round: µs per request. Allocations inside are added to *allocs. */
static double round_us(const struct bench_kind *k, long n, long *ok, unsigned long *allocs)
{
    unsigned long a0;
    double t0, t1;

    k->run(k, 1); /* the thresholds' one-time limits pass stays out of the timing */
    a0 = bench_allocs();
    t0 = clock_mono_s();
    *ok = k->run(k, n);
    t1 = clock_mono_s();
    *allocs += bench_allocs() - a0;
    return (t1 - t0) * 1e6 / (double) n;
}

/* Requests per round for about ms milliseconds, by a short trial of kind k. */
static long calibrate(const struct bench_kind *k, double ms)
{
    long n = 16;
    double t0, dt;

    for (;;) {
        t0 = clock_mono_s();
        k->run(k, n);
        dt = clock_mono_s() - t0;
        if (dt > 0.002 || n > (1L << 28))
            break;
        n *= 2;
    }
    n = (long) ((double) n * (ms / 1000.0) / dt);
    return n < 16 ? 16 : n;
}

/* Part 2, the class gate on, at these fleet sizes of 1 rank. */
static const int gate_workers[] = {512, 4096};

/* Per admission: classq_push + classq_dispatch (ready(): a pick under the class thresholds,
 * "does some worker have room?"; go(): a pick under the reject thresholds and the booking) +
 * the release, against part 1's select-and-book under the same reject thresholds. Two gated
 * kinds: class thresholds equal to the reject ones, which times the queue itself and the
 * second pick; and class thresholds of their own (prefill 1.0 of the budget, as Dynamo's
 * sample has), as a configured router would run, alternating two sets of thresholds pick by
 * pick: the view keeps rank limits for each of the last SEL_MAX_TSETS sets used
 * (select_slots.c), so neither pick recomputes them and this kind should cost what the
 * first does. A fourth kind times the queue alone. Rounds alternate plain, same, own, queue; the
 * ratios are over the plain round before. */
static void gate_table(int rounds, double ms, long iters, int only_workers, unsigned only_ranks,
                       const struct busy_thresholds *on, unsigned long *allocs)
{
    struct busy_thresholds own;

    if (only_ranks > 1)
        return;
    busy_thresholds_unset(&own);
    own.active_prefill_tokens_threshold_frac = 1.0;
    printf("\nclass gate on: classq_push + classq_dispatch (ready: sel_pick under the class\n"
           "thresholds; go: sel_pick under on + sel_book) + sel_first_token + sel_release, vs\n"
           "part 1's plain select-and-book under on; %d classes (FCFS and WSPT), 1 rank, medians\n"
           "of %d alternating rounds; class t = on, or own (prefill frac 1.0); queue = push +\n"
           "dispatch alone (ready() yes, go() nothing)\n\n",
           BENCH_CLASSES, rounds);
    printf("| workers | plain µs | gate, class t = on µs | x plain | gate, own class t µs | "
           "x plain | queue µs |\n");
    printf("|--------:|---------:|----------------------:|--------:|---------------------:|"
           "--------:|---------:|\n");
    for (size_t wi = 0; wi < sizeof gate_workers / sizeof gate_workers[0]; wi++) {
        int workers = gate_workers[wi];
        double t[4][BENCH_MAX_ROUNDS], pair[2][BENCH_MAX_ROUNDS], med[4], ratio[2];
        long n[4], ok[4] = {0, 0, 0, 0};
        struct gate_bench same, mine, bare;
        struct bench_kind kinds[4] = {{run_select, NULL, on, NULL, NULL},
                                      {run_gated, NULL, on, &same, NULL},
                                      {run_gated, NULL, on, &mine, NULL},
                                      {run_gated, NULL, on, &bare, NULL}};
        struct fleet f;

        if (only_workers && workers != only_workers)
            continue;
        fleet_make(&f, workers, 1, on);
        gate_make(&same, f.s, on, on, (unsigned) workers);
        gate_make(&mine, f.s, &own, on, (unsigned) workers);
        gate_make(&bare, f.s, on, on, (unsigned) workers);
        bare.ready = bare_ready;
        bare.go = bare_go;
        for (int k = 0; k < 4; k++) {
            kinds[k].s = f.s;
            n[k] = iters > 0 ? iters : calibrate(&kinds[k], ms);
            round_us(&kinds[k], n[k], &ok[k], allocs); /* warm-up */
        }
        for (int r = 0; r < rounds; r++) {
            for (int k = 0; k < 4; k++)
                t[k][r] = round_us(&kinds[k], n[k], &ok[k], allocs);
            pair[0][r] = t[1][r] / t[0][r];
            pair[1][r] = t[2][r] / t[0][r];
        }
        for (int k = 0; k < 4; k++) {
            med[k] = bench_median(t[k], rounds);
            if (ok[k] != n[k])
                fprintf(stderr, "select_bench: gate %d x 1, kind %d: %ld of %ld dispatched\n",
                        workers, k, ok[k], n[k]);
        }
        ratio[0] = bench_median(pair[0], rounds);
        ratio[1] = bench_median(pair[1], rounds);
        if (same.held + same.refused + same.lost + mine.held + mine.refused + mine.lost > 0)
            fprintf(
                stderr, "select_bench: gate %d x 1: held %ld/%ld, refused %ld/%ld, lost %ld/%ld\n",
                workers, same.held, mine.held, same.refused, mine.refused, same.lost, mine.lost);
        printf("| %7d | %8.2f | %21.2f | %7.2f | %20.2f | %7.2f | %8.3f |\n", workers, med[0],
               med[1], ratio[0], med[2], ratio[1], med[3]);
        fflush(stdout);
        classq_free(same.q);
        classq_free(mine.q);
        classq_free(bare.q);
        fleet_free(&f);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: select_bench [--cpu N] [--rounds N] [--ms N] [--workers N] "
                    "[--ranks N] [--iters N] [--part 1|2|3]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *cpu = NULL;
    int rounds = 7, only_workers = 0, part = 0;
    long iters = 0;
    unsigned only_ranks = 0;
    double ms = 20;
    struct busy_thresholds off, on;
    unsigned long allocs = 0, before;
    double target_on[2] = {NAN, NAN}, worst_ratio = 0;
    int worst_w = 0;
    unsigned worst_r = 0;
    uint32_t x = 88172645u;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--cpu") == 0 && i + 1 < argc)
            cpu = argv[++i];
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ms") == 0 && i + 1 < argc)
            ms = atof(argv[++i]);
        else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc)
            only_workers = atoi(argv[++i]);
        else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            iters = atol(argv[++i]);
        else if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc)
            only_ranks = (unsigned) atoi(argv[++i]);
        else if (strcmp(argv[i], "--part") == 0 && i + 1 < argc)
            part = atoi(argv[++i]);
        else
            usage();
    }
    if (rounds < 1 || rounds > BENCH_MAX_ROUNDS || !(ms > 0) || part < 0 || part > 3)
        usage();
    bench_pin("select_bench", cpu);

    /* The counter must see the library's allocations, or its 0 would mean nothing. */
    before = bench_allocs();
    sel_free(sel_new(3, 16));
    if (bench_allocs() == before) {
        fprintf(stderr, "select_bench: the allocation counter sees nothing (no --wrap?)\n");
        return 1;
    }

    for (int i = 0; i < BENCH_PROMPTS; i++)
        prompts[i] = 64 + bench_rand(&x) % 2000;
    busy_thresholds_unset(&off);
    busy_thresholds_unset(&on);
    on.active_decode_blocks_threshold = 0.9;
    on.active_prefill_tokens_threshold_frac = 0.9;
    on.active_prefill_tokens_threshold = 1000000;

    if (part == 0 || part == 1) {
        printf("select_bench: sel_pick + sel_book + sel_first_token + sel_release per request;\n"
               "median of %d alternating rounds of each (off, on, off, on, ...), ~%g ms a round\n",
               rounds, ms);
        printf("on = decode 0.9, prefill frac 0.9, prefill absolute 1e6; off = none set;\n"
               "on/off = median of each on round over the off round before it; eligible = workers\n"
               "not full by what they publish, under on\n\n");
        printf("model = on, for a model 3 of 4 workers serve (sel_pick_in with their bitset)\n\n");
        printf("| workers | ranks | off µs | on µs | on/off | model µs | eligible (on) | Dynamo "
               "published µs |\n");
        printf("|--------:|------:|-------:|------:|-------:|---------:|--------------:|:-------"
               "-------------|\n");
    }
    for (size_t wi = 0; wi < sizeof bench_workers / sizeof bench_workers[0]; wi++)
        for (size_t ri = 0; ri < sizeof bench_ranks / sizeof bench_ranks[0]; ri++) {
            int workers = bench_workers[wi];
            unsigned ranks = bench_ranks[ri];
            double toff[BENCH_MAX_ROUNDS], ton[BENCH_MAX_ROUNDS], pair[BENCH_MAX_ROUNDS];
            double tmodel[BENCH_MAX_ROUNDS];
            double moff, mon, mmodel, ratio;
            long n, ok_off = 0, ok_on = 0, ok_model = 0;
            struct fleet f;
            uint64_t *three_in_four;
            struct bench_kind koff = {run_select, NULL, &off, NULL, NULL};
            struct bench_kind kon = {run_select, NULL, &on, NULL, NULL};
            struct bench_kind kmodel = {run_select, NULL, &on, NULL, NULL};

            if ((part != 0 && part != 1) || (only_workers && workers != only_workers) ||
                (only_ranks && ranks != only_ranks))
                continue;
            three_in_four = calloc(((size_t) workers + 63) / 64, sizeof(uint64_t));
            if (three_in_four == NULL) {
                fprintf(stderr, "select_bench: out of memory\n");
                return 2;
            }
            for (int k = 0; k < workers; k++)
                if (k % 4 != 2)
                    three_in_four[k / 64] |= (uint64_t) 1 << (k % 64);
            kmodel.eligible = three_in_four;
            fleet_make(&f, workers, ranks, &on);
            koff.s = kon.s = kmodel.s = f.s;
            n = iters > 0 ? iters : calibrate(&koff, ms);
            round_us(&koff, n, &ok_off, &allocs); /* warm-up, both kinds */
            round_us(&kon, n, &ok_on, &allocs);
            round_us(&kmodel, n, &ok_model, &allocs);
            for (int k = 0; k < rounds; k++) {
                toff[k] = round_us(&koff, n, &ok_off, &allocs);
                ton[k] = round_us(&kon, n, &ok_on, &allocs);
                tmodel[k] = round_us(&kmodel, n, &ok_model, &allocs);
                pair[k] = ton[k] / toff[k];
            }
            /* The ratio is the median of each on round over the off round just before it:
             * a shared machine slows down for seconds at a time, and a pair of neighbours
             * shares the slowdown where two medians need not. */
            ratio = bench_median(pair, rounds);
            moff = bench_median(toff, rounds);
            mon = bench_median(ton, rounds);
            mmodel = bench_median(tmodel, rounds);
            if (ok_off != n || ok_on != n || ok_model != n)
                fprintf(stderr,
                        "select_bench: %d x %u: %ld (off), %ld (on) and %ld (model) of %ld found "
                        "room\n",
                        workers, ranks, ok_off, ok_on, ok_model, n);
            printf("| %7d | %5u | %6.2f | %5.2f | %6.3f | %8.2f | %12.1f%% | %s |\n", workers,
                   ranks, moff, mon, ratio, mmodel, 100.0 * (workers - f.full) / workers,
                   ranks == 1 ? dynamo_figure(workers) : "-");
            fflush(stdout);
            if (workers == 4096)
                target_on[ri] = mon;
            if (workers >= 512 && ratio > worst_ratio) {
                worst_ratio = ratio;
                worst_w = workers;
                worst_r = ranks;
            }
            fleet_free(&f);
            free(three_in_four);
        }
    if (part == 0 || part == 1)
        printf("\nDynamo's figures are per selection as published (512 and 4096 workers: two "
               "runs\nquoted; 1024: default policy; 10000: custom policy without filter), for "
               "scale only.\n");
    if (!isnan(target_on[0]) || !isnan(target_on[1]))
        printf("target: <= 26 µs at 4096 workers with thresholds on: %.2f µs (1 rank) %s, "
               "%.2f µs (4 ranks) %s\n",
               target_on[0], target_on[0] <= 26 ? "met" : "NOT met", target_on[1],
               target_on[1] <= 26 ? "met" : "NOT met");
    if (worst_w > 0)
        printf("target: thresholds cost <= +5 %% (on/off <= 1.05) from 512 workers up: worst "
               "%.3f at %d x %u %s\n",
               worst_ratio, worst_w, worst_r, worst_ratio <= 1.05 ? "met" : "NOT met");
    if (part == 0 || part == 2)
        gate_table(rounds, ms, iters, only_workers, only_ranks, &on, &allocs);
    if (part == 0 || part == 3)
        kv_table(rounds, ms, iters, only_workers, &allocs);
    printf("allocations during selection%s%s: %lu\n",
           part == 0 || part == 2 ? ", the class gate" : "",
           part == 0 || part == 3 ? ", keys and index" : "", allocs);
    return allocs == 0 ? 0 : 1;
}
