/* kvreplay: a gap in an engine rank's KV events, filled from the engine's replay socket.
 *
 * vLLM (and SGLang) keep their last buffer_steps batches for a ZMQ ROUTER, the replay
 * endpoint (rank r at its port + r, as the events). A client sends one frame, the 8-byte
 * big-endian sequence to start from; through a DEALER that is ["", seq]. The ROUTER answers
 * each kept batch from there on as [topic, seq, payload] (older versions: [seq, payload]),
 * then an end marker of sequence -1 with an empty payload. Under backpressure a ROUTER drops
 * replies silently, the end marker included, so the wait is bounded (KVREPLAY_MS).
 *
 * While a replay runs, the rank's live batches are held (copies) and the replayed ones are
 * relayed in order: a batch the relay already has is skipped, the next one relayed, one past
 * it means the replay no longer covers the gap. The replay ends filled as soon as it reaches
 * the first held batch; otherwise (the end marker before that, a malformed batch, the time
 * out, too much held) it ends unfilled and routers are told the rank is cleared. Either way the
 * held batches are relayed after it, as live ones from there on. A DEALER that may still get
 * replies of an ended replay is closed and opened again, so that none can be taken for the
 * next one's. */
#include "kvsub_impl.h"
#include "mock/mock_kvpub.h" /* the rank offset rule, vLLM's, for the replay endpoint too */
#include "util/log.h"
#include "util/xmalloc.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

static void on_dealer(evutil_socket_t fd, short what, void *arg);
static void on_timeout(evutil_socket_t fd, short what, void *arg);

/* The DEALER, connected (the engine's replay socket always binds), watched on the loop. */
static int dealer_open(struct kvsub_rank *k, char *err, size_t errlen)
{
    int zero = 0, hwm = KVSUB_HWM, fd;
    int64_t maxmsg = KVSUB_MAX_MSG;
    size_t fl = sizeof fd;

    k->dealer = zmq_socket(k->s->zctx, ZMQ_DEALER);
    if (k->dealer == NULL) {
        snprintf(err, errlen, "--engine-kv-events-replay: no ZMQ socket for rank %u: %s", k->rank,
                 zmq_strerror(errno));
        return -1;
    }
    zmq_setsockopt(k->dealer, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(k->dealer, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(k->dealer, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if (zmq_connect(k->dealer, k->replay_ep) != 0 ||
        zmq_getsockopt(k->dealer, ZMQ_FD, &fd, &fl) != 0) {
        snprintf(err, errlen, "--engine-kv-events-replay %s: %s", k->replay_ep,
                 zmq_strerror(errno));
        zmq_close(k->dealer);
        k->dealer = NULL;
        return -1;
    }
    k->dev = event_new(k->s->base, fd, EV_READ | EV_PERSIST, on_dealer, k);
    event_add(k->dev, NULL);
    return 0;
}

static void dealer_close(struct kvsub_rank *k)
{
    if (k->dealer == NULL)
        return;
    event_free(k->dev);
    zmq_close(k->dealer);
    k->dealer = NULL;
    k->dev = NULL;
}

int kvreplay_open(struct kvsub_rank *k, char *err, size_t errlen)
{
    if (k->s->replay[0] == '\0')
        return 0;
    if (mock_kvpub_rank_endpoint(k->s->replay, k->rank, k->replay_ep, sizeof k->replay_ep) != 0) {
        snprintf(err, errlen, "--engine-kv-events-replay %s: no endpoint for rank %u", k->s->replay,
                 k->rank);
        return -1;
    }
    k->timer = evtimer_new(k->s->base, on_timeout, k);
    if (dealer_open(k, err, errlen) != 0) {
        event_free(k->timer);
        k->timer = NULL;
        return -1;
    }
    return 0;
}

static void drop_held(struct kvsub_rank *k)
{
    for (size_t i = 0; i < k->held_n; i++)
        free(k->held[(k->held_head + i) % k->held_cap].buf);
    k->held_n = k->held_head = k->held_bytes = 0;
}

void kvreplay_close(struct kvsub_rank *k)
{
    dealer_close(k);
    if (k->timer != NULL)
        event_free(k->timer);
    drop_held(k);
    free(k->held);
}

int64_t kvreplay_newest(const struct kvsub_rank *k)
{
    return k->held_n ? k->held[(k->held_head + k->held_n - 1) % k->held_cap].seq : k->last_seq;
}

static void hold(struct kvsub_rank *k, int64_t seq, const void *p, size_t len)
{
    struct kvheld *h;

    if (k->held_n == k->held_cap) {
        size_t cap = k->held_cap ? k->held_cap * 2 : 16;
        struct kvheld *n = xmalloc(cap * sizeof *n);

        for (size_t i = 0; i < k->held_n; i++)
            n[i] = k->held[(k->held_head + i) % k->held_cap];
        free(k->held);
        k->held = n;
        k->held_cap = cap;
        k->held_head = 0;
    }
    h = &k->held[(k->held_head + k->held_n++) % k->held_cap];
    h->seq = seq;
    h->len = len;
    h->buf = xmalloc(len ? len : 1);
    memcpy(h->buf, p, len);
    k->held_bytes += len;
}

void kvreplay_hold(struct kvsub_rank *k, int64_t seq, const void *p, size_t len)
{
    hold(k, seq, p, len);
    if (k->held_n >= KVREPLAY_HELD_MAX || k->held_bytes >= KVREPLAY_HELD_BYTES)
        kvreplay_end(k, RPL_OVERFLOW);
}

int kvreplay_start(struct kvsub_rank *k, int64_t seq, const void *p, size_t len)
{
    unsigned char s8[8];
    uint64_t from = (uint64_t) (k->last_seq + 1);
    struct timeval tv = {KVREPLAY_MS / 1000, (KVREPLAY_MS % 1000) * 1000};

    if (k->dealer == NULL)
        return 0;
    for (int i = 0; i < 8; i++)
        s8[i] = (unsigned char) (from >> (56 - 8 * i));
    if (zmq_send(k->dealer, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(k->dealer, s8, sizeof s8, ZMQ_DONTWAIT) < 0) {
        log_debug("KV events rank %u: cannot ask for a replay: %s", k->rank, zmq_strerror(errno));
        return 0;
    }
    log_debug("KV events rank %u: replay asked from %llu", k->rank, (unsigned long long) from);
    k->replaying = 1;
    hold(k, seq, p, len);
    evtimer_add(k->timer, &tv);
    event_active(k->dev, EV_READ, 0); /* an edge may have passed since the last read */
    return 1;
}

/* The held batches, in order, as live batches after the replay (the first was the gap's end:
 * its gap was counted when it came; a later one's is counted here). */
static void release_held(struct kvsub_rank *k)
{
    size_t n = k->held_n;

    for (size_t i = 0; i < n; i++) {
        struct kvheld h = k->held[k->held_head];
        struct kve_out o;

        k->held_head = (k->held_head + 1) % k->held_cap;
        k->held_n--;
        k->held_bytes -= h.len;
        if (kvsub_decode(k, h.buf, h.len, &o) == 0 && h.seq > k->last_seq) {
            if (h.seq > k->last_seq + 1) {
                if (i > 0) {
                    k->gaps++;
                    k->missed += (uint64_t) (h.seq - k->last_seq - 1);
                }
                kvsub_clear(k, KVRELAY_GAP);
            }
            kvsub_apply(k, h.seq, &o);
        }
        free(h.buf);
    }
}

void kvreplay_end(struct kvsub_rank *k, int result)
{
    char err[200];

    if (!k->replaying)
        return;
    k->replaying = 0;
    evtimer_del(k->timer);
    k->replays[result]++;
    if (result != RPL_FILLED)
        log_info("KV events rank %u: replay from %s %s; routers are told the rank is cleared",
                 k->rank, k->replay_ep,
                 result == RPL_TIMEOUT    ? "timed out"
                 : result == RPL_OVERFLOW ? "outlasted by the live events"
                 : result == RPL_RESTART  ? "cut short by the engine's restart"
                                          : "did not cover the gap");
    /* Replies of this replay may still come: a new DEALER cannot take them for the next's. */
    dealer_close(k);
    if (dealer_open(k, err, sizeof err) != 0)
        log_warn("KV events rank %u: %s; gaps are relayed as cleared", k->rank, err);
    if (result == RPL_RESTART)
        drop_held(k);
    else
        release_held(k);
}

/* One replayed batch: relayed when it is the next one, skipped when the relay has it. Returns
 * 1 while the replay goes on. */
static int replayed(struct kvsub_rank *k, int64_t seq, const void *p, size_t len)
{
    struct kve_out o;

    if (seq <= k->last_seq)
        return 1;
    if (seq > k->last_seq + 1 || kvsub_decode(k, p, len, &o) != 0) {
        kvreplay_end(k, RPL_UNFILLED);
        return 0;
    }
    kvsub_apply(k, seq, &o);
    k->replayed++;
    if (k->held_n > 0 && k->last_seq + 1 >= k->held[k->held_head].seq) {
        kvreplay_end(k, RPL_FILLED);
        return 0;
    }
    return 1;
}

/* One reply: ["", topic, seq, payload] or ["", seq, payload]; other shapes are ignored. The
 * end marker (seq -1) before the gap was reached ends the replay unfilled. */
static int reply(struct kvsub_rank *k, zmq_msg_t *f, int nf)
{
    const unsigned char *q;
    int64_t seq = 0;
    int at = nf == 4 ? 2 : 1;

    if ((nf != 3 && nf != 4) || zmq_msg_size(&f[0]) != 0 || zmq_msg_size(&f[at]) != 8)
        return 1;
    q = zmq_msg_data(&f[at]);
    for (int i = 0; i < 8; i++)
        seq = (int64_t) ((uint64_t) seq << 8 | q[i]);
    if (seq < 0) {
        kvreplay_end(k, RPL_UNFILLED);
        return 0;
    }
    return replayed(k, seq, zmq_msg_data(&f[at + 1]), zmq_msg_size(&f[at + 1]));
}

/* Reads what the DEALER has; replies when no replay runs are stale and dropped. */
static void on_dealer(evutil_socket_t fd, short what, void *arg)
{
    struct kvsub_rank *k = arg;
    void *sock = k->dealer;

    (void) fd;
    (void) what;
    for (int n = 0; n < KVSUB_BURST; n++) {
        zmq_msg_t f[5];
        int events, nf = 0, more = 1, extra = 0, go;
        size_t el = sizeof events, ml = sizeof more;

        if (zmq_getsockopt(sock, ZMQ_EVENTS, &events, &el) != 0 || !(events & ZMQ_POLLIN))
            return;
        while (more) {
            zmq_msg_t x, *m = nf < 5 ? &f[nf] : &x; /* past five: no reply of vLLM's */

            zmq_msg_init(m);
            if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(m);
                break;
            }
            if (m == &x) {
                zmq_msg_close(&x);
                extra = 1;
            } else {
                nf++;
            }
            if (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml) != 0)
                more = 0;
        }
        go = k->replaying && !extra ? reply(k, f, nf) : 1;
        for (int i = 0; i < nf; i++)
            zmq_msg_close(&f[i]);
        /* an ended replay closed this socket (a new one is k->dealer) */
        if (!go)
            return;
    }
    event_active(k->dev, EV_READ, 0);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    kvreplay_end(arg, RPL_TIMEOUT);
}
