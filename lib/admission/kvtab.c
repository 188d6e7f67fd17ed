/* kvtab: engine hash -> key, an LRU list over entries in one array, found through an
 * open-addressed index (see kvtab.h). */
#include "admission/kvtab.h"

#include "util/xmalloc.h"

#include <stdlib.h>
#include <string.h>

/* The first allocation's entries; doubled up to the bound. */
#define KVTAB_MIN 64
/* No link: list ends and free entries' prev. */
#define NIL UINT32_MAX

struct ent {
    uint64_t hash, key;
    uint32_t prev, next; /* the LRU list (prev: more recent); a free entry: next free */
    uint32_t keyed;
};

struct kvtab {
    struct ent *e;
    size_t cap, bound, n; /* entries allocated, at most, held */
    uint32_t *slot;       /* index: entry + 1, 0 empty; nslots a power of 2 >= 2 cap */
    size_t nslots;
    uint32_t head, tail; /* most and least recently stored */
    uint32_t free;       /* the free entries' list */
};

static size_t home(const struct kvtab *t, uint64_t hash)
{
    /* The engine's hashes are digests already; the multiply only spreads their high bits. */
    return (size_t) ((hash * 0x9e3779b97f4a7c15ull) >> 32) & (t->nslots - 1);
}

/* The slot holding hash, or the empty slot where the probe ended. */
static size_t find(const struct kvtab *t, uint64_t hash)
{
    size_t i = home(t, hash);

    while (t->slot[i] != 0 && t->e[t->slot[i] - 1].hash != hash)
        i = (i + 1) & (t->nslots - 1);
    return i;
}

/* Empties slot i, moving back the entries of its run that could not be found past a hole. */
static void unslot(struct kvtab *t, size_t i)
{
    size_t mask = t->nslots - 1, j = i;

    t->slot[i] = 0;
    for (;;) {
        size_t h;

        j = (j + 1) & mask;
        if (t->slot[j] == 0)
            return;
        h = home(t, t->e[t->slot[j] - 1].hash);
        /* the entry at j stays unless its home lies cyclically outside (i, j] */
        if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
            t->slot[i] = t->slot[j];
            t->slot[j] = 0;
            i = j;
        }
    }
}

static void link_front(struct kvtab *t, uint32_t x)
{
    t->e[x].prev = NIL;
    t->e[x].next = t->head;
    if (t->head != NIL)
        t->e[t->head].prev = x;
    t->head = x;
    if (t->tail == NIL)
        t->tail = x;
}

static void unlink_ent(struct kvtab *t, uint32_t x)
{
    struct ent *e = &t->e[x];

    if (e->prev != NIL)
        t->e[e->prev].next = e->next;
    else
        t->head = e->next;
    if (e->next != NIL)
        t->e[e->next].prev = e->prev;
    else
        t->tail = e->prev;
}

/* Index sized for cap entries, every held entry placed again. */
static void reindex(struct kvtab *t)
{
    size_t want = 1;

    while (want < 2 * t->cap)
        want <<= 1;
    free(t->slot);
    t->nslots = want;
    t->slot = xcalloc(want, sizeof *t->slot);
    for (uint32_t x = t->head; x != NIL; x = t->e[x].next)
        t->slot[find(t, t->e[x].hash)] = x + 1;
}

/* More entries, up to the bound: the new ones go to the free list. */
static void grow(struct kvtab *t)
{
    size_t old = t->cap, cap = old ? old * 2 : KVTAB_MIN;

    if (cap > t->bound)
        cap = t->bound;
    t->e = xrealloc(t->e, cap * sizeof *t->e);
    for (size_t i = old; i < cap; i++) {
        t->e[i].next = i + 1 < cap ? (uint32_t) (i + 1) : t->free;
    }
    if (cap > old)
        t->free = (uint32_t) old;
    t->cap = cap;
    reindex(t);
}

struct kvtab *kvtab_new(size_t bound)
{
    struct kvtab *t = xcalloc(1, sizeof *t);

    /* entry numbers are 32-bit, with room for NIL and the index's +1 */
    t->bound = bound < 1 ? 1 : bound > NIL - 1 ? NIL - 1 : bound;
    t->head = t->tail = t->free = NIL;
    grow(t);
    return t;
}

void kvtab_free(struct kvtab *t)
{
    if (t == NULL)
        return;
    free(t->e);
    free(t->slot);
    free(t);
}

enum kvtab_found kvtab_get(const struct kvtab *t, uint64_t hash, uint64_t *key)
{
    size_t i = find(t, hash);
    const struct ent *e;

    if (t->slot[i] == 0)
        return KVTAB_ABSENT;
    e = &t->e[t->slot[i] - 1];
    if (!e->keyed)
        return KVTAB_UNKEYABLE;
    *key = e->key;
    return KVTAB_KEYED;
}

/* Takes entry x out of the table: index, list, back to the free list. */
static void drop(struct kvtab *t, uint32_t x, struct kvtab_ent *out)
{
    struct ent *e = &t->e[x];

    if (out != NULL)
        *out = (struct kvtab_ent){.hash = e->hash, .key = e->key, .keyed = (int) e->keyed};
    unslot(t, find(t, e->hash));
    unlink_ent(t, x);
    e->next = t->free;
    t->free = x;
    t->n--;
}

int kvtab_put(struct kvtab *t, uint64_t hash, int keyed, uint64_t key, struct kvtab_ent *evicted)
{
    size_t i = find(t, hash);
    int out = 0;
    uint32_t x;

    if (t->slot[i] != 0) {
        x = t->slot[i] - 1;
        unlink_ent(t, x);
    } else {
        if (t->n == t->cap && t->cap < t->bound)
            grow(t);
        if (t->n == t->bound) {
            drop(t, t->tail, evicted);
            out = 1;
        }
        x = t->free;
        t->free = t->e[x].next;
        t->e[x].hash = hash;
        t->n++;
        t->slot[find(t, hash)] = x + 1; /* the probe again: a grow or a drop moved things */
    }
    t->e[x].keyed = keyed != 0;
    t->e[x].key = keyed ? key : 0;
    link_front(t, x);
    return out;
}

enum kvtab_found kvtab_del(struct kvtab *t, uint64_t hash, uint64_t *key)
{
    size_t i = find(t, hash);
    struct kvtab_ent e;

    if (t->slot[i] == 0)
        return KVTAB_ABSENT;
    drop(t, t->slot[i] - 1, &e);
    if (!e.keyed)
        return KVTAB_UNKEYABLE;
    *key = e.key;
    return KVTAB_KEYED;
}

int kvtab_set_bound(struct kvtab *t, size_t bound, struct kvtab_ent *evicted)
{
    t->bound = bound < 1 ? 1 : bound > NIL - 1 ? NIL - 1 : bound;
    if (t->n <= t->bound)
        return 0;
    drop(t, t->tail, evicted);
    return 1;
}

void kvtab_clear(struct kvtab *t)
{
    memset(t->slot, 0, t->nslots * sizeof *t->slot);
    for (size_t i = 0; i < t->cap; i++)
        t->e[i].next = i + 1 < t->cap ? (uint32_t) (i + 1) : NIL;
    t->free = 0;
    t->head = t->tail = NIL;
    t->n = 0;
}

size_t kvtab_count(const struct kvtab *t)
{
    return t->n;
}

size_t kvtab_bound(const struct kvtab *t)
{
    return t->bound;
}

size_t kvtab_next(const struct kvtab *t, size_t cursor, struct kvtab_ent *e)
{
    uint32_t x = cursor == 0 ? t->tail : t->e[cursor - 1].prev;

    if (x == NIL)
        return 0;
    *e = (struct kvtab_ent){.hash = t->e[x].hash, .key = t->e[x].key, .keyed = (int) t->e[x].keyed};
    return (size_t) x + 1;
}
