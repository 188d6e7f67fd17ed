/* tokenize: the router's calls to the workers' POST /tokenize (see tokenize.h).
 *
 * A call is a wcall (wcall.h: one request on the worker's keep-alive pool, its answer read
 * whole), allowed a second try on a new connection when a kept one broke before any byte of
 * the answer: /tokenize changes nothing, so sending it twice is harmless. */
#include "tokenize.h"
#include "util/clock.h"
#include "util/xmalloc.h"
#include "wcall.h"
#include "wire/prom.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

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
    struct wcall *wc; /* the call to the worker, until it ends */
    struct timespec t0;
    size_t max_ids;
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

/* The call ends with res: counted, timed, its callback told, and freed. */
static void end(struct tokz_call *c, enum tokz_result res, const uint64_t *ids, size_t n,
                int64_t count)
{
    struct tokz *tz = c->tz;
    tokz_cb cb = c->cb;
    void *arg = c->arg;

    tz->results[res]++;
    prom_hist_observe(&tz->added, clock_seconds_since(&c->t0));
    free(c);
    cb(arg, res, ids, n, count);
}

/* The call's end, from wcall: on a whole 200, the ids of its "tokens" (the first max_ids). */
static void answered(void *arg, enum wcall_end e, int status, const char *body, size_t len)
{
    static const enum tokz_result of_end[] = {[WCALL_OK] = TOKZ_OK,
                                              [WCALL_TIMEOUT] = TOKZ_TIMEOUT,
                                              [WCALL_FAILED] = TOKZ_FAILED,
                                              [WCALL_INVALID] = TOKZ_INVALID};
    struct tokz_call *c = arg;
    json_t *root, *tokens;
    uint64_t *ids;
    size_t n = 0, i;
    int64_t count;

    c->wc = NULL;
    if (e != WCALL_OK || status != 200) {
        end(c, e != WCALL_OK ? of_end[e] : TOKZ_STATUS, NULL, 0, 0);
        return;
    }
    root = json_loadb(body, len, 0, NULL);
    tokens = json_object_get(root, "tokens");
    if (!json_is_array(tokens)) {
        json_decref(root);
        end(c, TOKZ_INVALID, NULL, 0, 0);
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
        end(c, TOKZ_INVALID, NULL, 0, 0);
    else
        end(c, TOKZ_OK, ids, n, count);
    free(ids);
}

struct tokz_call *tokz_start(struct tokz *tz, struct upstream *up, const char *body, size_t len,
                             unsigned timeout_ms, size_t max_ids, tokz_cb cb, void *arg)
{
    struct tokz_call *c = xcalloc(1, sizeof *c);
    struct wcall_req rq = {.target = "/tokenize",
                           .body = body,
                           .len = len,
                           .timeout_ms = timeout_ms,
                           .body_max = TOKZ_BODY_MAX,
                           .resend = 1}; /* /tokenize changes nothing */

    c->tz = tz;
    c->max_ids = max_ids;
    c->cb = cb;
    c->arg = arg;
    clock_mono(&c->t0);
    if ((c->wc = wcall_start(tz->base, up, &rq, answered, c)) == NULL) {
        tz->results[TOKZ_FAILED]++;
        prom_hist_observe(&tz->added, clock_seconds_since(&c->t0));
        free(c);
        return NULL;
    }
    return c;
}

void tokz_cancel(struct tokz_call *c)
{
    if (c == NULL)
        return;
    c->tz->results[TOKZ_CANCELLED]++; /* not timed: it added nothing to a request that goes on */
    wcall_cancel(c->wc);
    free(c);
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
