/* admission: the gate, the queue timeout, Retry-After and the book, as proxy hooks. */
#include "daemon/admission.h"
#include "wire/httputil.h"
#include "util/ratewin.h"
#include "admission/tokcount.h"
#include "util/xmalloc.h"
#include "http/proxy.h"
#include "util/clock.h"

#include <stdlib.h>
#include <time.h>

enum akind {
    AK_BYPASS = 0, /* GET/HEAD/OPTIONS, and the tokenizer: never takes a slot */
    AK_GATED,      /* holds a gate ticket */
    AK_NOCAP,      /* would be gated, but there is no cap */
};

/* Per exchange, inside the proxy's allocation. */
struct areq {
    struct gate_ticket ticket; /* first member: the dispatch callback casts back */
    struct admission *a;
    enum akind kind;
    struct book_req bk; /* booked load while at the engine (gated and no-cap requests) */
    struct timespec t_arrive;
};

struct admission {
    struct proxy *px;
    struct metrics *m;
    const struct admission_opts *o;
    struct gate *gate; /* NULL: no cap */
    struct book *book;
    struct ratewin releases; /* slot releases, for the Retry-After estimate */
    char *overload_body;     /* rendered once: the rejection path is hot under overload */
    size_t overload_len;
    void (*on_change)(void *arg);
    void *on_change_arg;
};

static void changed(struct admission *a)
{
    if (a->on_change != NULL)
        a->on_change(a->on_change_arg);
}

int admission_retry_after(struct admission *a)
{
    struct gate_stats st;

    if (a->o->retry_after_s > 0)
        return (int) a->o->retry_after_s;
    if (a->gate == NULL)
        return RETRY_AFTER_MIN;
    gate_get_stats(a->gate, &st);
    return (int) retry_after_estimate(st.queued, ratewin_rate(&a->releases, clock_mono_ms()));
}

/* A slot for a request: how long it waited goes into the histogram and its reply. One that
 * got its slot at once waited 0, not the microseconds spent reaching the gate (which a busy
 * machine can stretch past the 0.05 ms that would show as 0.1). */
static void admitted(struct areq *q, int at_once)
{
    double waited = at_once ? 0.0 : clock_seconds_since(&q->t_arrive);

    pxreq_set_queue_wait(pxreq_of_state(q), waited);
    prom_hist_observe(&q->a->m->queue_wait, waited);
}

/* ---- the proxy's hooks ------------------------------------------------------------------ */

static void on_begin(void *arg, struct pxreq *x, const struct http_req *r)
{
    struct admission *a = arg;
    struct areq *q = pxreq_state(x);

    q->a = a;
    gate_ticket_init(&q->ticket);
    clock_mono(&q->t_arrive);
    if (http_method_is_safe(r->method)) {
        q->kind = AK_BYPASS;
        a->m->requests_bypass++;
        a->m->inflight_bypass++;
    } else if (http_req_is_tokenizer(r)) { /* no inference: as a GET */
        q->kind = AK_BYPASS;
        a->m->tokenizer_reqs++;
        a->m->inflight_bypass++;
    } else if (a->gate != NULL) {
        q->kind = AK_GATED;
    } else {
        q->kind = AK_NOCAP;
        a->m->inflight_nocap++;
    }
}

static enum px_verdict on_arrive(void *arg, struct pxreq *x, const struct http_req *r)
{
    struct admission *a = arg;
    struct areq *q = pxreq_state(x);

    (void) r;
    if (q->kind != AK_GATED)
        return PX_FORWARD;
    switch (gate_enter(a->gate, &q->ticket)) {
    case GATE_ADMITTED:
        admitted(q, 1);
        return PX_FORWARD;
    case GATE_QUEUED:
        if (a->o->queue_timeout_ms > 0)
            proxy_wait_deadline(x, a->o->queue_timeout_ms);
        changed(a);
        return PX_WAIT;
    case GATE_REJECTED:
        break;
    }
    proxy_answer(x, a->o->overload_status, a->overload_body, a->overload_len,
                 admission_retry_after(a), "queue-full", OUT_REJECTED);
    return PX_ANSWERED;
}

/* Waited longer than --queue-timeout-ms: leave the queue with the overload status. */
static void on_expired(void *arg, struct pxreq *x)
{
    struct admission *a = arg;
    struct areq *q = pxreq_state(x);

    gate_leave(a->gate, &q->ticket);
    proxy_answer_error(x, a->o->overload_status, "overloaded_error", HTTPU_QUEUE_TIMEOUT_MESSAGE,
                       admission_retry_after(a), "queue-timeout", OUT_QUEUE_TIMEOUT);
}

/* A slot freed up for a waiter. */
static void on_dispatch(struct gate_ticket *t, void *arg)
{
    struct admission *a = arg;
    struct areq *q = (struct areq *) (void *) t;

    if (proxy_closing(a->px))
        return; /* shutting down: the proxy ends every exchange */
    admitted(q, 0);
    proxy_forward(pxreq_of_state(q));
}

static int on_forwarding(void *arg, struct pxreq *x, const struct http_req *r)
{
    struct admission *a = arg;
    struct areq *q = pxreq_state(x);
    struct tokcount tc;

    if (q->kind == AK_BYPASS)
        return 0;
    tokcount_body(r->body, r->body_len, a->o->chars_per_token, &tc);
    book_admit(a->book, &q->bk, tc.tokens);
    changed(a);
    return 1;
}

static void on_output(void *arg, struct pxreq *x, int first, unsigned tokens)
{
    struct admission *a = arg;
    struct areq *q = pxreq_state(x);

    if (first)
        book_first_byte(a->book, &q->bk);
    book_output(a->book, &q->bk, tokens);
    changed(a);
}

static void on_finish(void *arg, struct pxreq *x, enum outcome o)
{
    struct admission *a = arg;
    struct areq *q = pxreq_state(x);

    (void) o;
    book_release(a->book, &q->bk);
    switch (q->kind) {
    case AK_BYPASS:
        a->m->inflight_bypass--;
        break;
    case AK_NOCAP:
        a->m->inflight_nocap--;
        break;
    case AK_GATED:
        if (gate_ticket_state(&q->ticket) == GATE_SLOT)
            ratewin_add(&a->releases, clock_mono_ms());
        gate_leave(a->gate, &q->ticket); /* may start the next waiter right here */
        break;
    }
    changed(a);
}

static int on_retry_after(void *arg)
{
    return admission_retry_after(arg);
}

/* ---- setup ---------------------------------------------------------------------------- */

struct admission *admission_new(struct proxy *px, struct metrics *m, const struct admission_opts *o)
{
    struct admission *a = xcalloc(1, sizeof *a);
    struct proxy_admission hooks = {
        .begin = on_begin,
        .arrive = on_arrive,
        .expired = on_expired,
        .forwarding = on_forwarding,
        .output = on_output,
        .finish = on_finish,
        .retry_after = on_retry_after,
        .size = sizeof(struct areq),
        .arg = a,
    };

    a->px = px;
    a->m = m;
    a->o = o;
    if (o->engine_request_limit > 0)
        a->gate = gate_new(o->engine_request_limit, o->request_queue_limit, on_dispatch, a);
    a->book = book_new(o->nranks ? o->nranks : 1, o->block_size);
    ratewin_init(&a->releases);
    admission_reconfigure(a);
    proxy_set_admission(px, &hooks);
    return a;
}

void admission_free(struct admission *a)
{
    if (a == NULL)
        return;
    gate_free(a->gate);
    book_free(a->book);
    free(a->overload_body);
    free(a);
}

void admission_set_change_cb(struct admission *a, void (*cb)(void *arg), void *arg)
{
    a->on_change = cb;
    a->on_change_arg = arg;
}

const struct gate_stats *admission_gate_stats(const struct admission *a, struct gate_stats *st)
{
    if (a->gate == NULL)
        return NULL;
    gate_get_stats(a->gate, st);
    return st;
}

struct book *admission_book(struct admission *a)
{
    return a->book;
}

int admission_set_limits(struct admission *a, unsigned n, unsigned q)
{
    if (a->gate == NULL)
        return -1;
    gate_set_limits(a->gate, n, q);
    changed(a);
    return 0;
}

/* The overload body is rendered once; a reload may change its status. */
void admission_reconfigure(struct admission *a)
{
    struct buf b;

    free(a->overload_body);
    buf_init(&b);
    httpu_error_json(&b, a->o->overload_status, "overloaded_error", HTTPU_OVERLOAD_MESSAGE);
    a->overload_body = b.data;
    a->overload_len = b.len;
}
