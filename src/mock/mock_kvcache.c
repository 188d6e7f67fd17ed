/* mock_kvcache: a block pool indexed by chained block hashes, with an LRU of free blocks.
 *
 * Blocks live in one array that grows to the capacity as blocks are first needed (a large
 * --num-gpu-blocks costs nothing until used). A hash table of bucket chains (load at most 1)
 * maps a hash to its block; an intrusive doubly linked list orders the blocks nobody holds,
 * least recently released first. Indices, not pointers, so the array may move. */
#include "mock_kvcache.h"
#include "util/xmalloc.h"

#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
/* The parent hash of a sequence's first block. */
#define ROOT_HASH 0xcbf29ce484222325ull

struct kvblock {
    uint64_t hash;
    uint32_t ref;
    uint32_t next;               /* next block in the same hash bucket */
    uint32_t prev_lru, next_lru; /* on the LRU while ref == 0 */
};

struct mock_kvc {
    unsigned capacity, block_size;
    struct kvblock *b;
    uint32_t n, alloc; /* blocks used so far, blocks allocated */
    uint32_t *bucket;
    uint32_t nbucket; /* a power of two */
    uint32_t lru_head, lru_tail;
    size_t in_use;
    uint64_t evictions;
    struct mock_kvc_listener l;
};

struct mock_kvc *mock_kvc_new(unsigned capacity, unsigned block_size)
{
    struct mock_kvc *c = xcalloc(1, sizeof *c);

    c->capacity = capacity > NONE - 1 ? NONE - 1 : capacity;
    c->block_size = block_size ? block_size : 1;
    c->nbucket = 64;
    c->bucket = xmalloc(c->nbucket * sizeof *c->bucket);
    memset(c->bucket, 0xff, c->nbucket * sizeof *c->bucket);
    c->lru_head = c->lru_tail = NONE;
    return c;
}

void mock_kvc_listen(struct mock_kvc *c, const struct mock_kvc_listener *l)
{
    if (l != NULL)
        c->l = *l;
    else
        memset(&c->l, 0, sizeof c->l);
}

void mock_kvc_free(struct mock_kvc *c)
{
    if (c == NULL)
        return;
    free(c->b);
    free(c->bucket);
    free(c);
}

/* splitmix64's finalizer: spreads the FNV state over all 64 bits. */
static uint64_t mix64(uint64_t h)
{
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

uint64_t mock_kvc_hash(uint64_t parent, const uint32_t *ids, size_t n)
{
    uint64_t h = mix64(parent ? parent : ROOT_HASH);

    for (size_t i = 0; i < n; i++)
        h = (h ^ ids[i]) * 0x100000001b3ull;
    return mix64(h ^ n);
}

uint64_t mock_kvc_salt(const char *salt, size_t len)
{
    uint64_t h = ROOT_HASH;

    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char) salt[i]) * 0x100000001b3ull;
    /* a salt is never the unsalted parent: 0 stands for that one */
    h = mix64(h ^ len);
    return h ? h : 1;
}

static uint32_t find(const struct mock_kvc *c, uint64_t h)
{
    uint32_t i = c->bucket[h & (c->nbucket - 1)];

    while (i != NONE && c->b[i].hash != h)
        i = c->b[i].next;
    return i;
}

static void link_hash(struct mock_kvc *c, uint32_t i)
{
    uint32_t *head = &c->bucket[c->b[i].hash & (c->nbucket - 1)];

    c->b[i].next = *head;
    *head = i;
}

static void unlink_hash(struct mock_kvc *c, uint32_t i)
{
    uint32_t *p = &c->bucket[c->b[i].hash & (c->nbucket - 1)];

    while (*p != i)
        p = &c->b[*p].next;
    *p = c->b[i].next;
}

static void lru_remove(struct mock_kvc *c, uint32_t i)
{
    struct kvblock *k = &c->b[i];

    if (k->prev_lru != NONE)
        c->b[k->prev_lru].next_lru = k->next_lru;
    else
        c->lru_head = k->next_lru;
    if (k->next_lru != NONE)
        c->b[k->next_lru].prev_lru = k->prev_lru;
    else
        c->lru_tail = k->prev_lru;
}

static void lru_append(struct mock_kvc *c, uint32_t i)
{
    c->b[i].prev_lru = c->lru_tail;
    c->b[i].next_lru = NONE;
    if (c->lru_tail != NONE)
        c->b[c->lru_tail].next_lru = i;
    else
        c->lru_head = i;
    c->lru_tail = i;
}

/* Grows the array by one block (doubling its allocation) and keeps the table's load <= 1. */
static uint32_t grow(struct mock_kvc *c)
{
    if (c->n == c->alloc) {
        c->alloc = c->alloc ? c->alloc * 2 : 64;
        if (c->alloc > c->capacity)
            c->alloc = c->capacity;
        c->b = xrealloc(c->b, (size_t) c->alloc * sizeof *c->b);
    }
    if (c->n == c->nbucket) {
        free(c->bucket);
        c->nbucket *= 2;
        c->bucket = xmalloc((size_t) c->nbucket * sizeof *c->bucket);
        memset(c->bucket, 0xff, (size_t) c->nbucket * sizeof *c->bucket);
        for (uint32_t i = 0; i < c->n; i++)
            link_hash(c, i);
    }
    return c->n++;
}

/* A block for hash h, held once: a never-used one, else the LRU one; NONE if all are held. */
static uint32_t allocate(struct mock_kvc *c, uint64_t h)
{
    uint32_t i;

    if (c->n < c->capacity) {
        i = grow(c);
    } else if (c->lru_head != NONE) {
        i = c->lru_head;
        lru_remove(c, i);
        unlink_hash(c, i);
        c->evictions++;
        if (c->l.removed != NULL)
            c->l.removed(c->l.arg, c->b[i].hash);
    } else {
        return NONE;
    }
    c->b[i].hash = h;
    c->b[i].ref = 1;
    link_hash(c, i);
    c->in_use++;
    return i;
}

static void hold(struct mock_kvseq *s, uint32_t i)
{
    if (s->nheld == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->held = xrealloc(s->held, s->cap * sizeof *s->held);
    }
    s->held[s->nheld++] = i;
}

int mock_kvc_push(struct mock_kvc *c, struct mock_kvseq *s, const uint32_t *ids, int may_hit)
{
    uint64_t parent = s->last, h = mock_kvc_hash(parent, ids, c->block_size);
    uint32_t i = find(c, h);
    int hit = i != NONE && may_hit && !s->missed, has_parent = s->pushed;

    s->last = h;
    s->pushed = 1;
    if (!hit)
        s->missed = 1;
    if (i != NONE) {
        /* Found but no hit (its prefix missed, or it is being computed anyway): shared all
         * the same, so that one hash never names two blocks. */
        if (c->b[i].ref++ == 0) {
            lru_remove(c, i);
            c->in_use++;
        }
    } else if ((i = allocate(c, h)) == NONE) {
        return 0; /* every block is held: this one goes uncached */
    } else if (c->l.stored != NULL) {
        c->l.stored(c->l.arg, h, has_parent, parent, ids);
    }
    hold(s, i);
    return hit;
}

size_t mock_kvc_begin(struct mock_kvc *c, struct mock_kvseq *s, uint64_t seed, const uint32_t *ids,
                      size_t n)
{
    size_t bs = c->block_size, cached = 0;

    memset(s, 0, sizeof *s);
    s->last = seed;
    for (size_t k = 0; (k + 1) * bs <= n; k++)
        if (mock_kvc_push(c, s, ids + k * bs, (k + 1) * bs < n))
            cached += bs;
    return cached;
}

void mock_kvc_release(struct mock_kvc *c, struct mock_kvseq *s)
{
    for (size_t k = s->nheld; k-- > 0;) {
        uint32_t i = s->held[k];

        if (--c->b[i].ref == 0) {
            lru_append(c, i);
            c->in_use--;
        }
    }
    free(s->held);
    memset(s, 0, sizeof *s);
}

size_t mock_kvc_cached(const struct mock_kvc *c)
{
    return c->n;
}

size_t mock_kvc_in_use(const struct mock_kvc *c)
{
    return c->in_use;
}

uint64_t mock_kvc_evictions(const struct mock_kvc *c)
{
    return c->evictions;
}
