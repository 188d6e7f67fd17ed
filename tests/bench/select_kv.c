/* select_bench part 3: what prefix-aware selection adds per request, before it is wired in:
 * the block keys of a 2,048-token prompt sent as a chat body (admission/kvkeys.h) and the
 * lookup of those keys in the prefix index (admission/kvindex.h), then the insert of the
 * routing decision, at 512, 4,096 and 10,000 workers of 1 rank.
 *
 * The fleet's history: two sessions per worker, each a chain of 128 blocks (16-token blocks,
 * 64-byte text pieces) that opens with one of 8 system prompts of 16 blocks, so that a system
 * prompt's blocks are held by an eighth of the workers and a session's own by one; or (the
 * second row of each size) with an opening of its own, so that each block has one holder. The
 * global cap holds all of it. A request is a random session's body: its keys, the lookup (which
 * finds the eighth holding its system prompt, and its own worker at full depth), and the insert
 * for its deepest holder. A lookup reports at most KVR_MAX_HITS holders, as in the router: at
 * 4,096 workers and more, more than that hold a system prompt. Rounds alternate keys, keys +
 * lookup, keys + lookup + insert. */
#include "select_kv.h"

#include "benchutil.h"
#include "admission/kvindex.h"
#include "admission/kvkeys.h"
#include "router/kvroute.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_BLOCK      16
#define KV_PIECE      64
#define KV_KEYS       160 /* room past a 2,048-token prompt's 128 blocks */
#define KV_SYSTEMS    8
#define KV_SYS_BYTES  (16 * KV_PIECE - 24) /* with its role, 16 pieces and a bit */
#define KV_POOL       256                  /* bodies timed, drawn from the sessions */
#define KV_BODY_MAX   12000
#define KV_HITS       KVR_MAX_HITS /* what the router asks a lookup for */
#define KV_MAX_ROUNDS 99

static const int kv_workers[] = {512, 4096, 10000};

static uint32_t kv_rand(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

/* n bytes of words from seed: lower-case letters and spaces, no JSON escapes needed. */
static size_t kv_words(char *out, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    size_t i;

    for (i = 0; i < n; i++)
        out[i] = kv_rand(&x) % 6 == 0 ? ' ' : (char) ('a' + kv_rand(&x) % 26);
    return n;
}

/* The chat body of session s: its system prompt, then its own 2,048 tokens or so. */
static size_t kv_body(char *b, uint32_t s, int shared)
{
    size_t n = 0;

    n += (size_t) sprintf(b + n, "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":"
                                 "\"system\",\"content\":\"");
    n += kv_words(b + n, KV_SYS_BYTES, shared ? s % KV_SYSTEMS : 100000000 + s);
    n += (size_t) sprintf(b + n, "\"},{\"role\":\"user\",\"content\":\"");
    n += kv_words(b + n, 3600, 1000 + s);
    n += (size_t) sprintf(b + n, "\"},{\"role\":\"assistant\",\"content\":\"");
    n += kv_words(b + n, 1200, 9000000 + s);
    n += (size_t) sprintf(b + n, "\"},{\"role\":\"user\",\"content\":\"");
    n += kv_words(b + n, 2400, 5000000 + s);
    n += (size_t) sprintf(b + n, "\"}]}");
    return n;
}

struct kv_run {
    struct kvindex *idx;
    const struct kvk_params *p;
    char **bodies;
    size_t *lens;
    int level; /* 0 keys, 1 + lookup, 2 + insert */
    uint64_t now;
    uint64_t sink;
};

static void kv_requests(struct kv_run *r, long n)
{
    static uint64_t keys[KV_KEYS];
    static struct kvi_hit hits[KV_HITS];

    for (long i = 0; i < n; i++) {
        size_t j = (size_t) i % KV_POOL, nk, nh, best = 0;

        nk = kvk_body(r->p, r->bodies[j], r->lens[j], keys, KV_KEYS, NULL);
        r->sink += keys[nk - 1];
        if (r->level == 0)
            continue;
        nh = kvi_match(r->idx, keys, nk, r->now, hits, KV_HITS);
        for (size_t h = 1; h < nh; h++)
            if (hits[h].depth > hits[best].depth)
                best = h;
        r->sink += nh;
        if (r->level == 2 && nh)
            kvi_insert(r->idx, hits[best].worker, hits[best].rank, keys, nk, r->now);
    }
}

static double kv_round(struct kv_run *r, long n, unsigned long *allocs)
{
    unsigned long a0 = bench_allocs();
    double t0 = clock_mono_s(), t1;

    kv_requests(r, n);
    t1 = clock_mono_s();
    *allocs += bench_allocs() - a0;
    return (t1 - t0) * 1e6 / (double) n;
}

void kv_table(int rounds, double ms, long iters, int only_workers, unsigned long *allocs)
{
    struct kvk_params p = {kvk_seed("m", 1, "", 0), KV_BLOCK, KV_PIECE};
    char *bodies[KV_POOL], *b = malloc(KV_BODY_MAX);
    size_t lens[KV_POOL];
    static uint64_t keys[KV_KEYS];

    printf("\npart 3: prefix keys and index, per request: the keys of a 2,048-token chat body "
           "(%d-token\nblocks, %d-byte pieces), the lookup, the insert of the decision; 2 "
           "sessions of 128\nblocks per worker; medians of %d rounds. openings: 8 system prompts "
           "of 16 blocks,\neach shared by an eighth of the fleet, or each session its own\n\n",
           KV_BLOCK, KV_PIECE, rounds);
    printf("| workers | openings | blocks held | keys µs | + lookup µs | + insert µs | holders "
           "found | bytes/block |\n");
    printf("|--------:|:---------|------------:|--------:|------------:|------------:|--------"
           "------:|------------:|\n");
    for (size_t row = 0; row < 2 * sizeof kv_workers / sizeof kv_workers[0]; row++) {
        int workers = kv_workers[row / 2], shared = row % 2 == 0;
        uint32_t sessions = 2u * (uint32_t) workers, x = 7;
        struct kvi_config c = {(uint32_t) workers, 1, sessions * 128u, 0, KV_BLOCK, 0};
        static struct kvi_hit hits[KV_HITS];
        struct kvi_stats st;
        size_t found;
        struct kv_run r = {NULL, &p, bodies, lens, 0, 1000, 0};
        double t[3][KV_MAX_ROUNDS];
        long n;

        if (only_workers && workers != only_workers)
            continue;
        r.idx = kvi_new(&c);
        for (uint32_t s = 0; s < sessions; s++) {
            size_t len = kv_body(b, s, shared), nk = kvk_body(&p, b, len, keys, KV_KEYS, NULL);

            kvi_insert(r.idx, s % (uint32_t) workers, 0, keys, nk, r.now);
        }
        for (int j = 0; j < KV_POOL; j++) {
            bodies[j] = malloc(KV_BODY_MAX);
            lens[j] = kv_body(bodies[j], kv_rand(&x) % sessions, shared);
        }
        n = iters > 0 ? iters : 16;
        if (iters <= 0) { /* about ms a round at the slowest level */
            double t0, dt;

            r.level = 2;
            for (;;) {
                t0 = clock_mono_s();
                kv_requests(&r, n);
                dt = clock_mono_s() - t0;
                if (dt > 0.002 || n > (1L << 24))
                    break;
                n *= 2;
            }
            n = (long) ((double) n * (ms / 1000.0) / dt);
            n = n < 16 ? 16 : n;
        }
        for (int k = 0; k < rounds; k++)
            for (int lv = 0; lv < 3; lv++) {
                r.level = lv;
                t[lv][k] = kv_round(&r, n, allocs);
            }
        kvi_stats(r.idx, &st);
        found = kvi_match(r.idx, keys, kvk_body(&p, bodies[0], lens[0], keys, KV_KEYS, NULL), r.now,
                          hits, KV_HITS);
        printf("| %7d | %-8s | %11llu | %7.2f | %11.2f | %11.2f | %13zu | %11llu |\n", workers,
               shared ? "8 shared" : "own", (unsigned long long) st.blocks,
               bench_median(t[0], rounds), bench_median(t[1], rounds), bench_median(t[2], rounds),
               found, (unsigned long long) st.bytes_per_block);
        fflush(stdout);
        for (int j = 0; j < KV_POOL; j++)
            free(bodies[j]);
        kvi_free(r.idx);
        if (r.sink == 42)
            printf(" ");
    }
    free(b);
}
