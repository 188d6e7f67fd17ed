/* loadtab: the newest load per (worker, rank), as a subscriber keeps it.
 *
 * A sorted array with binary search: a router follows tens to hundreds of workers, reads
 * far more often than it writes, and wants a stable order to print. Staleness is judged
 * against each message's own heartbeat, so publishers with different intervals mix. */
#include "admission/loadtab.h"
#include "admit/load.h"
#include "util/xmalloc.h"

#include <stdlib.h>
#include <string.h>

struct slot {
    struct admit_load load;
    int64_t received_ms;
    struct busy_latch latch; /* every message kept, noted (admission/loadtab.h) */
};

struct admit_loadtab {
    struct slot *v;
    size_t n, cap;
    unsigned missed;
};

struct admit_loadtab *admit_loadtab_new(unsigned missed_heartbeats)
{
    struct admit_loadtab *t = xcalloc(1, sizeof *t);

    t->missed = missed_heartbeats ? missed_heartbeats : 1;
    return t;
}

void admit_loadtab_free(struct admit_loadtab *t)
{
    if (t == NULL)
        return;
    free(t->v);
    free(t);
}

static int cmp_key(const char *w, int64_t r, const struct admit_load *b)
{
    int c = strcmp(w, b->worker_id);

    if (c != 0)
        return c;
    return r < b->dp_rank ? -1 : r > b->dp_rank;
}

/* Index of (w, r) if present (*found = 1), else where it would be inserted. */
static size_t search(const struct admit_loadtab *t, const char *w, int64_t r, int *found)
{
    size_t lo = 0, hi = t->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_key(w, r, &t->v[mid].load);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    *found = 0;
    return lo;
}

static int is_stale(const struct admit_loadtab *t, const struct slot *s, int64_t now_ms)
{
    int64_t hb = s->load.heartbeat_ms > 0 ? s->load.heartbeat_ms : 1000;

    return now_ms - s->received_ms > hb * (int64_t) t->missed;
}

int admit_loadtab_update(struct admit_loadtab *t, const struct admit_load *m, int64_t now_ms)
{
    int found;
    size_t i = search(t, m->worker_id, m->dp_rank, &found);

    if (found) {
        struct slot *s = &t->v[i];
        /* Newer sequence wins. A lower one is a restarted publisher (its sequence starts
         * again) when its clock says newer, or when the old entry has gone stale. */
        if (m->seq <= s->load.seq && m->ts_ms <= s->load.ts_ms && !is_stale(t, s, now_ms))
            return 0;
        s->load = *m;
        s->received_ms = now_ms;
        busy_latch_note(&s->latch, m);
        return 1;
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->v = xrealloc(t->v, t->cap * sizeof *t->v);
    }
    memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof *t->v);
    t->v[i].load = *m;
    t->v[i].received_ms = now_ms;
    memset(&t->v[i].latch, 0, sizeof t->v[i].latch);
    busy_latch_note(&t->v[i].latch, m);
    t->n++;
    return 1;
}

static void fill(const struct admit_loadtab *t, const struct slot *s, int64_t now_ms,
                 struct admit_loadtab_entry *e)
{
    e->load = s->load;
    e->received_ms = s->received_ms;
    e->stale = is_stale(t, s, now_ms);
}

int admit_loadtab_get(const struct admit_loadtab *t, const char *worker_id, int64_t dp_rank,
                      int64_t now_ms, struct admit_loadtab_entry *e)
{
    int found;
    size_t i = search(t, worker_id, dp_rank, &found);

    if (!found)
        return -1;
    fill(t, &t->v[i], now_ms, e);
    return 0;
}

size_t admit_loadtab_size(const struct admit_loadtab *t)
{
    return t->n;
}

int admit_loadtab_at(const struct admit_loadtab *t, size_t i, int64_t now_ms,
                     struct admit_loadtab_entry *e)
{
    if (i >= t->n)
        return -1;
    fill(t, &t->v[i], now_ms, e);
    return 0;
}

const struct busy_latch *loadtab_latch_at(const struct admit_loadtab *t, size_t i)
{
    return i < t->n ? &t->v[i].latch : NULL;
}

size_t admit_loadtab_expire(struct admit_loadtab *t, int64_t now_ms, int64_t max_age_ms)
{
    size_t w = 0, dropped;

    for (size_t r = 0; r < t->n; r++)
        if (now_ms - t->v[r].received_ms <= max_age_ms)
            t->v[w++] = t->v[r];
    dropped = t->n - w;
    t->n = w;
    return dropped;
}
