/* top: a fixed-width table of worker load, "-" for unknown values. */
#include "top.h"
#include "admission/loadtab.h"

#include <stdio.h>

/* "used/limit" with "-" for unknown parts, into a small buffer. */
static const char *pair(char *b, size_t n, int64_t used, int64_t limit)
{
    char u[24] = "-", l[24] = "-";

    if (used >= 0)
        snprintf(u, sizeof u, "%lld", (long long) used);
    if (limit >= 0)
        snprintf(l, sizeof l, "%lld", (long long) limit);
    snprintf(b, n, "%s/%s", u, l);
    return b;
}

static const char *num(char *b, size_t n, int64_t v)
{
    if (v < 0)
        snprintf(b, n, "-");
    else
        snprintf(b, n, "%lld", (long long) v);
    return b;
}

/* "yes" or "no": the one room rule (admission/busy.h) on what the rank publishes, through its
 * latch as admit-router's monitor judges it (a signal unknown keeps its last known value). */
static const char *room(const struct busy_latch *latch, const struct busy_thresholds *th)
{
    struct busy_capacity c;
    struct busy_load l;

    if (th == NULL || !busy_thresholds_any(th) || latch == NULL)
        return "-";
    busy_latch_row(latch, &l, &c);
    return has_room(&l, &c, th) ? "yes" : "no";
}

void top_render(const struct admit_loadtab *t, int64_t now_ms, const struct busy_thresholds *th,
                struct buf *out)
{
    struct admit_loadtab_entry e;
    char a[48], b[48], c[48], d[24], f[24], pct[16];

    buf_printf(out, "%-28s %4s %-8s %11s %11s %17s %7s %8s %8s %4s %7s\n", "WORKER", "RANK",
               "STATE", "SLOTS", "QUEUE", "KV USED/TOTAL", "KV%", "DECODE", "PREFILL", "ROOM",
               "AGE");
    for (size_t i = 0; admit_loadtab_at(t, i, now_ms, &e) == 0; i++) {
        const struct admit_load *m = &e.load;

        if (m->kv_used_blocks >= 0 && m->kv_total_blocks > 0)
            snprintf(pct, sizeof pct, "%.1f%%",
                     100.0 * (double) m->kv_used_blocks / (double) m->kv_total_blocks);
        else
            snprintf(pct, sizeof pct, "-");
        buf_printf(out, "%-28.28s %4lld %-8s %11s %11s %17s %7s %8s %8s %4s %6.1fs%s\n",
                   m->worker_id, (long long) m->dp_rank, admit_load_state_name(m->state),
                   pair(a, sizeof a, m->engine_requests, m->engine_request_limit),
                   pair(b, sizeof b, m->queued_requests, m->request_queue_limit),
                   pair(c, sizeof c, m->kv_used_blocks, m->kv_total_blocks), pct,
                   num(d, sizeof d, m->active_decode_blocks),
                   num(f, sizeof f, m->active_prefill_tokens), room(loadtab_latch_at(t, i), th),
                   (double) (now_ms - e.received_ms) / 1000.0, e.stale ? " STALE" : "");
    }
}
