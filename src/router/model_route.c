/* model_route: the models the workers serve, as routing uses them (see model_route.h). */
#include "model_route.h"
#include "admission/bt_api.h"
#include "http/proxy.h"
#include "model_table.h"
#include "select.h"
#include "util/log.h"
#include "util/xmalloc.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest model name a 404 quotes (as the router reads a request's model). */
#define MODEL_MAX 128

struct model_route {
    struct model_table *t;
    struct bt_registry *bt;
    const struct sel *sel; /* how many workers there are: the table covers them all */
};

/* A name that a worker's list holds and none held before. */
static void served(void *arg, const char *name)
{
    struct model_route *m = arg;

    if (bt_registry_learn(m->bt, name) != 0)
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
    struct model_route *m = arg;

    bt_registry_forget(m->bt, name);
    log_info("model %s: no worker lists it any more", LOG_ESC(name));
}

struct model_route *mroute_new(struct bt_registry *bt, const struct sel *sel)
{
    struct model_route *m = xcalloc(1, sizeof *m);

    m->t = mtab_new();
    m->bt = bt;
    m->sel = sel;
    mtab_set_hooks(m->t, served, unserved, m);
    return m;
}

void mroute_free(struct model_route *m)
{
    if (m == NULL)
        return;
    mtab_free(m->t);
    free(m);
}

/* Workers added since the last message (none heard yet: they take any model). */
static void cover(struct model_route *m)
{
    mtab_reserve(m->t, sel_workers(m->sel));
}

void mroute_message(struct model_route *m, int idx, const struct admit_load *msg)
{
    char names[256];
    size_t k = 0;

    cover(m);
    if (!mtab_set(m->t, idx, &msg->models))
        return; /* the same list as before: nearly every message */
    if (msg->models.n < 0) {
        log_info("worker %s: its models are unknown: it takes requests for any model",
                 LOG_ESC(msg->worker_id));
        return;
    }
    names[0] = '\0';
    for (const char *p = admit_load_models_next(&msg->models, NULL); p != NULL && k < sizeof names;
         p = admit_load_models_next(&msg->models, p))
        k += (size_t) snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", LOG_ESC(p));
    log_info("worker %s serves %d model%s%s%s", LOG_ESC(msg->worker_id), msg->models.n,
             msg->models.n == 1 ? "" : "s", msg->models.n ? ": " : "", names);
}

void mroute_unknown(struct model_route *m, int idx)
{
    struct admit_load_models unknown;

    admit_load_models_unknown(&unknown);
    cover(m);
    mtab_set(m->t, idx, &unknown);
}

void mroute_drop(struct model_route *m, int idx)
{
    mtab_drop(m->t, idx);
}

const uint64_t *mroute_eligible(struct model_route *m, const char *model, int pinned)
{
    const uint64_t *e;

    if (pinned >= 0 || model[0] == '\0')
        return NULL;
    cover(m);
    mtab_eligible(m->t, model, &e);
    return e;
}

int mroute_refuse(struct model_route *m, struct pxreq *x, const char *model)
{
    const uint64_t *e;
    char msg[MODEL_MAX + 64];
    json_t *body;
    char *s;

    if (model[0] == '\0')
        return 0;
    cover(m);
    if (mtab_eligible(m->t, model, &e) != MTAB_NONE)
        return 0;
    /* vLLM's own answer for a model it does not serve, so that clients see one shape. */
    snprintf(msg, sizeof msg, "The model `%s` does not exist.", model);
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

const struct admit_load_models *mroute_list(const struct model_route *m, int idx)
{
    return mtab_list(m->t, idx);
}
