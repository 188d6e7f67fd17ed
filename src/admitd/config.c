/* config: admitd's option table, read by the engine in opt.c.
 *
 * Only what is admitd's own lives here: which options exist, their variables, ranges,
 * defaults and help, and the two rules the engine cannot know. Q is read only when N is
 * given by some source, as in Dynamo (a queue without a cap means nothing): the table says
 * so with "requires", and the engine then ignores Q's variable and flag, and checks a Q in
 * the file but keeps the default. And the engine's metrics URL defaults to the upstream's,
 * which is known only once everything else is parsed. Ranges that admit-router shares are
 * the CFG_DEF_ macros of config.h. */
#include "config.h"

#include <stdio.h>
#include <string.h>

/* --engine-metrics-url fills three fields (the address, the path, and that it was given), so
 * it is parsed here rather than by a kind of the engine. */
static int engine_metrics_url(void *obj, const char *raw, char *msg, size_t msglen)
{
    struct cfg *c = obj;

    if (http_url_parse_path(raw, &c->engine_metrics, c->engine_metrics_path,
                            sizeof c->engine_metrics_path, msg, msglen) != 0)
        return -1;
    c->engine_metrics_set = 1;
    return 0;
}

/* --publisher: auto (our own PUB, sppub) or nng (nng's PUB). */
static int parse_publisher(void *obj, const char *raw, char *msg, size_t msglen)
{
    struct cfg *c = obj;

    return opt_auto_or_nng(raw, &c->publisher_nng, msg, msglen);
}

/* --role: prefill, decode or both (docs/load-message.md, the `role` field). */
static int parse_role(void *obj, const char *raw, char *msg, size_t msglen)
{
    struct cfg *c = obj;

    if (admit_load_role_parse(raw, strlen(raw), &c->role) != 0) {
        snprintf(msg, msglen, "'%.120s' must be prefill, decode or both", raw);
        return -1;
    }
    return 0;
}

/* --engine-kv-events-topic: any bytes but NUL (ZMQ's subscription is a prefix of the first
 * frame; vLLM's default topic is empty). */
static int engine_kv_topic(void *obj, const char *raw, char *msg, size_t msglen)
{
    struct cfg *c = obj;

    if (strlen(raw) >= sizeof c->engine_kv_events_topic) {
        snprintf(msg, msglen, "must be at most %zu bytes", sizeof c->engine_kv_events_topic - 1);
        return -1;
    }
    strcpy(c->engine_kv_events_topic, raw);
    return 0;
}

/* The order here is the order of --help. */
static const struct opt_def opts[] = {
    OPT("engine-request-limit", "DYN_ENGINE_REQUEST_LIMIT", OPT_UINT,
        OPT_AT(struct cfg, engine_request_limit), 1, 1000000, NULL,
        "engine slots N; unset = no cap, requests pass straight through",
        "must be a positive integer"),
    OPT("request-queue-limit", "DYN_DYNAMO_REQUEST_QUEUE_LIMIT", OPT_UINT,
        OPT_AT(struct cfg, request_queue_limit), 2, 1000000, "16",
        "requests that may wait when all N slots are busy (Q >= 2)",
        "must be an integer >= 2 (the queue limit Q)", "engine-request-limit"),
    OPT("listen", "ADMITD_LISTEN", OPT_HOSTPORT, OPT_AT(struct cfg, listen), 0, 0, "0.0.0.0:8080",
        "client listener HOST:PORT"),
    OPT("upstream", "ADMITD_UPSTREAM", OPT_URL, OPT_AT(struct cfg, upstream), 0, 0,
        "http://127.0.0.1:8000", "the engine's OpenAI-compatible server, http://HOST:PORT"),
    OPT("metrics-listen", "ADMITD_METRICS_LISTEN", OPT_HOSTPORT, OPT_AT(struct cfg, metrics_listen),
        0, 0, "0.0.0.0:9091", "listener for /metrics, /health and /ready"),
    OPT("overload-status-code", "DYN_HTTP_OVERLOAD_STATUS_CODE", OPT_STATUS,
        OPT_AT(struct cfg, overload_status), CFG_DEF_OVERLOAD_STATUS,
        "status of overload answers (200-999; anything else means 529)"),
    OPT("retry-after", "ADMITD_RETRY_AFTER", OPT_RETRY, OPT_AT(struct cfg, retry_after_s),
        CFG_DEF_RETRY_AFTER,
        "Retry-After seconds on overload answers, or auto (from the slot release rate)"),
    OPT("upstream-timeout-ms", "ADMITD_UPSTREAM_TIMEOUT_MS", OPT_UINT,
        OPT_AT(struct cfg, upstream_timeout_ms), CFG_DEF_UPSTREAM_TIMEOUT_MS,
        "engine silent this long (connect, first byte or between bytes): 504"),
    OPT("client-timeout-ms", "ADMITD_CLIENT_TIMEOUT_MS", OPT_UINT,
        OPT_AT(struct cfg, client_timeout_ms), CFG_DEF_CLIENT_TIMEOUT_MS,
        "client idle this long while sending a request or not reading a reply: closed"),
    OPT("client-header-timeout-ms", "ADMITD_CLIENT_HEADER_TIMEOUT_MS", OPT_UINT,
        OPT_AT(struct cfg, client_header_timeout_ms), CFG_DEF_CLIENT_HEADER_TIMEOUT_MS,
        "a request head not whole this long after its first byte (a new connection: after "
        "the accept): 408, closed"),
    OPT("max-client-connections", "ADMITD_MAX_CLIENT_CONNECTIONS", OPT_UINT,
        OPT_AT(struct cfg, max_client_connections), CFG_DEF_MAX_CLIENT_CONNECTIONS,
        "client connections open at once; more wait in the kernel's backlog (0: (the "
        "open-file limit - 128) / 2)"),
    OPT("max-header-bytes", "ADMITD_MAX_HEADER_BYTES", OPT_UINT,
        OPT_AT(struct cfg, max_header_bytes), CFG_DEF_MAX_HEADER_BYTES,
        "largest request head (a longer request line: 414, a larger head: 431)"),
    OPT("max-body-bytes", "ADMITD_MAX_BODY_BYTES", OPT_UINT, OPT_AT(struct cfg, max_body_bytes),
        CFG_DEF_MAX_BODY_BYTES, "largest request body (larger: 413)"),
    OPT("upstream-keepalive", "ADMITD_UPSTREAM_KEEPALIVE", OPT_UINT,
        OPT_AT(struct cfg, upstream_keepalive), CFG_DEF_UPSTREAM_KEEPALIVE,
        "idle keep-alive connections to the engine kept for reuse"),
    OPT("stream-buffer-bytes", "ADMITD_STREAM_BUFFER_BYTES", OPT_UINT,
        OPT_AT(struct cfg, stream_buffer_bytes), CFG_DEF_STREAM_BUFFER_BYTES,
        "unsent reply bytes per client above which the engine is not read"),
    OPT("health-path", "ADMITD_HEALTH_PATH", OPT_PATH, OPT_AT(struct cfg, health_path), 0, 0,
        "/health", "engine path probed for /ready"),
    OPT("health-interval-ms", "ADMITD_HEALTH_INTERVAL_MS", OPT_UINT,
        OPT_AT(struct cfg, health_interval_ms), 10, 3600000, "1000",
        "how often the engine is probed"),
    OPT("log-level", "ADMITD_LOG_LEVEL", OPT_LOGLEVEL, OPT_AT(struct cfg, log_level), 0, 0, "info",
        "error, warn, info or debug"),
    OPT("mock-engine", "ADMITD_MOCK_ENGINE", OPT_BOOL, OPT_AT(struct cfg, mock_engine), 0, 0, "0",
        "start the built-in mock engine on a free loopback port and use it as the upstream"),
    OPT("publish", "ADMITD_PUBLISH", OPT_PUBURL, OPT_AT(struct cfg, publish), 0, 0,
        "tcp://0.0.0.0:5557",
        "nng PUB URL load messages are published on (tcp://HOST:PORT, ipc:///PATH, or none)"),
    OPT("publisher", "ADMITD_PUBLISHER", OPT_CUSTOM, OPT_AT(struct cfg, publisher_nng), 0, 0,
        "auto",
        "how load messages are sent: auto (our own PUB, on the event loop) or nng (nng's PUB, "
        "with its threads); the same bytes on the wire",
        NULL, NULL, parse_publisher),
    OPT("worker-id", "ADMITD_WORKER_ID", OPT_ID, OPT_AT(struct cfg, worker_id), 0, 0, NULL,
        "worker id in load messages (default: hostname:port of --listen)"),
    OPT("role", "ADMITD_ROLE", OPT_CUSTOM, OPT_AT(struct cfg, role), 0, 0, "both",
        "what the engine serves, said in load messages: both (whole requests), prefill or "
        "decode (one leg of disaggregated serving)",
        NULL, NULL, parse_role),
    OPT("heartbeat-ms", "ADMITD_HEARTBEAT_MS", OPT_UINT, OPT_AT(struct cfg, heartbeat_ms), 10,
        3600000, "1000", "republish the load this often even when nothing changed"),
    OPT("engine-metrics-url", "ADMITD_ENGINE_METRICS_URL", OPT_CUSTOM,
        OPT_AT(struct cfg, engine_metrics), 0, 0, NULL,
        "the engine's Prometheus metrics (default: the upstream + /metrics)", NULL, NULL,
        engine_metrics_url),
    OPT("engine-metrics-interval-ms", "ADMITD_ENGINE_METRICS_INTERVAL_MS", OPT_UINT,
        OPT_AT(struct cfg, engine_metrics_interval_ms), 10, 3600000, "100",
        "how often the engine is scraped"),
    OPT("engine-models-interval-ms", "ADMITD_ENGINE_MODELS_INTERVAL_MS", OPT_UINT,
        OPT_AT(struct cfg, engine_models_interval_ms), 0, 3600000, "10000",
        "how often the engine's GET /v1/models is read for the model names load messages "
        "carry (0 = never: they say the models are unknown)"),
    OPT("block-size", "ADMITD_BLOCK_SIZE", OPT_UINT, OPT_AT(struct cfg, block_size), 1, 1048576,
        "16", "KV block size in tokens, when the engine does not report it"),
    OPT("max-num-batched-tokens", "ADMITD_MAX_NUM_BATCHED_TOKENS", OPT_UINT,
        OPT_AT(struct cfg, max_num_batched_tokens), 0, 1000000000, "0",
        "the engine's per-step token budget, when it does not report it (0 = unknown)"),
    OPT("data-parallel-size", "ADMITD_DATA_PARALLEL_SIZE", OPT_UINT,
        OPT_AT(struct cfg, data_parallel_size), 0, 64, "0",
        "data-parallel ranks (0 = as many as the engine reports, else 1)"),
    OPT("engine-kv-events", "ADMITD_ENGINE_KV_EVENTS", OPT_PUBURL,
        OPT_AT(struct cfg, engine_kv_events), 0, 0, NULL,
        "the engine's KV events PUB, tcp://HOST:PORT or ipc:///PATH (vLLM's "
        "--kv-events-config endpoint; rank r at PORT + r); unset = not read"),
    OPT("engine-kv-events-topic", "ADMITD_ENGINE_KV_EVENTS_TOPIC", OPT_CUSTOM,
        OPT_AT(struct cfg, engine_kv_events_topic), 0, 0, NULL,
        "the topic of the engine's KV events (default: empty, vLLM's)", NULL, NULL,
        engine_kv_topic),
    OPT("engine-kv-events-replay", "ADMITD_ENGINE_KV_EVENTS_REPLAY", OPT_PUBURL,
        OPT_AT(struct cfg, engine_kv_events_replay), 0, 0, NULL,
        "the engine's KV events replay socket (vLLM's --kv-events-config replay_endpoint; "
        "rank r at PORT + r): a gap is filled from it; unset = a gap is relayed as cleared"),
    OPT("chars-per-token", "ADMITD_CHARS_PER_TOKEN", OPT_DOUBLE,
        OPT_AT(struct cfg, chars_per_token), 0.5, 1000, "4",
        "bytes of prompt text per token, for requests that do not send token ids"),
    OPT("queue-timeout-ms", "DYN_DYNAMO_REQUEST_QUEUE_TIMEOUT_MS", OPT_UINT,
        OPT_AT(struct cfg, queue_timeout_ms), 0, 86400000, "30000",
        "a request queued longer is answered with the overload status; 0 = never"),
    OPT("drain-timeout-ms", "ADMITD_DRAIN_TIMEOUT_MS", OPT_UINT,
        OPT_AT(struct cfg, drain_timeout_ms), CFG_DEF_DRAIN_TIMEOUT_MS,
        "on SIGTERM, how long in-flight requests may take before they are cancelled"),
    OPT("admin-token", "ADMITD_ADMIN_TOKEN", OPT_TOKEN, OPT_AT(struct cfg, admin_token), 0, 0, NULL,
        "bearer token for POST /admission (default: only loopback peers may change limits)"),
    OPT("log-format", "ADMITD_LOG_FORMAT", OPT_LOGFMT, OPT_AT(struct cfg, log_json), 0, 0, "text",
        "text or json (one JSON object per line)"),
    OPT("access-log", "ADMITD_ACCESS_LOG", OPT_BOOL, OPT_AT(struct cfg, access_log), 0, 0, "0",
        "log one line per finished request (method, path, status, outcome, timings, bytes)"),
};

static const struct opt_spec spec = {
    "admitd",
    "[--option=value ...]",
    "admitd sits in front of an OpenAI-compatible inference engine and caps the\n"
    "requests it runs at N, queues up to Q more, and answers the rest at once with\n"
    "the overload status. Each option can also be set by the environment variable\n"
    "shown, or in a YAML file (--config, key = the option with '_' for '-');\n"
    "a flag wins over the environment, which wins over the file.\n",
    "ADMITD_CONFIG",
    "examples/admitd.yaml",
    opts,
    sizeof opts / sizeof opts[0],
    OPT_AT(struct cfg, config_path),
    NULL, /* no file-only keys: every setting of admitd is a flag too */
    0,
    NULL,
};

int cfg_parse_overload_status(const char *s)
{
    return opt_lenient_int(s, 200, 999, CFG_DEFAULT_OVERLOAD_STATUS);
}

enum cfg_result cfg_parse(struct cfg *c, int argc, char **argv, cfg_env_fn env, char *err,
                          size_t errlen)
{
    enum opt_result r;

    memset(c, 0, sizeof *c);
    r = opt_parse(&spec, c, argc, argv, env, err, errlen);
    if ((r == OPT_RUN || r == OPT_CHECK) && !c->engine_metrics_set) {
        c->engine_metrics = c->upstream;
        strcpy(c->engine_metrics_path, "/metrics");
    }
    return (enum cfg_result) r;
}

void cfg_usage(FILE *out, const char *prog)
{
    struct opt_spec s = spec;

    s.prog = prog;
    opt_usage(&s, out);
}
