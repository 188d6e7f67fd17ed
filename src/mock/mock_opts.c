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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum mock_opt_kind {
    MO_FLOAT,
    MO_UINT,
    MO_MODEL,
    MO_SERVED,
    MO_LISTEN,
    MO_LOGLEVEL,
    MO_SET,   /* a switch without a value: sets the int field to 1 */
    MO_CLEAR, /* ... to 0 */
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
    {"enable-prefix-caching", MO_CLEAR, MOFF(no_prefix_caching), 0, 0, NULL,
     "cache KV blocks of prompts and answers across requests (the default)"},
    {"no-enable-prefix-caching", MO_SET, MOFF(no_prefix_caching), 0, 0, NULL,
     "no prefix cache: every prompt token is computed, cached_tokens is 0"},
    {"enable-prompt-tokens-details", MO_SET, MOFF(prompt_tokens_details), 0, 0, NULL,
     "add usage.prompt_tokens_details.cached_tokens to every answer"},
    {"prompt-tokens-details-if-cached", MO_SET, MOFF(details_if_cached), 0, 0, NULL,
     "as vLLM's --enable-prompt-tokens-details: the details only above 0 cached, else null "
     "(none in a stream)"},
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
                const struct buildinfo_lib libs[] = {{"libevent", event_get_version()}};

                buildinfo_print(stdout, "admit-mock-engine", libs, 1);
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
