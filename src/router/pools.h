/* pools: the roles of admit-router's workers, and the one judgement of a disaggregated
 * request: a prefill worker and a decode worker, both with room.
 *
 * A worker is aggregated (role both: whole requests, every worker before disaggregated
 * serving), a prefill worker or a decode worker: the role its source gives it (--prefill-worker,
 * a workers file's role...), else the one its load messages publish (admitd's --role). The
 * workers that serve a request's model split into three pools by role; a model whose workers
 * are all aggregated is routed as before, at the cost of one counter test.
 *
 * A model with prefill or decode workers is served disaggregated (vLLM's NIXL proxy flow,
 * docs/router.md): its request needs a prefill worker and a decode worker with room at the same
 * time, each judged by the one has_room() (selection's pass, select.h) under its pool's part of
 * the thresholds, Dynamo's split: the prefill pool by prefill tokens alone, the decode pool by
 * decode blocks alone. Prefix hits count in the prefill pool only (the decode pool gets the KV
 * transferred, whatever it caches). When the pair cannot be had, the model's aggregated
 * workers, if it has any, take the request whole; else the answer names the pool that failed.
 *
 * Pure: no sockets, no clock (callers pass the time), no allocation per request. */
#ifndef ADMIT_ROUTER_POOLS_H
#define ADMIT_ROUTER_POOLS_H

#include "admit/load.h"
#include "select.h"

#include <stddef.h>
#include <stdint.h>

struct pools;

/* The masks of one request: its model's workers split by role, bit k for worker k as
 * sel_pick_in() takes them; valid until the next pools_split() on the same pools. */
struct pools_req {
    const uint64_t *pool[3]; /* indexed by enum admit_load_role: both, prefill, decode */
    int pd;                  /* the model has prefill or decode workers: disaggregated */
    int agg;                 /* ... and aggregated ones too (pool[BOTH] not empty) */
};

/* What pools_pick() and pools_gate() found. */
struct pools_choice {
    enum sel_result res;         /* SEL_OK: both chosen; else the failing pool's result */
    enum admit_load_role failed; /* with res != SEL_OK: the pool that has no room or no worker */
    int pw, dw;                  /* prefill and decode workers */
    unsigned pr, dr;             /* their ranks */
    int64_t cached;              /* tokens predicted cached on the prefill rank */
};

/** an empty table (no worker has a role) */
struct pools *pools_new(void);
/** frees it; NULL is a no-op */
void pools_free(struct pools *p);
/** worker k's role: the effective one (its source's, else its messages'); -1: k holds no
 *  worker (free, or retired) */
void pools_set(struct pools *p, int k, int role);
/** worker k's role as set (-1 when none) */
int pools_role(const struct pools *p, int k);
/** 1 when some worker is a prefill or a decode worker (else every request is aggregated) */
int pools_any(const struct pools *p);
/** splits the workers a request may go to (eligible, mroute_eligible()'s, covering nworkers;
 *  NULL: any) by role into out; 0 when the model is aggregated (out->pd 0), else 1 */
int pools_split(struct pools *p, int nworkers, const uint64_t *eligible, struct pools_req *out);
/** the prefill pool's thresholds and the decode pool's of one set t (Dynamo's split) */
void pools_thresholds(const struct busy_thresholds *t, struct busy_thresholds *prefill,
                      struct busy_thresholds *decode);
/** chooses a prefill worker (hits[0 .. nhits) predicted to hold part of the prompt) and a
 *  decode worker for a request of prompt_tokens under the model's thresholds t, the prefill
 *  pool judged first; books nothing */
void pools_pick(struct sel *s, const struct pools_req *rq, int64_t now_ms, int64_t prompt_tokens,
                const struct busy_thresholds *t, const struct sel_hit *hits, size_t nhits,
                struct pools_choice *out);
/** the prefill pool's choice alone, worker exclude left out (-1: none): a prefill leg that
 *  worker's admitd turned away goes to another; SEL_OK with *w, *rank, *cached */
enum sel_result pools_pick_prefill(struct sel *s, const struct pools_req *rq, int64_t now_ms,
                                   int64_t prompt_tokens, const struct busy_thresholds *t,
                                   const struct sel_hit *hits, size_t nhits, int exclude, int *w,
                                   unsigned *rank, int64_t *cached);
/** what pools_pick() would find, choosing nothing (the class queue's gate): SEL_OK when both
 *  pools have room under t */
enum sel_result pools_gate(struct sel *s, const struct pools_req *rq, int64_t now_ms,
                           int64_t prompt_tokens, const struct busy_thresholds *t,
                           const struct sel_hit *hits, size_t nhits);
/** the decode pool's choice for a decode leg that left worker exclude (a refusal before any
 *  byte): SEL_OK with *w, *rank */
enum sel_result pools_pick_decode(struct sel *s, const struct pools_req *rq, int64_t now_ms,
                                  int64_t prompt_tokens, const struct busy_thresholds *t,
                                  int exclude, int *w, unsigned *rank);

#endif
