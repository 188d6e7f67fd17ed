/* classify: the classifier interface over the router's request, classes and selection view
 * (see classify.h and admit/classify.h). */
#include "classify.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* The public thresholds are the router's under plainer names: one conversion each way, so
 * that every judgement below is admission/busy.h's. */
static void to_busy(const struct admit_thresholds *a, struct busy_thresholds *b)
{
    b->active_prefill_tokens_threshold = a->prefill_tokens;
    b->active_prefill_tokens_threshold_frac = a->prefill_frac;
    b->active_decode_blocks_threshold = a->decode_frac;
}

static void to_admit(const struct busy_thresholds *b, struct admit_thresholds *a)
{
    a->prefill_tokens = b->active_prefill_tokens_threshold;
    a->prefill_frac = b->active_prefill_tokens_threshold_frac;
    a->decode_frac = b->active_decode_blocks_threshold;
}

/* The index of the class called name, or nclasses. */
static size_t find_class(const struct classify_view *v, const char *name)
{
    if (name == NULL)
        return v->nclasses;
    for (size_t i = 0; i < v->nclasses; i++)
        if (strcmp(v->classes[i].name, name) == 0)
            return i;
    return v->nclasses;
}

void classify_init(struct admit_classify *c, const struct classify_view *view,
                   const struct classify_request *req, int builtin,
                   const struct busy_thresholds *reject, int64_t now_ms)
{
    c->req = *req;
    c->view = *view;
    c->builtin =
        builtin >= 0 && (size_t) builtin < view->nclasses ? (size_t) builtin : view->nclasses;
    c->cls = c->builtin;
    if (reject != NULL)
        c->reject = *reject;
    else
        busy_thresholds_unset(&c->reject);
    c->now_ms = now_ms;
}

int classify_run(struct admit_classify *c, admit_classifier_fn fn, void *arg)
{
    /* A classifier that declines (or fails) leaves the built-in choice, even if it had set
     * a class on its way: half a decision is not one. */
    if (fn != NULL && fn(c, arg) != 0)
        c->cls = c->builtin;
    return c->cls < c->view.nclasses ? (int) c->cls : -1;
}

int classify_plugin_open(const char *path, admit_classifier_fn *fn, char *err, size_t errlen)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL), *sym;
    const int *abi;

    /* RTLD_NOW: a plugin that calls something the router does not export fails here, at
     * startup, and not at the first request that reaches the call. */
    if (h == NULL) {
        snprintf(err, errlen, "cannot load classifier plugin: %s", dlerror());
        return -1;
    }
    abi = dlsym(h, ADMIT_CLASSIFIER_ABI_SYMBOL);
    sym = dlsym(h, ADMIT_CLASSIFIER_SYMBOL);
    if (sym == NULL || abi == NULL) {
        snprintf(err, errlen,
                 "%s is not a classifier plugin: it exports no %s (see admit/classify.h)", path,
                 sym == NULL ? ADMIT_CLASSIFIER_SYMBOL : ADMIT_CLASSIFIER_ABI_SYMBOL);
        dlclose(h);
        return -1;
    }
    if (*abi != ADMIT_CLASSIFY_ABI) {
        snprintf(err, errlen,
                 "classifier plugin %s was built for classifier ABI %d, this router has %d: "
                 "rebuild it against this admit/classify.h",
                 path, *abi, ADMIT_CLASSIFY_ABI);
        dlclose(h);
        return -1;
    }
    /* dlsym answers a data pointer; POSIX guarantees it converts to the function's pointer,
     * which ISO C does not spell as a cast. */
    _Static_assert(sizeof sym == sizeof *fn, "function and data pointers have one size");
    memcpy(fn, &sym, sizeof *fn);
    return 0;
}

/* ---- the public accessors (admit/classify.h), exported to plugins ---------------------- */

const char *admit_classify_model(const struct admit_classify *c)
{
    return c->req.model != NULL ? c->req.model : "";
}

int64_t admit_classify_prompt_tokens(const struct admit_classify *c)
{
    return c->req.prompt_tokens;
}

const char *admit_classify_header(const struct admit_classify *c, const char *name)
{
    return c->req.header != NULL && name != NULL ? c->req.header(c->req.header_arg, name) : NULL;
}

const char *admit_classify_class(const struct admit_classify *c)
{
    return c->cls < c->view.nclasses ? c->view.classes[c->cls].name : "";
}

size_t admit_classify_classes(const struct admit_classify *c)
{
    return c->view.nclasses;
}

const char *admit_classify_class_at(const struct admit_classify *c, size_t i)
{
    return i < c->view.nclasses ? c->view.classes[i].name : NULL;
}

int admit_queue_thresholds(const struct admit_classify *c, struct admit_thresholds *out)
{
    if (c->cls >= c->view.nclasses)
        return -1;
    to_admit(&c->view.classes[c->cls].t, out);
    return 0;
}

int admit_queue_thresholds_for(const struct admit_classify *c, const char *name,
                               struct admit_thresholds *out)
{
    size_t i = find_class(&c->view, name);

    if (i == c->view.nclasses)
        return -1;
    to_admit(&c->view.classes[i].t, out);
    return 0;
}

int admit_reject_thresholds(const struct admit_classify *c, struct admit_thresholds *out)
{
    to_admit(&c->reject, out);
    return 0;
}

int admit_classify_set_class(struct admit_classify *c, const char *name)
{
    size_t i = find_class(&c->view, name);

    if (i == c->view.nclasses)
        return -1;
    c->cls = i;
    return 0;
}

size_t admit_classify_workers(const struct admit_classify *c)
{
    return (size_t) sel_workers(c->view.sel);
}

int admit_classify_worker_alive(const struct admit_classify *c, size_t w)
{
    return w < admit_classify_workers(c) && sel_alive(c->view.sel, (int) w, c->now_ms);
}

unsigned admit_classify_ranks(const struct admit_classify *c, size_t w)
{
    return w < admit_classify_workers(c) ? sel_ranks(c->view.sel, (int) w) : 0;
}

int admit_classify_rank(const struct admit_classify *c, size_t w, unsigned r,
                        struct admit_rank_load *load, struct admit_rank_capacity *cap)
{
    struct busy_load bl;
    struct busy_capacity bc;

    if (r >= admit_classify_ranks(c, w))
        return -1;
    sel_booked(c->view.sel, (int) w, r, &bl, &bc);
    if (load != NULL) {
        load->prefill_tokens = bl.prefill_tokens;
        load->decode_blocks = bl.decode_blocks;
        load->requests = bl.requests;
        load->observed = bl.observed;
    }
    if (cap != NULL) {
        cap->max_num_batched_tokens = bc.max_num_batched_tokens;
        cap->kv_total_blocks = bc.kv_total_blocks;
        cap->kv_block_size = bc.kv_block_size;
    }
    return 0;
}

int admit_has_room(const struct admit_rank_load *l, const struct admit_rank_capacity *cap,
                   const struct admit_thresholds *t)
{
    struct busy_load bl = {l->prefill_tokens, l->decode_blocks, l->requests, l->observed};
    struct busy_capacity bc = {cap->max_num_batched_tokens, cap->kv_total_blocks,
                               cap->kv_block_size};
    struct busy_thresholds bt;

    if (t != NULL)
        to_busy(t, &bt);
    else
        busy_thresholds_unset(&bt);
    return has_room(&bl, &bc, &bt); /* the one rule, admission/busy.h */
}

int admit_classify_room_anywhere(const struct admit_classify *c, const struct admit_thresholds *t)
{
    struct busy_thresholds bt;

    if (t == NULL)
        return sel_room(c->view.sel, c->now_ms, c->req.prompt_tokens, NULL);
    to_busy(t, &bt);
    return sel_room(c->view.sel, c->now_ms, c->req.prompt_tokens, &bt);
}
