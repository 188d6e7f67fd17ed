/* mock_kvpub: a rank's KV cache events, batched per turn of the event loop, packed with
 * msgpack-c, published on a ZMQ PUB and kept in a ring for the replay ROUTER.
 *
 * The cache reports block by block (mock_kvc_listener); the pending events coalesce them as
 * vLLM's block pool does per request: a block whose parent is the last block of the pending
 * store joins it, and the evictions that make room for a store go, as one BlockRemoved,
 * before it (vLLM evicts for all of a request's new blocks, then stores them). An event made
 * active (not a timer) flushes them once the callback that changed the cache returns: one
 * batch per scheduler step of the mock, never an empty one. */
#include "mock_kvpub.h"
#include "util/log.h"
#include "util/xmalloc.h"

#include <event2/event.h>
#include <msgpack.h>
#include <zmq.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ZMQ's PUB high-water mark, vLLM's default hwm: messages past it are dropped. */
#define KVPUB_HWM 100000

enum { EV_STORED, EV_REMOVED };

/* A pending event: its own arrays, kept (emptied) from batch to batch. */
struct kvev {
    int kind;
    int has_parent;
    uint64_t parent;
    uint64_t salt; /* a root chain's seed: its request's cache_salt (0: none) */
    uint64_t *h;   /* block_hashes */
    size_t nh, hcap;
    uint32_t *ids; /* a store's token ids: nh * block_size of them */
    size_t nids, idscap;
};

/* A published batch, kept for replay. */
struct kvbatch {
    int64_t seq;
    char *buf;
    size_t len;
};

struct mock_kvpub {
    void *pub, *router; /* router: NULL without a replay endpoint */
    struct mock_kvc *cache;
    struct event *flush, *replay;
    unsigned rank, block_size;
    enum mock_kv_encoding enc;
    int hash_bytes;
    char topic[MOCK_KV_ENDPOINT_MAX];
    int64_t next_seq;
    struct kvev *ev; /* pending events: ev[0 .. nev), and emptied ones up to evcap */
    size_t nev, evcap;
    struct kvbatch *ring; /* the last nring batches, oldest at ring[head] once full */
    size_t nring, ringcap, head;
};

int mock_kvpub_rank_endpoint(const char *endpoint, unsigned rank, char *out, size_t outlen)
{
    const char *colon = strrchr(endpoint, ':');
    int n;

    if (strncmp(endpoint, "tcp://", 6) == 0 && colon != NULL && colon > endpoint + 6) {
        unsigned long port = strtoul(colon + 1, NULL, 10) + rank;

        if (port > 65535)
            return -1;
        n = snprintf(out, outlen, "%.*s:%lu", (int) (colon - endpoint), endpoint, port);
    } else if (rank > 0) {
        n = snprintf(out, outlen, "%s_dp%u", endpoint, rank);
    } else {
        n = snprintf(out, outlen, "%s", endpoint);
    }
    return n < 0 || (size_t) n >= outlen ? -1 : 0;
}

static void grow(void **a, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return;
    while (*cap < need)
        *cap = *cap ? *cap * 2 : 16;
    *a = xrealloc(*a, *cap * size);
}

static void put_be64(unsigned char *b, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (unsigned char) v;
}

/* A new empty event at position at (the end, or before the last one). */
static struct kvev *new_event(struct mock_kvpub *p, int kind, size_t at)
{
    struct kvev e = {.kind = kind};
    size_t old = p->evcap;

    grow((void **) &p->ev, &p->evcap, p->nev + 1, sizeof *p->ev);
    memset(p->ev + old, 0, (p->evcap - old) * sizeof *p->ev);
    /* the emptied event past the end lends its arrays */
    e.h = p->ev[p->nev].h;
    e.hcap = p->ev[p->nev].hcap;
    e.ids = p->ev[p->nev].ids;
    e.idscap = p->ev[p->nev].idscap;
    memmove(p->ev + at + 1, p->ev + at, (p->nev - at) * sizeof *p->ev);
    p->ev[at] = e;
    if (p->nev++ == 0)
        event_active(p->flush, EV_TIMEOUT, 0);
    return &p->ev[at];
}

static void add_hash(struct kvev *e, uint64_t h)
{
    grow((void **) &e->h, &e->hcap, e->nh + 1, sizeof *e->h);
    e->h[e->nh++] = h;
}

static void on_stored(void *arg, uint64_t hash, int has_parent, uint64_t parent,
                      const uint32_t *ids)
{
    struct mock_kvpub *p = arg;
    struct kvev *e = p->nev > 0 ? &p->ev[p->nev - 1] : NULL;

    /* the next block of the pending store's chain joins it, as vLLM stores a request's new
     * blocks in one event */
    if (e == NULL || e->kind != EV_STORED || !has_parent || e->h[e->nh - 1] != parent) {
        e = new_event(p, EV_STORED, p->nev);
        e->has_parent = has_parent;
        if (has_parent)
            e->parent = parent;
        else
            e->salt = parent;
    }
    add_hash(e, hash);
    grow((void **) &e->ids, &e->idscap, e->nids + p->block_size, sizeof *e->ids);
    memcpy(e->ids + e->nids, ids, p->block_size * sizeof *ids);
    e->nids += p->block_size;
}

static int names(const struct kvev *e, uint64_t hash)
{
    if (e->has_parent && e->parent == hash)
        return 1;
    for (size_t i = 0; i < e->nh; i++)
        if (e->h[i] == hash)
            return 1;
    return 0;
}

static void on_removed(void *arg, uint64_t hash)
{
    struct mock_kvpub *p = arg;
    size_t at = p->nev;

    /* vLLM evicts a request's new blocks' places before it stores them: an eviction during a
     * pending store goes before it, unless the store names the block (then the order is the
     * truth a reader needs: store, then removal). */
    if (at > 0 && p->ev[at - 1].kind == EV_STORED && !names(&p->ev[at - 1], hash))
        at--;
    if (at > 0 && p->ev[at - 1].kind == EV_REMOVED)
        add_hash(&p->ev[at - 1], hash);
    else
        add_hash(new_event(p, EV_REMOVED, at), hash);
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);

    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_hash(const struct mock_kvpub *p, msgpack_packer *pk, uint64_t h)
{
    unsigned char b[8];

    if (!p->hash_bytes) {
        msgpack_pack_uint64(pk, h);
        return;
    }
    /* vLLM's bytes are the whole digest; a reader takes the last 8 big-endian, these. */
    put_be64(b, h);
    msgpack_pack_bin(pk, sizeof b);
    msgpack_pack_bin_body(pk, b, sizeof b);
}

/* A field: its name first in the map encoding, nothing in the positional one. */
static void pack_key(const struct mock_kvpub *p, msgpack_packer *pk, const char *name)
{
    if (p->enc == MOCK_KV_MAP)
        pack_str(pk, name);
}

static void pack_event(const struct mock_kvpub *p, msgpack_packer *pk, const struct kvev *e)
{
    int stored = e->kind == EV_STORED;
    /* BlockStored: tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id,
     * medium, lora_name, and extra_keys for a salted chain; BlockRemoved: tag, block_hashes,
     * medium. */
    size_t n = stored ? (e->salt ? 9 : 8) : 3;

    if (p->enc == MOCK_KV_MAP) {
        msgpack_pack_map(pk, n);
        pack_str(pk, "type");
    } else {
        msgpack_pack_array(pk, n);
    }
    pack_str(pk, stored ? "BlockStored" : "BlockRemoved");
    pack_key(p, pk, "block_hashes");
    msgpack_pack_array(pk, e->nh);
    for (size_t i = 0; i < e->nh; i++)
        pack_hash(p, pk, e->h[i]);
    if (stored) {
        pack_key(p, pk, "parent_block_hash");
        if (e->has_parent)
            pack_hash(p, pk, e->parent);
        else
            msgpack_pack_nil(pk);
        pack_key(p, pk, "token_ids");
        msgpack_pack_array(pk, e->nids);
        for (size_t i = 0; i < e->nids; i++)
            msgpack_pack_uint32(pk, e->ids[i]);
        pack_key(p, pk, "block_size");
        msgpack_pack_unsigned_int(pk, p->block_size);
        pack_key(p, pk, "lora_id");
        msgpack_pack_nil(pk);
    }
    pack_key(p, pk, "medium");
    pack_str(pk, "GPU");
    if (stored) {
        pack_key(p, pk, "lora_name");
        msgpack_pack_nil(pk);
    }
    if (stored && e->salt) {
        char salt[17];

        /* vLLM puts the cache_salt in the first block's extra_keys, so that a reader knows
         * the engine's hash covers more than the tokens; the mock knows only the salt's
         * hash, and sends that (hex). The other blocks have none. */
        snprintf(salt, sizeof salt, "%016llx", (unsigned long long) e->salt);
        pack_key(p, pk, "extra_keys");
        msgpack_pack_array(pk, e->nh);
        msgpack_pack_array(pk, 1);
        pack_str(pk, salt);
        for (size_t i = 1; i < e->nh; i++)
            msgpack_pack_nil(pk);
    }
}

/* Sends one message: [prefix frames..., topic, seq, payload]; ZMQ queues it whole or not. */
static int send_batch(void *sock, const void *id, size_t idlen, const char *topic, int64_t seq,
                      const void *buf, size_t len)
{
    unsigned char s8[8];

    put_be64(s8, (uint64_t) seq);
    if (id != NULL && (zmq_send(sock, id, idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
                       zmq_send(sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0))
        return -1;
    if (zmq_send(sock, topic, strlen(topic), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(sock, s8, sizeof s8, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(sock, buf, len, ZMQ_DONTWAIT) < 0)
        return -1;
    return 0;
}

static void keep(struct mock_kvpub *p, int64_t seq, char *buf, size_t len)
{
    struct kvbatch *b;

    if (p->nring < p->ringcap) {
        b = &p->ring[p->nring++];
    } else {
        b = &p->ring[p->head];
        free(b->buf);
        p->head = (p->head + 1) % p->ringcap;
    }
    b->seq = seq;
    b->buf = buf;
    b->len = len;
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct mock_kvpub *p = arg;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct timespec ts;
    size_t len;
    char *buf;

    (void) fd;
    (void) what;
    if (p->nev == 0)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    /* The batch stays an array in both encodings, as vLLM 0.26 still sends it. */
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, (double) ts.tv_sec + (double) ts.tv_nsec / 1e9);
    msgpack_pack_array(&pk, p->nev);
    for (size_t i = 0; i < p->nev; i++)
        pack_event(p, &pk, &p->ev[i]);
    msgpack_pack_unsigned_int(&pk, p->rank);
    len = sb.size;
    buf = msgpack_sbuffer_release(&sb);
    if (send_batch(p->pub, NULL, 0, p->topic, p->next_seq, buf, len) != 0)
        log_debug("KV events rank %u: batch %lld dropped: %s", p->rank, (long long) p->next_seq,
                  zmq_strerror(zmq_errno()));
    keep(p, p->next_seq++, buf, len);
    for (size_t i = 0; i < p->nev; i++)
        p->ev[i].nh = p->ev[i].nids = 0;
    p->nev = 0;
}

/* One request off the ROUTER: [identity, "", start sequence]; anything else is ignored. */
static void answer_replay(struct mock_kvpub *p)
{
    unsigned char id[256], delim[8], start8[16];
    int nid, ndelim, nstart, more = 0, parts = 0;
    size_t moresz = sizeof more;
    int64_t start = 0;

    nid = zmq_recv(p->router, id, sizeof id, ZMQ_DONTWAIT);
    if (nid < 0)
        return;
    parts = 1;
    ndelim = nstart = -1;
    for (;;) {
        unsigned char junk[16];
        int n;

        if (zmq_getsockopt(p->router, ZMQ_RCVMORE, &more, &moresz) != 0 || !more)
            break;
        n = zmq_recv(p->router,
                     parts == 1   ? delim
                     : parts == 2 ? start8
                                  : junk,
                     parts == 1 ? sizeof delim : 16, 0);
        if (parts == 1)
            ndelim = n;
        else if (parts == 2)
            nstart = n;
        parts++;
    }
    if (parts != 3 || ndelim != 0 || nstart != 8 || nid > (int) sizeof id)
        return;
    for (int i = 0; i < 8; i++)
        start = (int64_t) (((uint64_t) start << 8) | start8[i]);
    for (size_t k = 0; k < p->nring; k++) {
        const struct kvbatch *b = &p->ring[(p->head + k) % p->ringcap];

        if (b->seq >= start &&
            send_batch(p->router, id, (size_t) nid, p->topic, b->seq, b->buf, b->len) != 0)
            return; /* the client is gone or too slow: it sees no end marker and retries */
    }
    send_batch(p->router, id, (size_t) nid, p->topic, -1, "", 0);
}

/* ZMQ's descriptor only signals that ZMQ_EVENTS may have changed: read until it says no. */
static void on_replay(evutil_socket_t fd, short what, void *arg)
{
    struct mock_kvpub *p = arg;
    int events;
    size_t sz = sizeof events;

    (void) fd;
    (void) what;
    while (zmq_getsockopt(p->router, ZMQ_EVENTS, &events, &sz) == 0 && (events & ZMQ_POLLIN))
        answer_replay(p);
}

static void *open_socket(void *zctx, int type, const char *endpoint, int bind, int hwm, char *err,
                         size_t errlen)
{
    void *s = zmq_socket(zctx, type);
    int linger = 0;

    if (s == NULL) {
        snprintf(err, errlen, "cannot create a ZMQ socket: %s", zmq_strerror(zmq_errno()));
        return NULL;
    }
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if ((bind ? zmq_bind(s, endpoint) : zmq_connect(s, endpoint)) != 0) {
        snprintf(err, errlen, "cannot %s KV events endpoint %s: %s", bind ? "bind" : "connect",
                 endpoint, zmq_strerror(zmq_errno()));
        zmq_close(s);
        return NULL;
    }
    return s;
}

struct mock_kvpub *mock_kvpub_new(struct event_base *base, void *zctx, const struct mock_opts *o,
                                  unsigned rank, struct mock_kvc *cache, char *err, size_t errlen)
{
    struct mock_kvpub *p = xcalloc(1, sizeof *p);
    struct mock_kvc_listener l = {on_stored, on_removed, p};
    char ep[MOCK_KV_ENDPOINT_MAX + 16];
    /* As vLLM: the PUB binds a wildcard or a local transport, else connects to a central
     * subscriber; the replay socket always binds. */
    int bind = strchr(o->kv_endpoint, '*') != NULL || strstr(o->kv_endpoint, "::") != NULL ||
               strncmp(o->kv_endpoint, "tcp://", 6) != 0;
    evutil_socket_t fd;
    size_t fdsz = sizeof fd;

    p->rank = rank;
    p->block_size = o->block_size ? o->block_size : MOCK_DEFAULT_BLOCK_SIZE;
    p->enc = o->kv_encoding;
    p->hash_bytes = o->kv_hash_bytes;
    snprintf(p->topic, sizeof p->topic, "%s", o->kv_topic);
    p->ringcap = o->kv_buffer_steps ? o->kv_buffer_steps : MOCK_DEFAULT_KV_BUFFER_STEPS;
    p->ring = xcalloc(p->ringcap, sizeof *p->ring);
    p->flush = event_new(base, -1, 0, on_flush, p);
    if (p->flush == NULL)
        fatal("cannot create the KV events flush event");
    if (mock_kvpub_rank_endpoint(o->kv_endpoint, rank, ep, sizeof ep) != 0) {
        snprintf(err, errlen, "KV events endpoint %s has no port for rank %u", o->kv_endpoint,
                 rank);
        goto fail;
    }
    if ((p->pub = open_socket(zctx, ZMQ_PUB, ep, bind, KVPUB_HWM, err, errlen)) == NULL)
        goto fail;
    if (o->kv_replay_endpoint[0] != '\0') {
        if (mock_kvpub_rank_endpoint(o->kv_replay_endpoint, rank, ep, sizeof ep) != 0) {
            snprintf(err, errlen, "KV events replay endpoint %s has no port for rank %u",
                     o->kv_replay_endpoint, rank);
            goto fail;
        }
        /* Room for a whole replay and its end marker (5 frames each) before ZMQ drops. */
        p->router = open_socket(zctx, ZMQ_ROUTER, ep, 1, (int) (p->ringcap + 16) * 5, err, errlen);
        if (p->router == NULL)
            goto fail;
        if (zmq_getsockopt(p->router, ZMQ_FD, &fd, &fdsz) != 0 ||
            (p->replay = event_new(base, fd, EV_READ | EV_PERSIST, on_replay, p)) == NULL ||
            event_add(p->replay, NULL) != 0) {
            snprintf(err, errlen, "cannot watch the KV events replay socket");
            goto fail;
        }
    }
    mock_kvc_listen(cache, &l);
    p->cache = cache;
    return p;
fail:
    mock_kvpub_free(p);
    return NULL;
}

void mock_kvpub_free(struct mock_kvpub *p)
{
    if (p == NULL)
        return;
    if (p->cache != NULL)
        mock_kvc_listen(p->cache, NULL);
    if (p->replay != NULL)
        event_free(p->replay);
    event_free(p->flush);
    if (p->router != NULL)
        zmq_close(p->router);
    if (p->pub != NULL)
        zmq_close(p->pub);
    for (size_t k = 0; k < p->nring; k++)
        free(p->ring[k].buf);
    free(p->ring);
    for (size_t i = 0; i < p->evcap; i++) {
        free(p->ev[i].h);
        free(p->ev[i].ids);
    }
    free(p->ev);
    free(p);
}
