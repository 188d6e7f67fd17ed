/* pools: workers' roles and the judgement of a disaggregated request (see pools.h). */
#include "pools.h"
#include "util/xmalloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NROLES 3

struct pools {
    int *role;                 /* per worker: enum admit_load_role, or -1 */
    size_t n;                  /* workers covered */
    size_t words;              /* 64-bit words of each mask */
    uint64_t *mask[NROLES];    /* the workers of each role */
    unsigned count[NROLES];    /* how many */
    uint64_t *scratch[NROLES]; /* a request's pools (pools_split), one request at a time */
};

struct pools *pools_new(void)
{
    return xcalloc(1, sizeof(struct pools));
}

void pools_free(struct pools *p)
{
    if (p == NULL)
        return;
    for (int i = 0; i < NROLES; i++) {
        free(p->mask[i]);
        free(p->scratch[i]);
    }
    free(p->role);
    free(p);
}

/* Covers workers 0 .. n-1 (new ones hold no role). */
static void cover(struct pools *p, size_t n)
{
    size_t words = (n + 63) / 64;

    if (n <= p->n)
        return;
    p->role = xrealloc(p->role, n * sizeof *p->role);
    for (size_t k = p->n; k < n; k++)
        p->role[k] = -1;
    p->n = n;
    if (words <= p->words)
        return;
    for (int i = 0; i < NROLES; i++) {
        p->mask[i] = xrealloc(p->mask[i], words * sizeof *p->mask[i]);
        memset(p->mask[i] + p->words, 0, (words - p->words) * sizeof *p->mask[i]);
        p->scratch[i] = xrealloc(p->scratch[i], words * sizeof *p->scratch[i]);
    }
    p->words = words;
}

void pools_set(struct pools *p, int k, int role)
{
    int was;

    if (k < 0)
        return;
    cover(p, (size_t) k + 1);
    if ((was = p->role[k]) == role)
        return;
    if (was >= 0) {
        p->mask[was][k >> 6] &= ~(UINT64_C(1) << (k & 63));
        p->count[was]--;
    }
    if (role >= 0 && role < NROLES) {
        p->mask[role][k >> 6] |= UINT64_C(1) << (k & 63);
        p->count[role]++;
    } else
        role = -1;
    p->role[k] = role;
}

int pools_role(const struct pools *p, int k)
{
    return k >= 0 && (size_t) k < p->n ? p->role[k] : -1;
}

int pools_any(const struct pools *p)
{
    return p->count[ADMIT_LOAD_ROLE_PREFILL] + p->count[ADMIT_LOAD_ROLE_DECODE] > 0;
}

int pools_split(struct pools *p, int nworkers, const uint64_t *eligible, struct pools_req *out)
{
    uint64_t any[NROLES] = {0, 0, 0};

    out->pd = out->agg = 0;
    if (!pools_any(p))
        return 0;
    cover(p, nworkers > 0 ? (size_t) nworkers : 0);
    for (int i = 0; i < NROLES; i++) {
        for (size_t w = 0; w < p->words; w++) {
            uint64_t b = p->mask[i][w] & (eligible != NULL ? eligible[w] : ~UINT64_C(0));

            p->scratch[i][w] = b;
            any[i] |= b;
        }
        out->pool[i] = p->scratch[i];
    }
    out->pd = (any[ADMIT_LOAD_ROLE_PREFILL] | any[ADMIT_LOAD_ROLE_DECODE]) != 0;
    out->agg = any[ADMIT_LOAD_ROLE_BOTH] != 0;
    return out->pd;
}

void pools_thresholds(const struct busy_thresholds *t, struct busy_thresholds *prefill,
                      struct busy_thresholds *decode)
{
    *prefill = *t;
    prefill->active_decode_blocks_threshold = NAN;
    *decode = *t;
    decode->active_prefill_tokens_threshold = -1;
    decode->active_prefill_tokens_threshold_frac = NAN;
}

enum sel_result pools_pick_prefill(struct sel *s, const struct pools_req *rq, int64_t now_ms,
                                   int64_t prompt_tokens, const struct busy_thresholds *t,
                                   const struct sel_hit *hits, size_t nhits, int exclude, int *w,
                                   unsigned *rank, int64_t *cached)
{
    struct busy_thresholds tp, td;

    pools_thresholds(t, &tp, &td);
    *cached = 0;
    return sel_pick_kv(s, now_ms, prompt_tokens, &tp, exclude, -1,
                       rq->pool[ADMIT_LOAD_ROLE_PREFILL], hits, nhits, w, rank, cached);
}

void pools_pick(struct sel *s, const struct pools_req *rq, int64_t now_ms, int64_t prompt_tokens,
                const struct busy_thresholds *t, const struct sel_hit *hits, size_t nhits,
                struct pools_choice *out)
{
    struct busy_thresholds tp, td;
    int64_t none;

    pools_thresholds(t, &tp, &td);
    out->failed = ADMIT_LOAD_ROLE_PREFILL;
    out->res = pools_pick_prefill(s, rq, now_ms, prompt_tokens, t, hits, nhits, -1, &out->pw,
                                  &out->pr, &out->cached);
    if (out->res != SEL_OK)
        return;
    /* The decode worker gets the prompt's KV transferred: what it caches does not matter. */
    out->failed = ADMIT_LOAD_ROLE_DECODE;
    out->res = sel_pick_kv(s, now_ms, prompt_tokens, &td, -1, -1, rq->pool[ADMIT_LOAD_ROLE_DECODE],
                           NULL, 0, &out->dw, &out->dr, &none);
}

enum sel_result pools_gate(struct sel *s, const struct pools_req *rq, int64_t now_ms,
                           int64_t prompt_tokens, const struct busy_thresholds *t,
                           const struct sel_hit *hits, size_t nhits)
{
    struct busy_thresholds tp, td;
    enum sel_result r;

    pools_thresholds(t, &tp, &td);
    r = sel_gate_kv(s, now_ms, prompt_tokens, &tp, -1, rq->pool[ADMIT_LOAD_ROLE_PREFILL], hits,
                    nhits);
    if (r != SEL_OK)
        return r;
    return sel_gate_kv(s, now_ms, prompt_tokens, &td, -1, rq->pool[ADMIT_LOAD_ROLE_DECODE], NULL,
                       0);
}

enum sel_result pools_pick_decode(struct sel *s, const struct pools_req *rq, int64_t now_ms,
                                  int64_t prompt_tokens, const struct busy_thresholds *t,
                                  int exclude, int *w, unsigned *rank)
{
    struct busy_thresholds tp, td;

    pools_thresholds(t, &tp, &td);
    return sel_pick_in(s, now_ms, prompt_tokens, &td, exclude, -1, rq->pool[ADMIT_LOAD_ROLE_DECODE],
                       w, rank);
}
