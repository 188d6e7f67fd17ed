/* mock_opts: the mock engine's options and their command-line parsing.
 *
 * Kept apart from the engine so that the scheduler (mock_sched) and the HTTP surface (mock)
 * both depend on it and not on each other. */
#include "mock_opts.h"
#include "util/buildinfo.h"
#include "util/xmalloc.h"

#include <ctype.h>
#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

enum mock_opt_kind {
    MO_FLOAT,
    MO_UINT,
    MO_MODEL,
    MO_SERVED,
    MO_LISTEN,
    MO_LOGLEVEL,
    MO_KVSTR,    /* a KV events endpoint or topic (char[MOCK_KV_ENDPOINT_MAX]) */
    MO_ENCODING, /* positional|map */
    MO_KVCONFIG, /* vLLM's --kv-events-config JSON */
    MO_ROLE,     /* both|prefill|decode */
    MO_SET,      /* a switch without a value: sets the int field to 1 */
    MO_CLEAR,    /* ... to 0 */
    MO_HELP,
    MO_VERSION
};

struct mock_opt {
    const char *name; /* long flag without dashes */
    enum mock_opt_kind kind;
    size_t off;        /* field in struct mock_opts */
    unsigned min, max; /* MO_UINT range */
    const char *arg;   /* placeholder in --help */
    const char *help;
};

#define MOFF(f) offsetof(struct mock_opts, f)

static const struct mock_opt mock_optv[] = {
    {"listen", MO_LISTEN, MOFF(listen), 0, 0, "HOST:PORT",
     "address to serve on; port 0 picks a free one (default " MOCK_DEFAULT_LISTEN ")"},
    {"model-name", MO_MODEL, MOFF(model), 0, 0, "NAME",
     "model name served by /v1/models (default " MOCK_DEFAULT_MODEL ")"},
    {"served-model-name", MO_SERVED, MOFF(served), 0, 0, "NAME",
     "one more name /v1/models lists after --model-name (repeatable, up to 8)"},
    {"speedup-ratio", MO_FLOAT, MOFF(speedup_ratio), 0, 0, "X",
     "divide prefill and decode times by X; 0 = no delay at all (default 1)"},
    {"block-size", MO_UINT, MOFF(block_size), 1, 1048576, "N", "tokens per KV block (default 16)"},
    {"num-gpu-blocks", MO_UINT, MOFF(num_gpu_blocks), 1, UINT_MAX, "N",
     "KV blocks per data-parallel rank (default 16384)"},
    {"max-num-seqs", MO_UINT, MOFF(max_num_seqs), 1, 1000000, "N",
     "requests running at once per rank; the rest wait (default 256)"},
    {"max-num-batched-tokens", MO_UINT, MOFF(max_num_batched_tokens), 1, UINT_MAX, "N",
     "reported in /metrics only (default 8192)"},
    {"data-parallel-size", MO_UINT, MOFF(data_parallel_size), 1, 1024, "N",
     "data-parallel ranks, each with its own slots and KV cache (default 1)"},
    {"token-interval-ms", MO_UINT, MOFF(token_interval_ms), 0, 3600000, "MS",
     "fixed gap before each token instead of the decode model, not scaled (default 0 = off)"},
    {"stop-after", MO_UINT, MOFF(stop_after), 0, MOCK_MAX_TOKENS_CAP, "N",
     "the Nth generated token ends every request with finish_reason stop, even at max_tokens "
     "(default 0 = off: every request ends at max_tokens, length)"},
    {"prefill-interference", MO_SET, MOFF(prefill_interference), 0, 0, NULL,
     "one batch a step per rank, as an engine without chunked prefill: the rank's prefills run "
     "one at a time and its decoding requests get no token while one runs (default off: every "
     "request on its own clock)"},
    {"role", MO_ROLE, MOFF(role), 0, 0, "ROLE",
     "both, prefill or decode: the disaggregated role /metrics reports; every role serves "
     "both legs and whole requests (default both)"},
    {"enable-prefix-caching", MO_CLEAR, MOFF(no_prefix_caching), 0, 0, NULL,
     "cache KV blocks of prompts and answers across requests (the default)"},
    {"no-enable-prefix-caching", MO_SET, MOFF(no_prefix_caching), 0, 0, NULL,
     "no prefix cache: every prompt token is computed, cached_tokens is 0"},
    {"enable-prompt-tokens-details", MO_SET, MOFF(prompt_tokens_details), 0, 0, NULL,
     "add usage.prompt_tokens_details.cached_tokens to every answer"},
    {"prompt-tokens-details-if-cached", MO_SET, MOFF(details_if_cached), 0, 0, NULL,
     "as vLLM's --enable-prompt-tokens-details: the details only above 0 cached, else null "
     "(none in a stream)"},
    {"tokenize-status", MO_UINT, MOFF(tokenize_status), 400, 599, "N",
     "answer POST /tokenize with this error status instead of the tokens (default: off)"},
    {"tokenize-hang", MO_SET, MOFF(tokenize_hang), 0, 0, NULL,
     "never answer POST /tokenize: hold it until its client leaves"},
    {"kv-events-endpoint", MO_KVSTR, MOFF(kv_endpoint), 0, 0, "ENDPOINT",
     "publish the KV cache's events on a ZMQ PUB, as vLLM: tcp://*:PORT binds (rank r at "
     "PORT+r), tcp://HOST:PORT connects, ipc:// binds (default off)"},
    {"kv-events-replay-endpoint", MO_KVSTR, MOFF(kv_replay_endpoint), 0, 0, "ENDPOINT",
     "ZMQ ROUTER answering replay requests, rank r at PORT+r (default none)"},
    {"kv-events-topic", MO_KVSTR, MOFF(kv_topic), 0, 0, "TOPIC",
     "first frame of every KV events message (default empty, as vLLM)"},
    {"kv-events-encoding", MO_ENCODING, MOFF(kv_encoding), 0, 0, "ENC",
     "positional (events as arrays, tag first) or map (tag under \"type\", vLLM 0.26) "
     "(default positional)"},
    {"kv-events-hash-bytes", MO_SET, MOFF(kv_hash_bytes), 0, 0, NULL,
     "block hashes as 8 bytes big-endian (vLLM's VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)"},
    {"kv-events-buffer-steps", MO_UINT, MOFF(kv_buffer_steps), 1, 1000000, "N",
     "batches each rank keeps for replay (default 10000, as vLLM)"},
    {"kv-events-config", MO_KVCONFIG, 0, 0, 0, "JSON",
     "vLLM's form: {\"enable_kv_cache_events\", \"endpoint\", \"replay_endpoint\", "
     "\"topic\", \"buffer_steps\"}; other keys ignored"},
    {"log-level", MO_LOGLEVEL, MOFF(log_level), 0, 0, "LEVEL",
     "error, warn, info or debug (default info)"},
    {"help", MO_HELP, 0, 0, 0, NULL, "print this help and exit"},
    {"version", MO_VERSION, 0, 0, 0, NULL, "print the version and exit"},
};

#define MOCK_NOPTS (sizeof mock_optv / sizeof mock_optv[0])

void mock_opts_defaults(struct mock_opts *o)
{
    char err[64];

    memset(o, 0, sizeof *o);
    o->speedup_ratio = 1.0;
    o->block_size = MOCK_DEFAULT_BLOCK_SIZE;
    o->num_gpu_blocks = MOCK_DEFAULT_NUM_GPU_BLOCKS;
    o->max_num_seqs = MOCK_DEFAULT_MAX_NUM_SEQS;
    o->max_num_batched_tokens = MOCK_DEFAULT_MAX_NUM_BATCHED_TOKENS;
    o->data_parallel_size = 1;
    snprintf(o->model, sizeof o->model, "%s", MOCK_DEFAULT_MODEL);
    if (hostport_parse(MOCK_DEFAULT_LISTEN, &o->listen, err, sizeof err) != 0)
        fatal("bad built-in listen address: %s", err);
    o->log_level = LOG_INFO;
    o->kv_buffer_steps = MOCK_DEFAULT_KV_BUFFER_STEPS;
}

static void mock_usage(void)
{
    printf("usage: admit-mock-engine [OPTION]...\n"
           "An OpenAI-compatible fake LLM engine: /v1/chat/completions, /v1/completions,\n"
           "/v1/models, /tokenize, /health and /metrics (vLLM names).\n"
           "A request's X-Request-Id (1 to 128 visible ASCII characters, no '\"' or '\\') comes\n"
           "back in the reply head, and completion ids are chatcmpl-<it> / cmpl-<it>, as\n"
           "vLLM's with --enable-request-id-headers; any other X-Request-Id is ignored.\n\n");
    for (size_t i = 0; i < MOCK_NOPTS; i++) {
        char flag[64];

        snprintf(flag, sizeof flag, "--%s%s%s", mock_optv[i].name, mock_optv[i].arg ? " " : "",
                 mock_optv[i].arg ? mock_optv[i].arg : "");
        printf("  %-34s %s\n", flag, mock_optv[i].help);
    }
}

/* Strict unsigned decimal: digits only, no sign, no blanks, no overflow. */
static int parse_uint(const char *s, unsigned long long *out)
{
    unsigned long long v = 0;

    if (*s == '\0')
        return -1;
    for (; *s; s++) {
        if (!isdigit((unsigned char) *s) || v > (ULLONG_MAX - 9) / 10)
            return -1;
        v = v * 10 + (unsigned long long) (*s - '0');
    }
    *out = v;
    return 0;
}

/* Strict non-negative decimal number ("2", "0.5", "1e3"); no hex, inf, nan or sign. */
static int parse_ratio(const char *s, double *out)
{
    char *end;
    double v;

    if (!(isdigit((unsigned char) *s) || *s == '.') || s[strspn(s, "0123456789.eE+-")] != '\0')
        return -1;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v < 0)
        return -1;
    *out = v;
    return 0;
}

/* A KV events endpoint as ZMQ takes it: tcp://HOST:PORT (PORT numeric, so that ranks can
 * add to it), ipc://PATH or inproc://NAME; "" turns it off. */
static int kv_endpoint_ok(const char *v)
{
    const char *colon;
    unsigned long long port;

    if (*v == '\0' || strncmp(v, "ipc://", 6) == 0 || strncmp(v, "inproc://", 9) == 0)
        return 1;
    if (strncmp(v, "tcp://", 6) != 0 || (colon = strrchr(v + 6, ':')) == NULL)
        return 0;
    return colon > v + 6 && parse_uint(colon + 1, &port) == 0 && port > 0 && port <= 65535;
}

static int kv_set(const char *name, char *field, const char *v, int endpoint, char *err,
                  size_t errlen)
{
    if (strlen(v) >= MOCK_KV_ENDPOINT_MAX) {
        snprintf(err, errlen, "%s: longer than %d bytes", name, MOCK_KV_ENDPOINT_MAX - 1);
        return -1;
    }
    if (endpoint && !kv_endpoint_ok(v)) {
        snprintf(err, errlen, "%s: '%s' must be tcp://HOST:PORT, ipc://PATH or inproc://NAME", name,
                 v);
        return -1;
    }
    snprintf(field, MOCK_KV_ENDPOINT_MAX, "%s", v);
    return 0;
}

/* vLLM's --kv-events-config: the keys the mock has, each as its own flag would set it. */
static int kv_config(struct mock_opts *o, const char *v, char *err, size_t errlen)
{
    json_error_t je;
    json_t *j = json_loads(v, 0, &je), *x;
    int rc = -1, enable;

    if (!json_is_object(j)) {
        snprintf(err, errlen, "--kv-events-config: not a JSON object");
        goto out;
    }
    x = json_object_get(j, "enable_kv_cache_events");
    enable = json_is_true(x);
    x = json_object_get(j, "publisher");
    if (x != NULL && (!json_is_string(x) || (strcmp(json_string_value(x), "zmq") != 0 &&
                                             strcmp(json_string_value(x), "null") != 0))) {
        snprintf(err, errlen, "--kv-events-config: publisher must be \"zmq\" or \"null\"");
        goto out;
    }
    if (x != NULL && strcmp(json_string_value(x), "null") == 0)
        enable = 0;
    x = json_object_get(j, "endpoint");
    if (!enable)
        o->kv_endpoint[0] = '\0';
    else if (kv_set("--kv-events-config: endpoint", o->kv_endpoint,
                    json_is_string(x) ? json_string_value(x) : "tcp://*:5557", 1, err, errlen) != 0)
        goto out;
    x = json_object_get(j, "replay_endpoint");
    if (kv_set("--kv-events-config: replay_endpoint", o->kv_replay_endpoint,
               json_is_string(x) ? json_string_value(x) : "", 1, err, errlen) != 0)
        goto out;
    x = json_object_get(j, "topic");
    if (kv_set("--kv-events-config: topic", o->kv_topic,
               json_is_string(x) ? json_string_value(x) : "", 0, err, errlen) != 0)
        goto out;
    x = json_object_get(j, "buffer_steps");
    if (x != NULL) {
        if (!json_is_integer(x) || json_integer_value(x) < 1 || json_integer_value(x) > 1000000) {
            snprintf(err, errlen, "--kv-events-config: buffer_steps must be 1 to 1000000");
            goto out;
        }
        o->kv_buffer_steps = (unsigned) json_integer_value(x);
    }
    rc = 0;
out:
    json_decref(j);
    return rc;
}

static int mock_opt_apply(struct mock_opts *o, const struct mock_opt *d, const char *v, char *err,
                          size_t errlen)
{
    char *field = (char *) o + d->off;
    char sub[192];
    unsigned long long u;
    json_t *j;

    switch (d->kind) {
    case MO_FLOAT:
        if (parse_ratio(v, (double *) (void *) field) == 0)
            return 0;
        snprintf(err, errlen, "--%s: '%s' must be a number >= 0", d->name, v);
        return -1;
    case MO_UINT:
        if (parse_uint(v, &u) == 0 && u >= d->min && u <= d->max) {
            *(unsigned *) (void *) field = (unsigned) u;
            return 0;
        }
        if (parse_uint(v, &u) == 0 && u > d->max)
            snprintf(err, errlen, "--%s: '%s' must be at most %u", d->name, v, d->max);
        else if (d->min == 0)
            snprintf(err, errlen, "--%s: '%s' must be a non-negative integer", d->name, v);
        else
            snprintf(err, errlen, "--%s: '%s' must be a positive integer", d->name, v);
        return -1;
    case MO_MODEL:
    case MO_SERVED:
        j = json_string(v); /* NULL unless valid UTF-8: the name is echoed inside JSON */
        json_decref(j);
        if (j == NULL || *v == '\0' || strlen(v) >= sizeof o->model) {
            snprintf(err, errlen, "--%s: must be 1 to %zu bytes of UTF-8", d->name,
                     sizeof o->model - 1);
            return -1;
        }
        if (d->kind == MO_MODEL) {
            snprintf(o->model, sizeof o->model, "%s", v);
            return 0;
        }
        if (o->nserved == MOCK_MAX_SERVED) {
            snprintf(err, errlen, "--%s: at most %d", d->name, MOCK_MAX_SERVED);
            return -1;
        }
        snprintf(o->served[o->nserved++], sizeof o->served[0], "%s", v);
        return 0;
    case MO_LISTEN:
        if (hostport_parse(v, &o->listen, sub, sizeof sub) == 0)
            return 0;
        snprintf(err, errlen, "--%s: %s", d->name, sub);
        return -1;
    case MO_LOGLEVEL:
        if (log_level_parse(v, &o->log_level) == 0)
            return 0;
        snprintf(err, errlen, "--%s: '%s' must be error, warn, info or debug", d->name, v);
        return -1;
    case MO_KVSTR:
        snprintf(sub, sizeof sub, "--%s", d->name);
        return kv_set(sub, field, v, d->off != MOFF(kv_topic), err, errlen);
    case MO_ENCODING:
        if (strcmp(v, "positional") == 0 || strcmp(v, "map") == 0) {
            o->kv_encoding = v[0] == 'm' ? MOCK_KV_MAP : MOCK_KV_POSITIONAL;
            return 0;
        }
        snprintf(err, errlen, "--%s: '%s' must be positional or map", d->name, v);
        return -1;
    case MO_KVCONFIG:
        return kv_config(o, v, err, errlen);
    case MO_ROLE:
        if (admit_load_role_parse(v, strlen(v), &o->role) == 0)
            return 0;
        snprintf(err, errlen, "--%s: '%s' must be both, prefill or decode", d->name, v);
        return -1;
    case MO_SET:
    case MO_CLEAR:
    case MO_HELP:
    case MO_VERSION:
        break;
    }
    return -1;
}

int mock_opts_parse(struct mock_opts *o, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *name, *eq, *val;
        const struct mock_opt *d = NULL;
        size_t nl;

        if (strcmp(a, "-h") == 0)
            a = "--help";
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            snprintf(err, errlen, "unexpected argument '%s' (see --help)", a);
            return -1;
        }
        name = a + 2;
        eq = strchr(name, '=');
        nl = eq != NULL ? (size_t) (eq - name) : strlen(name);
        for (size_t k = 0; k < MOCK_NOPTS && d == NULL; k++)
            if (strlen(mock_optv[k].name) == nl && strncmp(mock_optv[k].name, name, nl) == 0)
                d = &mock_optv[k];
        if (d == NULL) {
            snprintf(err, errlen, "unknown option '%s' (see --help)", a);
            return -1;
        }
        if (d->kind == MO_HELP || d->kind == MO_VERSION || d->kind == MO_SET ||
            d->kind == MO_CLEAR) {
            if (eq != NULL) {
                snprintf(err, errlen, "--%s takes no value", d->name);
                return -1;
            }
            if (d->kind == MO_SET || d->kind == MO_CLEAR) {
                *(int *) (void *) ((char *) o + d->off) = d->kind == MO_SET;
                continue;
            }
            if (d->kind == MO_HELP) {
                mock_usage();
            } else {
                char zv[32];
                int maj, min, pat;
                struct buildinfo_lib libs[] = {
                    {"libevent", event_get_version()}, {"libzmq", zv}, {"msgpack-c", NULL}};

                zmq_version(&maj, &min, &pat);
                snprintf(zv, sizeof zv, "%d.%d.%d", maj, min, pat);
                libs[2].version = msgpack_version();
                buildinfo_print(stdout, "admit-mock-engine", libs, 3);
            }
            return 1;
        }
        if (eq != NULL)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else {
            snprintf(err, errlen, "--%s needs a value", d->name);
            return -1;
        }
        if (mock_opt_apply(o, d, val, err, errlen) != 0)
            return -1;
    }
    return 0;
}
