/* router_load: the workers' load messages: following each worker's publisher (through
 * pubsub/subscribe.h, spsub or nng as --subscriber says), taking each message into the
 * selection view and the models, and counting the intake for /metrics.
 *
 * The counters are those of the subscribers (spsub's, summed over the workers) and the
 * router's own for messages that do not decode. A worker's subscriber goes when the worker
 * is retired; what it had counted is kept in the router (load_gone), so the families, which
 * are counters, never go down as workers come and go. */
#include "router_impl.h"
#include "core/log.h"
#include "core/prom.h"
#include "http/upstream.h"
#include "pubsub/subscribe.h"

#include <stdio.h>
#include <string.h>

/* The longest a retired worker's subscriber may take to close (nng's dialer: sub_close;
 * spsub's connection closes at once). */
#define SUB_CLOSE_MS 100

/* Adds the counters of add into sum (connected too). */
static void stats_add(struct spsub_stats *sum, const struct spsub_stats *add)
{
    sum->messages += add->messages;
    sum->bytes += add->bytes;
    sum->filtered += add->filtered;
    sum->oversized += add->oversized;
    sum->bad_headers += add->bad_headers;
    sum->timeouts += add->timeouts;
    sum->sessions += add->sessions;
    sum->reconnects += add->reconnects;
    sum->connected += add->connected;
}

/* A message of worker arg: into the selection view and its models, or counted as invalid. */
static void on_message(void *arg, const void *msg, size_t len)
{
    struct rworker *w = arg;
    struct admit_load m;
    char err[256];

    if (w->state != RW_ACTIVE)
        return; /* retired: its subscriber is closed, nothing more is heard */
    if (admit_load_decode(msg, len, &m, err, sizeof err) != 0) {
        w->r->load_invalid++;
        if (w->bad_messages++ < 5)
            log_warn("worker %s sent an invalid load message: %s", w->proxy_url, err);
        return;
    }
    /* A worker whose engine's host name has no address yet is not routable: its load is
     * taken from the first message after the lookup answered (which this starts again). */
    if (!upstream_resolved(w->up)) {
        if (!w->unresolved_said++)
            log_warn("worker %s: its host name is not looked up yet; it is not routable until it "
                     "is",
                     w->proxy_url);
        return;
    }
    if (w->unresolved_said) {
        log_info("worker %s: its host name is looked up; routable from now on", w->proxy_url);
        w->unresolved_said = 0;
    }
    w->last_ms = router_now_ms();
    if (strcmp(w->worker_id, m.worker_id) != 0)
        snprintf(w->worker_id, sizeof w->worker_id, "%s", m.worker_id);
    sel_message(w->r->sel, w->idx, &m, w->last_ms);
    rm_message(w->r, w->idx, &m);
    rq_kick(w->r); /* its room may have changed */
}

int rl_subscribe(struct router *r, struct rworker *w, const char *pub_url, char *err, size_t errlen)
{
    struct sub_opts o = {r->cfg->subscriber_nng ? SUB_NNG : SUB_AUTO, r->cfg->load_batch_ms};

    w->sub = sub_new(r->base, pub_url, &o, on_message, w, err, errlen);
    return w->sub != NULL ? 0 : -1;
}

void rl_unsubscribe(struct router *r, struct rworker *w)
{
    struct spsub_stats st;

    if (w->sub == NULL)
        return;
    sub_get_stats(w->sub, &st);
    st.connected = 0; /* a gauge: not after it is gone */
    stats_add(&r->load_gone, &st);
    sub_close(w->sub, SUB_CLOSE_MS);
    w->sub = NULL;
}

static void counter(struct buf *out, const char *name, const char *help, uint64_t v)
{
    prom_family(out, name, "counter", help);
    prom_sample(out, name, NULL, (double) v);
}

/* The load messages' intake: every worker's subscriber, and those of the workers retired
 * since the start, so that the counters never go down. */
void rl_render_metrics(struct router *r, struct buf *out)
{
    struct spsub_stats t = r->load_gone, st;
    unsigned sp = 0, nng = 0;
    static const char *const reasons[] = {"oversized", "bad_header", "timeout", "invalid",
                                          "other_topic"};
    uint64_t refused[5];

    t.connected = 0;
    for (size_t k = 0; k < r->n; k++) {
        if (r->w[k]->sub == NULL)
            continue;
        sub_get_stats(r->w[k]->sub, &st);
        stats_add(&t, &st);
        sp += (unsigned) sub_is_sp(r->w[k]->sub);
        nng += (unsigned) !sub_is_sp(r->w[k]->sub);
    }
    counter(out, "admit_router_load_messages_total",
            "Load messages received from the workers' publishers (their topic's, before decoding)",
            t.messages);
    counter(out, "admit_router_load_bytes_total", "Bytes of those messages", t.bytes);
    counter(out, "admit_router_load_connects_total",
            "Sessions opened with a publisher (our reader's; nng's are not seen)", t.sessions);
    counter(out, "admit_router_load_reconnects_total",
            "Connection attempts to a publisher after the first (our reader's)", t.reconnects);
    refused[0] = t.oversized;
    refused[1] = t.bad_headers;
    refused[2] = t.timeouts;
    refused[3] = r->load_invalid;
    refused[4] = t.filtered;
    prom_family(out, "admit_router_load_refused_total", "counter",
                "Load messages or connections refused, by reason (oversized: a message over "
                "2048 bytes, bad_header: not an SP PUB0 peer, timeout: connect or handshake "
                "over 10 s, all three dropping the connection; invalid: a message that does not "
                "decode; other_topic: a message of another topic)");
    for (size_t i = 0; i < sizeof reasons / sizeof *reasons; i++) {
        char name[96];

        snprintf(name, sizeof name, "admit_router_load_refused_total{reason=\"%s\"}", reasons[i]);
        prom_sample(out, name, NULL, (double) refused[i]);
    }
    prom_family(out, "admit_router_load_subscribers", "gauge",
                "Workers followed, by reader (spsub: our own, on the loop; nng: nng's SUB)");
    prom_sample(out, "admit_router_load_subscribers{via=\"spsub\"}", NULL, sp);
    prom_sample(out, "admit_router_load_subscribers{via=\"nng\"}", NULL, nng);
    prom_family(out, "admit_router_load_connected", "gauge",
                "Workers whose publisher our reader is connected to now (nng's are not seen)");
    prom_sample(out, "admit_router_load_connected", NULL, t.connected);
}
