/* kvrelay: keying an engine's stored blocks, and the kv_events messages (see kvrelay.h). */
#include "admission/kvrelay.h"

#include "admission/kvkeys.h"
#include "admission/kvtab.h"
#include "util/xmalloc.h"
#include "wire/kvmsg.h"

#include <stdlib.h>
#include <string.h>

struct rank {
    struct kvtab *tab;
    uint64_t seq;        /* last published */
    uint32_t block_size; /* of the last store: removals and the dump carry it */
    struct kvrelay_stats st;
};

/* The message being filled: keys of one op and block size, sent when another comes, when
 * full, and at the end of a batch. */
struct pending {
    unsigned rank;
    enum kvm_op op;
    uint32_t block_size, n;
    uint64_t keys[KVM_KEYS_MAX];
};

struct kvrelay {
    uint64_t epoch;
    kvrelay_emit_fn emit;
    void *arg;
    char *model; /* NULL: unknown */
    size_t model_len;
    uint64_t seed; /* kvk_seed(model, "") */
    struct rank *r[KVRELAY_MAX_RANKS];
    struct pending p;
};

struct kvrelay *kvrelay_new(uint64_t epoch, kvrelay_emit_fn emit, void *arg)
{
    struct kvrelay *r = xcalloc(1, sizeof *r);

    r->epoch = epoch;
    r->emit = emit;
    r->arg = arg;
    return r;
}

void kvrelay_free(struct kvrelay *r)
{
    if (r == NULL)
        return;
    for (unsigned i = 0; i < KVRELAY_MAX_RANKS; i++)
        if (r->r[i] != NULL) {
            kvtab_free(r->r[i]->tab);
            free(r->r[i]);
        }
    free(r->model);
    free(r);
}

void kvrelay_set_model(struct kvrelay *r, const char *model, size_t len)
{
    if (model != NULL && r->model != NULL && len == r->model_len &&
        memcmp(model, r->model, len) == 0)
        return;
    free(r->model);
    r->model = NULL;
    r->model_len = 0;
    if (model == NULL)
        return;
    r->model = xmalloc(len + 1);
    memcpy(r->model, model, len);
    r->model[len] = '\0';
    r->model_len = len;
    r->seed = kvk_seed(model, len, "", 0);
}

static size_t bound_of(uint64_t blocks)
{
    uint64_t b = (blocks ? blocks : KVRELAY_DEFAULT_BLOCKS) * 2;

    return b > SIZE_MAX ? SIZE_MAX : (size_t) b;
}

/* The rank's state, made at its first use. */
static struct rank *rank_of(struct kvrelay *r, unsigned rank)
{
    struct rank *k;

    if (rank >= KVRELAY_MAX_RANKS)
        return NULL;
    if ((k = r->r[rank]) == NULL) {
        k = r->r[rank] = xcalloc(1, sizeof *k);
        k->tab = kvtab_new(bound_of(0));
    }
    return k;
}

/* Sends one message of rank: the next sequence number. */
static void send(struct kvrelay *r, unsigned rank, enum kvm_op op, uint32_t block_size,
                 const uint64_t *keys, uint32_t n)
{
    struct rank *k = r->r[rank];
    struct kvm_msg m = {.op = op,
                        .dp_rank = rank,
                        .block_size = op == KVM_CLEARED ? 0 : block_size,
                        .n = n,
                        .epoch = r->epoch,
                        .seq = k->seq + 1};
    unsigned char out[KVM_MSG_MAX];
    size_t len = kvm_encode(&m, keys, out, sizeof out);

    if (len == 0) /* n <= KVM_KEYS_MAX and rank < 64: cannot happen */
        abort();
    k->seq++;
    k->st.messages[op - 1]++;
    if (op == KVM_STORED || op == KVM_REMOVED)
        k->st.keys[op - 1] += n;
    r->emit(r->arg, rank, out, len);
}

static void flush(struct kvrelay *r)
{
    if (r->p.n > 0)
        send(r, r->p.rank, r->p.op, r->p.block_size, r->p.keys, r->p.n);
    r->p.n = 0;
}

/* One key into the message being filled: a new message when the op, the block size or the
 * rank changes, or the message is full. */
static void add(struct kvrelay *r, unsigned rank, enum kvm_op op, uint32_t block_size, uint64_t key)
{
    struct pending *p = &r->p;

    if (p->n > 0 && (p->rank != rank || p->op != op || p->block_size != block_size))
        flush(r);
    if (p->n == KVM_KEYS_MAX)
        flush(r);
    p->rank = rank;
    p->op = op;
    p->block_size = block_size;
    p->keys[p->n++] = key;
}

/* An entry the table's bound pushed out: routers must not keep its key. */
static void evicted(struct kvrelay *r, unsigned rank, const struct kvtab_ent *e)
{
    struct rank *k = r->r[rank];

    k->st.evicted++;
    if (e->keyed)
        add(r, rank, KVM_REMOVED, k->block_size, e->key);
}

/* The seed of a chain that starts at the root, for the event's model; 0 when it cannot be
 * keyed: no base model yet, or a LoRA known only by its id. */
static int root_seed(const struct kvrelay *r, const struct kve_event *e, uint64_t *seed)
{
    if (e->lora_name != NULL) {
        *seed = kvk_seed(e->lora_name, e->lora_name_len, "", 0);
        return 1;
    }
    if (e->lora_id >= 0 || r->model == NULL)
        return 0;
    *seed = r->seed;
    return 1;
}

static void stored(struct kvrelay *r, unsigned rank, const struct kve_event *e,
                   const struct kve_out *o)
{
    struct rank *k = r->r[rank];
    uint64_t parent = 0;
    int keyable;

    if (e->has_parent)
        /* a LoRA named by its id alone cannot be keyed, whatever its parent */
        keyable = kvtab_get(k->tab, e->parent, &parent) == KVTAB_KEYED &&
                  (e->lora_name != NULL || e->lora_id < 0);
    else
        keyable = root_seed(r, e, &parent);
    if (k->block_size != e->block_size)
        flush(r); /* keys of another size: their own message */
    k->block_size = e->block_size;
    for (uint32_t i = 0; i < e->n_hashes; i++) {
        uint64_t hash = o->hashes[e->hash_first + i], key = 0;
        struct kvtab_ent out;

        /* once a block cannot be keyed, none of its children can */
        keyable = keyable && i < e->n_plain;
        if (keyable) {
            key = kvk_block32(parent, o->tokens + e->token_first + (size_t) i * e->block_size,
                              e->block_size);
            parent = key;
        } else {
            k->st.unkeyed++;
        }
        if (kvtab_put(k->tab, hash, keyable, key, &out))
            evicted(r, rank, &out);
        if (keyable)
            add(r, rank, KVM_STORED, e->block_size, key);
    }
}

static void removed(struct kvrelay *r, unsigned rank, const struct kve_event *e,
                    const struct kve_out *o)
{
    struct rank *k = r->r[rank];

    for (uint32_t i = 0; i < e->n_hashes; i++) {
        uint64_t key;
        enum kvtab_found f = kvtab_del(k->tab, o->hashes[e->hash_first + i], &key);

        if (f == KVTAB_KEYED)
            add(r, rank, KVM_REMOVED, k->block_size, key);
        else if (f == KVTAB_ABSENT)
            k->st.unknown++;
    }
}

void kvrelay_batch(struct kvrelay *r, unsigned rank, const struct kve_out *o)
{
    struct rank *k = rank_of(r, rank);

    if (k == NULL)
        return;
    for (size_t i = 0; i < o->n_events; i++) {
        const struct kve_event *e = &o->events[i];

        if (e->kind == KVE_CLEARED) {
            kvrelay_clear(r, rank, KVRELAY_ENGINE);
        } else if (e->group_idx > 0) {
            k->st.other_group++;
        } else if (e->kind == KVE_STORED) {
            stored(r, rank, e, o);
        } else {
            removed(r, rank, e, o);
        }
    }
    flush(r);
}

void kvrelay_clear(struct kvrelay *r, unsigned rank, enum kvrelay_why why)
{
    struct rank *k = rank_of(r, rank);

    if (k == NULL)
        return;
    flush(r);
    kvtab_clear(k->tab);
    k->st.cleared[why]++;
    send(r, rank, KVM_CLEARED, 0, NULL, 0);
}

void kvrelay_set_blocks(struct kvrelay *r, unsigned rank, uint64_t blocks)
{
    struct rank *k = rank_of(r, rank);
    struct kvtab_ent out;

    if (k == NULL || kvtab_bound(k->tab) == bound_of(blocks))
        return;
    while (kvtab_set_bound(k->tab, bound_of(blocks), &out))
        evicted(r, rank, &out);
    flush(r);
}

/* One snapshot record: length, then the message. */
static void record(const struct kvrelay *r, unsigned rank, const struct rank *k,
                   const uint64_t *keys, uint32_t n, struct buf *out)
{
    struct kvm_msg m = {.op = KVM_SNAPSHOT,
                        .dp_rank = rank,
                        .block_size = k ? k->block_size : 0,
                        .n = n,
                        .epoch = r->epoch,
                        .seq = k ? k->seq : 0};
    unsigned char msg[4 + KVM_MSG_MAX];
    size_t len = kvm_encode(&m, keys, msg + 4, sizeof msg - 4);

    for (int i = 0; i < 4; i++)
        msg[i] = (unsigned char) (len >> (24 - 8 * i));
    buf_append(out, msg, len + 4);
}

void kvrelay_dump(const struct kvrelay *r, unsigned ranks, struct buf *out)
{
    for (unsigned rank = 0; rank < ranks && rank < KVRELAY_MAX_RANKS; rank++) {
        const struct rank *k = r->r[rank];
        uint64_t keys[KVM_KEYS_MAX];
        uint32_t n = 0;
        int sent = 0;
        struct kvtab_ent e;

        for (size_t c = k ? kvtab_next(k->tab, 0, &e) : 0; c != 0; c = kvtab_next(k->tab, c, &e)) {
            if (!e.keyed)
                continue;
            keys[n++] = e.key;
            if (n == KVM_KEYS_MAX) {
                record(r, rank, k, keys, n, out);
                sent = 1;
                n = 0;
            }
        }
        if (n > 0 || !sent) /* every rank has a record, if only an empty one */
            record(r, rank, k, keys, n, out);
    }
}

struct kvrelay_stats kvrelay_stats(const struct kvrelay *r, unsigned rank)
{
    struct kvrelay_stats none;

    memset(&none, 0, sizeof none);
    return rank < KVRELAY_MAX_RANKS && r->r[rank] != NULL ? r->r[rank]->st : none;
}

uint64_t kvrelay_seq(const struct kvrelay *r, unsigned rank)
{
    return rank < KVRELAY_MAX_RANKS && r->r[rank] != NULL ? r->r[rank]->seq : 0;
}

uint64_t kvrelay_epoch(const struct kvrelay *r)
{
    return r->epoch;
}
