/* config: admit-router's option table, read by the engine in config/opt.c. */
#include "config.h"
#include "admit/load.h"
#include "util/log.h"
#include "util/ratewin.h"
#include "config/optdiff.h"
#include "util/xmalloc.h"
#include "wlist.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <stdlib.h>
#include <string.h>

/* A worker is "PROXY_URL=PUB_URL": checked here, at parse time, so that --check-config and
 * a bad start fail the same way before anything is dialled. */
static int check_worker(void *obj, const char *item, char *msg, size_t msglen)
{
    (void) obj;
    return wlist_check(item, msg, msglen);
}

/* A --worker-dns name is NAME:HTTP_PORT:PUB_PORT. */
static int check_dns(void *obj, const char *item, char *msg, size_t msglen)
{
    char name[WLIST_DNS_NAME_MAX + 1];
    unsigned http_port, pub_port;

    (void) obj;
    return wlist_dns_spec(item, name, &http_port, &pub_port, msg, msglen);
}

/* --dns-nameserver is a numeric IP:PORT ([V6]:PORT), as evdns takes it. */
static int parse_nameserver(void *obj, const char *raw, char *msg, size_t msglen)
{
    struct router_cfg *c = obj;
    struct hostport hp;
    unsigned char bin[16];
    char sub[160];

    if (raw[0] == '\0') {
        c->dns_nameserver[0] = '\0';
        return 0;
    }
    if (hostport_parse(raw, &hp, sub, sizeof sub) != 0) {
        snprintf(msg, msglen, "'%.120s': %s", raw, sub);
        return -1;
    }
    if ((inet_pton(AF_INET, hp.host, bin) != 1 && inet_pton(AF_INET6, hp.host, bin) != 1) ||
        hp.port < 1 || strchr(raw, ':') == NULL) {
        snprintf(msg, msglen, "'%.120s' must be a numeric IP:PORT or [IPV6]:PORT", raw);
        return -1;
    }
    snprintf(c->dns_nameserver, sizeof c->dns_nameserver,
             strchr(hp.host, ':') ? "[%s]:%d" : "%s:%d", hp.host, hp.port);
    return 0;
}

/* --dns-family: v4, v6, v4-preferred or v6-preferred. */
static int parse_dns_family(void *obj, const char *raw, char *msg, size_t msglen)
{
    static const char *const names[] = {"v4", "v6", "v4-preferred", "v6-preferred"};
    struct router_cfg *c = obj;

    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(raw, names[i]) == 0) {
            c->dns_family = (enum rc_dns_family) i;
            return 0;
        }
    snprintf(msg, msglen, "'%.120s' must be v4, v6, v4-preferred or v6-preferred", raw);
    return -1;
}

/* --subscriber: auto (spsub where it can, nng for the rest) or nng (nng for every worker). */
static int parse_subscriber(void *obj, const char *raw, char *msg, size_t msglen)
{
    struct router_cfg *c = obj;

    return opt_auto_or_nng(raw, &c->subscriber_nng, msg, msglen);
}

#define AT(member) OPT_AT(struct router_cfg, member)

/* The order here is the order of --help. Where admitd has the option too, the range and
 * default are admitd's (config.h). */
static const struct opt_def opts[] = {
    OPT("worker", "ADMIT_ROUTER_WORKER", OPT_LIST, AT(workers), 0, 0, NULL,
        "admitd http://HOST:PORT=its --publish URL; repeatable", NULL, NULL, check_worker),
    OPT("prefill-worker", "ADMIT_ROUTER_PREFILL_WORKER", OPT_LIST, AT(prefill_workers), 0, 0, NULL,
        "as --worker, a worker of the prefill role (whatever its load messages say); repeatable",
        NULL, NULL, check_worker),
    OPT("decode-worker", "ADMIT_ROUTER_DECODE_WORKER", OPT_LIST, AT(decode_workers), 0, 0, NULL,
        "as --worker, a worker of the decode role (whatever its load messages say); repeatable",
        NULL, NULL, check_worker),
    OPT("workers-file", "ADMIT_ROUTER_WORKERS_FILE", OPT_PATH, AT(workers_file), 0, 0, NULL,
        "a file of workers, PROXY_URL=PUB_URL [role=ROLE] a line or a YAML list; re-read on "
        "SIGHUP"),
    OPT("worker-dns", "ADMIT_ROUTER_WORKER_DNS", OPT_LIST, AT(worker_dns), 0, 0, NULL,
        "NAME:HTTP_PORT:PUB_PORT: every address NAME resolves to is a worker; repeatable", NULL,
        NULL, check_dns),
    OPT("prefill-worker-dns", "ADMIT_ROUTER_PREFILL_WORKER_DNS", OPT_LIST, AT(prefill_worker_dns),
        0, 0, NULL, "as --worker-dns, its workers of the prefill role; repeatable", NULL, NULL,
        check_dns),
    OPT("decode-worker-dns", "ADMIT_ROUTER_DECODE_WORKER_DNS", OPT_LIST, AT(decode_worker_dns), 0,
        0, NULL, "as --worker-dns, its workers of the decode role; repeatable", NULL, NULL,
        check_dns),
    OPT("dns-interval-ms", "ADMIT_ROUTER_DNS_INTERVAL_MS", OPT_UINT, AT(dns_interval_ms), 100,
        3600000, "5000", "how often --worker-dns names are resolved again"),
    OPT("dns-nameserver", "ADMIT_ROUTER_DNS_NAMESERVER", OPT_CUSTOM, AT(dns_nameserver), 0, 0, NULL,
        "the DNS server to ask, IP:PORT (default: those of /etc/resolv.conf)", NULL, NULL,
        parse_nameserver),
    OPT("dns-family", "ADMIT_ROUTER_DNS_FAMILY", OPT_CUSTOM, AT(dns_family), 0, 0, "v4",
        "which records name the workers: v4 (A), v6 (AAAA), v4-preferred (A, else AAAA) or "
        "v6-preferred (AAAA, else A)",
        NULL, NULL, parse_dns_family),
    OPT("subscriber", "ADMIT_ROUTER_SUBSCRIBER", OPT_CUSTOM, AT(subscriber_nng), 0, 0, "auto",
        "load messages: auto (our own reader for numeric tcp:// and ipc://, nng's for the "
        "rest) or nng (nng's SUB for every worker)",
        NULL, NULL, parse_subscriber),
    OPT("load-batch-ms", "ADMIT_ROUTER_LOAD_BATCH_MS", OPT_UINT, AT(load_batch_ms), 0, 10, "2",
        "auto's reader takes the load messages in one go this often (0: each at once)"),
    OPT("model", "ADMIT_ROUTER_MODEL", OPT_LIST, AT(models), 0, 0, NULL,
        "a model whose thresholds POST /busy_threshold may change, repeatable; optional: "
        "the models the workers serve are added as their load messages name them"),
    OPT("listen", "ADMIT_ROUTER_LISTEN", OPT_HOSTPORT, AT(listen), 0, 0, "0.0.0.0:8090",
        "client listener HOST:PORT; port 0 picks a free port"),
    OPT("metrics-listen", "ADMIT_ROUTER_METRICS_LISTEN", OPT_HOSTPORT, AT(metrics_listen), 0, 0,
        "0.0.0.0:9092", "listener for /metrics, /load, /health and /ready"),
    OPT("active-decode-blocks-threshold", "ADMIT_ROUTER_ACTIVE_DECODE_BLOCKS_THRESHOLD",
        OPT_FRACTION, AT(t.active_decode_blocks_threshold), 0, 0, "None",
        "busy above this fraction (0..1) of KV blocks in use, or None"),
    OPT("active-prefill-tokens-threshold", "ADMIT_ROUTER_ACTIVE_PREFILL_TOKENS_THRESHOLD",
        OPT_COUNT, AT(t.active_prefill_tokens_threshold), 0, 1e18, "None",
        "busy above this many prompt tokens being prefilled, or None",
        "must be a token count (an integer >= 0), or None"),
    OPT("active-prefill-tokens-threshold-frac", "ADMIT_ROUTER_ACTIVE_PREFILL_TOKENS_THRESHOLD_FRAC",
        OPT_SCALE, AT(t.active_prefill_tokens_threshold_frac), 0, 0, "None",
        "busy above this multiple (>= 0) of max_num_batched_tokens, or None"),
    OPT("overload-status-code", "DYN_HTTP_OVERLOAD_STATUS_CODE", OPT_STATUS, AT(overload_status),
        CFG_DEF_OVERLOAD_STATUS, "status when every worker is busy (200-999; else 529)"),
    OPT("router-track-output-blocks", "ADMIT_ROUTER_TRACK_OUTPUT_BLOCKS", OPT_BOOL,
        AT(track_output_blocks), 0, 0, "0",
        "book one more KV block each time prompt + output cross a block boundary"),
    OPT("kv-block-size", "ADMIT_ROUTER_KV_BLOCK_SIZE", OPT_UINT, AT(kv_block_size), 1, 1048576,
        "16", "KV block size for booking, for workers that do not report theirs"),
    OPT("chars-per-token", "ADMIT_ROUTER_CHARS_PER_TOKEN", OPT_DOUBLE, AT(chars_per_token), 0.5,
        1000, "4", "bytes of prompt text per token, as admitd's --chars-per-token"),
    OPT("kv-overlap-score-weight", "ADMIT_ROUTER_KV_OVERLAP_SCORE_WEIGHT", OPT_DOUBLE,
        AT(kv_overlap_weight), 0, 1000, "1",
        "cost = W x (booked prefill + this request's uncached blocks) + decode blocks; 0: load "
        "only, and no prefix index is kept (Dynamo's --kv-overlap-score-weight)"),
    OPT("router-ttl-secs", "ADMIT_ROUTER_TTL_SECS", OPT_UINT, AT(router_ttl_secs), 1, 86400, "120",
        "a block the prefix index holds is forgotten this long after it was last routed "
        "(Dynamo's --router-ttl-secs)"),
    OPT("router-max-tree-size", "ADMIT_ROUTER_MAX_TREE_SIZE", OPT_UINT, AT(router_max_tree_size),
        1024, 1u << 30, "262144",
        "blocks the prefix index holds at most, and the KV events index apart, least recently "
        "used out first (each preallocated: 64 bytes a block; Dynamo's --router-max-tree-size)"),
    OPT("kv-predicted-ttl-ms", "ADMIT_ROUTER_KV_PREDICTED_TTL_MS", OPT_UINT,
        AT(kv_predicted_ttl_ms), 1, 3600000, "5000",
        "for a worker that sends KV events, a routing decision of token ids is held this long, "
        "until the engine's events say (Dynamo's --router-predicted-ttl-secs)"),
    OPT("tokenize", "ADMIT_ROUTER_TOKENIZE", OPT_BOOL, AT(tokenize), 0, 0, "0",
        "key a text request's prefix by the token ids a worker's POST /tokenize gives (its "
        "engine's tokenizer and chat template), not by its text; one round trip more"),
    OPT("tokenize-timeout-ms", "ADMIT_ROUTER_TOKENIZE_TIMEOUT_MS", OPT_UINT,
        AT(tokenize_timeout_ms), 1, 60000, "200",
        "a /tokenize not answered in this long: the request is keyed by its text"),
    OPT("missed-heartbeats", "ADMIT_ROUTER_MISSED_HEARTBEATS", OPT_UINT, AT(missed_heartbeats), 1,
        1000, "3", "a worker silent this many heartbeats is not routable"),
    OPT("max-heartbeat-ms", "ADMIT_ROUTER_MAX_HEARTBEAT_MS", OPT_UINT, AT(max_heartbeat_ms), 10,
        3600000, "60000",
        "a worker's heartbeat counts for at most this long (a message may claim any)"),
    OPT("upstream-timeout-ms", "ADMIT_ROUTER_UPSTREAM_TIMEOUT_MS", OPT_UINT,
        AT(upstream_timeout_ms), CFG_DEF_UPSTREAM_TIMEOUT_MS,
        "worker silent this long (connect, first byte or between bytes): 504"),
    OPT("client-timeout-ms", "ADMIT_ROUTER_CLIENT_TIMEOUT_MS", OPT_UINT, AT(client_timeout_ms),
        CFG_DEF_CLIENT_TIMEOUT_MS,
        "client idle this long (request, keep-alive, unread reply): closed"),
    OPT("client-header-timeout-ms", "ADMIT_ROUTER_CLIENT_HEADER_TIMEOUT_MS", OPT_UINT,
        AT(client_header_timeout_ms), CFG_DEF_CLIENT_HEADER_TIMEOUT_MS,
        "a request head not whole this long after its first byte (a new connection: after "
        "the accept): 408, closed"),
    OPT("max-client-connections", "ADMIT_ROUTER_MAX_CLIENT_CONNECTIONS", OPT_UINT,
        AT(max_client_connections), CFG_DEF_MAX_CLIENT_CONNECTIONS,
        "client connections open at once; more wait in the kernel's backlog (0: (the "
        "open-file limit - 128) / 2)"),
    OPT("max-header-bytes", "ADMIT_ROUTER_MAX_HEADER_BYTES", OPT_UINT, AT(max_header_bytes),
        CFG_DEF_MAX_HEADER_BYTES,
        "largest request head (a longer request line: 414, a larger head: 431)"),
    OPT("max-body-bytes", "ADMIT_ROUTER_MAX_BODY_BYTES", OPT_UINT, AT(max_body_bytes),
        CFG_DEF_MAX_BODY_BYTES, "largest request body (larger: 413)"),
    OPT("upstream-keepalive", "ADMIT_ROUTER_UPSTREAM_KEEPALIVE", OPT_UINT, AT(upstream_keepalive),
        CFG_DEF_UPSTREAM_KEEPALIVE, "idle keep-alive connections per worker kept for reuse"),
    OPT("stream-buffer-bytes", "ADMIT_ROUTER_STREAM_BUFFER_BYTES", OPT_UINT,
        AT(stream_buffer_bytes), CFG_DEF_STREAM_BUFFER_BYTES,
        "unsent reply bytes per client above which the worker is not read"),
    OPT("retry-after", "ADMIT_ROUTER_RETRY_AFTER", OPT_RETRY, AT(retry_after_s),
        CFG_DEF_RETRY_AFTER, "Retry-After seconds on overload answers, or auto"),
    OPT("drain-timeout-ms", "ADMIT_ROUTER_DRAIN_TIMEOUT_MS", OPT_UINT, AT(drain_timeout_ms),
        CFG_DEF_DRAIN_TIMEOUT_MS, "on SIGTERM, how long requests in flight may take"),
    OPT("admin-token", "ADMIT_ROUTER_ADMIN_TOKEN", OPT_TOKEN, AT(admin_token), 0, 0, NULL,
        "bearer token for POST /busy_threshold (default: open, as Dynamo)"),
    OPT("classifier-plugin", "ADMIT_ROUTER_CLASSIFIER_PLUGIN", OPT_PATH, AT(classifier_plugin), 0,
        0, NULL, "a policy-class classifier to load (an absolute path to a shared object)"),
    OPT("log-level", "ADMIT_ROUTER_LOG_LEVEL", OPT_LOGLEVEL, AT(log_level), 0, 0, "info",
        "error, warn, info or debug"),
    OPT("log-format", "ADMIT_ROUTER_LOG_FORMAT", OPT_LOGFMT, AT(log_json), 0, 0, "text",
        "text or json (one JSON object per line)"),
    OPT("access-log", "ADMIT_ROUTER_ACCESS_LOG", OPT_BOOL, AT(access_log), 0, 0, "0",
        "one log line per finished request (status, outcome, timings, bytes)"),
};

/* The keys of the file that are not settings: the policy classes. */
static const struct opt_file_key file_keys[] = {
    {ROUTER_CLASSES_KEY, "ADMIT_ROUTER_POLICY_CLASSES"},
    {ROUTER_DEFAULT_CLASS_KEY, "ADMIT_ROUTER_DEFAULT_POLICY_CLASS"},
    {ROUTER_CLASS_RULES_KEY, "ADMIT_ROUTER_POLICY_CLASS_RULES"},
};

/* Reads the policy classes from the file's text, once its settings are read. */
static int read_classes(void *obj, const char *path, const char *text, size_t len, char *err,
                        size_t errlen)
{
    return router_classes_parse(path, text, len, &((struct router_cfg *) obj)->classes, err,
                                errlen);
}

static const struct opt_spec spec = {
    "admit-router",
    "--worker=PROXY_URL=PUB_URL [--worker=...] [--option=value ...]",
    "Routes OpenAI-compatible requests to admitd workers that have room, judged from\n"
    "their load messages, and answers the overload status when every worker is busy.\n"
    "Each option can also be set by the environment variable shown, or in a YAML file\n"
    "(--config, key = the option with '_' for '-'); a flag wins over the environment,\n"
    "which wins over the file. A list from one source replaces those of the sources\n"
    "below it; in the environment and the file a list is comma-separated. The policy\n"
    "classes (policy_classes, default_policy_class, policy_class_rules) are set only\n"
    "in the file: see examples/admit-router-classes.yaml.\n",
    "ADMIT_ROUTER_CONFIG",
    "examples/admit-router.yaml",
    opts,
    sizeof opts / sizeof opts[0],
    AT(config_path),
    file_keys,
    sizeof file_keys / sizeof file_keys[0],
    read_classes,
};

/* The options that name workers (and names), with the role each gives. */
static const char *const worker_opts[] = {"--worker", "--prefill-worker", "--decode-worker"};
static const char *const dns_opts[] = {"--worker-dns", "--prefill-worker-dns",
                                       "--decode-worker-dns"};
static const int opt_roles[] = {WLIST_ROLE_NONE, ADMIT_LOAD_ROLE_PREFILL, ADMIT_LOAD_ROLE_DECODE};

/* 1 when l holds item. */
static int list_has(const struct opt_list *l, const char *item)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->items[i], item) == 0)
            return 1;
    return 0;
}

/* A worker that --worker, --prefill-worker and --decode-worker give two roles (as published
 * counts as one), or a name two of the --*worker-dns options give: which role it has would be
 * a guess, so it is an error. 0, or -1 with err. */
static int check_roles(const struct router_cfg *c, char *err, size_t errlen)
{
    const struct opt_list *ws[] = {&c->workers, &c->prefill_workers, &c->decode_workers};
    const struct opt_list *ns[] = {&c->worker_dns, &c->prefill_worker_dns, &c->decode_worker_dns};
    struct wlist all = {0};
    char canon[WLIST_ENTRY_MAX], msg[300];
    int other, rc = 0;

    for (size_t j = 0; j < 3 && rc == 0; j++)
        for (size_t i = 0; i < ws[j]->n && rc == 0; i++) {
            if (wlist_canon_role(ws[j]->items[i], opt_roles[j], canon, sizeof canon, msg,
                                 sizeof msg) != 0)
                continue; /* checked by its option */
            if (wlist_role_clash(&all, canon, &other)) {
                snprintf(err, errlen,
                         "%s: worker '%.200s' is given another role already (%s): a worker has one "
                         "role",
                         worker_opts[j], ws[j]->items[i], wlist_role_label(other));
                rc = -1;
            }
            wlist_add(&all, canon);
        }
    for (size_t j = 0; j < 3 && rc == 0; j++)
        for (size_t i = 0; i < ns[j]->n && rc == 0; i++)
            for (size_t k = 0; k < j && rc == 0; k++)
                if (list_has(ns[k], ns[j]->items[i])) {
                    snprintf(err, errlen,
                             "%s: '%.200s' is given by %s already: a name's workers "
                             "have one role",
                             dns_opts[j], ns[j]->items[i], dns_opts[k]);
                    rc = -1;
                }
    wlist_free(&all);
    return rc;
}

/* Both readings: the start's reads the workers file too (a bad one stops the start), a
 * reload's leaves it to discovery, whose own step reads it (a bad one keeps its workers and
 * holds back nothing else). */
static enum opt_result parse(struct router_cfg *c, int argc, char **argv, opt_env_fn env,
                             int read_workers_file, char *err, size_t errlen)
{
    enum opt_result r;

    memset(c, 0, sizeof *c);
    c->classes.default_cls = -1;
    r = opt_parse(&spec, c, argc, argv, env, err, errlen);
    if (r != OPT_RUN && r != OPT_CHECK) {
        router_classes_free(&c->classes); /* read before a later source failed */
        return r;
    }
    if (c->workers.n + c->prefill_workers.n + c->decode_workers.n == 0 &&
        c->workers_file[0] == '\0' &&
        c->worker_dns.n + c->prefill_worker_dns.n + c->decode_worker_dns.n == 0) {
        snprintf(err, errlen,
                 "no worker: name at least one with --worker=PROXY_URL=PUB_URL, "
                 "--workers-file=FILE or --worker-dns=NAME:HTTP_PORT:PUB_PORT (or their "
                 "--prefill-... and --decode-... forms, their variables, or keys of the config "
                 "file)");
        r = OPT_ERROR;
    } else if (check_roles(c, err, errlen) != 0) {
        r = OPT_ERROR;
    } else if (read_workers_file && c->workers_file[0] != '\0' &&
               wlist_read(c->workers_file, &c->file_workers, err, errlen) != 0) {
        r = OPT_ERROR; /* the message is "file:line: ..." */
    } else if (busy_thresholds_validate(&c->t, err, errlen) != 0) {
        r = OPT_ERROR; /* the kinds check the ranges already: this is the router's own rule */
    }
    if (r == OPT_ERROR)
        router_cfg_free(c);
    return r;
}

enum opt_result router_cfg_parse(struct router_cfg *c, int argc, char **argv, opt_env_fn env,
                                 char *err, size_t errlen)
{
    return parse(c, argc, argv, env, 1, err, errlen);
}

int router_cfg_reparse(struct router_cfg *c, int argc, char **argv, opt_env_fn env, char *err,
                       size_t errlen)
{
    enum opt_result r = parse(c, argc, argv, env, 0, err, errlen);

    if (r == OPT_RUN || r == OPT_CHECK)
        return 0;
    if (r != OPT_ERROR) { /* --help or --version: they stopped the start, they cannot be here */
        snprintf(err, errlen, "the command line asks for no run");
        router_cfg_free(c);
    }
    return -1;
}

/* ---- a reload: what changed -------------------------------------------------------------- */

/* Bound or sized once at start: a listener, the resolver's servers, the selection view's
 * defaults, each worker's connection pool (created when the worker is added; one pool size
 * for all), the proxy's limits on clients, a loaded plugin, the load subscribers' kind. */
static const struct opt_field restart_fields[] = {
    OPT_FIELD(struct router_cfg, listen),
    OPT_FIELD(struct router_cfg, metrics_listen),
    OPT_FIELD(struct router_cfg, dns_nameserver),
    OPT_FIELD(struct router_cfg, kv_block_size),
    OPT_FIELD(struct router_cfg, router_ttl_secs),      /* the index is sized with it */
    OPT_FIELD(struct router_cfg, kv_predicted_ttl_ms),  /* ... and the side table */
    OPT_FIELD(struct router_cfg, router_max_tree_size), /* ... and both are preallocated */
    OPT_FIELD(struct router_cfg, missed_heartbeats),
    OPT_FIELD(struct router_cfg, upstream_timeout_ms),
    OPT_FIELD(struct router_cfg, upstream_keepalive),
    OPT_FIELD(struct router_cfg, client_timeout_ms),
    OPT_FIELD(struct router_cfg, client_header_timeout_ms),
    OPT_FIELD(struct router_cfg, max_client_connections),
    OPT_FIELD(struct router_cfg, max_header_bytes),
    OPT_FIELD(struct router_cfg, max_body_bytes),
    OPT_FIELD(struct router_cfg, classifier_plugin),
    /* How load messages are read: each worker's subscriber is made as the worker is added,
     * and a fleet read half one way, half the other, would be no one's configuration. */
    OPT_FIELD_AS("subscriber", struct router_cfg, subscriber_nng),
    OPT_FIELD(struct router_cfg, load_batch_ms),
};

/* Read where they are used, or handed on by the reload (the thresholds, the resolver's
 * interval, the proxy's live fields). The lists and the classes are compared below, for the
 * log only: their owners apply them (discovery the workers and names, the registry the
 * models, the queue the classes). */
static const struct opt_field live_fields[] = {
    OPT_FIELD(struct router_cfg, workers_file),
    OPT_FIELD(struct router_cfg, dns_interval_ms),
    OPT_FIELD(struct router_cfg, dns_family),
    OPT_FIELD_AS("active_decode_blocks_threshold", struct router_cfg,
                 t.active_decode_blocks_threshold),
    OPT_FIELD_AS("active_prefill_tokens_threshold", struct router_cfg,
                 t.active_prefill_tokens_threshold),
    OPT_FIELD_AS("active_prefill_tokens_threshold_frac", struct router_cfg,
                 t.active_prefill_tokens_threshold_frac),
    OPT_FIELD_AS("overload_status_code", struct router_cfg, overload_status),
    OPT_FIELD_AS("router_track_output_blocks", struct router_cfg, track_output_blocks),
    OPT_FIELD(struct router_cfg, chars_per_token),
    OPT_FIELD(struct router_cfg, kv_overlap_weight),
    OPT_FIELD(struct router_cfg, tokenize),
    OPT_FIELD(struct router_cfg, tokenize_timeout_ms),
    OPT_FIELD(struct router_cfg, max_heartbeat_ms),
    OPT_FIELD(struct router_cfg, stream_buffer_bytes),
    OPT_FIELD_AS("retry_after", struct router_cfg, retry_after_s),
    OPT_FIELD(struct router_cfg, drain_timeout_ms),
    OPT_FIELD(struct router_cfg, admin_token),
    OPT_FIELD(struct router_cfg, log_level),
    OPT_FIELD_AS("log_format", struct router_cfg, log_json),
    OPT_FIELD(struct router_cfg, access_log),
};

#define NFIELDS(a) (sizeof(a) / sizeof(a)[0])

static int lists_same(const struct opt_list *a, const struct opt_list *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->items[i], b->items[i]) != 0)
            return 0;
    return 1;
}

static int class_same(const struct rclass *a, const struct rclass *b)
{
    return strcmp(a->name, b->name) == 0 && memcmp(&a->t, &b->t, sizeof a->t) == 0 &&
           a->quantum == b->quantum && a->policy == b->policy &&
           a->limit_per_worker == b->limit_per_worker && a->queue_timeout_ms == b->queue_timeout_ms;
}

static int rule_same(const struct rrule *a, const struct rrule *b)
{
    if (a->kind != b->kind || strcmp(a->model, b->model) != 0 || a->cls != b->cls ||
        a->nbuckets != b->nbuckets)
        return 0;
    for (size_t i = 0; i < a->nbuckets; i++)
        if (a->buckets[i].min_tokens != b->buckets[i].min_tokens ||
            a->buckets[i].cls != b->buckets[i].cls)
            return 0;
    return 1;
}

static int classes_same(const struct router_classes *a, const struct router_classes *b)
{
    if (a->n != b->n || a->default_cls != b->default_cls || a->nrules != b->nrules)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (!class_same(&a->c[i], &b->c[i]))
            return 0;
    for (size_t i = 0; i < a->nrules; i++)
        if (!rule_same(&a->rules[i], &b->rules[i]))
            return 0;
    return 1;
}

/* Appends to out the names of a's classes that b has not. */
static void names_missing(const struct router_classes *a, const struct router_classes *b, char *out,
                          size_t outlen)
{
    size_t len = 0;

    out[0] = '\0';
    for (size_t i = 0; i < a->n && len < outlen; i++)
        if (router_classes_find(b, a->c[i].name) < 0)
            len +=
                (size_t) snprintf(out + len, outlen - len, "%s%s", len ? ", " : "", a->c[i].name);
}

size_t router_cfg_diff(const struct router_cfg *cur, struct router_cfg *next)
{
    static const char *const lists[] = {"worker",     "prefill_worker",     "decode_worker",
                                        "worker_dns", "prefill_worker_dns", "decode_worker_dns",
                                        "model"};
    const struct opt_list *was[] = {
        &cur->workers,    &cur->prefill_workers,    &cur->decode_workers,
        &cur->worker_dns, &cur->prefill_worker_dns, &cur->decode_worker_dns,
        &cur->models};
    const struct opt_list *now[] = {
        &next->workers,    &next->prefill_workers,    &next->decode_workers,
        &next->worker_dns, &next->prefill_worker_dns, &next->decode_worker_dns,
        &next->models};

    opt_fields_diff(live_fields, NFIELDS(live_fields), cur, next, OPT_DIFF_LIVE);
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++)
        if (!lists_same(was[i], now[i]))
            log_info("reload: %s changed", lists[i]);
    if (!classes_same(&cur->classes, &next->classes)) {
        char added[256], removed[256];

        names_missing(&next->classes, &cur->classes, added, sizeof added);
        names_missing(&cur->classes, &next->classes, removed, sizeof removed);
        log_info("reload: policy classes changed: %zu -> %zu classes (added: %s; removed: %s)",
                 cur->classes.n, next->classes.n, added[0] ? added : "none",
                 removed[0] ? removed : "none");
    }
    return opt_fields_diff(restart_fields, NFIELDS(restart_fields), cur, next, OPT_DIFF_RESTART);
}

void router_cfg_class_map(const struct router_classes *cur, const struct router_classes *next,
                          int *map)
{
    for (size_t i = 0; i < cur->n; i++) {
        int k = router_classes_find(next, cur->c[i].name);

        map[i] = k >= 0 ? k : next->default_cls; /* -1 when next has no classes */
    }
}

int router_cfg_retry_after(const struct router_cfg *c)
{
    return c->retry_after_s > 0 ? (int) c->retry_after_s : RETRY_AFTER_MIN;
}

void router_cfg_free(struct router_cfg *c)
{
    opt_free(&spec, c);
    router_classes_free(&c->classes);
    wlist_free(&c->file_workers);
}

void router_cfg_usage(FILE *out)
{
    opt_usage(&spec, out);
}
