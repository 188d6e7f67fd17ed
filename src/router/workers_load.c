/* workers_load: the workers' load messages: following each worker's publisher (through
 * pubsub/subscribe.h, spsub or nng as --subscriber says), taking each message into the
 * selection view and the model table, and counting the intake for /metrics.
 *
 * The counters are those of the subscribers (spsub's, summed over the workers) and the
 * table's own for messages it refuses: those that do not decode, and those whose worker_id is
 * not one admitd would take or is another live worker's (claim()). A worker's subscriber goes
 * when the worker is retired; what it had counted is kept in the table (load_gone), so the
 * families, which are counters, never go down as workers come and go. */
#include "http/upstream.h"
#include "kvroute.h"
#include "model_route.h"
#include "pubsub/subscribe.h"
#include "select.h"
#include "util/clock.h"
#include "util/log.h"
#include "wire/prom.h"
#include "workers_impl.h"

#include <stdio.h>
#include <string.h>

/* The longest a retired worker's subscriber may take to close (nng's dialer: sub_close;
 * spsub's connection closes at once). */
#define SUB_CLOSE_MS 100

/* Adds the counters of add into sum (connected too). */
static void stats_add(struct spsub_stats *sum, const struct spsub_stats *add)
{
    sum->messages += add->messages;
    sum->events += add->events;
    sum->bytes += add->bytes;
    sum->filtered += add->filtered;
    sum->oversized += add->oversized;
    sum->bad_headers += add->bad_headers;
    sum->timeouts += add->timeouts;
    sum->sessions += add->sessions;
    sum->reconnects += add->reconnects;
    sum->connected += add->connected;
}

/* Worker w's messages name the worker id `id`, which its newest accepted one did not: may
 * it? An id belongs to the first worker that claims it, for as long as that worker is active
 * and heard within its missed heartbeats (lost or not: one restarting in place keeps it);
 * another worker's messages that claim it are refused (counted, logged once), so that two
 * workers never show as one in the metrics nor share a pin. Then it passes on: a worker that
 * left, or went silent, and whose id a new one takes (a pod rescheduled elsewhere), loses it,
 * and its next message must claim it again. 0 when w may, -1 when it may not. */
static int claim(struct workers *ws, struct worker *w, const char *id)
{
    int64_t now = clock_mono_ms();

    for (size_t k = 0; k < ws->n; k++) {
        struct worker *o = ws->w[k];

        if (o == w || o->state == WORKER_FREE || strcmp(o->worker_id, id) != 0)
            continue;
        if (o->state == WORKER_ACTIVE && sel_heard(ws->sel, o->idx, now)) {
            if (!w->id_said)
                log_warn("worker %s names itself %s, the worker_id of worker %s: its load "
                         "messages are ignored while that one's are heard",
                         w->proxy_url, LOG_ESC(id), o->proxy_url);
            w->id_said = 1;
            return -1;
        }
        log_info("worker_id %s passes from worker %s (%s) to worker %s", LOG_ESC(id), o->proxy_url,
                 o->state == WORKER_ACTIVE ? "silent" : "retired", w->proxy_url);
        o->worker_id[0] = '\0';
    }
    w->id_said = 0;
    return 0;
}

/* Active worker w is lost: not routable until its next message; logged once, until then. */
static void lose(struct worker *w, const char *why)
{
    struct workers *ws = w->ws;

    if (w->state != WORKER_ACTIVE)
        return;
    sel_lost(ws->sel, w->idx);
    if (w->lost)
        return;
    w->lost = 1;
    ws->changes.lost++;
    log_warn("worker %s lost: %s; not routable until it publishes again", w->proxy_url, why);
}

/* A refused connect costs a request nothing (the proxy sends it to another worker, once), so
 * one refusal is enough to lose the worker (HAProxy's observe layer4 with on-error mark-down,
 * whose check here is the worker's next load message, a heartbeat away): a killed worker would
 * otherwise take its share until its missed heartbeats. */
void workers_unreachable(struct workers *ws, int k, const char *why)
{
    struct worker *w = ws->w[k];

    if (!w->http_down) /* once until it answers again (workers_answered()), not per request */
        log_warn("worker unreachable url=http://%s reason=\"%s\"", w->proxy_url, why);
    w->http_down = 1;
    lose(w, "its engine's port refused a connection, or closed it before a request was sent");
}

void workers_answered(struct workers *ws, int k)
{
    struct worker *w = ws->w[k];

    if (w->http_down) {
        w->http_down = 0;
        log_info("worker reachable url=http://%s", w->proxy_url);
    }
}

/* Worker arg's publisher connection, which was up, ended (spsub's; nng's SUB does not say):
 * the worker is not routable until it publishes again, rather than for its missed
 * heartbeats, when a killed worker refuses every request sent its way. */
static void on_lost(void *arg, const char *why)
{
    struct worker *w = arg;
    char msg[200];

    snprintf(msg, sizeof msg, "its load publisher's connection ended (%s)", why);
    lose(w, msg);
}

/* Worker arg's publisher could not be reached before it was ever heard (its connect refused,
 * timed out): said once, at warn, since such a worker is not routable; its first message
 * says it is reachable. Later attempts stay at debug (spsub), so a fleet that starts
 * before its workers logs one line per worker, not one per attempt. */
static void on_unreachable(void *arg, const char *why)
{
    struct worker *w = arg;

    w->pub_down = 1;
    log_warn("worker %s unreachable at start: its load publisher cannot be reached (%s); not "
             "routable until it publishes",
             w->proxy_url, why);
}

/* A message of worker arg: into the selection view and its models, or counted as refused. */
static void on_message(void *arg, const void *msg, size_t len)
{
    struct worker *w = arg;
    struct workers *ws = w->ws;
    struct admit_load m;
    char err[256];

    if (w->state != WORKER_ACTIVE)
        return; /* retired: its subscriber is closed, nothing more is heard */
    if (admit_load_decode(msg, len, &m, err, sizeof err) != 0) {
        ws->load_invalid++;
        if (w->bad_messages++ < 5)
            log_warn("worker %s sent an invalid load message: %s", w->proxy_url, LOG_ESC(err));
        return;
    }
    /* admitd's own rule for an id (its --worker-id): an id the wire allows but admitd would
     * not take (a newline, a quote, a blank) could forge log lines and metrics labels. */
    if (!admit_load_worker_id_ok(m.worker_id)) {
        ws->load_bad_id++;
        if (!w->id_said)
            log_warn("worker %s sent a load message whose worker_id %s is not printable ASCII "
                     "without spaces, quotes or backslashes: ignored",
                     w->proxy_url, LOG_ESC(m.worker_id));
        w->id_said = 1;
        return;
    }
    if (strcmp(w->worker_id, m.worker_id) == 0) {
        w->id_said = 0; /* its own id again: the next refusal is news */
    } else if (claim(ws, w, m.worker_id) != 0) {
        ws->load_id_taken++;
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
    w->last_ms = clock_mono_ms();
    w->pub_role = (int) m.role;
    if (strcmp(w->worker_id, m.worker_id) != 0)
        snprintf(w->worker_id, sizeof w->worker_id, "%s", m.worker_id);
    sel_message(ws->sel, w->idx, &m, w->last_ms);
    kvr_message(ws->kv, w->idx, &m);
    if (w->lost) {
        w->lost = 0;
        ws->changes.back++;
        log_info("worker %s back: it publishes again", w->proxy_url);
    }
    if (w->pub_down) {
        w->pub_down = 0;
        log_info("worker %s reachable: it publishes", w->proxy_url);
    }
    mroute_message(ws->models, w->idx, &m);
    ws->room(ws->room_arg); /* its room may have changed */
}

/* A kv_events message of worker arg: to its stream's follower. Not before its first load
 * message was taken (the table's checks of its worker id, its engine's name looked up). */
static void on_events(void *arg, const void *msg, size_t len)
{
    struct worker *w = arg;

    if (w->state != WORKER_ACTIVE || w->last_ms == 0)
        return;
    if (w->kvf == NULL) /* made at its first: most fleets send none */
        w->kvf = kvf_new(w->ws->base, w->ws->kv, w->idx, w->proxy_url, &w->ws->kvf);
    kvf_message(w->kvf, msg, len);
}

int wl_subscribe(struct workers *ws, struct worker *w, const char *pub_url, char *err,
                 size_t errlen)
{
    struct sub_opts o = {ws->cfg->subscriber_nng ? SUB_NNG : SUB_AUTO, ws->cfg->load_batch_ms};

    w->sub = sub_new(ws->base, pub_url, &o, on_message, w, err, errlen);
    if (w->sub == NULL)
        return -1;
    sub_set_events(w->sub, on_events);
    sub_set_lost(w->sub, on_lost);
    sub_set_unreachable(w->sub, on_unreachable);
    return 0;
}

void wl_unsubscribe(struct workers *ws, struct worker *w)
{
    struct spsub_stats st;

    if (w->sub == NULL)
        return;
    sub_get_stats(w->sub, &st);
    st.connected = 0; /* a gauge: not after it is gone */
    stats_add(&ws->load_gone, &st);
    sub_close(w->sub, SUB_CLOSE_MS);
    w->sub = NULL;
    kvf_free(w->kvf);
    w->kvf = NULL;
}

/* The load messages' intake: every worker's subscriber, and those of the workers retired
 * since the start, so that the counters never go down. */
void workers_render_metrics(const struct workers *ws, struct buf *out)
{
    struct spsub_stats t = ws->load_gone, st;
    unsigned sp = 0, nng = 0;
    static const char *const reasons[] = {"oversized",      "bad_header",  "timeout",
                                          "invalid",        "other_topic", "bad_worker_id",
                                          "worker_id_taken"};
    uint64_t refused[7];

    t.connected = 0;
    for (size_t k = 0; k < ws->n; k++) {
        if (ws->w[k]->sub == NULL)
            continue;
        sub_get_stats(ws->w[k]->sub, &st);
        stats_add(&t, &st);
        sp += (unsigned) sub_is_sp(ws->w[k]->sub);
        nng += (unsigned) !sub_is_sp(ws->w[k]->sub);
    }
    prom_counter(
        out, "admit_router_load_messages_total",
        "Load messages received from the workers' publishers (their topic's, before decoding)",
        t.messages);
    prom_counter(out, "admit_router_load_bytes_total", "Bytes of those messages", t.bytes);
    prom_counter(out, "admit_router_load_connects_total",
                 "Sessions opened with a publisher (our reader's; nng's are not seen)", t.sessions);
    prom_counter(out, "admit_router_load_reconnects_total",
                 "Connection attempts to a publisher after the first (our reader's)", t.reconnects);
    refused[0] = t.oversized;
    refused[1] = t.bad_headers;
    refused[2] = t.timeouts;
    refused[3] = ws->load_invalid;
    refused[4] = t.filtered;
    refused[5] = ws->load_bad_id;
    refused[6] = ws->load_id_taken;
    prom_labelled(out, "admit_router_load_refused_total", "counter",
                  "Load messages or connections refused, by reason (oversized: a message over "
                  "2048 bytes, bad_header: not an SP PUB0 peer, timeout: connect or handshake "
                  "over 10 s, all three dropping the connection; invalid: a message that does not "
                  "decode; other_topic: a message of another topic; bad_worker_id: a worker_id "
                  "admitd would not take; worker_id_taken: a worker_id another live worker holds)",
                  "reason", reasons, refused, sizeof reasons / sizeof *reasons);
    prom_family(out, "admit_router_load_subscribers", "gauge",
                "Workers followed, by reader (spsub: our own, on the loop; nng: nng's SUB)");
    prom_sample1(out, "admit_router_load_subscribers", "via", "spsub", sp);
    prom_sample1(out, "admit_router_load_subscribers", "via", "nng", nng);
    prom_gauge(out, "admit_router_load_connected",
               "Workers whose publisher our reader is connected to now (nng's are not seen)",
               t.connected);
    prom_counter(out, "admit_router_kv_events_received_total",
                 "kv_events messages received from the workers' publishers (before decoding)",
                 t.events);
}

unsigned workers_event_workers(const struct workers *ws)
{
    unsigned n = 0;

    for (size_t k = 0; k < ws->n; k++)
        n += ws->w[k]->state == WORKER_ACTIVE && kvr_event_worker(ws->kv, ws->w[k]->idx);
    return n;
}

const struct kvf_stats *workers_kvf_stats(const struct workers *ws)
{
    return &ws->kvf;
}
