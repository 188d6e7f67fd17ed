/* router_models: the models the workers serve, as admit-router's routing uses them.
 *
 * Glue between models.h's table (fed by every load message) and the router: a request that
 * names a model no worker serves is answered 404 in OpenAI's shape at arrival; otherwise its
 * selection (and the class gate's) runs among the workers that take its model. A request that
 * names no model, or one every worker takes, or is pinned to a worker (X-Admit-Worker: the
 * pin names the worker, and its engine decides), is not filtered at all. A name that first
 * appears in a worker's list becomes a model of /busy_threshold, and leaves it when no list
 * holds it any more. */
#include "router.h"
#include "router_impl.h"
#include "util/log.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A name that a worker's list holds and none held before. */
static void served(void *arg, const char *name)
{
    struct router *r = arg;

    if (bt_registry_learn(r->bt, name) != 0)
        log_warn("model %s: served by a worker, but /busy_threshold holds %d models already: "
                 "it is judged by the default thresholds",
                 LOG_ESC(name), BT_API_MODELS_MAX);
    else
        log_info("model %s: served by a worker (its thresholds are now /busy_threshold's too)",
                 LOG_ESC(name));
}

/* A name that no worker's list holds any more: /busy_threshold forgets it, unless the
 * configuration names it or a POST set its thresholds, so that lists of made-up names cannot
 * fill the registry: a worker holds at most the ADMIT_LOAD_MODELS_MAX names of its newest
 * list there. */
static void unserved(void *arg, const char *name)
{
    struct router *r = arg;

    bt_registry_forget(r->bt, name);
    log_info("model %s: no worker lists it any more", LOG_ESC(name));
}

void rm_init(struct router *r)
{
    mtab_set_hooks(r->models, served, unserved, r);
}

void rm_message(struct router *r, int idx, const struct admit_load *m)
{
    char names[256];
    size_t k = 0;

    mtab_reserve(r->models, sel_workers(r->sel));
    if (!mtab_set(r->models, idx, &m->models))
        return; /* the same list as before: nearly every message */
    if (m->models.n < 0) {
        log_info("worker %s: its models are unknown: it takes requests for any model",
                 LOG_ESC(m->worker_id));
        return;
    }
    names[0] = '\0';
    for (const char *p = admit_load_models_next(&m->models, NULL); p != NULL && k < sizeof names;
         p = admit_load_models_next(&m->models, p))
        k += (size_t) snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", LOG_ESC(p));
    log_info("worker %s serves %d model%s%s%s", LOG_ESC(m->worker_id), m->models.n,
             m->models.n == 1 ? "" : "s", m->models.n ? ": " : "", names);
}

const uint64_t *rm_eligible(struct router *r, const struct rreq *q)
{
    const uint64_t *e;

    if (q->pinned >= 0 || q->model[0] == '\0')
        return NULL;
    /* Workers added since the last message (none heard yet: they take any model). */
    mtab_reserve(r->models, sel_workers(r->sel));
    mtab_eligible(r->models, q->model, &e);
    return e;
}

int rm_refuse(struct router *r, struct pxreq *x, struct rreq *q, const struct http_req *req)
{
    const uint64_t *e;
    char msg[sizeof q->model + 64];
    json_t *body;
    char *s;

    if (q->bypass)
        return 0;
    router_read_request(r, q, req);
    if (q->pinned != -1 || q->model[0] == '\0')
        return 0; /* pinned: the pin decides (an unknown name is selection's 503) */
    mtab_reserve(r->models, sel_workers(r->sel));
    if (mtab_eligible(r->models, q->model, &e) != MTAB_NONE)
        return 0;
    r->rejected_unknown_model++;
    /* vLLM's own answer for a model it does not serve, so that clients see one shape. */
    snprintf(msg, sizeof msg, "The model `%s` does not exist.", q->model);
    body = json_pack("{s:{s:s, s:s, s:s, s:s}}", "error", "message", msg, "type",
                     "invalid_request_error", "param", "model", "code", "model_not_found");
    s = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
    if (s != NULL)
        proxy_answer(x, 404, s, strlen(s), 0, "model-not-found", OUT_BAD_REQUEST);
    else
        proxy_answer_error(x, 404, "invalid_request_error", msg, 0, "model-not-found",
                           OUT_BAD_REQUEST);
    free(s);
    json_decref(body);
    return 1;
}
