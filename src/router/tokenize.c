/* tokenize: the router's calls to the workers' POST /tokenize (see tokenize.h).
 *
 * A call is one request on one connection of the worker's pool: written at once (a new
 * connection's bytes wait in its spill buffer while it connects), its answer read whole into
 * the connection's buffer as the engine pollers read theirs (http/hreply.h), the connection
 * given back to the pool when the answer left it fit for the next request. A kept connection that
 * the worker closed before any byte of the answer (an idle close crossing the request) is tried
 * once more on a new one: /tokenize changes nothing, so sending it twice is harmless. */
#include "tokenize.h"
#include "http/hreply.h"
#include "http/upstream.h"
#include "util/clock.h"
#include "util/xmalloc.h"
#include "wire/prom.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* An answer's head, in bytes (admitd and vLLM send a few hundred). */
#define TOKZ_HEAD_MAX (32 * 1024)
/* The largest body taken: a 128k-token prompt's ids are about 1 MiB of JSON. */
#define TOKZ_BODY_MAX (8 * 1024 * 1024)

/* From a kept connection's answer (a fraction of a millisecond) to the default deadline and
 * past it, in seconds. */
static const double added_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                      0.01,   0.025,   0.05,   0.1,   0.2,    0.5};

static const char *const result_names[TOKZ__COUNT] = {"ok",      "timeout",   "failed",   "status",
                                                      "invalid", "no_worker", "cancelled"};

struct tokz {
    struct event_base *base;
    uint64_t results[TOKZ__COUNT];
    struct prom_hist added; /* seconds from a call's start to its end */
};

struct tokz_call {
    struct tokz *tz;
    struct upstream *up;
    struct uconn *uc;   /* NULL between a broken kept connection and the next */
    struct event timer; /* the deadline */
    struct buf req;     /* head and body, kept for a second try */
    struct timespec t0;
    int reused, retried; /* on a kept connection; already sent a second time */
    int got;             /* a byte of the answer came */
    size_t max_ids;
    struct hreply ans;
    tokz_cb cb;
    void *arg;
};

/* ---- the request's body ------------------------------------------------------------------ */

/* Copies key from src to dst when src has it. */
static void keep(json_t *dst, const json_t *src, const char *key)
{
    json_t *v = json_object_get(src, key);

    if (v != NULL)
        json_object_set(dst, key, v);
}

int tokz_body(const char *body, size_t len, struct buf *out)
{
    static const char *const chat_keys[] = {"tools", "chat_template", "chat_template_kwargs",
                                            "continue_final_message", "add_special_tokens"};
    json_t *root = json_loadb(body, len, 0, NULL), *t = NULL;
    const json_t *messages = json_object_get(root, "messages");
    const json_t *prompt = json_object_get(root, "prompt");
    char *text;
    int rv = -1;

    if (!json_is_object(root))
        goto out;
    if (json_is_array(messages)) {
        /* The engine's chat path renders the template with the generation prompt unless
         * the request says otherwise: its ids end with the assistant's header. */
        t = json_object();
        json_object_set(t, "messages", (json_t *) messages);
        if (json_is_boolean(json_object_get(root, "add_generation_prompt")))
            keep(t, root, "add_generation_prompt");
        else
            json_object_set_new(t, "add_generation_prompt", json_true());
        for (size_t i = 0; i < sizeof chat_keys / sizeof *chat_keys; i++)
            keep(t, root, chat_keys[i]);
    } else if (json_is_string(prompt)) {
        t = json_object();
        json_object_set(t, "prompt", (json_t *) prompt);
        keep(t, root, "add_special_tokens");
    } else {
        goto out;
    }
    keep(t, root, "model");
    if ((text = json_dumps(t, JSON_COMPACT)) != NULL) {
        buf_puts(out, text);
        free(text);
        rv = 0;
    }
out:
    json_decref(t);
    json_decref(root);
    return rv;
}

/* ---- a call -------------------------------------------------------------------------------- */

static void on_conn(void *arg, enum uc_event ev);

/* Frees the call: its connection given back when the answer left it whole, else closed. */
static void release(struct tokz_call *c, int keep_conn)
{
    if (c->uc != NULL) {
        if (keep_conn)
            upstream_put(c->up, c->uc);
        else
            uconn_drop(c->uc);
    }
    event_del(&c->timer);
    buf_free(&c->req);
    free(c);
}

/* The call ends with res: counted, timed, its callback told, and freed. */
static void end(struct tokz_call *c, enum tokz_result res, const uint64_t *ids, size_t n,
                int64_t count, int keep_conn)
{
    struct tokz *tz = c->tz;
    tokz_cb cb = c->cb;
    void *arg = c->arg;

    tz->results[res]++;
    prom_hist_observe(&tz->added, clock_seconds_since(&c->t0));
    release(c, keep_conn);
    cb(arg, res, ids, n, count);
}

/* The answer's body, whole: the ids of its "tokens" (the first max_ids), or invalid. */
static void answered(struct tokz_call *c, int keep_conn)
{
    struct iobuf *in = uconn_in(c->uc);
    json_t *root, *tokens;
    uint64_t *ids;
    size_t n = 0, i;
    int64_t count;

    if (c->ans.rp.status != 200) {
        end(c, TOKZ_STATUS, NULL, 0, 0, keep_conn);
        return;
    }
    root = json_loadb(in->p + in->off, c->ans.blen, 0, NULL);
    in->off = in->len = 0; /* the body is taken: a connection with nothing held is kept */
    tokens = json_object_get(root, "tokens");
    if (!json_is_array(tokens)) {
        json_decref(root);
        end(c, TOKZ_INVALID, NULL, 0, 0, keep_conn);
        return;
    }
    count = (int64_t) json_array_size(tokens);
    n = json_array_size(tokens) < c->max_ids ? json_array_size(tokens) : c->max_ids;
    ids = xcalloc(n ? n : 1, sizeof *ids);
    for (i = 0; i < n; i++) {
        const json_t *v = json_array_get(tokens, i);

        if (!json_is_integer(v) || json_integer_value(v) < 0)
            break;
        ids[i] = (uint64_t) json_integer_value(v);
    }
    json_decref(root);
    if (i < n)
        end(c, TOKZ_INVALID, NULL, 0, 0, keep_conn);
    else
        end(c, TOKZ_OK, ids, n, count, keep_conn);
    free(ids);
}

/* Sends the request on a connection of the pool; 0, or -1 when none could even start. */
static int send_request(struct tokz_call *c)
{
    struct iovec v = {c->req.data, c->req.len};

    for (int attempt = 0;; attempt++) {
        if ((c->uc = upstream_get(c->up, on_conn, c, &c->reused)) == NULL)
            return -1;
        c->got = 0;
        hreply_init(&c->ans, H1_M_POST, TOKZ_HEAD_MAX, TOKZ_BODY_MAX);
        if (uconn_write(c->uc, &v, 1) == 0)
            return 0;
        uconn_drop(c->uc); /* a kept connection found closed: nothing of it went out */
        c->uc = NULL;
        if (!c->reused || attempt > 0)
            return -1;
    }
}

/* The connection broke before the answer was whole: on a kept one before any byte of it,
 * once more on a new connection; else the call failed. */
static void broken(struct tokz_call *c)
{
    int retry = c->reused && !c->got && !c->retried;

    uconn_drop(c->uc);
    c->uc = NULL;
    if (retry) {
        c->retried = 1;
        if (send_request(c) == 0)
            return;
    }
    end(c, TOKZ_FAILED, NULL, 0, 0, 0);
}

/* One read of the answer, and what it completes. */
static void read_answer(struct tokz_call *c)
{
    ssize_t got = uconn_fill(c->uc, hreply_read_max(&c->ans));
    int rv;

    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (got == 0 && hreply_eof(&c->ans)) {
        answered(c, 0); /* the close ends the body */
        return;
    }
    if (got <= 0) {
        broken(c);
        return;
    }
    c->got = 1;
    uconn_touch(c->uc);
    if ((rv = hreply_take(&c->ans, uconn_in(c->uc))) == H1_DONE)
        answered(c, c->ans.keep);
    else if (rv == H1_ERROR)
        end(c, TOKZ_INVALID, NULL, 0, 0, 0);
}

static void on_conn(void *arg, enum uc_event ev)
{
    struct tokz_call *c = arg;

    switch (ev) {
    case UC_READABLE:
        read_answer(c);
        break;
    case UC_DRAINED:
        break;
    case UC_CONNECT_FAILED:
    case UC_WRITE_FAILED:
        broken(c);
        break;
    case UC_TIMEOUT:
        end(c, TOKZ_TIMEOUT, NULL, 0, 0, 0);
        break;
    }
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    end(arg, TOKZ_TIMEOUT, NULL, 0, 0, 0);
}

struct tokz_call *tokz_start(struct tokz *tz, struct upstream *up, const char *body, size_t len,
                             unsigned timeout_ms, size_t max_ids, tokz_cb cb, void *arg)
{
    struct tokz_call *c = xcalloc(1, sizeof *c);
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};

    c->tz = tz;
    c->up = up;
    c->max_ids = max_ids;
    c->cb = cb;
    c->arg = arg;
    clock_mono(&c->t0);
    buf_init(&c->req);
    buf_printf(&c->req,
               "POST /tokenize HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
               "Content-Length: %zu\r\n\r\n",
               upstream_hostport(up), len);
    buf_append(&c->req, body, len);
    evtimer_assign(&c->timer, tz->base, on_deadline, c);
    evtimer_add(&c->timer, &tv);
    if (send_request(c) != 0) {
        tz->results[TOKZ_FAILED]++;
        prom_hist_observe(&tz->added, clock_seconds_since(&c->t0));
        release(c, 0);
        return NULL;
    }
    return c;
}

void tokz_cancel(struct tokz_call *c)
{
    if (c == NULL)
        return;
    c->tz->results[TOKZ_CANCELLED]++; /* not timed: it added nothing to a request that goes on */
    release(c, 0);
}

void tokz_count(struct tokz *tz, enum tokz_result res)
{
    tz->results[res]++;
}

struct tokz *tokz_new(struct event_base *base)
{
    struct tokz *tz = xcalloc(1, sizeof *tz);

    tz->base = base;
    prom_hist_init(&tz->added, added_bounds, sizeof added_bounds / sizeof *added_bounds);
    return tz;
}

void tokz_free(struct tokz *tz)
{
    free(tz);
}

void tokz_render_metrics(const struct tokz *tz, struct buf *out)
{
    prom_labelled(out, "admit_router_tokenize_total", "counter",
                  "Calls to a worker's POST /tokenize for a text request (--tokenize), by how "
                  "they ended; all but ok key the request by its text",
                  "result", result_names, tz->results, TOKZ__COUNT);
    prom_hist_write(out, "admit_router_tokenize_seconds",
                    "Time a call to a worker's /tokenize held its request, from its start to its "
                    "end (the time --tokenize adds before the request goes on)",
                    &tz->added);
}
