/* kvsub: admitd's SUBs on its engine's KV events, read on the event loop. */
#include "kvsub.h"
#include "kvsub_impl.h"
#include "admission/kvevents.h"
#include "admission/kvrelay.h"
#include "mock/mock_kvpub.h" /* the rank offset rule, vLLM's, that the mock publishes by */
#include "util/log.h"
#include "util/xmalloc.h"
#include "wire/prom.h"

#include <errno.h>
#include <stddef.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* Said once per change, not per batch: events flowing, or no longer decodable. */
void kvsub_set_state(struct kvsub_rank *k, int ok, const char *why)
{
    if (ok == k->state)
        return;
    if (ok)
        log_info("KV events flowing from %s (rank %u)", k->endpoint, k->rank);
    else
        log_warn("KV events from %s (rank %u) not decodable, dropped: %s", k->endpoint, k->rank,
                 why);
    k->state = ok;
}

static void count_batch(struct kvsub_rank *k, const struct kve_out *o)
{
    for (size_t i = 0; i < o->n_events; i++) {
        const struct kve_event *e = &o->events[i];

        if (e->kind == KVE_STORED) {
            k->events[EVT_STORED]++;
            k->blocks[BLK_STORED] += e->n_hashes;
        } else if (e->kind == KVE_REMOVED) {
            k->events[EVT_REMOVED]++;
            k->blocks[BLK_REMOVED] += e->n_hashes;
        } else {
            k->events[EVT_CLEARED]++;
        }
    }
    k->events[EVT_UNKNOWN] += o->unknown_events;
    k->events[EVT_OTHER_MEDIUM] += o->other_medium;
    k->blocks[BLK_OTHER_MEDIUM] += o->other_medium_blocks;
}

/* Decodes one payload, growing the arrays when it does not fit (they never need more than
 * one entry per payload byte, kvevents.h). */
static int decode(struct kvsub *s, const void *p, size_t len, struct kve_out *o, char *err,
                  size_t errlen)
{
    for (;;) {
        int rc;

        *o = (struct kve_out){.events = s->events,
                              .events_cap = EVENTS_CAP(s->cap),
                              .hashes = s->hashes,
                              .hashes_cap = s->cap,
                              .tokens = s->tokens,
                              .tokens_cap = s->cap};
        rc = kve_decode(s->dec, p, len, o, err, errlen);
        if (rc != KVE_EFULL || s->cap >= len)
            return rc;
        s->cap = s->cap * 4 < len ? s->cap * 4 : len;
        s->events = xrealloc(s->events, EVENTS_CAP(s->cap) * sizeof *s->events);
        s->hashes = xrealloc(s->hashes, s->cap * sizeof *s->hashes);
        s->tokens = xrealloc(s->tokens, s->cap * sizeof *s->tokens);
    }
}

int kvsub_decode(struct kvsub_rank *k, const void *p, size_t len, struct kve_out *o)
{
    char err[160];

    if (decode(k->s, p, len, o, err, sizeof err) == KVE_OK)
        return 0;
    k->batches[RES_MALFORMED]++;
    kvsub_set_state(k, 0, err);
    return -1;
}

void kvsub_apply(struct kvsub_rank *k, int64_t seq, const struct kve_out *o)
{
    k->last_seq = seq;
    k->batches[RES_OK]++;
    count_batch(k, o);
    kvrelay_batch(k->s->relay, k->rank, o);
    k->rs = kvrelay_stats(k->s->relay, k->rank);
    kvsub_set_state(k, 1, NULL);
}

void kvsub_clear(struct kvsub_rank *k, enum kvrelay_why why)
{
    kvrelay_clear(k->s->relay, k->rank, why);
    k->rs = kvrelay_stats(k->s->relay, k->rank);
}

/* A live batch of the rank's SUB. In order, it is relayed. A jump forward (ZMQ dropped, or
 * the engine skipped) is a gap: counted, with how many are missing, and filled from the
 * replay socket when there is one (the batch waits, kvreplay.c); otherwise routers are told
 * the rank is cleared before the batch is relayed. A step back only an engine that restarted
 * makes (its sequence starts again at 0): cleared too. The sequence of a malformed batch is
 * not trusted: only a decoded batch moves it. */
static void live(struct kvsub_rank *k, int64_t seq, const void *p, size_t len)
{
    struct kve_out o;

    if (k->replaying) {
        if (seq > kvreplay_newest(k)) {
            kvreplay_hold(k, seq, p, len);
            return;
        }
        kvreplay_end(k, RPL_RESTART); /* the engine went back: what was held is moot */
    }
    if (kvsub_decode(k, p, len, &o) != 0)
        return;
    if (k->last_seq >= 0 && seq > k->last_seq + 1) {
        k->gaps++;
        k->missed += (uint64_t) (seq - k->last_seq - 1);
        log_debug("KV events rank %u: gap, seq %lld after %lld", k->rank, (long long) seq,
                  (long long) k->last_seq);
        if (kvreplay_start(k, seq, p, len))
            return;
        kvsub_clear(k, KVRELAY_GAP);
    } else if (k->last_seq >= 0 && seq <= k->last_seq) {
        k->restarts++;
        log_info("KV events rank %u: sequence went back from %lld to %lld (engine restart)",
                 k->rank, (long long) k->last_seq, (long long) seq);
        kvsub_clear(k, KVRELAY_RESTART);
    }
    kvsub_apply(k, seq, &o);
}

/* One message of [topic, seq, payload]; anything else is counted as bad frames. */
static void handle(struct kvsub_rank *k, zmq_msg_t *f, int nf)
{
    const unsigned char *q;
    uint64_t seq = 0;
    char err[160];

    if (nf == 3 && zmq_msg_size(&f[1]) == 8) {
        q = zmq_msg_data(&f[1]);
        for (int i = 0; i < 8; i++)
            seq = seq << 8 | q[i];
    }
    /* A negative sequence is the replay socket's end marker, never a live batch's. */
    if (nf != 3 || zmq_msg_size(&f[1]) != 8 || (int64_t) seq < 0) {
        k->batches[RES_BAD_FRAMES]++;
        if (nf == 3 && zmq_msg_size(&f[1]) == 8)
            snprintf(err, sizeof err, "a negative sequence number %lld", (long long) seq);
        else
            snprintf(err, sizeof err, "a message of %d frames (sequence of %zu bytes), not 3 (8)",
                     nf, nf > 1 ? zmq_msg_size(&f[1]) : (size_t) 0);
        kvsub_set_state(k, 0, err);
        return;
    }
    live(k, (int64_t) seq, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]));
}

/* Receives one whole message (its frames arrive together); 0 when none is waiting. */
static int recv_one(struct kvsub_rank *k)
{
    zmq_msg_t f[3], extra;
    int nf = 0, more;
    size_t ml = sizeof more;

    zmq_msg_init(&f[0]);
    if (zmq_msg_recv(&f[0], k->sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&f[0]);
        return 0;
    }
    for (nf = 1;; nf++) {
        zmq_msg_t *m = nf < 3 ? &f[nf] : &extra;

        if (zmq_getsockopt(k->sock, ZMQ_RCVMORE, &more, &ml) != 0 || !more)
            break;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, k->sock, 0) < 0) {
            zmq_msg_close(m);
            break;
        }
        if (m == &extra)
            zmq_msg_close(&extra);
    }
    handle(k, f, nf);
    for (int i = 0; i < nf && i < 3; i++)
        zmq_msg_close(&f[i]);
    return 1;
}

/* ZMQ_FD is edge-triggered: a wakeup says only that ZMQ_EVENTS may have changed, so the
 * socket is drained until ZMQ_EVENTS has no POLLIN (reading ZMQ_EVENTS also re-arms the fd);
 * a burst cut short comes back through event_active rather than a new edge. */
static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct kvsub_rank *k = arg;
    int events;
    size_t el = sizeof events;

    (void) fd;
    (void) what;
    for (int i = 0; i < KVSUB_BURST; i++) {
        if (zmq_getsockopt(k->sock, ZMQ_EVENTS, &events, &el) != 0 || !(events & ZMQ_POLLIN))
            return;
        if (!recv_one(k))
            return;
    }
    event_active(k->ev, EV_READ, 0);
}

static struct kvsub_rank *rank_open(struct kvsub *s, unsigned r, char *err, size_t errlen)
{
    struct kvsub_rank *k = xcalloc(1, sizeof *k);
    int zero = 0, hwm = KVSUB_HWM, fd;
    int64_t maxmsg = KVSUB_MAX_MSG;
    size_t fl = sizeof fd;

    k->s = s;
    k->rank = r;
    k->last_seq = -1;
    k->state = -1;
    if (mock_kvpub_rank_endpoint(s->endpoint, r, k->endpoint, sizeof k->endpoint) != 0) {
        snprintf(err, errlen, "--engine-kv-events %s: no endpoint for rank %u", s->endpoint, r);
        free(k);
        return NULL;
    }
    k->sock = zmq_socket(s->zctx, ZMQ_SUB);
    if (k->sock == NULL) { /* ZMQ's socket limit (1023 by default) or no context */
        snprintf(err, errlen, "--engine-kv-events: no ZMQ socket for rank %u: %s", r,
                 zmq_strerror(errno));
        free(k);
        return NULL;
    }
    zmq_setsockopt(k->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(k->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(k->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(k->sock, ZMQ_SUBSCRIBE, s->topic, strlen(s->topic));
    /* vLLM's PUB binds a wildcard (its default, port 5557 on every address) or an ipc name, and
     * connects to a concrete host: admitd mirrors it, connecting (ZMQ reconnects by itself when the
     * engine restarts) unless given a wildcard, where the engine connects to us. */
    if ((strchr(k->endpoint, '*') != NULL ? zmq_bind(k->sock, k->endpoint)
                                          : zmq_connect(k->sock, k->endpoint)) != 0 ||
        zmq_getsockopt(k->sock, ZMQ_FD, &fd, &fl) != 0) {
        snprintf(err, errlen, "--engine-kv-events %s: %s", k->endpoint, zmq_strerror(errno));
        zmq_close(k->sock);
        free(k);
        return NULL;
    }
    if (kvreplay_open(k, err, errlen) != 0) {
        zmq_close(k->sock);
        free(k);
        return NULL;
    }
    k->ev = event_new(s->base, fd, EV_READ | EV_PERSIST, on_readable, k);
    event_add(k->ev, NULL);
    event_active(k->ev, EV_READ, 0); /* an edge may have passed during the setup */
    log_info("reading KV events of rank %u at %s%s%s", r, k->endpoint, s->topic[0] ? " topic=" : "",
             s->topic);
    return k;
}

/* The epoch of this admitd's kv_events: random and nonzero, so that a reader tells a
 * restarted admitd's sequence from the one it followed. */
static uint64_t draw_epoch(void)
{
    uint64_t e = 0;

    if (getrandom(&e, sizeof e, 0) != (ssize_t) sizeof e)
        e = (uint64_t) time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t) getpid();
    return e ? e : 1;
}

struct kvsub *kvsub_new(struct event_base *base, const char *endpoint, const char *topic,
                        const char *replay, unsigned ranks, kvrelay_emit_fn emit, void *arg,
                        char *err, size_t errlen)
{
    struct kvsub *s = xcalloc(1, sizeof *s);

    s->base = base;
    snprintf(s->endpoint, sizeof s->endpoint, "%s", endpoint);
    snprintf(s->topic, sizeof s->topic, "%s", topic);
    snprintf(s->replay, sizeof s->replay, "%s", replay ? replay : "");
    s->zctx = zmq_ctx_new();
    s->dec = kve_decoder_new();
    s->relay = kvrelay_new(draw_epoch(), emit, arg);
    s->cap = 4096;
    s->events = xmalloc(EVENTS_CAP(s->cap) * sizeof *s->events);
    s->hashes = xmalloc(s->cap * sizeof *s->hashes);
    s->tokens = xmalloc(s->cap * sizeof *s->tokens);
    for (unsigned r = 0; r < (ranks ? ranks : 1) && r < KVSUB_MAX_RANKS; r++) {
        s->r[r] = rank_open(s, r, err, errlen);
        if (s->r[r] == NULL) {
            kvsub_free(s);
            return NULL;
        }
        s->n = r + 1;
    }
    return s;
}

void kvsub_set_ranks(struct kvsub *s, unsigned ranks)
{
    char err[320];

    while (s != NULL && s->n < ranks && s->n < KVSUB_MAX_RANKS) {
        s->r[s->n] = rank_open(s, s->n, err, sizeof err);
        if (s->r[s->n] == NULL) {
            log_warn("%s", err);
            return;
        }
        s->n++;
    }
}

void kvsub_set_model(struct kvsub *s, const char *model)
{
    if (s != NULL && model != NULL)
        kvrelay_set_model(s->relay, model, strlen(model));
}

void kvsub_set_blocks(struct kvsub *s, unsigned rank, int64_t blocks)
{
    if (s != NULL && rank < s->n) {
        kvrelay_set_blocks(s->relay, rank, blocks > 0 ? (uint64_t) blocks : 0);
        s->r[rank]->rs = kvrelay_stats(s->relay, rank);
    }
}

void kvsub_dump(const struct kvsub *s, struct buf *out)
{
    kvrelay_dump(s->relay, s->n, out);
}

/* One family whose samples are per rank and per value of one more label. */
static void family(struct buf *out, const struct kvsub *s, const char *name, const char *help,
                   const char *key, const char *const *vals, int nvals, size_t off)
{
    prom_family(out, name, "counter", help);
    for (unsigned r = 0; r < s->n; r++) {
        const uint64_t *c = (const uint64_t *) (const void *) ((const char *) s->r[r] + off);

        for (int i = 0; i < nvals; i++) {
            char labels[96];

            snprintf(labels, sizeof labels, "dp_rank=\"%u\"%s%s%s%s%s", r, key ? "," : "",
                     key ? key : "", key ? "=\"" : "", key ? vals[i] : "", key ? "\"" : "");
            prom_sample(out, name, labels, (double) c[i]);
        }
    }
}

void kvsub_render(const struct kvsub *s, struct buf *out)
{
    static const char *const res[] = {"ok", "malformed", "bad_frames"};
    static const char *const evt[] = {"stored", "removed", "cleared", "unknown", "other_medium"};
    static const char *const blk[] = {"stored", "removed", "other_medium"};
    static const char *const op[] = {"stored", "removed", "cleared"};
    static const char *const why[] = {"engine", "restart", "gap"};
    static const char *const rpl[] = {"filled", "unfilled", "timeout", "overflow", "restart"};

    if (s == NULL)
        return;
    family(out, s, "admitd_engine_kv_events_batches_total",
           "KV event batches from the engine, per rank: decoded (ok), dropped as malformed, or "
           "not [topic, seq, payload] (bad_frames)",
           "result", res, RES__COUNT, offsetof(struct kvsub_rank, batches));
    family(out, s, "admitd_engine_kv_events_total",
           "KV events decoded, per rank and type (other_medium: not the GPU's, skipped)", "type",
           evt, EVT__COUNT, offsetof(struct kvsub_rank, events));
    family(out, s, "admitd_engine_kv_events_blocks_total",
           "KV blocks the engine stored and removed, per rank (other_medium: skipped)", "op", blk,
           BLK__COUNT, offsetof(struct kvsub_rank, blocks));
    family(out, s, "admitd_engine_kv_events_gaps_total",
           "Jumps forward of a rank's KV event sequence (batches lost)", NULL, NULL, 1,
           offsetof(struct kvsub_rank, gaps));
    family(out, s, "admitd_engine_kv_events_missed_batches_total",
           "KV event batches the gaps skipped", NULL, NULL, 1, offsetof(struct kvsub_rank, missed));
    family(out, s, "admitd_engine_kv_events_restarts_total",
           "Steps back of a rank's KV event sequence (the engine restarted)", NULL, NULL, 1,
           offsetof(struct kvsub_rank, restarts));
    family(out, s, "admitd_engine_kv_events_replays_total",
           "Gaps asked of the engine's replay socket, per rank and how it ended (filled; "
           "unfilled: its start no longer kept, or a malformed batch; timeout; overflow: too "
           "many live batches meanwhile; restart: the engine restarted meanwhile)",
           "result", rpl, RPL__COUNT, offsetof(struct kvsub_rank, replays));
    family(out, s, "admitd_engine_kv_events_replayed_batches_total",
           "KV event batches relayed from the engine's replay socket", NULL, NULL, 1,
           offsetof(struct kvsub_rank, replayed));
    family(out, s, "admitd_kv_relay_messages_total",
           "kv_events messages published, per rank and op", "op", op, 3,
           offsetof(struct kvsub_rank, rs.messages));
    family(out, s, "admitd_kv_relay_keys_total",
           "Block keys published in kv_events messages, per rank and op", "op", op, 2,
           offsetof(struct kvsub_rank, rs.keys));
    family(out, s, "admitd_kv_relay_unkeyed_blocks_total",
           "Stored blocks admitd could not key (base model unknown, extra keys beyond the LoRA "
           "name, a LoRA by id alone, an unknown or unkeyable parent): not relayed",
           NULL, NULL, 1, offsetof(struct kvsub_rank, rs.unkeyed));
    family(out, s, "admitd_kv_relay_table_evictions_total",
           "Blocks dropped from the rank's engine hash table by its bound (relayed as removed)",
           NULL, NULL, 1, offsetof(struct kvsub_rank, rs.evicted));
    family(out, s, "admitd_kv_relay_unknown_removals_total",
           "Removals of engine hashes admitd did not hold (stored before it started, or evicted)",
           NULL, NULL, 1, offsetof(struct kvsub_rank, rs.unknown));
    family(out, s, "admitd_kv_relay_other_group_events_total",
           "Events of a KV-cache group other than the first (hybrid models), not relayed", NULL,
           NULL, 1, offsetof(struct kvsub_rank, rs.other_group));
    family(out, s, "admitd_kv_relay_clears_total",
           "kv_events cleared messages, per rank and reason (engine: AllBlocksCleared; restart: "
           "the engine's sequence went back; gap: events lost and not replayed)",
           "reason", why, KVRELAY__WHY, offsetof(struct kvsub_rank, rs.cleared));
    prom_family(out, "admitd_engine_kv_events_last_seq", "gauge",
                "Sequence number of the rank's last decoded KV event batch (-1: none yet)");
    for (unsigned r = 0; r < s->n; r++) {
        char labels[32];

        snprintf(labels, sizeof labels, "dp_rank=\"%u\"", r);
        prom_sample(out, "admitd_engine_kv_events_last_seq", labels, (double) s->r[r]->last_seq);
    }
}

void kvsub_free(struct kvsub *s)
{
    if (s == NULL)
        return;
    for (unsigned r = 0; r < s->n; r++) {
        event_free(s->r[r]->ev);
        zmq_close(s->r[r]->sock); /* ZMQ_LINGER 0 was set: the context's end cannot block */
        kvreplay_close(s->r[r]);
        free(s->r[r]);
    }
    zmq_ctx_term(s->zctx);
    kve_decoder_free(s->dec);
    kvrelay_free(s->relay);
    free(s->events);
    free(s->hashes);
    free(s->tokens);
    free(s);
}
