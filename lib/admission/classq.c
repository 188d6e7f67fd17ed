/* classq: policy-class queues and their deficit round robin (see classq.h for the rules).
 *
 * Invariants, checked by the unit tests:
 *   an empty class has deficit 0, and every deficit is >= 0;
 *   depth of a class == the entries linked in its list or heap, total == the sum of depths;
 *   an entry is queued iff it is in exactly one class's list or heap, that of e->_class;
 *   a WSPT heap is ordered by (cost, seq) and heap[i]->_at._pos == i.
 *
 * classq_dispatch keeps nothing from one step to the next but the cursor and the carried
 * class, both plain class indexes that every step checks against the queue as it then is.
 * That is what lets go() push and remove entries freely: the step that follows reads the
 * queues afresh. */
#include "admission/classq.h"
#include "util/xmalloc.h"

#include <stdint.h>
#include <stdlib.h>

struct cq_class {
    struct classq_def def;
    size_t depth;
    int64_t deficit;
    /* FCFS: the list, oldest first */
    struct classq_entry *head, *tail;
    /* WSPT: the heap, smallest (cost, seq) at 0 */
    struct classq_entry **heap;
    size_t cap;
    /* scratch of one dispatch step: the cost of the head found ready, 0 when none */
    int64_t cand;
};

struct classq {
    struct cq_class *classes;
    size_t n;
    size_t total;
    uint64_t seq;
    size_t cursor; /* where the next ring walk starts: the class after the last to dispatch */
    int carry;     /* the class whose turn it is: the last to dispatch, while it has credit and
                    * requests (kept across calls, even those where it was not ready); or -1 */
    int busy;      /* a dispatch is running: calls from its callbacks return at once */
};

static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;

    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t sat_mul(int64_t a, int64_t b)
{
    int64_t r;

    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

struct classq *classq_new(const struct classq_def *defs, size_t nclasses)
{
    struct classq *q;

    if (nclasses == 0 || nclasses > INT32_MAX)
        return NULL;
    for (size_t i = 0; i < nclasses; i++)
        if (defs[i].quantum < 1 || (defs[i].policy != CLASSQ_FCFS && defs[i].policy != CLASSQ_WSPT))
            return NULL;
    q = xcalloc(1, sizeof *q);
    q->classes = xcalloc(nclasses, sizeof *q->classes);
    q->n = nclasses;
    q->carry = -1;
    for (size_t i = 0; i < nclasses; i++)
        q->classes[i].def = defs[i];
    return q;
}

void classq_free(struct classq *q)
{
    if (q == NULL)
        return;
    for (size_t i = 0; i < q->n; i++)
        free(q->classes[i].heap);
    free(q->classes);
    free(q);
}

size_t classq_nclasses(const struct classq *q)
{
    return q->n;
}

static struct cq_class *class_at(const struct classq *q, int cls)
{
    return cls >= 0 && (size_t) cls < q->n ? &q->classes[cls] : NULL;
}

/* ---- WSPT: a binary heap of entries by (cost, seq), each entry knowing its place ---------- */

static int heap_before(const struct classq_entry *a, const struct classq_entry *b)
{
    return a->_cost < b->_cost || (a->_cost == b->_cost && a->_seq < b->_seq);
}

static void heap_set(struct cq_class *c, size_t i, struct classq_entry *e)
{
    c->heap[i] = e;
    e->_at._pos = i;
}

static void heap_up(struct cq_class *c, size_t i)
{
    struct classq_entry *e = c->heap[i];

    while (i > 0 && heap_before(e, c->heap[(i - 1) / 2])) {
        heap_set(c, i, c->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(c, i, e);
}

static void heap_down(struct cq_class *c, size_t i)
{
    struct classq_entry *e = c->heap[i];

    for (;;) {
        size_t k = 2 * i + 1;

        if (k >= c->depth)
            break;
        if (k + 1 < c->depth && heap_before(c->heap[k + 1], c->heap[k]))
            k++;
        if (!heap_before(c->heap[k], e))
            break;
        heap_set(c, i, c->heap[k]);
        i = k;
    }
    heap_set(c, i, e);
}

static void heap_push(struct cq_class *c, struct classq_entry *e)
{
    if (c->depth == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->heap = xrealloc(c->heap, c->cap * sizeof *c->heap);
    }
    heap_set(c, c->depth, e);
    c->depth++;
    heap_up(c, c->depth - 1);
}

/* The last entry fills the hole, then moves whichever way its key says. */
static void heap_remove(struct cq_class *c, struct classq_entry *e)
{
    size_t i = e->_at._pos;

    c->depth--;
    if (i == c->depth)
        return;
    heap_set(c, i, c->heap[c->depth]);
    if (i > 0 && heap_before(c->heap[i], c->heap[(i - 1) / 2]))
        heap_up(c, i);
    else
        heap_down(c, i);
}

/* ---- FCFS: an intrusive list ---------------------------------------------------------- */

static void list_push(struct cq_class *c, struct classq_entry *e)
{
    e->_at._list.next = NULL;
    e->_at._list.prev = c->tail;
    if (c->tail != NULL)
        c->tail->_at._list.next = e;
    else
        c->head = e;
    c->tail = e;
    c->depth++;
}

static void list_remove(struct cq_class *c, struct classq_entry *e)
{
    struct classq_entry *prev = e->_at._list.prev, *next = e->_at._list.next;

    if (prev != NULL)
        prev->_at._list.next = next;
    else
        c->head = next;
    if (next != NULL)
        next->_at._list.prev = prev;
    else
        c->tail = prev;
    e->_at._list.prev = e->_at._list.next = NULL;
    c->depth--;
}

/* ---- the queue ------------------------------------------------------------------------ */

size_t classq_limit(const struct classq *q, int cls, unsigned routable_workers)
{
    const struct cq_class *c = class_at(q, cls);
    size_t w = routable_workers ? routable_workers : 1, lim;

    if (c == NULL || c->def.limit_per_worker == 0)
        return 0;
    return __builtin_mul_overflow((size_t) c->def.limit_per_worker, w, &lim) ? SIZE_MAX : lim;
}

/* Queues e at the back of class c (its cost already set): the push that passed its checks. */
static void enqueue(struct classq *q, int cls, struct classq_entry *e)
{
    struct cq_class *c = &q->classes[cls];

    e->_seq = q->seq++;
    e->_class = cls + 1; /* stored off by one so that a zeroed entry reads as never pushed */
    e->_queued = 1;
    if (c->def.policy == CLASSQ_WSPT)
        heap_push(c, e);
    else
        list_push(c, e);
    q->total++;
}

int classq_push(struct classq *q, int cls, struct classq_entry *e, int64_t prompt_tokens,
                unsigned routable_workers)
{
    struct cq_class *c = class_at(q, cls);
    size_t lim;

    if (c == NULL || e->_queued)
        return -1; /* a caller bug; refuse rather than corrupt a queue */
    lim = classq_limit(q, cls, routable_workers);
    if (lim != 0 && c->depth >= lim)
        return -1;
    e->_cost = prompt_tokens > 1 ? prompt_tokens : 1;
    enqueue(q, cls, e);
    return 0;
}

int classq_requeue(struct classq *q, int cls, struct classq_entry *e)
{
    if (class_at(q, cls) == NULL || e->_queued || e->_cost < 1)
        return -1;
    enqueue(q, cls, e);
    return 0;
}

static int by_arrival(const void *a, const void *b)
{
    const struct classq_entry *x = *(struct classq_entry *const *) a;
    const struct classq_entry *y = *(struct classq_entry *const *) b;

    return x->_seq < y->_seq ? -1 : x->_seq > y->_seq;
}

size_t classq_drain(struct classq *q, struct classq_entry **out)
{
    size_t n = 0;

    for (size_t i = 0; i < q->n; i++) {
        struct cq_class *c = &q->classes[i];

        if (c->def.policy == CLASSQ_WSPT)
            for (size_t k = 0; k < c->depth; k++)
                out[n++] = c->heap[k];
        else
            for (struct classq_entry *e = c->head; e != NULL; e = e->_at._list.next)
                out[n++] = e;
    }
    qsort(out, n, sizeof *out, by_arrival);
    for (size_t k = 0; k < n; k++)
        classq_remove(q, out[k]);
    q->carry = -1;
    return n;
}

void classq_remove(struct classq *q, struct classq_entry *e)
{
    struct cq_class *c;

    if (!e->_queued)
        return;
    c = &q->classes[e->_class - 1];
    if (c->def.policy == CLASSQ_WSPT)
        heap_remove(c, e);
    else
        list_remove(c, e);
    e->_queued = 0;
    q->total--;
    if (c->depth == 0)
        c->deficit = 0;
}

int classq_queued(const struct classq_entry *e)
{
    return e->_queued;
}

int classq_class_of(const struct classq_entry *e)
{
    return e->_class - 1;
}

int64_t classq_cost_of(const struct classq_entry *e)
{
    return e->_cost;
}

size_t classq_depth(const struct classq *q, int cls)
{
    const struct cq_class *c = class_at(q, cls);

    return c != NULL ? c->depth : 0;
}

size_t classq_total(const struct classq *q)
{
    return q->total;
}

static struct classq_entry *class_head(const struct cq_class *c)
{
    if (c->depth == 0)
        return NULL;
    return c->def.policy == CLASSQ_WSPT ? c->heap[0] : c->head;
}

const struct classq_entry *classq_head(const struct classq *q, int cls)
{
    const struct cq_class *c = class_at(q, cls);

    return c != NULL ? class_head(c) : NULL;
}

int64_t classq_deficit(const struct classq *q, int cls)
{
    const struct cq_class *c = class_at(q, cls);

    return c != NULL ? c->deficit : 0;
}

/* ---- dispatch ------------------------------------------------------------------------- */

/* Asks whether class i's head may go: its cost if so, 0 if not or if the class is empty.
 * An empty class found here loses its credit. */
static int64_t candidate(struct classq *q, size_t i, classq_ready_fn ready, void *arg)
{
    struct cq_class *c = &q->classes[i];
    const struct classq_entry *h = class_head(c);

    if (h == NULL) {
        c->deficit = 0;
        return 0;
    }
    return ready(arg, (int) i, h) ? h->_cost : 0;
}

/* Takes class i's head out, pays for it, and moves the cursor past the class; the class
 * keeps the turn (carry) while it has credit left. */
static struct classq_entry *take(struct classq *q, size_t i)
{
    struct cq_class *c = &q->classes[i];
    struct classq_entry *e = class_head(c);

    c->deficit -= e->_cost;
    classq_remove(q, e); /* resets the deficit if that emptied the class */
    q->cursor = (i + 1) % q->n;
    q->carry = c->depth > 0 && c->deficit > 0 ? (int) i : -1;
    return e;
}

/* The class whose turn it is, or -1: the carried class while it still has requests and
 * credit (a removal may have emptied it since, and so zeroed its credit). */
static int carried_class(struct classq *q)
{
    const struct cq_class *c = class_at(q, q->carry);

    if (c == NULL || c->depth == 0 || c->deficit <= 0)
        q->carry = -1;
    return q->carry;
}

/* One step of the round robin: the next entry to go, already out of its queue, or NULL
 * when no non-empty class is ready.
 *
 * The turn (carry) outlives a step in which its class was not ready: under tight capacity
 * the gate closes behind every dispatch, and a turn lost there would hand the next opening
 * to the ring, so that classes alternated whatever their quanta. It ends only when the class
 * runs out of credit or requests (take), when its head costs more than its credit, or when
 * another class dispatches (take, for that class). */
static struct classq_entry *step(struct classq *q, classq_ready_fn ready, void *arg)
{
    int carried = carried_class(q);
    int64_t rounds = INT64_MAX;

    if (q->total == 0)
        return NULL;
    if (carried >= 0) {
        struct cq_class *c = &q->classes[carried];

        c->cand = candidate(q, (size_t) carried, ready, arg);
        if (c->cand != 0 && c->cand <= c->deficit)
            return take(q, (size_t) carried);
        if (c->cand != 0)
            q->carry = -1; /* ready but unaffordable: its turn is over, the ring goes on */
    }
    for (size_t k = 0; k < q->n; k++) {
        size_t i = (q->cursor + k) % q->n;
        struct cq_class *c = &q->classes[i];

        if ((int) i != carried) /* the carried class was asked a moment ago */
            c->cand = candidate(q, i, ready, arg);
        if (c->cand == 0)
            continue; /* blocked: it keeps its credit and earns none */
        if (c->cand <= c->deficit)
            return take(q, i); /* credit left from earlier visits comes first */
        c->deficit = sat_add(c->deficit, c->def.quantum);
        if (c->cand <= c->deficit)
            return take(q, i);
    }
    /* No ready head was affordable. Rather than walk the ring (cost - deficit) / quantum
     * more times, grant every ready class the fewest whole rounds that let one of them go;
     * the same count for all keeps the shares in proportion to the quanta. */
    for (size_t i = 0; i < q->n; i++) {
        struct cq_class *c = &q->classes[i];
        int64_t missing, need;

        if (c->cand == 0)
            continue;
        missing = c->cand - c->deficit; /* > 0, or the ring would have taken it */
        need = missing / c->def.quantum + (missing % c->def.quantum != 0);
        if (need < rounds)
            rounds = need;
    }
    if (rounds == INT64_MAX)
        return NULL; /* nothing ready */
    for (size_t i = 0; i < q->n; i++) {
        struct cq_class *c = &q->classes[i];

        if (c->cand != 0)
            c->deficit = sat_add(c->deficit, sat_mul(c->def.quantum, rounds));
    }
    for (size_t k = 0; k < q->n; k++) {
        size_t i = (q->cursor + k) % q->n;
        struct cq_class *c = &q->classes[i];

        if (c->cand != 0 && c->cand <= c->deficit)
            return take(q, i);
    }
    return NULL; /* not reached: the class that set rounds can pay */
}

unsigned classq_dispatch(struct classq *q, classq_ready_fn ready, classq_go_fn go, void *arg)
{
    struct classq_entry *e;
    unsigned n = 0;

    if (q->busy)
        return 0;
    q->busy = 1;
    while ((e = step(q, ready, arg)) != NULL) {
        n++;
        go(arg, e);
    }
    q->busy = 0;
    return n;
}
