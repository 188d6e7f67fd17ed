/* config: table-driven option parsing with flag > env > default precedence. */
#include "core/config.h"
#include "core/cfgfile.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum opt_kind {
    K_UINT,
    K_HOSTPORT,
    K_URL,
    K_STATUS,
    K_LOGLEVEL,
    K_PATH,
    K_BOOL,
    K_PUBURL,
    K_ID,
    K_URLPATH,
    K_RATIO,
    K_RETRY,
    K_TOKEN,
    K_LOGFMT
};

struct opt {
    const char *flag; /* long flag without dashes */
    const char *env;  /* environment variable */
    enum opt_kind kind;
    size_t off;        /* offset of the field in struct cfg */
    unsigned min, max; /* K_UINT range */
    const char *def;   /* default, as text */
    const char *help;
};

#define OFF(f) offsetof(struct cfg, f)

/* The order here is the order of --help. Index 0 and 1 are referred to below. */
static const struct opt opts[] = {
    {"engine-request-limit", "DYN_ENGINE_REQUEST_LIMIT", K_UINT, OFF(engine_request_limit), 1,
     1000000, NULL, "engine slots N; unset = no cap, requests pass straight through"},
    {"request-queue-limit", "DYN_DYNAMO_REQUEST_QUEUE_LIMIT", K_UINT, OFF(request_queue_limit), 2,
     1000000, "16", "requests that may wait when all N slots are busy (Q >= 2)"},
    {"listen", "ADMITD_LISTEN", K_HOSTPORT, OFF(listen), 0, 0, "0.0.0.0:8080",
     "client listener HOST:PORT"},
    {"upstream", "ADMITD_UPSTREAM", K_URL, OFF(upstream), 0, 0, "http://127.0.0.1:8000",
     "the engine's OpenAI-compatible server, http://HOST:PORT"},
    {"metrics-listen", "ADMITD_METRICS_LISTEN", K_HOSTPORT, OFF(metrics_listen), 0, 0,
     "0.0.0.0:9091", "listener for /metrics, /health and /ready"},
    {"overload-status-code", "DYN_HTTP_OVERLOAD_STATUS_CODE", K_STATUS, OFF(overload_status), 0, 0,
     "529", "status of overload answers (200-999; anything else means 529)"},
    {"retry-after", "ADMITD_RETRY_AFTER", K_RETRY, OFF(retry_after_s), 1, 3600, "auto",
     "Retry-After seconds on overload answers, or auto (from the slot release rate)"},
    {"upstream-timeout-ms", "ADMITD_UPSTREAM_TIMEOUT_MS", K_UINT, OFF(upstream_timeout_ms), 1,
     86400000, "600000", "engine silent this long (connect, first byte or between bytes): 504"},
    {"client-timeout-ms", "ADMITD_CLIENT_TIMEOUT_MS", K_UINT, OFF(client_timeout_ms), 1, 86400000,
     "60000", "client idle this long while sending a request or not reading a reply: closed"},
    {"max-header-bytes", "ADMITD_MAX_HEADER_BYTES", K_UINT, OFF(max_header_bytes), 1024, 16777216,
     "65536", "largest request header block (larger: 400)"},
    {"max-body-bytes", "ADMITD_MAX_BODY_BYTES", K_UINT, OFF(max_body_bytes), 1, 1073741824,
     "33554432", "largest request body (larger: 413)"},
    {"upstream-keepalive", "ADMITD_UPSTREAM_KEEPALIVE", K_UINT, OFF(upstream_keepalive), 0, 100000,
     "64", "idle keep-alive connections to the engine kept for reuse"},
    {"stream-buffer-bytes", "ADMITD_STREAM_BUFFER_BYTES", K_UINT, OFF(stream_buffer_bytes), 4096,
     1073741824, "262144", "unsent reply bytes per client above which the engine is not read"},
    {"health-path", "ADMITD_HEALTH_PATH", K_PATH, OFF(health_path), 0, 0, "/health",
     "engine path probed for /ready"},
    {"health-interval-ms", "ADMITD_HEALTH_INTERVAL_MS", K_UINT, OFF(health_interval_ms), 10,
     3600000, "1000", "how often the engine is probed"},
    {"log-level", "ADMITD_LOG_LEVEL", K_LOGLEVEL, OFF(log_level), 0, 0, "info",
     "error, warn, info or debug"},
    {"mock-engine", "ADMITD_MOCK_ENGINE", K_BOOL, OFF(mock_engine), 0, 0, "0",
     "start the built-in mock engine on a free loopback port and use it as the upstream"},
    {"publish", "ADMITD_PUBLISH", K_PUBURL, OFF(publish), 0, 0, "tcp://0.0.0.0:5557",
     "nng PUB URL load messages are published on (tcp://HOST:PORT, ipc:///PATH, or none)"},
    {"worker-id", "ADMITD_WORKER_ID", K_ID, OFF(worker_id), 0, 0, NULL,
     "worker id in load messages (default: hostname:port of --listen)"},
    {"heartbeat-ms", "ADMITD_HEARTBEAT_MS", K_UINT, OFF(heartbeat_ms), 10, 3600000, "1000",
     "republish the load this often even when nothing changed"},
    {"engine-metrics-url", "ADMITD_ENGINE_METRICS_URL", K_URLPATH, OFF(engine_metrics), 0, 0, NULL,
     "the engine's Prometheus metrics (default: the upstream + /metrics)"},
    {"engine-metrics-interval-ms", "ADMITD_ENGINE_METRICS_INTERVAL_MS", K_UINT,
     OFF(engine_metrics_interval_ms), 10, 3600000, "100", "how often the engine is scraped"},
    {"block-size", "ADMITD_BLOCK_SIZE", K_UINT, OFF(block_size), 1, 1048576, "16",
     "KV block size in tokens, when the engine does not report it"},
    {"max-num-batched-tokens", "ADMITD_MAX_NUM_BATCHED_TOKENS", K_UINT, OFF(max_num_batched_tokens),
     0, 1000000000, "0",
     "the engine's per-step token budget, when it does not report it (0 = unknown)"},
    {"data-parallel-size", "ADMITD_DATA_PARALLEL_SIZE", K_UINT, OFF(data_parallel_size), 0, 64, "0",
     "data-parallel ranks (0 = as many as the engine reports, else 1)"},
    {"chars-per-token", "ADMITD_CHARS_PER_TOKEN", K_RATIO, OFF(chars_per_token), 0, 0, "4",
     "bytes of prompt text per token, for requests that do not send token ids"},
    {"queue-timeout-ms", "DYN_DYNAMO_REQUEST_QUEUE_TIMEOUT_MS", K_UINT, OFF(queue_timeout_ms), 0,
     86400000, "30000", "a request queued longer is answered with the overload status; 0 = never"},
    {"drain-timeout-ms", "ADMITD_DRAIN_TIMEOUT_MS", K_UINT, OFF(drain_timeout_ms), 0, 86400000,
     "30000", "on SIGTERM, how long in-flight requests may take before they are cancelled"},
    {"admin-token", "ADMITD_ADMIN_TOKEN", K_TOKEN, OFF(admin_token), 0, 0, NULL,
     "bearer token for POST /admission (default: only loopback peers may change limits)"},
    {"log-format", "ADMITD_LOG_FORMAT", K_LOGFMT, OFF(log_json), 0, 0, "text",
     "text or json (one JSON object per line)"},
    {"access-log", "ADMITD_ACCESS_LOG", K_BOOL, OFF(access_log), 0, 0, "0",
     "log one line per finished request (method, path, status, outcome, timings, bytes)"},
};

#define NOPTS            (sizeof opts / sizeof opts[0])
#define OPT_ENGINE_LIMIT 0
#define OPT_QUEUE_LIMIT  1

int cfg_parse_overload_status(const char *s)
{
    char *end;
    long v;

    if (s == NULL)
        return CFG_DEFAULT_OVERLOAD_STATUS;
    while (isspace((unsigned char) *s))
        s++;
    if (!isdigit((unsigned char) *s))
        return CFG_DEFAULT_OVERLOAD_STATUS;
    errno = 0;
    v = strtol(s, &end, 10);
    while (isspace((unsigned char) *end))
        end++;
    if (errno != 0 || *end != '\0' || v < 200 || v > 999)
        return CFG_DEFAULT_OVERLOAD_STATUS;
    return (int) v;
}

/* Strict unsigned decimal: digits only (surrounding blanks allowed), no sign, no overflow. */
static int parse_uint(const char *s, unsigned long long *out)
{
    unsigned long long v = 0;
    int digits = 0;

    while (isspace((unsigned char) *s))
        s++;
    for (; isdigit((unsigned char) *s); s++, digits++) {
        if (v > (ULLONG_MAX - 9) / 10)
            return -1;
        v = v * 10 + (unsigned long long) (*s - '0');
    }
    while (isspace((unsigned char) *s))
        s++;
    if (digits == 0 || *s != '\0')
        return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off", ""};

    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (strcasecmp(s, yes[i]) == 0)
            return *out = 1, 0;
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (strcasecmp(s, no[i]) == 0)
            return *out = 0, 0;
    return -1;
}

/* Converts one raw value into its field; src names where it came from for the message. */
static int apply(struct cfg *c, const struct opt *o, const char *raw, const char *src, char *err,
                 size_t errlen)
{
    char *field = (char *) c + o->off;
    char sub[192];
    unsigned long long v;

    switch (o->kind) {
    case K_UINT:
        if (parse_uint(raw, &v) != 0 || v < o->min || v > o->max) {
            if (o == &opts[OPT_ENGINE_LIMIT])
                snprintf(err, errlen, "%s: '%s' must be a positive integer", src, raw);
            else if (o == &opts[OPT_QUEUE_LIMIT])
                snprintf(err, errlen, "%s: '%s' must be an integer >= 2 (the queue limit Q)", src,
                         raw);
            else
                snprintf(err, errlen, "%s: '%s' must be an integer from %u to %u", src, raw, o->min,
                         o->max);
            return -1;
        }
        *(unsigned *) (void *) field = (unsigned) v;
        return 0;
    case K_HOSTPORT:
        if (hostport_parse(raw, (struct hostport *) (void *) field, sub, sizeof sub) != 0) {
            snprintf(err, errlen, "%s: %s", src, sub);
            return -1;
        }
        return 0;
    case K_URL:
        if (http_url_parse(raw, (struct http_url *) (void *) field, sub, sizeof sub) != 0) {
            snprintf(err, errlen, "%s: %s", src, sub);
            return -1;
        }
        return 0;
    case K_STATUS:
        *(int *) (void *) field = cfg_parse_overload_status(raw);
        return 0;
    case K_LOGLEVEL:
        if (log_level_parse(raw, (enum log_level *) (void *) field) != 0) {
            snprintf(err, errlen, "%s: '%s' must be error, warn, info or debug", src, raw);
            return -1;
        }
        return 0;
    case K_PATH:
        if (raw[0] != '/' || strlen(raw) >= sizeof c->health_path || strpbrk(raw, " \r\n")) {
            snprintf(err, errlen, "%s: '%s' must be a path starting with / (at most %zu bytes)",
                     src, raw, sizeof c->health_path - 1);
            return -1;
        }
        strcpy(field, raw);
        return 0;
    case K_PUBURL:
        if (strcmp(raw, "none") == 0 || raw[0] == '\0') {
            field[0] = '\0';
            return 0;
        }
        if ((strncmp(raw, "tcp://", 6) != 0 && strncmp(raw, "ipc://", 6) != 0) ||
            strlen(raw) >= sizeof c->publish || strlen(raw) < 7 || strpbrk(raw, " \r\n")) {
            snprintf(err, errlen, "%s: '%s' must be tcp://HOST:PORT, ipc:///PATH or none", src,
                     raw);
            return -1;
        }
        strcpy(field, raw);
        return 0;
    case K_ID:
        for (const char *p = raw; *p; p++)
            if ((unsigned char) *p < 0x21 || (unsigned char) *p > 0x7e || *p == '"' || *p == '\\') {
                snprintf(err, errlen,
                         "%s: '%s' must be printable ASCII without spaces, quotes or backslashes",
                         src, raw);
                return -1;
            }
        if (raw[0] == '\0' || strlen(raw) >= sizeof c->worker_id) {
            snprintf(err, errlen, "%s: must be 1 to %zu characters", src, sizeof c->worker_id - 1);
            return -1;
        }
        strcpy(field, raw);
        return 0;
    case K_URLPATH:
        if (http_url_parse_path(raw, &c->engine_metrics, c->engine_metrics_path,
                                sizeof c->engine_metrics_path, sub, sizeof sub) != 0) {
            snprintf(err, errlen, "%s: %s", src, sub);
            return -1;
        }
        c->engine_metrics_set = 1;
        return 0;
    case K_RATIO: {
        char *end;
        double d = strtod(raw, &end);
        if (end == raw || *end != '\0' || !(d >= 0.5 && d <= 1000)) {
            snprintf(err, errlen, "%s: '%s' must be a number from 0.5 to 1000", src, raw);
            return -1;
        }
        *(double *) (void *) field = d;
        return 0;
    }
    case K_RETRY:
        if (strcmp(raw, "auto") == 0) {
            *(unsigned *) (void *) field = 0;
            return 0;
        }
        if (parse_uint(raw, &v) != 0 || v < o->min || v > o->max) {
            snprintf(err, errlen, "%s: '%s' must be auto or seconds from %u to %u", src, raw,
                     o->min, o->max);
            return -1;
        }
        *(unsigned *) (void *) field = (unsigned) v;
        return 0;
    case K_TOKEN:
        if (strlen(raw) < 16 || strlen(raw) >= sizeof c->admin_token || strpbrk(raw, " \t\r\n")) {
            snprintf(err, errlen, "%s: must be 16 to %zu characters without blanks", src,
                     sizeof c->admin_token - 1);
            return -1;
        }
        strcpy(field, raw);
        return 0;
    case K_LOGFMT:
        if (strcmp(raw, "text") != 0 && strcmp(raw, "json") != 0) {
            snprintf(err, errlen, "%s: '%s' must be text or json", src, raw);
            return -1;
        }
        *(int *) (void *) field = strcmp(raw, "json") == 0;
        return 0;
    case K_BOOL:
        if (parse_bool(raw, (int *) (void *) field) != 0) {
            snprintf(err, errlen, "%s: '%s' must be true or false", src, raw);
            return -1;
        }
        return 0;
    }
    return -1;
}

/* State of the file pass: which options the file set. */
struct filepass {
    struct cfg *c;
    int set[NOPTS];
};

/* A key of the config file: the option whose flag, with '-' as '_', is the key. */
static int on_file_item(const struct cfgfile_item *it, void *arg, char *msg, size_t msglen,
                        int *at_key)
{
    struct filepass *fp = arg;

    for (size_t i = 0; i < NOPTS; i++) {
        const char *f = opts[i].flag, *k = it->key;

        while (*f && *k && (*f == *k || (*f == '-' && *k == '_'))) {
            f++;
            k++;
        }
        if (*f != '\0' || *k != '\0')
            continue;
        *at_key = 0;
        if (it->is_null)
            return 0; /* null: keep the default */
        if (apply(fp->c, &opts[i], it->value, it->key, msg, msglen) != 0)
            return -1;
        fp->set[i] = 1;
        return 0;
    }
    *at_key = 1;
    snprintf(msg, msglen, "unknown setting '%.64s' (examples/admitd.yaml lists them all)", it->key);
    return -1;
}

enum cfg_result cfg_parse(struct cfg *c, int argc, char **argv, cfg_env_fn env, char *err,
                          size_t errlen)
{
    struct option longopts[NOPTS + 5];
    struct filepass fp;
    const char *config = env ? env("ADMITD_CONFIG") : NULL;
    int check = 0;
    const char *raw[NOPTS] = {0};
    char srcbuf[NOPTS][64];
    const char *src[NOPTS] = {0};
    int ch, idx;

    memset(c, 0, sizeof *c);
    err[0] = '\0';
    for (size_t i = 0; i < NOPTS; i++) {
        longopts[i].name = opts[i].flag;
        longopts[i].has_arg = opts[i].kind == K_BOOL ? optional_argument : required_argument;
        longopts[i].flag = NULL;
        longopts[i].val = 1000 + (int) i;
        if (opts[i].def != NULL && apply(c, &opts[i], opts[i].def, "default", err, errlen) != 0)
            return CFG_ERROR;
        const char *e = env ? env(opts[i].env) : NULL;
        if (e != NULL) {
            raw[i] = e;
            src[i] = opts[i].env;
        }
    }
    longopts[NOPTS] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[NOPTS + 1] = (struct option){"version", no_argument, NULL, 'V'};
    longopts[NOPTS + 2] = (struct option){"config", required_argument, NULL, 'c'};
    longopts[NOPTS + 3] = (struct option){"check-config", no_argument, NULL, 'C'};
    longopts[NOPTS + 4] = (struct option){NULL, 0, NULL, 0};

    optind = 0; /* glibc: full re-initialisation, so cfg_parse can run more than once */
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":hV", longopts, &idx)) != -1) {
        if (ch == 'h')
            return CFG_HELP;
        if (ch == 'V')
            return CFG_VERSION;
        if (ch == 'c') {
            config = optarg;
            continue;
        }
        if (ch == 'C') {
            check = 1;
            continue;
        }
        if (ch == '?') {
            snprintf(err, errlen, "unknown option '%s' (see --help)", argv[optind - 1]);
            return CFG_ERROR;
        }
        if (ch == ':') {
            snprintf(err, errlen, "option '%s' needs a value", argv[optind - 1]);
            return CFG_ERROR;
        }
        size_t i = (size_t) (ch - 1000);
        raw[i] = optarg ? optarg : "true";
        snprintf(srcbuf[i], sizeof srcbuf[i], "--%s", opts[i].flag);
        src[i] = srcbuf[i];
    }
    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument '%s' (options are --name=value)", argv[optind]);
        return CFG_ERROR;
    }
    memset(&fp, 0, sizeof fp);
    fp.c = c;
    if (config != NULL && config[0] != '\0') {
        if (strlen(config) >= sizeof c->config_path) {
            snprintf(err, errlen, "--config: the path is too long");
            return CFG_ERROR;
        }
        strcpy(c->config_path, config);
        if (cfgfile_load(config, on_file_item, &fp, err, errlen) != 0)
            return CFG_ERROR;
    }
    for (size_t i = 0; i < NOPTS; i++) {
        /* Q is read only when N is set, as in Dynamo: without a cap there is no queue. */
        if (i == OPT_QUEUE_LIMIT && raw[OPT_ENGINE_LIMIT] == NULL && !fp.set[OPT_ENGINE_LIMIT]) {
            c->request_queue_limit = CFG_DEFAULT_QUEUE_LIMIT;
            continue;
        }
        if (raw[i] != NULL && apply(c, &opts[i], raw[i], src[i], err, errlen) != 0)
            return CFG_ERROR;
    }
    if (!c->engine_metrics_set) {
        c->engine_metrics = c->upstream;
        strcpy(c->engine_metrics_path, "/metrics");
    }
    return check ? CFG_CHECK : CFG_RUN;
}

void cfg_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s [--option=value ...]\n\n"
            "admitd sits in front of an OpenAI-compatible inference engine and caps the\n"
            "requests it runs at N, queues up to Q more, and answers the rest at once with\n"
            "the overload status. Each option can also be set by the environment variable\n"
            "shown, or in a YAML file (--config, key = the option with '_' for '-');\n"
            "a flag wins over the environment, which wins over the file.\n\n",
            prog);
    for (size_t i = 0; i < NOPTS; i++) {
        char name[64];
        snprintf(name, sizeof name, "--%s%s", opts[i].flag, opts[i].kind == K_BOOL ? "" : "=V");
        fprintf(out, "  %-28s %s\n  %-28s env %s; default %s\n", name, opts[i].help, "",
                opts[i].env, opts[i].def ? opts[i].def : "unset");
    }
    fprintf(out, "  %-28s %s\n  %-28s env ADMITD_CONFIG\n", "--config=FILE",
            "read settings from a YAML file (see examples/admitd.yaml)", "");
    fprintf(out, "  %-28s %s\n", "--check-config",
            "validate the settings and exit (0 good, 2 bad)");
    fprintf(out, "  %-28s %s\n  %-28s %s\n", "--help", "print this help and exit", "--version",
            "print the version and exit");
}
