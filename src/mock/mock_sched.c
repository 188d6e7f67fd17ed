/* mock_sched: per-rank sequence slots, the prefill/decode clock and token streaming.
 *
 * Life of a request (an mreq): it waits FIFO on its rank until a sequence slot is free, then
 * runs: one timer fires for prefill, then once per decode step, each step producing one token
 * (a batch of tokens per loop turn when steps take no time). With --prefill-interference the
 * rank's prefill timeline (mock_busy) couples them: a prefill ends after the rank's earlier
 * ones, and a decode step due while the rank prefills waits for the end. A request ends in
 * exactly one of four ways, each of which calls mreq_free(), the only release path:
 *   - finished: the reply is handed to evhttp (mreq_finish);
 *   - the client hung up while no reply had started: cwatch tells us and we close the
 *     connection, which frees the evhttp request (mreq_on_hangup);
 *   - the connection went down while the reply streamed: evhttp fires the connection's close
 *     callback (mreq_on_close) and, if the client left first, hands the request to us;
 *   - its client's close already sits in the socket when another request is about to start
 *     (mreq_retire, below).
 * A request never outlives its rank's lists; the engine frees the rest at shutdown.
 *
 * The running count is what tests compare with admitd's N, so it must not count a request
 * whose client has already left. The event loop reports a close only on a later turn, and a
 * turn may read a new request first: admitd cancels a request by closing its connection and
 * gives the slot to the next one at once, and when the engine is slow to read, the cancelled
 * request's bytes, its close and the next request are all waiting together. So before any
 * request starts, every running request's socket is looked at, and a waiting request whose
 * client has gone is not started (its watcher frees it on the next turn). */
#include "mock_sched.h"
#include "util/buf.h"
#include "http/cwatch.h"
#include "util/xmalloc.h"
#include "util/clock.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* Above this many unsent bytes for a client, generation pauses until they are written. */
#define MREQ_BACKPRESSURE_BYTES (256 * 1024)
/* Tokens produced per loop turn when a step takes no time, so that one huge request cannot
 * keep the loop from serving everyone else. */
#define MREQ_BATCH_TOKENS 64
/* Longest single timer; a prompt of billions of tokens would otherwise overflow timeval. */
#define MREQ_MAX_DELAY_MS 1e9

enum mreq_state { MR_WAITING = 0, MR_PREFILL, MR_DECODE };

struct mreq {
    TAILQ_ENTRY(mreq) link; /* on rank->waiting (MR_WAITING) or rank->running (otherwise) */
    struct mock_engine *e;
    struct mock_rank *rank;
    struct evhttp_request *req;
    struct evhttp_connection *evcon; /* NULL once its close callback is no longer ours */
    int req_owned;                   /* evhttp detached req from a dead connection: ours to free */
    struct cwatch *watch;            /* hang-up watch while no reply has started */
    struct event *timer;             /* prefill, then each decode step */
    enum mreq_state state;
    uint64_t due_us;          /* CLOCK_MONOTONIC deadline of the pending timer */
    uint64_t prefill_from_us; /* when its prefill began on the rank (--prefill-interference) */
    int paused;               /* the client has too much unsent: wait for the flush callback */
    int stalled;              /* its next token waits for the rank's prefills */
    enum mock_api api;
    int stream;
    int include_usage;
    unsigned prompt_tokens;
    unsigned cached_tokens; /* of the prompt, found in the prefix cache at start */
    uint32_t *ids;          /* the prompt's token ids */
    size_t nids;
    struct mock_kvseq kv; /* the prefix cache blocks held while running */
    uint64_t kv_seed;     /* its cache_salt's seed of the block chain (0: none) */
    unsigned max_tokens;  /* tokens it generates: the request's, or --stop-after if fewer */
    int eos;              /* its last token ends it (--stop-after): finish_reason "stop" */
    unsigned generated;
    struct mock_kvx kvx;  /* its leg of a disaggregated request */
    unsigned transferred; /* a decode leg's prompt tokens received, not prefilled */
    unsigned blocks;      /* KV blocks its context takes on its rank while running (in the cache
                             or its own, see mreq_own_blocks) */
    long long created;
    char id[sizeof "chatcmpl-" + MOCK_REQUEST_ID_MAX]; /* the completion id of every reply */
    const char *rid;  /* in id: the request id after "chatcmpl-" or "cmpl-" */
    char *model;      /* echoed in replies */
    char *model_json; /* the same as a JSON string literal, quotes included */
};

void mock_reply_json(struct evhttp_request *req, int code, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    struct evbuffer *b = evbuffer_new();

    json_decref(j);
    if (s == NULL || b == NULL)
        fatal("out of memory rendering a reply");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    /* evhttp 2.1 would send a body even to HEAD; it sets no Content-Length for HEAD either. */
    if (evhttp_request_get_command(req) != EVHTTP_REQ_HEAD)
        evbuffer_add(b, s, strlen(s));
    evhttp_send_reply(req, code, NULL, b);
    evbuffer_free(b);
    free(s);
}

static void rank_pump(struct mock_engine *e, struct mock_rank *r);
static void mreq_on_flushed(struct evhttp_connection *evcon, void *arg);

/* The blocks of a running request's context that are its own, not shared through the cache:
 * those it holds no cache reference for (kv.nheld never exceeds its full blocks). */
static unsigned mreq_own_blocks(const struct mreq *m)
{
    return m->kv.nheld < m->blocks ? m->blocks - (unsigned) m->kv.nheld : 0;
}

uint64_t mock_rank_kv_blocks(const struct mock_rank *r)
{
    return r->own_blocks + (r->cache != NULL ? mock_kvc_in_use(r->cache) : 0);
}

/* The single release path. The caller has already settled what happens to the evhttp
 * request: evhttp keeps it (attached to a live connection, or answered), or req_owned says
 * it was detached and is ours. */
static void mreq_free(struct mreq *m)
{
    struct mock_rank *r = m->rank;

    m->e->in_flight--;
    if (m->state == MR_WAITING) {
        TAILQ_REMOVE(&r->waiting, m, link);
        r->nwaiting--;
    } else {
        TAILQ_REMOVE(&r->running, m, link);
        r->nrunning--;
        r->own_blocks -= mreq_own_blocks(m);
        m->e->running_total--;
        if (m->state == MR_PREFILL && m->e->o.prefill_interference)
            mock_busy_cancel(&r->busy, (uint64_t) clock_mono_us(), m->prefill_from_us, m->due_us);
        if (r->cache != NULL)
            mock_kvc_release(r->cache, &m->kv);
    }
    free(m->ids);
    event_free(m->timer);
    cwatch_free(m->watch);
    if (m->evcon != NULL)
        evhttp_connection_set_closecb(m->evcon, NULL, NULL);
    if (m->req_owned)
        evhttp_request_free(m->req);
    free(m->model);
    free(m->model_json);
    free(m);
}

/* Arms the timer for the deadline due; one already past fires at once. */
static void mreq_arm_at(struct mreq *m, uint64_t now, uint64_t due)
{
    uint64_t delay;
    struct timeval tv;

    if (due < now)
        due = now;
    m->due_us = due;
    delay = due - now;
    tv.tv_sec = (time_t) (delay / 1000000);
    tv.tv_usec = (suseconds_t) (delay % 1000000);
    evtimer_add(m->timer, &tv);
}

/* Arms the timer ms after the previous deadline, or after now when restart is set. Counting
 * from the deadline keeps timer latency (epoll rounds up to whole ms) from adding up over
 * thousands of tokens; a deadline already past fires at once but builds no further debt. */
static void mreq_arm(struct mreq *m, double ms, int restart)
{
    uint64_t now = (uint64_t) clock_mono_us();

    if (!(ms > 0))
        ms = 0;
    if (ms > MREQ_MAX_DELAY_MS)
        ms = MREQ_MAX_DELAY_MS;
    mreq_arm_at(m, now, (restart ? now : m->due_us) + (uint64_t) (ms * 1000));
}

/* The delay before the next token, from the KV fill of the rank as it is now. */
static double mreq_step_ms(const struct mreq *m)
{
    const struct mock_opts *o = &m->e->o;

    if (o->token_interval_ms > 0)
        return o->token_interval_ms;
    return mock_decode_ms((double) mock_rank_kv_blocks(m->rank) / o->num_gpu_blocks,
                          o->speedup_ratio);
}

/* `data: {"id":...,"object":...,"created":...,"model":...,` of every SSE event */
static void sse_head(const struct mreq *m, struct evbuffer *b)
{
    evbuffer_add_printf(b, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":%s,",
                        m->id,
                        m->api == MOCK_API_CHAT ? "chat.completion.chunk" : "text_completion",
                        m->created, m->model_json);
}

/* Hands the event in the scratch buffer to evhttp as its own chunk, so that each token
 * leaves as soon as it exists. Pauses generation when the client is not keeping up. */
static void mreq_send_event(struct mreq *m)
{
    struct evbuffer *b = m->e->scratch;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(m->evcon);
    size_t pending = evbuffer_get_length(bufferevent_get_output(bev)) + evbuffer_get_length(b);

    if (pending > MREQ_BACKPRESSURE_BYTES) {
        /* The flush callback belongs to the connection and every chunk replaces it; no chunk
         * follows until it has fired, so it cannot be lost. */
        m->paused = 1;
        evhttp_send_reply_chunk_with_cb(m->req, b, mreq_on_flushed, m);
    } else {
        evhttp_send_reply_chunk(m->req, b);
    }
    evbuffer_drain(b, evbuffer_get_length(b));
}

/* The context just filled a block that ends in generated tokens: cache it, as vLLM caches
 * full blocks of the output. Its ids are the prompt's and the generated tokens' ids. */
static void mreq_cache_block(struct mreq *m)
{
    size_t bs = m->e->o.block_size, end = m->nids + m->generated, start = end - bs;
    uint32_t *ids = m->e->block_ids;

    for (size_t i = 0; i < bs; i++)
        ids[i] = start + i < m->nids ? m->ids[start + i]
                                     : mock_tok_gen_id((unsigned) (start + i - m->nids));
    mock_kvc_push(m->rank->cache, &m->kv, ids, 0);
}

static void mreq_emit_token(struct mreq *m)
{
    struct mock_rank *r = m->rank;
    unsigned tok = m->generated++;
    unsigned ctx =
        m->prompt_tokens > UINT_MAX - m->generated ? UINT_MAX : m->prompt_tokens + m->generated;
    unsigned own = mreq_own_blocks(m);
    struct evbuffer *b = m->e->scratch;
    char piece[MOCK_TOK_PIECE];

    r->generation_tokens_total++;
    m->blocks = mock_blocks_for(ctx, m->e->o.block_size);
    if (r->cache != NULL && (m->nids + m->generated) % m->e->o.block_size == 0)
        mreq_cache_block(m);
    /* a new partial block is the request's own; one it fills moves into the cache */
    r->own_blocks = r->own_blocks - own + mreq_own_blocks(m);
    if (!m->stream)
        return;
    mock_tok_gen_text(tok, piece);
    sse_head(m, b);
    if (m->api == MOCK_API_CHAT)
        evbuffer_add_printf(b,
                            "\"choices\":[{\"index\":0,\"delta\":{%s\"content\":\"%.4s\"},"
                            "\"logprobs\":null,\"finish_reason\":null}]}\n\n",
                            tok == 0 ? "\"role\":\"assistant\"," : "", piece);
    else
        evbuffer_add_printf(b,
                            "\"choices\":[{\"index\":0,\"text\":\"%.4s\",\"logprobs\":null,"
                            "\"finish_reason\":null}]}\n\n",
                            piece);
    mreq_send_event(m);
}

/* Whether the usage carries prompt_tokens_details: always with --enable-prompt-tokens-details,
 * only when some of the prompt was cached with --prompt-tokens-details-if-cached (vLLM's and
 * SGLang's way, which a router must read as 0 when it knows the engine reports them). */
static int mreq_details(const struct mreq *m)
{
    if (m->e->o.details_if_cached)
        return m->cached_tokens > 0;
    return m->e->o.prompt_tokens_details;
}

/* "stop" when the request's last token ended it (--stop-after), else "length": max_tokens. */
static const char *mreq_finish_reason(const struct mreq *m)
{
    return m->eos ? "stop" : "length";
}

/* The kv_transfer_params of a prefill leg's answer, as vLLM's NixlConnector gives them only
 * to a request that ended length-capped (else null, as for any other leg). Called before the
 * request releases its blocks. */
static json_t *mreq_kv_params(struct mreq *m)
{
    struct mock_engine *e = m->e;
    struct mock_kvx_site site = {e->engine_id, e->kv_host, m->rank->index};
    uint32_t *ids;
    size_t n;
    json_t *j;

    if (m->kvx.leg != MOCK_KVX_PREFILL || m->eos)
        return json_null();
    ids = xmalloc(((size_t) mock_blocks_for(m->prompt_tokens, e->o.block_size) + 1) * sizeof *ids);
    n = mock_kvx_block_ids(m->kv.held, m->kv.nheld, m->prompt_tokens, e->o.block_size,
                           e->o.num_gpu_blocks, &e->next_own_block, ids);
    j = mock_kvx_answer(&site, ids, n, m->rid);
    free(ids);
    if (j == NULL)
        fatal("cannot build kv_transfer_params");
    e->kvx.transfers[MOCK_KVX_PREFILL]++;
    e->kvx.tokens[MOCK_KVX_PREFILL] += m->prompt_tokens;
    return j;
}

/* The end of a stream: finish_reason, usage if asked for, [DONE], each its own event. */
static void mreq_reply_stream_end(struct mreq *m)
{
    struct evbuffer *b = m->e->scratch;

    sse_head(m, b);
    if (m->api == MOCK_API_CHAT)
        evbuffer_add_printf(b,
                            "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,"
                            "\"finish_reason\":\"%s\"}]}\n\n",
                            mreq_finish_reason(m));
    else
        evbuffer_add_printf(b,
                            "\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,"
                            "\"finish_reason\":\"%s\"}]}\n\n",
                            mreq_finish_reason(m));
    evhttp_send_reply_chunk(m->req, b);
    if (m->include_usage) {
        sse_head(m, b);
        evbuffer_add_printf(b,
                            "\"choices\":[],\"usage\":{\"prompt_tokens\":%u,"
                            "\"completion_tokens\":%u,\"total_tokens\":%llu",
                            m->prompt_tokens, m->generated,
                            (unsigned long long) m->prompt_tokens + m->generated);
        if (mreq_details(m))
            evbuffer_add_printf(b, ",\"prompt_tokens_details\":{\"cached_tokens\":%u}",
                                m->cached_tokens);
        evbuffer_add_printf(b, "}}\n\n");
        evhttp_send_reply_chunk(m->req, b);
    }
    evbuffer_add_printf(b, "data: [DONE]\n\n");
    evhttp_send_reply_chunk(m->req, b);
    evbuffer_drain(b, evbuffer_get_length(b));
    evhttp_send_reply_end(m->req);
}

/* The whole completion in one JSON reply; the text is what the stream deltas would add up to. */
static void mreq_reply_full(struct mreq *m)
{
    struct buf text;
    json_t *choice, *body;
    char piece[MOCK_TOK_PIECE];

    buf_init(&text);
    for (unsigned i = 0; i < m->generated; i++) {
        mock_tok_gen_text(i, piece);
        buf_append(&text, piece, sizeof piece);
    }
    if (m->api == MOCK_API_CHAT)
        choice = json_pack("{s:i, s:{s:s, s:s%}, s:n, s:s}", "index", 0, "message", "role",
                           "assistant", "content", text.data, text.len, "logprobs", "finish_reason",
                           mreq_finish_reason(m));
    else
        choice = json_pack("{s:i, s:s%, s:n, s:s}", "index", 0, "text", text.data, text.len,
                           "logprobs", "finish_reason", mreq_finish_reason(m));
    body = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:{s:I, s:I, s:I}}", "id", m->id, "object",
                     m->api == MOCK_API_CHAT ? "chat.completion" : "text_completion", "created",
                     (json_int_t) m->created, "model", m->model, "choices", choice, "usage",
                     "prompt_tokens", (json_int_t) m->prompt_tokens, "completion_tokens",
                     (json_int_t) m->generated, "total_tokens",
                     (json_int_t) m->prompt_tokens + m->generated);
    buf_free(&text);
    if (body == NULL)
        fatal("cannot build a completion reply");
    if (mreq_details(m))
        json_object_set_new(json_object_get(body, "usage"), "prompt_tokens_details",
                            json_pack("{s:I}", "cached_tokens", (json_int_t) m->cached_tokens));
    else if (m->e->o.details_if_cached) /* vLLM's JSON answer: the field is there, null */
        json_object_set_new(json_object_get(body, "usage"), "prompt_tokens_details", json_null());
    /* Only an answer to a request that named kv_transfer_params names them (vLLM has the key,
     * null, in every answer; clients of the mock do not expect it in theirs). */
    if (m->kvx.present)
        json_object_set_new(body, "kv_transfer_params", mreq_kv_params(m));
    mock_reply_json(m->req, 200, body);
}

static void mreq_finish(struct mreq *m)
{
    struct mock_engine *e = m->e;
    struct mock_rank *r = m->rank;

    log_debug("%s: done, %u prompt (%u cached) + %u generated tokens", m->id, m->prompt_tokens,
              m->cached_tokens, m->generated);
    /* From here the reply belongs to evhttp. The connection is keep-alive, so its close
     * callback must not outlive this request with a dangling argument. */
    cwatch_free(m->watch);
    m->watch = NULL;
    evhttp_connection_set_closecb(m->evcon, NULL, NULL);
    m->evcon = NULL;
    if (m->stream)
        mreq_reply_stream_end(m);
    else
        mreq_reply_full(m);
    mreq_free(m);
    rank_pump(e, r);
}

static void mreq_decode(struct mreq *m)
{
    unsigned n = 0;
    double ms;

    do {
        mreq_emit_token(m);
        ms = mreq_step_ms(m);
    } while (m->generated < m->max_tokens && !m->paused && ms <= 0 && ++n < MREQ_BATCH_TOKENS);
    if (m->generated == m->max_tokens)
        mreq_finish(m);
    else if (!m->paused)
        mreq_arm(m, ms, 0);
}

static void mreq_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct mreq *m = arg;

    (void) fd;
    (void) what;
    if (m->state == MR_PREFILL) {
        m->rank->prompt_tokens_total += m->prompt_tokens;
        m->state = MR_DECODE;
        mreq_arm(m, mreq_step_ms(m), 0);
        return;
    }
    /* --prefill-interference: while the rank prefills, no decode step runs on it */
    if (m->e->o.prefill_interference) {
        uint64_t now = (uint64_t) clock_mono_us(), at = mock_busy_next(&m->rank->busy, now);

        if (at > now) {
            m->rank->decode_stalls += !m->stalled;
            m->rank->decode_stall_us += at - now;
            m->stalled = 1;
            mreq_arm_at(m, now, at);
            return;
        }
    }
    m->stalled = 0;
    mreq_decode(m);
}

/* evhttp wrote everything we gave it: resume a paused stream. */
static void mreq_on_flushed(struct evhttp_connection *evcon, void *arg)
{
    struct mreq *m = arg;

    (void) evcon;
    if (!m->paused)
        return;
    m->paused = 0;
    mreq_arm(m, mreq_step_ms(m), 1);
}

/* The connection is going down (the client left mid-stream, or the server frees it). */
static void mreq_on_close(struct evhttp_connection *evcon, void *arg)
{
    struct mreq *m = arg;
    struct mock_engine *e = m->e;
    struct mock_rank *r = m->rank;

    (void) evcon;
    e->cancelled_total++;
    log_debug("%s: client left after %u of %u tokens", m->id, m->generated, m->max_tokens);
    /* When the client left first, evhttp detached the request (its connection is NULL) and
     * it is ours to free; otherwise the connection frees it right after this callback. */
    m->req_owned = evhttp_request_get_connection(m->req) == NULL;
    m->evcon = NULL;
    mreq_free(m);
    rank_pump(e, r);
}

/* Ends a request whose client has gone, with its connection. mreq_free() drops the watcher
 * while the fd is still open and clears the close callback; freeing the connection then frees
 * the evhttp request with it. Never called from the request's own evhttp callbacks. */
static void mreq_retire(struct mreq *m, const char *when)
{
    struct evhttp_connection *evcon = m->evcon;

    m->e->cancelled_total++;
    log_debug("%s: client left %s", m->id, when);
    mreq_free(m);
    evhttp_connection_free(evcon);
}

/* The client hung up before any reply: evhttp is not reading and would never notice. */
static void mreq_on_hangup(void *arg)
{
    struct mreq *m = arg;
    struct mock_engine *e = m->e;
    struct mock_rank *r = m->rank;

    mreq_retire(m, "before the reply started");
    rank_pump(e, r);
}

static int mreq_client_gone(const struct mreq *m)
{
    return cwatch_peer_gone(bufferevent_getfd(evhttp_connection_get_bufferevent(m->evcon)));
}

/* Retires the running requests, on every rank, whose client's close is already in the socket
 * though the loop has not reported it yet. Returns how many. */
static unsigned reap_gone(struct mock_engine *e)
{
    unsigned n = 0;

    for (unsigned i = 0; i < e->o.data_parallel_size; i++) {
        struct mreq *m, *next;

        for (m = TAILQ_FIRST(&e->ranks[i].running); m != NULL; m = next) {
            next = TAILQ_NEXT(m, link);
            if (mreq_client_gone(m)) {
                mreq_retire(m, "while running (noticed before the next start)");
                n++;
            }
        }
    }
    return n;
}

static void mreq_start(struct mreq *m)
{
    struct mock_engine *e = m->e;
    struct mock_rank *r = m->rank;
    unsigned computed;
    double ms;

    TAILQ_REMOVE(&r->waiting, m, link);
    r->nwaiting--;
    TAILQ_INSERT_TAIL(&r->running, m, link);
    r->nrunning++;
    if (++e->running_total > e->running_peak)
        e->running_peak = e->running_total;
    m->blocks = mock_blocks_for(m->prompt_tokens, e->o.block_size);
    m->state = MR_PREFILL;
    /* vLLM looks the prompt up when it schedules it, and its blocks are shared from then on. */
    if (r->cache != NULL) {
        size_t cached = mock_kvc_begin(r->cache, &m->kv, m->kv_seed, m->ids, m->nids);

        m->cached_tokens = cached > m->prompt_tokens ? m->prompt_tokens : (unsigned) cached;
        r->prefix_queries += m->nids;
        r->prefix_hits += cached;
    }
    r->own_blocks += mreq_own_blocks(m);
    /* A decode leg received the KV of remote_block_ids: those tokens need no prefill, nor do
     * the cached ones; the rest are computed. */
    if (m->kvx.leg == MOCK_KVX_DECODE) {
        m->transferred =
            mock_kvx_transferred(m->kvx.remote_blocks, e->o.block_size, m->prompt_tokens);
        e->kvx.transfers[MOCK_KVX_DECODE]++;
        e->kvx.tokens[MOCK_KVX_DECODE] += m->transferred;
    }
    computed =
        m->prompt_tokens - (m->transferred > m->cached_tokens ? m->transferred : m->cached_tokens);
    e->kvx.computed += computed;
    if (m->stream) {
        struct evkeyvalq *h = evhttp_request_get_output_headers(m->req);

        /* Once the reply starts evhttp reads the connection again and reports a hang-up
         * through the close callback; a second watcher on the fd is no longer needed. */
        cwatch_free(m->watch);
        m->watch = NULL;
        evhttp_add_header(h, "Content-Type", "text/event-stream");
        evhttp_add_header(h, "Cache-Control", "no-cache");
        evhttp_send_reply_start(m->req, 200, "OK");
    }
    ms = mock_prefill_ms(computed, e->o.speedup_ratio);
    if (e->o.prefill_interference) {
        uint64_t now = (uint64_t) clock_mono_us();

        mreq_arm_at(m, now, mock_busy_reserve(&r->busy, now, ms, &m->prefill_from_us));
    } else {
        mreq_arm(m, ms, 1);
    }
}

/* Starts waiting requests, oldest first, while sequence slots are free; one whose client has
 * gone stays waiting until its watcher reports the close. */
static void rank_start(struct mock_engine *e, struct mock_rank *r)
{
    struct mreq *m, *next;

    for (m = TAILQ_FIRST(&r->waiting); m != NULL && r->nrunning < e->o.max_num_seqs; m = next) {
        next = TAILQ_NEXT(m, link);
        if (!mreq_client_gone(m))
            mreq_start(m);
    }
}

static void rank_pump(struct mock_engine *e, struct mock_rank *r)
{
    if (TAILQ_EMPTY(&r->waiting))
        return;
    if (reap_gone(e) == 0) {
        rank_start(e, r);
        return;
    }
    /* Slots were freed, perhaps on other ranks, whose waiters nothing else would start. */
    for (unsigned i = 0; i < e->o.data_parallel_size; i++)
        rank_start(e, &e->ranks[i]);
}

void mock_sched_submit(struct mock_engine *e, struct evhttp_request *req, const struct mock_gen *g)
{
    struct mreq *m = xcalloc(1, sizeof *m);
    json_t *model = json_string(g->model);
    const char *kind = g->api == MOCK_API_CHAT ? "chatcmpl" : "cmpl";
    int fd;

    m->e = e;
    m->req = req;
    m->api = g->api;
    m->stream = g->stream;
    m->include_usage = g->include_usage;
    m->prompt_tokens = g->prompt_tokens;
    m->ids = g->ids;
    m->nids = g->nids;
    m->max_tokens = g->max_tokens;
    /* --stop-after: the model's end of sequence comes first; at max_tokens too, it wins */
    if (e->o.stop_after > 0 && e->o.stop_after <= m->max_tokens) {
        m->max_tokens = e->o.stop_after;
        m->eos = 1;
    }
    m->kvx = g->kvx;
    m->kv_seed = g->kv_seed;
    m->created = (long long) time(NULL);
    /* vLLM's form: "chatcmpl-" or "cmpl-" before the client's X-Request-Id, so that every
     * event of a reply names whose request it answers; else before the engine's own id. */
    if (g->request_id != NULL)
        snprintf(m->id, sizeof m->id, "%s-%s", kind, g->request_id);
    else
        snprintf(m->id, sizeof m->id, "%s-mock-%llu", kind, (unsigned long long) ++e->next_id);
    m->rid = m->id + strlen(kind) + 1;
    m->model = xstrdup(g->model);
    /* The model name comes from jansson or from validated options, so it is valid UTF-8. */
    m->model_json = model != NULL ? json_dumps(model, JSON_ENCODE_ANY) : NULL;
    json_decref(model);
    if (m->model_json == NULL)
        fatal("cannot encode the model name");
    m->timer = evtimer_new(e->base, mreq_on_timer, m);
    if (m->timer == NULL)
        fatal("evtimer_new failed");
    m->rank = &e->ranks[e->next_rank];
    e->next_rank = (e->next_rank + 1) % e->o.data_parallel_size;
    m->evcon = evhttp_request_get_connection(req);
    fd = bufferevent_getfd(evhttp_connection_get_bufferevent(m->evcon));
    evhttp_connection_set_closecb(m->evcon, mreq_on_close, m);
    m->watch = cwatch_new(e->base, fd, mreq_on_hangup, m);
    m->state = MR_WAITING;
    TAILQ_INSERT_TAIL(&m->rank->waiting, m, link);
    m->rank->nwaiting++;
    if (++e->in_flight > e->in_flight_max)
        e->in_flight_max = e->in_flight;
    log_debug("%s: rank %u, %u prompt tokens, %u to generate%s", m->id, m->rank->index,
              m->prompt_tokens, m->max_tokens, m->stream ? ", streaming" : "");
    rank_pump(e, m->rank);
}

void mock_sched_drop_all(struct mock_engine *e)
{
    for (unsigned i = 0; i < e->o.data_parallel_size; i++) {
        struct mock_rank *r = &e->ranks[i];
        struct mreq *m;

        while ((m = TAILQ_FIRST(&r->running)) != NULL)
            mreq_free(m);
        while ((m = TAILQ_FIRST(&r->waiting)) != NULL)
            mreq_free(m);
    }
}
