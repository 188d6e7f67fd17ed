/* metrics: rendering of the Dynamo-compatible and admitd_* families. */
#include "daemon/metrics.h"

#include <stdio.h>
#include <string.h>

/* From 100 us (a direct admission) to minutes (a long queue behind long streams). */
static const double queue_wait_bounds[] = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25,
                                           0.5,    1,      2.5,   5,     10,   30,   60,  300};

static const char *const stage_names[STAGE__COUNT] = {"queued", "waiting", "streaming"};
static const char *const uerr_names[UERR__COUNT] = {"connect", "timeout", "broken", "invalid"};
static const char *const listener_names[LISTENER__COUNT] = {"client", "metrics"};

void metrics_init(struct metrics *m)
{
    memset(m, 0, sizeof *m);
    prom_hist_init(&m->queue_wait, queue_wait_bounds,
                   sizeof queue_wait_bounds / sizeof queue_wait_bounds[0]);
}

/* The listeners' families: one sample per listener each. */
static void listeners(struct buf *out, const struct metrics *m)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"admitd_connections", "gauge",
         "Connections open now, per listener (client: --listen; metrics: --metrics-listen)"},
        {"admitd_accept_pauses_total", "counter",
         "Pauses of 100 ms in accepting for want of file descriptors or memory (EMFILE, "
         "ENFILE, ENOBUFS, ENOMEM): new connections waited in the backlog"},
        {"admitd_connection_cap_reached_total", "counter",
         "Times accepting stopped at the connection cap (--max-client-connections; 64 on the "
         "metrics listener) until a connection closed"},
        {"admitd_request_head_timeouts_total", "counter",
         "Request heads not whole within --client-header-timeout-ms (408), or new "
         "connections that sent nothing in that time (closed)"},
        {"admitd_out_of_memory_refusals_total", "counter",
         "Requests refused with 500 because their buffers could not grow (the daemon "
         "serves on)"},
    };

    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        uint64_t v[LISTENER__COUNT];

        for (int i = 0; i < LISTENER__COUNT; i++) {
            const struct listen_stats *st = &m->listen[i];
            const uint64_t all[] = {st->conns, st->accept_pauses, st->cap_reached,
                                    st->head_timeouts, st->oom_refusals};

            v[i] = all[f];
        }
        prom_labelled(out, fam[f].name, fam[f].type, fam[f].help, "listener", listener_names, v,
                      LISTENER__COUNT);
    }
}

/* The booked load per data-parallel rank, as published in load messages. */
static void booked(struct buf *out, const struct book *b)
{
    static const char *const names[] = {"admitd_active_prefill_tokens",
                                        "admitd_active_decode_blocks"};
    static const char *const helps[] = {
        "Prompt tokens of admitted requests before their first output byte, per rank",
        "KV blocks of admitted requests' prompts and output so far, per rank"};

    for (int f = 0; f < 2; f++) {
        prom_family(out, names[f], "gauge", helps[f]);
        for (unsigned r = 0; r < book_ranks(b); r++) {
            const struct book_rank *k = book_rank(b, r);
            char rank[16];
            struct buf l;

            snprintf(rank, sizeof rank, "%u", r);
            buf_init(&l);
            prom_label(&l, "dp_rank", rank);
            prom_sample(out, names[f], l.data, (double) (f ? k->decode_blocks : k->prefill_tokens));
            buf_free(&l);
        }
    }
}

void metrics_render(const struct metrics_view *v, struct buf *out)
{
    const struct metrics *m = v->m;
    const struct gate_stats *g = v->gate;
    const char *outcome_names[OUT__COUNT];
    struct buf l;

    for (int o = 0; o < OUT__COUNT; o++)
        outcome_names[o] = proxy_outcome_name((enum outcome) o);

    prom_family(out, "dynamo_rejection_request_total", "counter",
                "Requests rejected because the worker is at capacity (engine request limit and "
                "request queue both full, or the queue wait ran out)");
    prom_sample(out, "dynamo_rejection_request_total", NULL,
                (double) (m->px.outcomes[OUT_REJECTED] + m->px.outcomes[OUT_QUEUE_TIMEOUT]));
    prom_gauge(out, "dynamo_engine_request",
               "Current number of requests being handled by the engine (--engine-request-limit)",
               g ? g->slots_used : m->inflight_nocap);
    prom_gauge(out, "dynamo_request_queue",
               "Current number of requests waiting for an engine slot, the dispatcher-held one "
               "included (DYN_DYNAMO_REQUEST_QUEUE_LIMIT)",
               g ? g->queued : 0);

    prom_gauge(out, "admitd_engine_request_limit",
               "Configured engine slots N (0 when there is no cap)", g ? g->limit : 0);
    prom_gauge(out, "admitd_request_queue_limit",
               "Configured queue limit Q (0 when there is no cap)", g ? g->queue_limit : 0);
    prom_gauge(out, "admitd_request_queue_held",
               "Requests held by the dispatcher for the next free slot (0 or 1)", g ? g->held : 0);
    prom_labelled(out, "admitd_requests_total", "counter",
                  "Finished requests by outcome (each request is counted once)", "outcome",
                  outcome_names, m->px.outcomes, OUT__COUNT);
    prom_labelled(out, "admitd_client_cancellations_total", "counter",
                  "Clients that disconnected before their response was complete, by stage", "stage",
                  stage_names, m->px.cancelled, STAGE__COUNT);
    prom_labelled(out, "admitd_upstream_errors_total", "counter", "Failures talking to the engine",
                  "kind", uerr_names, m->px.upstream_errors, UERR__COUNT);
    prom_hist_write(out, "admitd_queue_wait_seconds",
                    "Time from arrival to an engine slot, for admitted requests", &m->queue_wait);
    prom_counter(out, "admitd_bypass_requests_total",
                 "Requests passed to the engine without taking a slot (GET, HEAD, OPTIONS)",
                 m->requests_bypass);
    prom_counter(out, "admitd_tokenizer_requests_total",
                 "Requests to the engine's tokenizer (POST /tokenize, /detokenize) passed to it "
                 "without taking a slot",
                 m->tokenizer_reqs);
    prom_gauge(out, "admitd_bypass_requests_in_flight",
               "Requests passing to the engine without a slot (the tokenizer's included), in "
               "flight now",
               m->inflight_bypass);
    prom_gauge(out, "admitd_engine_ready", "1 when the last engine health probe succeeded",
               m->engine_ready ? 1 : 0);
    {
        static const char *const results[] = {"ok", "failed"};
        const uint64_t scrapes[] = {m->scrapes_ok, m->scrapes_failed};
        prom_labelled(out, "admitd_engine_scrapes_total", "counter",
                      "Scrapes of the engine's /metrics by result", "result", results, scrapes, 2);
    }
    {
        static const char *const results[] = {"ok", "failed", "too_many"};
        prom_labelled(out, "admitd_engine_models_scrapes_total", "counter",
                      "Scrapes of the engine's /v1/models by result (too_many: sent as unknown)",
                      "result", results, m->models_scrapes, 3);
    }
    prom_counter(
        out, "admitd_drain_cancelled_total",
        "Requests ended because --drain-timeout-ms ran out (queued: 503; at the engine: cut)",
        m->drain_cancelled);
    prom_counter(out, "admitd_limit_changes_total",
                 "Live changes of N or Q applied (POST /admission, SIGHUP)", m->limit_changes);
    listeners(out, m);
    prom_counter(out, "admitd_load_messages_total", "Load messages published", m->load_messages);
    if (m->load_pub_seen) {
        prom_gauge(out, "admitd_load_subscribers",
                   "Subscribers (routers, monitors) the load publisher sends to now",
                   m->load_subscribers);
        prom_counter(out, "admitd_load_dropped_total",
                     "Load messages not sent to a subscriber that fell behind (its oldest queued)",
                     m->load_dropped);
        prom_counter(out, "admitd_load_bad_subscribers_total",
                     "Connections to the load publisher dropped for breaking the SP protocol "
                     "(a wrong header, none in time, data after it)",
                     m->load_bad_peers);
    }
    if (v->book != NULL)
        booked(out, v->book);
    prom_family(out, "admitd_build_info", "gauge", "Build information");
    buf_init(&l);
    prom_label(&l, "version", v->version);
    if (v->m->role != NULL)
        prom_label(&l, "role", v->m->role);
    prom_sample(out, "admitd_build_info", l.data, 1);
    buf_free(&l);
}
