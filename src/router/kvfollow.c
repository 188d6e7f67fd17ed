/* kvfollow: one worker's kv_events stream, per rank, into the events index (see kvfollow.h).
 *
 * A rank is NONE (nothing heard, or forgotten), FOLLOW (its entries are the stream's up to
 * (epoch, seq), applied while the events index had generation gen) or WAIT (its entries
 * dropped, its live messages kept in pending, a dump wanted). The worker has one poller for
 * its dump, made at the first dump wanted, whose own interval is out of reach: each attempt is
 * a kick, from the retry timer. */
#include "kvfollow.h"
#include "http/poller.h"
#include "kvroute.h"
#include "select.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/netaddr.h"
#include "util/xmalloc.h"
#include "wire/kvmsg.h"
#include "wire/prom.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The dump poller's own interval: never reached (each attempt is a kick). */
#define KVF_NEVER_MS (1000u * 3600 * 24 * 30)

enum kvf_state { KVF_NONE, KVF_FOLLOW, KVF_WAIT };

struct kvf_rank {
    enum kvf_state state;
    uint64_t epoch, seq; /* the last message applied (FOLLOW) */
    uint32_t gen;        /* the events index's generation it was applied to */
    struct buf pending;  /* WAIT: live messages, each a 4-byte length then its bytes */
};

struct kvfollow {
    struct event_base *base;
    struct kvroute *kv;
    struct kvf_stats *st;
    int worker;
    struct http_url url;
    struct poller *dump; /* NULL until the first dump wanted */
    struct event *retry; /* the next attempt */
    unsigned backoff_ms;
    int said_size, said_bad; /* logged once: another block size, a bad message */
    struct kvf_rank *r[SEL_MAX_RANKS];
};

static void on_dump(void *arg, int status, const char *body, size_t len);
static void take(struct kvfollow *f, struct kvf_rank *r, unsigned rank, const struct kvm_msg *m,
                 const void *raw, size_t len);

/* The big-endian 32-bit length before a dump's record, and before a kept message. */
static size_t be32(const unsigned char *p)
{
    return (size_t) p[0] << 24 | (size_t) p[1] << 16 | (size_t) p[2] << 8 | p[3];
}

/* A dump attempt now: the poller is made at the first, and kicked after. */
static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct kvfollow *f = arg;

    (void) fd;
    (void) what;
    if (!kvf_waiting(f))
        return;
    if (f->dump == NULL)
        f->dump = poller_new(f->base, &f->url, "/admitd/kv_blocks", KVF_NEVER_MS,
                             KVF_DUMP_TIMEOUT_MS, on_dump, f);
    else
        poller_kick(f->dump);
}

/* The next attempt in ms (0: on the loop's next turn), unless one is due already. */
static void want_dump(struct kvfollow *f, unsigned ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    if (!evtimer_pending(f->retry, NULL))
        evtimer_add(f->retry, &tv);
}

int kvf_waiting(const struct kvfollow *f)
{
    for (unsigned i = 0; i < SEL_MAX_RANKS; i++)
        if (f->r[i] != NULL && f->r[i]->state == KVF_WAIT)
            return 1;
    return 0;
}

/* Keeps a live message of a waiting rank; past the bound what was kept goes (the continuity
 * check after the dump sees the hole and asks for another). */
static void keep(struct kvfollow *f, struct kvf_rank *r, const void *raw, size_t len)
{
    unsigned char n[4] = {(unsigned char) (len >> 24), (unsigned char) (len >> 16),
                          (unsigned char) (len >> 8), (unsigned char) len};

    if (r->pending.len + 4 + len > KVF_PENDING_MAX) {
        f->st->overflows++;
        buf_reset(&r->pending);
    }
    buf_append(&r->pending, n, 4);
    buf_append(&r->pending, raw, len);
}

/* The rank's stream broke (or starts): its entries go, its messages wait for a dump. */
static void wait_dump(struct kvfollow *f, struct kvf_rank *r, unsigned rank)
{
    kvr_ev_clear(f->kv, f->worker, rank, 0);
    r->state = KVF_WAIT;
    buf_reset(&r->pending);
    want_dump(f, 0);
}

/* The keys of m into keys (KVM_KEYS_MAX of room); their count. */
static size_t keys_of(const struct kvm_msg *m, uint64_t *keys)
{
    for (size_t i = 0; i < m->n; i++)
        keys[i] = kvm_key(m, i);
    return m->n;
}

/* m's keys cover blocks of the router's size (a cleared has none: it always does). */
static int same_blocks(struct kvfollow *f, const struct kvm_msg *m)
{
    if (m->op == KVM_CLEARED || m->block_size == kvr_block_tokens(f->kv))
        return 1;
    f->st->refused[KVF_BLOCK_SIZE]++;
    if (!f->said_size++)
        log_warn("worker %s: its KV events are of %u-token blocks, the router's keys of %u "
                 "(--kv-block-size): they cannot match, and are not indexed",
                 f->url.hostport, m->block_size, kvr_block_tokens(f->kv));
    return 0;
}

/* Applies m, the next message of rank's stream. */
static void apply(struct kvfollow *f, unsigned rank, const struct kvm_msg *m)
{
    uint64_t keys[KVM_KEYS_MAX];
    size_t n;

    if (!same_blocks(f, m))
        return;
    n = keys_of(m, keys);
    switch (m->op) {
    case KVM_STORED:
        kvr_ev_stored(f->kv, f->worker, rank, keys, n, (uint64_t) clock_mono_ms());
        f->st->messages[0]++;
        f->st->keys[0] += n;
        break;
    case KVM_REMOVED:
        kvr_ev_removed(f->kv, f->worker, rank, keys, n);
        f->st->messages[1]++;
        f->st->keys[1] += n;
        break;
    default: /* cleared (a snapshot never gets here: take() refuses it) */
        kvr_ev_clear(f->kv, f->worker, rank, 1);
        f->st->messages[2]++;
    }
}

/* One live message of rank, decoded: kept while the rank waits, applied when it is the next of
 * its stream, else the stream broke. */
static void take(struct kvfollow *f, struct kvf_rank *r, unsigned rank, const struct kvm_msg *m,
                 const void *raw, size_t len)
{
    if (r->state == KVF_WAIT) {
        keep(f, r, raw, len);
        return;
    }
    /* At or below the last applied, in the same epoch: a message the dump held already, come
     * late on the live stream (the dump comes over HTTP, the stream over the publisher, and
     * either may be read first), never a loss. */
    if (r->state == KVF_FOLLOW && r->gen == kvr_generation(f->kv) && m->epoch == r->epoch &&
        m->seq <= r->seq)
        return;
    if (r->state != KVF_FOLLOW || r->gen != kvr_generation(f->kv) || m->epoch != r->epoch ||
        m->seq != r->seq + 1) {
        if (r->state == KVF_FOLLOW)
            f->st->gaps++;
        wait_dump(f, r, rank);
        keep(f, r, raw, len);
        return;
    }
    r->seq = m->seq;
    apply(f, rank, m);
}

/* The index is off (weight 0): every rank starts again at its next message once it is on. */
static void forget_all(struct kvfollow *f)
{
    for (unsigned i = 0; i < SEL_MAX_RANKS; i++)
        if (f->r[i] != NULL) {
            f->r[i]->state = KVF_NONE;
            buf_free(&f->r[i]->pending);
        }
}

/* A message that does not decode, or that has no place on the live stream. */
static void refuse(struct kvfollow *f, const char *why)
{
    f->st->refused[KVF_INVALID]++;
    if (f->said_bad++ < 5)
        log_warn("worker %s sent an invalid kv_events message: %s", f->url.hostport, LOG_ESC(why));
}

void kvf_message(struct kvfollow *f, const void *msg, size_t len)
{
    struct kvm_msg m;
    char err[160];

    if (kvm_decode(msg, len, &m, err, sizeof err) != 0) {
        refuse(f, err);
        return;
    }
    if (m.op == KVM_SNAPSHOT || m.dp_rank >= SEL_MAX_RANKS) {
        refuse(f, m.op == KVM_SNAPSHOT ? "a snapshot outside a dump" : "a rank over 63");
        return;
    }
    if (kvr_events_on(f->kv) == 0) {
        f->st->refused[KVF_OFF]++;
        forget_all(f);
        return;
    }
    /* an event worker once its events can match the router's keys: one of another block size
     * keeps its decisions in the history, where they last */
    if (m.op == KVM_CLEARED || m.block_size == kvr_block_tokens(f->kv))
        kvr_ev_worker(f->kv, f->worker);
    if (f->r[m.dp_rank] == NULL)
        f->r[m.dp_rank] = xcalloc(1, sizeof *f->r[m.dp_rank]);
    take(f, f->r[m.dp_rank], m.dp_rank, &m, msg, len);
}

/* ---- the dump --------------------------------------------------------------------------- */

/* What a dump says of one rank: its epoch and seq, and that it has records. */
struct dumped {
    uint64_t epoch, seq;
    int seen;
};

/* Walks body's records: with ranks, checks them and notes each rank's epoch and seq there;
 * without, inserts each waiting rank's keys: 0, or -1 with why (a bad length, a record that does
 * not decode or is not a snapshot, a rank whose records disagree on epoch and seq). */
static int walk(struct kvfollow *f, const unsigned char *b, size_t len, struct dumped *ranks,
                char *why, size_t whylen)
{
    uint64_t keys[KVM_KEYS_MAX];
    size_t off = 0;

    while (off < len) {
        struct kvm_msg m;
        size_t l;
        struct kvf_rank *r;

        if (len - off < 4 || (l = be32(b + off)) > len - off - 4) {
            snprintf(why, whylen, "a record's length passes the body's end");
            return -1;
        }
        if (kvm_decode(b + off + 4, l, &m, why, whylen) != 0)
            return -1;
        off += 4 + l;
        if (m.op != KVM_SNAPSHOT) {
            snprintf(why, whylen, "a record that is not a snapshot");
            return -1;
        }
        if (m.dp_rank >= SEL_MAX_RANKS)
            continue;
        if (ranks != NULL) {
            struct dumped *d = &ranks[m.dp_rank];

            if (d->seen && (d->epoch != m.epoch || d->seq != m.seq)) {
                snprintf(why, whylen, "rank %u's records disagree on epoch and seq",
                         (unsigned) m.dp_rank);
                return -1;
            }
            d->seen = 1;
            d->epoch = m.epoch;
            d->seq = m.seq;
        } else if ((r = f->r[m.dp_rank]) != NULL && r->state == KVF_WAIT && same_blocks(f, &m)) {
            kvr_ev_stored(f->kv, f->worker, m.dp_rank, keys, keys_of(&m, keys),
                          (uint64_t) clock_mono_ms());
            f->st->keys[2] += m.n;
        }
    }
    return 0;
}

/* The dump is in for rank r: its kept messages after the dump's seq are applied in order. */
static void replay(struct kvfollow *f, struct kvf_rank *r, unsigned rank, const struct dumped *d)
{
    struct buf kept = r->pending;
    size_t off = 0;

    buf_init(&r->pending);
    r->state = KVF_FOLLOW;
    r->epoch = d->epoch;
    r->seq = d->seq;
    r->gen = kvr_generation(f->kv);
    while (off + 4 <= kept.len) {
        const unsigned char *p = (const unsigned char *) kept.data + off;
        size_t l = be32(p);
        struct kvm_msg m;

        off += 4 + l;
        if (kvm_decode(p + 4, l, &m, NULL, 0) != 0)
            continue;                   /* never: kept only once decoded */
        take(f, r, rank, &m, p + 4, l); /* what the dump held already, take() skips */
    }
    buf_free(&kept);
}

static void on_dump(void *arg, int status, const char *body, size_t len)
{
    struct kvfollow *f = arg;
    struct dumped d[SEL_MAX_RANKS];
    char why[200];
    unsigned i;

    if (!kvf_waiting(f))
        return; /* unasked (the poller's own interval) */
    memset(d, 0, sizeof d);
    if (status == 0) {
        snprintf(why, sizeof why, "%s", poller_error(f->dump));
    } else if (status != 200) {
        snprintf(why, sizeof why, "status %d", status);
    } else if (kvr_events_on(f->kv) == 0) {
        forget_all(f); /* the index went off meanwhile: nothing to apply to */
        return;
    } else if (walk(f, (const unsigned char *) body, len, d, why, sizeof why) == 0) {
        for (i = 0; i < SEL_MAX_RANKS; i++)
            if (f->r[i] != NULL && f->r[i]->state == KVF_WAIT && d[i].seen)
                kvr_ev_clear(f->kv, f->worker, i, 0);
        (void) walk(f, (const unsigned char *) body, len, NULL, why, sizeof why);
        for (i = 0; i < SEL_MAX_RANKS; i++)
            if (f->r[i] != NULL && f->r[i]->state == KVF_WAIT && d[i].seen)
                replay(f, f->r[i], i, &d[i]);
        f->st->dumps_fetched++;
        f->backoff_ms = KVF_RETRY_MIN_MS;
        log_debug("worker %s: KV blocks dump applied (%zu bytes)", f->url.hostport, len);
        if (kvf_waiting(f)) /* a rank it lacked, or a gap in what was kept since */
            want_dump(f, KVF_RETRY_MIN_MS);
        return;
    }
    f->st->dumps_failed++;
    /* the first failure of a series at warn, the tries after it at debug */
    log_msg(f->backoff_ms == KVF_RETRY_MIN_MS ? LOG_WARN : LOG_DEBUG,
            "worker %s: GET /admitd/kv_blocks failed (%s); tried again every %u to %u ms",
            f->url.hostport, LOG_ESC(why), KVF_RETRY_MIN_MS, KVF_RETRY_MAX_MS);
    want_dump(f, f->backoff_ms);
    f->backoff_ms = f->backoff_ms * 2 > KVF_RETRY_MAX_MS ? KVF_RETRY_MAX_MS : f->backoff_ms * 2;
}

struct kvfollow *kvf_new(struct event_base *base, struct kvroute *kv, int worker,
                         const char *proxy_url, struct kvf_stats *st)
{
    struct kvfollow *f = xcalloc(1, sizeof *f);
    char url[NETADDR_HOST_MAX + 32], err[160];

    f->base = base;
    f->kv = kv;
    f->worker = worker;
    f->st = st;
    f->backoff_ms = KVF_RETRY_MIN_MS;
    snprintf(url, sizeof url, "http://%s", proxy_url);
    if (http_url_parse(url, &f->url, err, sizeof err) != 0)
        fatal("worker %s: %s", proxy_url, err); /* never: the table parsed it before */
    f->retry = evtimer_new(base, on_retry, f);
    if (f->retry == NULL)
        fatal("evtimer_new failed");
    return f;
}

void kvf_free(struct kvfollow *f)
{
    if (f == NULL)
        return;
    poller_free(f->dump);
    event_free(f->retry);
    for (unsigned i = 0; i < SEL_MAX_RANKS; i++)
        if (f->r[i] != NULL) {
            buf_free(&f->r[i]->pending);
            free(f->r[i]);
        }
    free(f);
}

void kvf_render_metrics(const struct kvf_stats *st, uint64_t events_blocks, unsigned workers,
                        struct buf *out)
{
    static const char *const ops[] = {"stored", "removed", "cleared"};
    static const char *const kops[] = {"stored", "removed", "snapshot"};
    static const char *const reasons[] = {"invalid", "block_size", "off"};
    static const char *const results[] = {"fetched", "failed"};
    uint64_t dumps[2] = {st->dumps_fetched, st->dumps_failed};

    prom_labelled(out, "admit_router_kv_events_messages_total", "counter",
                  "kv_events messages applied to the events index, by op", "op", ops, st->messages,
                  3);
    prom_labelled(out, "admit_router_kv_events_keys_total", "counter",
                  "Block keys of those messages, and of the dumps' snapshots, by op", "op", kops,
                  st->keys, 3);
    prom_labelled(out, "admit_router_kv_events_refused_total", "counter",
                  "kv_events messages not applied, by reason (invalid: does not decode, or a "
                  "snapshot outside a dump; block_size: blocks of another size than "
                  "--kv-block-size; off: --kv-overlap-score-weight is 0)",
                  "reason", reasons, st->refused, KVF_NREFUSALS);
    prom_counter(out, "admit_router_kv_events_gaps_total",
                 "Times a rank's kv_events stream broke (a new epoch, a seq not the last + 1): "
                 "its blocks dropped and its worker's dump fetched",
                 st->gaps);
    prom_labelled(out, "admit_router_kv_events_dumps_total", "counter",
                  "GET /admitd/kv_blocks attempts, by result", "result", results, dumps, 2);
    prom_counter(out, "admit_router_kv_events_overflows_total",
                 "Times a rank's messages kept while its dump was fetched passed the bound",
                 st->overflows);
    prom_gauge(out, "admit_router_kv_events_index_blocks",
               "Blocks (key, worker rank) the events index holds", (double) events_blocks);
    prom_gauge(out, "admit_router_kv_events_workers",
               "Workers that send KV events (their exact decisions go to the side table)",
               (double) workers);
}
