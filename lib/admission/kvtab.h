/* kvtab: one engine rank's blocks as admitd relays them: engine block hash -> our key, or
 * "unkeyable", bounded, the least recently stored out first.
 *
 * admitd keys an engine's stored blocks itself (kvrelay.h) and needs the engine's hash of each
 * block it has seen for two things: a later store names its parent by that hash (the parent's
 * key is the seed of its children's), and a removal names only hashes. A block that could not
 * be keyed is kept too, marked unkeyable, so that its children are known to be unkeyable and
 * its removal is recognised (not counted as an unknown hash).
 *
 * Bounded: at most `bound` entries; a put on a full table first evicts the entry least
 * recently put (a put of a hash already there moves it to the front), and hands it back so
 * that the caller can say the key is gone. Memory grows with use, doubling up to the bound:
 * about 40 bytes per entry (the entry, 32, and its index slots). Lookups are one probe
 * sequence in an open-addressed index (linear probing, at most half full, deletion by
 * backward shift: no tombstones). Not thread-safe. */
#ifndef ADMIT_KVTAB_H
#define ADMIT_KVTAB_H

#include <stddef.h>
#include <stdint.h>

/* What a lookup found. */
enum kvtab_found {
    KVTAB_ABSENT = 0, /* never stored, removed or evicted */
    KVTAB_UNKEYABLE,  /* stored, without a key */
    KVTAB_KEYED       /* stored, with a key */
};

/* One entry, as an eviction hands it back. */
struct kvtab_ent {
    uint64_t hash, key;
    int keyed;
};

struct kvtab;

/** an empty table of at most bound (>= 1) entries */
struct kvtab *kvtab_new(size_t bound);
/** frees t (NULL is fine) */
void kvtab_free(struct kvtab *t);
/** what hash maps to; its key into *key when keyed */
enum kvtab_found kvtab_get(const struct kvtab *t, uint64_t hash, uint64_t *key);
/** hash -> key (keyed) or unkeyable (keyed 0), now the most recently stored; when the table
    was full, the least recently stored entry went: 1 and it in *evicted, else 0 */
int kvtab_put(struct kvtab *t, uint64_t hash, int keyed, uint64_t key, struct kvtab_ent *evicted);
/** removes hash; what it was (its key into *key when keyed) */
enum kvtab_found kvtab_del(struct kvtab *t, uint64_t hash, uint64_t *key);
/** a new bound (>= 1); while more entries are held than it, evicts the least recently stored:
    1 and it in *evicted per call (call again until 0), else 0 */
int kvtab_set_bound(struct kvtab *t, size_t bound, struct kvtab_ent *evicted);
/** forgets every entry (keeps the memory) */
void kvtab_clear(struct kvtab *t);
/** entries held */
size_t kvtab_count(const struct kvtab *t);
/** the bound */
size_t kvtab_bound(const struct kvtab *t);
/** iteration from the least recently stored: pass 0 first, then what it returned, until 0;
    each call fills *e with the next entry */
size_t kvtab_next(const struct kvtab *t, size_t cursor, struct kvtab_ent *e);

#endif
