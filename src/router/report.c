/* report: the router's fleet and rejections, in Prometheus families and in /load (see
 * report.h). */
#include "report.h"
#include "admit/load.h"
#include "admission/bt_api.h"
#include "kvfollow.h"
#include "kvroute.h"
#include "model_route.h"
#include "select.h"
#include "util/clock.h"
#include "util/xmalloc.h"
#include "wire/prom.h"
#include "workers.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Distinct (model, endpoint) rejection counters kept; the last absorbs the overflow. */
#define REPORT_MAX_REJECT_KEYS 256

struct reject_key {
    char model[128];
    char endpoint[32];
    uint64_t count;
};

struct report {
    const struct workers *ws;
    struct sel *sel;
    const struct kvroute *kv;
    const struct model_route *models;
    const struct bt_registry *bt;
    uint64_t rejected[REPORT_REASONS];
    struct reject_key rejects[REPORT_MAX_REJECT_KEYS];
    size_t nrejects;
};

struct report *report_new(const struct workers *ws, struct sel *sel, const struct kvroute *kv,
                          const struct model_route *models, const struct bt_registry *bt)
{
    struct report *rp = xcalloc(1, sizeof *rp);

    rp->ws = ws;
    rp->sel = sel;
    rp->kv = kv;
    rp->models = models;
    rp->bt = bt;
    return rp;
}

void report_free(struct report *rp)
{
    free(rp);
}

void report_rejected(struct report *rp, enum report_reason why)
{
    rp->rejected[why]++;
}

/* The endpoint label of a request's URI. */
static const char *endpoint_of(const char *uri)
{
    if (strncmp(uri, "/v1/chat/completions", 20) == 0)
        return "chat_completions";
    if (strncmp(uri, "/v1/completions", 15) == 0)
        return "completions";
    if (strncmp(uri, "/v1/embeddings", 14) == 0)
        return "embeddings";
    return "other";
}

void report_model_rejected(struct report *rp, const char *model, const char *target)
{
    const char *endpoint = endpoint_of(target);
    size_t i;

    for (i = 0; i < rp->nrejects; i++)
        if (strcmp(rp->rejects[i].model, model) == 0 &&
            strcmp(rp->rejects[i].endpoint, endpoint) == 0)
            break;
    if (i == rp->nrejects) {
        if (rp->nrejects == REPORT_MAX_REJECT_KEYS)
            i = REPORT_MAX_REJECT_KEYS - 1; /* the last key absorbs the overflow */
        else {
            snprintf(rp->rejects[i].model, sizeof rp->rejects[i].model, "%s", model);
            snprintf(rp->rejects[i].endpoint, sizeof rp->rejects[i].endpoint, "%s", endpoint);
            rp->nrejects++;
        }
    }
    rp->rejects[i].count++;
}

/* The worker_id a worker names itself by; its URL's host:port until it has spoken. */
static const char *id_of(const struct worker_info *w)
{
    return w->worker_id[0] != '\0' ? w->worker_id : w->url;
}

enum rank_field { RF_BOOKED_PREFILL, RF_BOOKED_DECODE, RF_PUB_PREFILL, RF_PUB_DECODE };

static int64_t field_of(const struct sel_rank_view *v, enum rank_field f)
{
    switch (f) {
    case RF_BOOKED_PREFILL:
        return v->booked.prefill_tokens;
    case RF_BOOKED_DECODE:
        return v->booked.decode_blocks;
    case RF_PUB_PREFILL:
        return v->published ? v->pub_prefill_tokens : -1;
    case RF_PUB_DECODE:
        return v->published ? v->pub_decode_blocks : -1;
    }
    return -1;
}

/* One gauge per (worker, rank); unknown values are left out. */
static void rank_gauge(struct buf *out, struct report *rp, const struct busy_thresholds *t,
                       const char *name, const char *help, enum rank_field f, int dynamo)
{
    prom_family(out, name, "gauge", help);
    for (int k = 0; k < workers_slots(rp->ws); k++) {
        struct worker_info w;

        if (!workers_info(rp->ws, k, &w))
            continue;
        for (unsigned i = 0; i < sel_ranks(rp->sel, k); i++) {
            struct sel_rank_view v;
            char rank[16];
            struct buf l;
            int64_t x;

            sel_view(rp->sel, k, i, t, &v);
            if ((x = field_of(&v, f)) < 0)
                continue;
            snprintf(rank, sizeof rank, "%u", i);
            buf_init(&l);
            prom_label(&l, "worker_id", id_of(&w));
            prom_label(&l, "dp_rank", rank);
            if (dynamo)
                prom_label(&l, "worker_type", "decode");
            prom_sample(out, name, l.data, (double) x);
            buf_free(&l);
        }
    }
}

/* Routable, but with no room: every rank full by its booked load or by what it publishes. */
static int worker_busy(struct report *rp, int k, const struct busy_thresholds *t)
{
    unsigned n = sel_ranks(rp->sel, k);

    if (sel_published_full(rp->sel, k, t))
        return 1;
    for (unsigned i = 0; i < n; i++) {
        struct sel_rank_view v;

        sel_view(rp->sel, k, i, t, &v);
        if (v.live && v.booked_room)
            return 0; /* a rank silent past its window has no say */
    }
    return n > 0;
}

/* The prefix index's counters and size (kvroute.h). */
static void render_prefix(const struct report *rp, struct buf *out)
{
    static const char *const evict_names[] = {"ttl",       "capacity",  "global",
                                              "corrected", "forgotten", "removed"};
    struct kvi_stats s;
    uint64_t ev[6], events_blocks;

    kvr_stats(rp->kv, &s, &events_blocks);
    ev[0] = s.evicted_ttl;
    ev[1] = s.evicted_capacity;
    ev[2] = s.evicted_global;
    ev[3] = s.dropped_correct;
    ev[4] = s.dropped_forget;
    ev[5] = s.dropped_removed;
    prom_counter(out, "admit_router_prefix_lookups_total",
                 "Prefix index lookups (one per selection of a request with block keys)",
                 s.lookups);
    prom_counter(out, "admit_router_prefix_matched_blocks_total",
                 "Per lookup, the deepest holder's leading blocks, summed", s.matched_blocks);
    prom_counter(out, "admit_router_prefix_predicted_cached_tokens_total",
                 "Cached tokens the index predicted on the ranks whose answers reported theirs",
                 s.predicted_tokens);
    prom_counter(out, "admit_router_prefix_confirmed_cached_tokens_total",
                 "Of those, the tokens the answers' cached_tokens confirmed", s.confirmed_tokens);
    prom_gauge(out, "admit_router_prefix_index_blocks",
               "Blocks (key, worker rank) the prefix index predicts (its history and side table)",
               (double) s.blocks);
    prom_gauge(out, "admit_router_prefix_index_bytes",
               "Memory the prefix index took (preallocated; 0 with weight 0)", (double) s.bytes);
    prom_labelled(out, "admit_router_prefix_evictions_total", "counter",
                  "Blocks that left the prefix index, by why (ttl; capacity: the worker rank's "
                  "published KV capacity; global: the index's cap; corrected: an answer's "
                  "cached_tokens said the engine lacked them; forgotten: the worker retired, its "
                  "engine cleared its cache or its events broke, or the index was dropped; "
                  "removed: its engine's events said it evicted them)",
                  "reason", evict_names, ev, sizeof ev / sizeof *ev);
    kvf_render_metrics(workers_kvf_stats(rp->ws), events_blocks, workers_event_workers(rp->ws),
                       out);
}

void report_render_metrics(struct report *rp, struct buf *out)
{
    struct busy_thresholds t;
    unsigned routable_n = 0, busy_n = 0, active_n = 0, retired_n = 0;
    int64_t now = clock_mono_ms();
    static const char *const change_names[] = {"added",   "revived", "retired",
                                               "removed", "lost",    "back"};
    struct workers_changes c;
    uint64_t changes[6];

    workers_changes(rp->ws, &c);
    changes[0] = c.added;
    changes[1] = c.revived;
    changes[2] = c.retired;
    changes[3] = c.removed;
    changes[4] = c.lost;
    changes[5] = c.back;
    bt_registry_get(rp->bt, "", &t);
    prom_family(out, "dynamo_frontend_model_rejection_total", "counter",
                "Total number of requests rejected due to resource exhaustion");
    for (size_t i = 0; i < rp->nrejects; i++) {
        struct buf l;

        buf_init(&l);
        prom_label(&l, "model", rp->rejects[i].model);
        prom_label(&l, "endpoint", rp->rejects[i].endpoint);
        prom_sample(out, "dynamo_frontend_model_rejection_total", l.data,
                    (double) rp->rejects[i].count);
        buf_free(&l);
    }
    prom_family(out, "admit_router_rejections_total", "counter",
                "Requests the router answered itself, by reason (all_busy: overload status; "
                "no_worker: 503; model_not_found: 404, a model no worker serves)");
    prom_sample1(out, "admit_router_rejections_total", "reason", "all_busy",
                 (double) rp->rejected[REPORT_ALL_BUSY]);
    prom_sample1(out, "admit_router_rejections_total", "reason", "no_worker",
                 (double) rp->rejected[REPORT_NO_WORKER]);
    prom_sample1(out, "admit_router_rejections_total", "reason", "model_not_found",
                 (double) rp->rejected[REPORT_MODEL_NOT_FOUND]);
    rank_gauge(out, rp, &t, "dynamo_frontend_worker_active_decode_blocks",
               "Active KV cache decode blocks per worker", RF_PUB_DECODE, 1);
    rank_gauge(out, rp, &t, "dynamo_frontend_worker_active_prefill_tokens",
               "Active prefill tokens queued per worker", RF_PUB_PREFILL, 1);
    rank_gauge(out, rp, &t, "admit_router_booked_prefill_tokens",
               "Prompt tokens this router sent to the rank that have not had their first token",
               RF_BOOKED_PREFILL, 0);
    rank_gauge(out, rp, &t, "admit_router_booked_decode_blocks",
               "KV blocks this router booked on the rank for the requests it sent there",
               RF_BOOKED_DECODE, 0);
    for (int k = 0; k < workers_slots(rp->ws); k++) {
        struct worker_info w;

        if (workers_info(rp->ws, k, &w)) {
            active_n += w.state == WORKER_ACTIVE;
            retired_n += w.state == WORKER_RETIRED;
        }
        if (!sel_routable(rp->sel, k, now))
            continue;
        routable_n++;
        busy_n += (unsigned) worker_busy(rp, k, &t);
    }
    prom_family(out, "admit_router_workers", "gauge",
                "Workers by state (configured: named by a source now; routable: of those, "
                "alive and not skipped; busy: routable but with no room under the default "
                "thresholds; retired: no longer named, requests still in flight there)");
    prom_sample1(out, "admit_router_workers", "state", "configured", active_n);
    prom_sample1(out, "admit_router_workers", "state", "routable", routable_n);
    prom_sample1(out, "admit_router_workers", "state", "busy", busy_n);
    prom_sample1(out, "admit_router_workers", "state", "retired", retired_n);
    prom_labelled(out, "admit_router_worker_changes_total", "counter",
                  "Workers that came and went (added, revived: named again while retired, "
                  "retired, removed: a retired worker's last request ended; lost: its publisher's "
                  "connection ended or its engine refused a connection, back: it published "
                  "again)",
                  "change", change_names, changes, sizeof changes / sizeof *changes);
    render_prefix(rp, out);
}

static void put_int(struct buf *out, const char *key, int64_t v, int comma)
{
    if (v < 0)
        buf_printf(out, "%s\"%s\":null", comma ? "," : "", key);
    else
        buf_printf(out, "%s\"%s\":%lld", comma ? "," : "", key, (long long) v);
}

/* A JSON string, escaped by jansson (a worker_id came from a message jansson decoded, so it
 * is valid UTF-8); "" or anything unencodable is null. */
static void put_string(struct buf *out, const char *v)
{
    json_t *j = v[0] != '\0' ? json_string(v) : NULL;
    char *d = j != NULL ? json_dumps(j, JSON_ENCODE_ANY) : NULL;

    buf_puts(out, d != NULL ? d : "null");
    free(d);
    json_decref(j);
}

static void render_rank(struct buf *out, const struct sel_rank_view *v, unsigned i)
{
    buf_printf(out, "{\"dp_rank\":%u,\"alive\":%s,\"booked\":{", i, v->live ? "true" : "false");
    put_int(out, "prefill_tokens", v->booked.prefill_tokens, 0);
    put_int(out, "decode_blocks", v->booked.decode_blocks, 1);
    put_int(out, "requests", v->booked.requests, 1);
    buf_puts(out, "},\"published\":");
    if (v->published) {
        buf_puts(out, "{");
        put_int(out, "active_prefill_tokens", v->pub_prefill_tokens, 0);
        put_int(out, "active_decode_blocks", v->pub_decode_blocks, 1);
        put_int(out, "kv_used_blocks", v->pub_kv_used_blocks, 1);
        buf_puts(out, "}");
    } else
        buf_puts(out, "null");
    buf_puts(out, ",\"capacity\":{");
    put_int(out, "max_num_batched_tokens", v->capacity.max_num_batched_tokens, 0);
    put_int(out, "kv_total_blocks", v->capacity.kv_total_blocks, 1);
    put_int(out, "kv_block_size", v->capacity.kv_block_size, 1);
    buf_printf(out, "},\"block_size\":%lld,\"room\":{\"booked\":%s,\"published\":%s}}",
               (long long) v->block_size, v->booked_room ? "true" : "false",
               v->published_room ? "true" : "false");
}

/* ,"models":[...] of a worker's newest message, or null when unknown (it takes any). */
static void render_models(struct buf *out, const struct admit_load_models *l)
{
    if (l->n < 0) {
        buf_puts(out, ",\"models\":null");
        return;
    }
    buf_puts(out, ",\"models\":[");
    for (const char *p = admit_load_models_next(l, NULL); p != NULL;
         p = admit_load_models_next(l, p)) {
        if (p != l->names)
            buf_puts(out, ",");
        put_string(out, p);
    }
    buf_puts(out, "]");
}

void report_render_workers(struct report *rp, struct buf *out)
{
    struct busy_thresholds t;
    int64_t now = clock_mono_ms();
    int first = 1;

    bt_registry_get(rp->bt, "", &t);
    buf_puts(out, "{\"workers\":[");
    for (int k = 0; k < workers_slots(rp->ws); k++) {
        struct worker_info w;
        int alive = sel_alive(rp->sel, k, now);

        if (!workers_info(rp->ws, k, &w))
            continue;
        /* The URLs are escaped too: a workers file's publisher may hold a quote. */
        buf_puts(out, first ? "{\"url\":" : ",{\"url\":");
        first = 0;
        put_string(out, w.url);
        buf_puts(out, ",\"publish\":");
        put_string(out, w.pub_url);
        buf_printf(out, ",\"state\":\"%s\",\"in_flight\":%u,",
                   w.state == WORKER_ACTIVE ? "active" : "retired", w.inflight);
        buf_puts(out, "\"worker_id\":");
        put_string(out, w.worker_id);
        buf_printf(out, ",\"role\":\"%s\"", admit_load_role_name((enum admit_load_role) w.role));
        buf_printf(out, ",\"alive\":%s,\"routable\":%s,\"busy\":%s,\"age_ms\":",
                   alive ? "true" : "false", sel_routable(rp->sel, k, now) ? "true" : "false",
                   alive && worker_busy(rp, k, &t) ? "true" : "false");
        if (w.last_ms)
            buf_printf(out, "%lld", (long long) (now - w.last_ms));
        else
            buf_puts(out, "null");
        render_models(out, mroute_list(rp->models, k));
        buf_printf(out, ",\"prefix_index_blocks\":%llu", (unsigned long long) kvr_held(rp->kv, k));
        buf_printf(out, ",\"kv_events\":%s,\"kv_events_blocks\":%llu",
                   kvr_event_worker(rp->kv, k) ? "true" : "false",
                   (unsigned long long) kvr_events_held(rp->kv, k));
        buf_puts(out, ",\"ranks\":[");
        for (unsigned i = 0; i < sel_ranks(rp->sel, k); i++) {
            struct sel_rank_view v;

            sel_view(rp->sel, k, i, &t, &v);
            if (i)
                buf_puts(out, ",");
            render_rank(out, &v, i);
        }
        buf_puts(out, "]}");
    }
    buf_puts(out, "]}\n");
}
