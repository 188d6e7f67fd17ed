/* model_table: the router's table of which workers take which model (see model_table.h). */
#include "model_table.h"
#include "util/xmalloc.h"

#include <stdlib.h>
#include <string.h>

/* An interned name and the workers that may take it. */
struct mname {
    char *name;
    uint64_t *serves;        /* workers whose known list holds it */
    uint64_t *elig;          /* serves, and the workers whose list is unknown */
    unsigned nserves, nelig; /* bits set in each */
};

/* A worker, as the table knows it. */
struct mworker {
    struct admit_load_models list; /* the newest list received (to compare the next with) */
    int present;                   /* added and not dropped */
    int unknown;                   /* takes any model: its list is unknown or did not fit */
};

struct model_table {
    mtab_name_fn served, unserved; /* mtab_set_hooks() */
    void *arg;
    struct mname *v;
    size_t n, cap;
    uint32_t *hash; /* index + 1 into v, 0 = empty; open addressing, hcap a power of two */
    size_t hcap;
    uint64_t *unknown; /* workers that take any model */
    uint64_t *none;    /* no worker: what MTAB_NONE hands out */
    unsigned nunknown, npresent;
    struct mworker *w;
    int nw;
    size_t words; /* of every bitset */
};

static const struct admit_load_models unknown_list = {ADMIT_LOAD_UNKNOWN, 0, 0, {0}};

static void bit_set(uint64_t *b, int k)
{
    b[k >> 6] |= (uint64_t) 1 << (k & 63);
}

static void bit_clear(uint64_t *b, int k)
{
    b[k >> 6] &= ~((uint64_t) 1 << (k & 63));
}

static size_t hash_of(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    for (; *s; s++)
        h = (h ^ (unsigned char) *s) * 1099511628211ULL;
    return (size_t) h;
}

static long lookup(const struct model_table *m, const char *name)
{
    if (m->hcap == 0)
        return -1;
    for (size_t i = hash_of(name) & (m->hcap - 1);; i = (i + 1) & (m->hcap - 1)) {
        uint32_t v = m->hash[i];
        if (v == 0)
            return -1;
        if (strcmp(m->v[v - 1].name, name) == 0)
            return (long) v - 1;
    }
}

static void rehash(struct model_table *m, size_t hcap)
{
    free(m->hash);
    m->hcap = hcap;
    m->hash = xcalloc(hcap, sizeof *m->hash);
    for (size_t k = 0; k < m->n; k++) {
        size_t i = hash_of(m->v[k].name) & (hcap - 1);
        while (m->hash[i] != 0)
            i = (i + 1) & (hcap - 1);
        m->hash[i] = (uint32_t) k + 1;
    }
}

static void free_name(struct mname *n)
{
    free(n->name);
    free(n->serves);
    free(n->elig);
}

/* Forgets the names no worker lists (ids change; bitsets handed out are stale). */
static void compact(struct model_table *m)
{
    size_t k = 0;

    for (size_t i = 0; i < m->n; i++) {
        if (m->v[i].nserves == 0)
            free_name(&m->v[i]);
        else
            m->v[k++] = m->v[i];
    }
    m->n = k;
    rehash(m, m->hcap);
}

/* The id of name, added if new; the caller made room (fits()). */
static long intern(struct model_table *m, const char *name)
{
    long id = lookup(m, name);
    struct mname *n;

    if (id >= 0)
        return id;
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 16;
        m->v = xrealloc(m->v, m->cap * sizeof *m->v);
    }
    n = &m->v[m->n];
    n->name = xstrdup(name);
    n->serves = xcalloc(m->words ? m->words : 1, sizeof *n->serves);
    n->elig = xcalloc(m->words ? m->words : 1, sizeof *n->elig);
    if (m->words)
        memcpy(n->elig, m->unknown, m->words * sizeof *n->elig);
    n->nserves = 0;
    n->nelig = m->nunknown;
    m->n++;
    if (m->n * 2 > m->hcap)
        rehash(m, m->hcap ? m->hcap * 2 : 64);
    else {
        size_t i = hash_of(name) & (m->hcap - 1);
        while (m->hash[i] != 0)
            i = (i + 1) & (m->hcap - 1);
        m->hash[i] = (uint32_t) m->n;
    }
    return (long) m->n - 1;
}

static uint64_t *grow_bits(uint64_t *b, size_t old, size_t words)
{
    b = xrealloc(b, words * sizeof *b);
    memset(b + old, 0, (words - old) * sizeof *b);
    return b;
}

/* Worker w takes any model from now on (its known bits, if any, are already cleared). */
static void make_unknown(struct model_table *m, int w)
{
    if (m->w[w].unknown)
        return;
    m->w[w].unknown = 1;
    bit_set(m->unknown, w);
    m->nunknown++;
    for (size_t i = 0; i < m->n; i++) {
        bit_set(m->v[i].elig, w);
        m->v[i].nelig++;
    }
}

/* Worker w takes only what it lists from now on (its list's bits are set next). */
static void make_known(struct model_table *m, int w)
{
    if (!m->w[w].unknown)
        return;
    m->w[w].unknown = 0;
    bit_clear(m->unknown, w);
    m->nunknown--;
    for (size_t i = 0; i < m->n; i++) {
        bit_clear(m->v[i].elig, w);
        m->v[i].nelig--;
    }
}

/* Clears the bits of worker w's known list. */
static void remove_known(struct model_table *m, int w)
{
    const struct admit_load_models *l = &m->w[w].list;

    for (const char *p = admit_load_models_next(l, NULL); p != NULL;
         p = admit_load_models_next(l, p)) {
        long id = lookup(m, p);
        if (id < 0)
            continue; /* cannot be: a name in a known list stays interned */
        bit_clear(m->v[id].serves, w);
        bit_clear(m->v[id].elig, w);
        m->v[id].nserves--;
        m->v[id].nelig--;
    }
}

/* Worker w's list went from was to its list now: the hooks hear of the names it brought
 * that no other worker lists, and of those it dropped that no worker lists any more. A name
 * the table forgot to make room (compact()) is listed by none. A list holds at most
 * ADMIT_LOAD_MODELS_MAX names, and lists change seldom: the lookups are cheap enough. */
static void tell(const struct model_table *m, int w, const struct admit_load_models *was)
{
    const struct admit_load_models *now = &m->w[w].list;
    int known = m->w[w].present && !m->w[w].unknown;

    for (const char *p = admit_load_models_next(was, NULL); p != NULL && m->unserved != NULL;
         p = admit_load_models_next(was, p)) {
        long id = lookup(m, p);

        if (id < 0 || m->v[id].nserves == 0)
            m->unserved(m->arg, p);
    }
    for (const char *p = known ? admit_load_models_next(now, NULL) : NULL;
         p != NULL && m->served != NULL; p = admit_load_models_next(now, p)) {
        long id = lookup(m, p);

        if (id >= 0 && m->v[id].nserves == 1 && !admit_load_models_has(was, p))
            m->served(m->arg, p);
    }
}

struct model_table *mtab_new(void)
{
    return xcalloc(1, sizeof(struct model_table));
}

void mtab_set_hooks(struct model_table *m, mtab_name_fn served, mtab_name_fn unserved, void *arg)
{
    m->served = served;
    m->unserved = unserved;
    m->arg = arg;
}

void mtab_free(struct model_table *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n; i++)
        free_name(&m->v[i]);
    free(m->v);
    free(m->hash);
    free(m->unknown);
    free(m->none);
    free(m->w);
    free(m);
}

void mtab_reserve(struct model_table *m, int n)
{
    size_t words = ((size_t) n + 63) / 64;
    int old = m->nw;

    if (n <= m->nw)
        return;
    if (words > m->words) {
        m->unknown = grow_bits(m->unknown, m->words, words);
        m->none = grow_bits(m->none, m->words, words);
        for (size_t i = 0; i < m->n; i++) {
            m->v[i].serves = grow_bits(m->v[i].serves, m->words, words);
            m->v[i].elig = grow_bits(m->v[i].elig, m->words, words);
        }
        m->words = words;
    }
    m->w = xrealloc(m->w, (size_t) n * sizeof *m->w);
    m->nw = n;
    for (int k = old; k < n; k++) {
        m->w[k].list = unknown_list;
        m->w[k].present = 1;
        m->w[k].unknown = 0;
        m->npresent++;
        make_unknown(m, k);
    }
}

/* Names of l not interned yet. */
static size_t misses(const struct model_table *m, const struct admit_load_models *l)
{
    size_t k = 0;

    for (const char *p = admit_load_models_next(l, NULL); p != NULL;
         p = admit_load_models_next(l, p))
        k += lookup(m, p) < 0;
    return k;
}

/* 1 when l's names can all be interned, forgetting the names nobody lists if need be. */
static int fits(struct model_table *m, const struct admit_load_models *l)
{
    if (m->n + misses(m, l) <= MTAB_NAMES_MAX)
        return 1;
    compact(m);
    return m->n + misses(m, l) <= MTAB_NAMES_MAX;
}

int mtab_set(struct model_table *m, int w, const struct admit_load_models *l)
{
    struct mworker *mw;
    struct admit_load_models was;
    long ids[ADMIT_LOAD_MODELS_MAX];
    int n = 0;

    if (w < 0)
        return 0;
    mtab_reserve(m, w + 1);
    mw = &m->w[w];
    if (!mw->present) { /* dropped, and back */
        mw->present = 1;
        mw->unknown = 0;
        mw->list = unknown_list;
        m->npresent++;
        make_unknown(m, w);
    } else if (admit_load_models_equal(&mw->list, l)) {
        return 0; /* the same list again: nearly every message */
    }
    was = mw->unknown ? unknown_list : mw->list; /* the names it served, for tell() */
    if (!mw->unknown)
        remove_known(m, w);
    mw->list = *l;
    /* Unknown, or more names than the table holds: it takes any model. */
    if (l->n < 0 || !fits(m, l)) {
        make_unknown(m, w);
        tell(m, w, &was);
        return 1;
    }
    for (const char *p = admit_load_models_next(l, NULL); p != NULL && n < ADMIT_LOAD_MODELS_MAX;
         p = admit_load_models_next(l, p))
        ids[n++] = intern(m, p);
    make_known(m, w);
    for (int i = 0; i < n; i++) {
        struct mname *mn = &m->v[ids[i]];
        bit_set(mn->serves, w);
        bit_set(mn->elig, w);
        mn->nserves++;
        mn->nelig++;
    }
    tell(m, w, &was);
    return 1;
}

void mtab_drop(struct model_table *m, int w)
{
    struct mworker *mw;
    struct admit_load_models was;

    if (w < 0 || w >= m->nw || !m->w[w].present)
        return;
    mw = &m->w[w];
    was = mw->unknown ? unknown_list : mw->list;
    if (mw->unknown) {
        mw->unknown = 0;
        bit_clear(m->unknown, w);
        m->nunknown--;
        for (size_t i = 0; i < m->n; i++) {
            bit_clear(m->v[i].elig, w);
            m->v[i].nelig--;
        }
    } else {
        remove_known(m, w);
    }
    mw->list = unknown_list;
    mw->present = 0;
    m->npresent--;
    tell(m, w, &was);
}

enum mtab_verdict mtab_eligible(const struct model_table *m, const char *model,
                                const uint64_t **eligible)
{
    long id;

    *eligible = NULL;
    if (model == NULL || model[0] == '\0' || m->npresent == 0)
        return MTAB_ANY; /* no workers: selection answers that none is available */
    id = lookup(m, model);
    if (id < 0) {
        if (m->nunknown == 0) {
            *eligible = m->none;
            return MTAB_NONE;
        }
        if (m->nunknown == m->npresent)
            return MTAB_ANY;
        *eligible = m->unknown;
        return MTAB_SOME;
    }
    if (m->v[id].nelig == 0) {
        *eligible = m->none;
        return MTAB_NONE;
    }
    if (m->v[id].nelig == m->npresent)
        return MTAB_ANY;
    *eligible = m->v[id].elig;
    return MTAB_SOME;
}

const struct admit_load_models *mtab_list(const struct model_table *m, int w)
{
    return w >= 0 && w < m->nw ? &m->w[w].list : &unknown_list;
}

size_t mtab_names(const struct model_table *m)
{
    return m->n;
}
