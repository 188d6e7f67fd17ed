/* load_jansson: the jansson-based load message decoder, moved here unchanged from
 * lib/admission/load.c when the single-pass decoder replaced it (see load_jansson.h). jansson
 * builds the whole tree first (rejecting duplicate keys at any depth), then each field is looked up
 * and checked in a fixed order, so that order decides which error a message with several gets;
 * unknown keys are ignored, kv_block_size, models and role may be absent. */
#include "load_jansson.h"

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The nullable numeric fields, in wire order, with their offsets, the least value they may
 * hold, and whether a reader accepts a message without them (fields added to v1 later). */
struct numfield {
    const char *name;
    size_t off;
    int64_t min;
    int optional;
};

#define NF(f)                                                                                      \
    {                                                                                              \
#f, offsetof(struct admit_load, f), 0, 0                                                   \
    }
static const struct numfield numfields[] = {
    NF(kv_used_blocks),
    NF(kv_total_blocks),
    {"kv_block_size", offsetof(struct admit_load, kv_block_size), 1, 1},
    NF(active_decode_blocks),
    NF(active_prefill_tokens),
    NF(max_num_batched_tokens),
    NF(engine_requests),
    NF(engine_request_limit),
    NF(queued_requests),
    NF(request_queue_limit),
};
#define NNUM (sizeof numfields / sizeof numfields[0])

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A required integer in [min, ADMIT_LOAD_INT_MAX]; nullable ones may also be null. */
static int get_int(json_t *root, const char *key, int64_t min, int nullable, int64_t *out,
                   char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);

    if (v == NULL)
        return fail(err, errlen, "field '%s' is missing", key);
    if (nullable && json_is_null(v)) {
        *out = ADMIT_LOAD_UNKNOWN;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min ||
        json_integer_value(v) > ADMIT_LOAD_INT_MAX)
        return fail(err, errlen, "field '%s' must be an integer from %lld to 2^53-1%s", key,
                    (long long) min, nullable ? " or null" : "");
    *out = (int64_t) json_integer_value(v);
    return 0;
}

/* The optional model list: absent or null is unknown; else an array of distinct names within
 * the bounds of include/admit/load.h, or the message is invalid. */
static int get_models(json_t *root, struct admit_load_models *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, "models"), *e;
    size_t i;

    admit_load_models_unknown(out);
    if (v == NULL || json_is_null(v))
        return 0; /* from a publisher older than the field, or one that does not know */
    if (!json_is_array(v))
        return fail(err, errlen, "field 'models' must be an array of strings or null");
    admit_load_models_clear(out);
    json_array_foreach(v, i, e)
    {
        const char *s = json_string_value(e);
        size_t len = json_string_length(e);
        int rc = -1;

        if (json_is_string(e) && strlen(s) == len)
            rc = admit_load_models_add(out, s, len);
        if (rc == -1)
            return fail(err, errlen,
                        "field 'models' must hold model names of 1 to %d bytes without control "
                        "characters",
                        ADMIT_LOAD_MODEL_NAME_MAX);
        if (rc == -2)
            return fail(err, errlen,
                        "field 'models' is over its bounds (%d names, %d bytes as JSON)",
                        ADMIT_LOAD_MODELS_MAX, ADMIT_LOAD_MODELS_JSON_MAX);
        if ((size_t) out->n != i + 1)
            return fail(err, errlen, "field 'models' lists a name twice");
    }
    return 0;
}

/* The optional role: absent or null is both; else a role's name, or the message is invalid. */
static int get_role(json_t *root, enum admit_load_role *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, "role");

    *out = ADMIT_LOAD_ROLE_BOTH;
    if (v == NULL || json_is_null(v))
        return 0; /* from an aggregated worker, or a publisher older than the field */
    if (!json_is_string(v) ||
        admit_load_role_parse(json_string_value(v), json_string_length(v), out) != 0)
        return fail(err, errlen, "field 'role' must be \"prefill\", \"decode\", \"both\" or null");
    return 0;
}

static int decode_object(json_t *root, struct admit_load *out, char *err, size_t errlen)
{
    json_t *v;
    const char *s;
    int64_t version = 0;

    if (!json_is_object(root))
        return fail(err, errlen, "the message is not a JSON object");
    if (get_int(root, "v", 0, 0, &version, err, errlen) != 0)
        return -1;
    if (version != ADMIT_LOAD_VERSION)
        return fail(err, errlen, "unsupported version %lld (this reader knows %d)",
                    (long long) version, ADMIT_LOAD_VERSION);
    v = json_object_get(root, "worker_id");
    if (!json_is_string(v))
        return fail(err, errlen, "field 'worker_id' must be a string");
    s = json_string_value(v);
    if (json_string_length(v) == 0 || json_string_length(v) > ADMIT_LOAD_WORKER_ID_MAX ||
        strlen(s) != json_string_length(v))
        return fail(err, errlen, "field 'worker_id' must be 1 to %d bytes without NUL",
                    ADMIT_LOAD_WORKER_ID_MAX);
    memcpy(out->worker_id, s, json_string_length(v) + 1);
    v = json_object_get(root, "state");
    if (!json_is_string(v))
        return fail(err, errlen, "field 'state' must be \"serving\" or \"draining\"");
    if (strcmp(json_string_value(v), "serving") == 0)
        out->state = ADMIT_LOAD_SERVING;
    else if (strcmp(json_string_value(v), "draining") == 0)
        out->state = ADMIT_LOAD_DRAINING;
    else
        return fail(err, errlen, "field 'state' must be \"serving\" or \"draining\"");
    if (get_int(root, "dp_rank", 0, 0, &out->dp_rank, err, errlen) != 0 ||
        get_int(root, "seq", 0, 0, &out->seq, err, errlen) != 0 ||
        get_int(root, "ts_ms", 0, 0, &out->ts_ms, err, errlen) != 0 ||
        get_int(root, "heartbeat_ms", 1, 0, &out->heartbeat_ms, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < NNUM; i++) {
        int64_t *f = (int64_t *) (void *) ((char *) out + numfields[i].off);
        if (numfields[i].optional && json_object_get(root, numfields[i].name) == NULL) {
            *f = ADMIT_LOAD_UNKNOWN; /* from a publisher older than the field */
            continue;
        }
        if (get_int(root, numfields[i].name, numfields[i].min, 1, f, err, errlen) != 0)
            return -1;
    }
    if (get_models(root, &out->models, err, errlen) != 0)
        return -1;
    return get_role(root, &out->role, err, errlen);
}

int load_jansson_decode(const void *data, size_t len, struct admit_load *out, char *err,
                        size_t errlen)
{
    const char *p = data;
    size_t tl = sizeof ADMIT_LOAD_TOPIC - 1;
    json_error_t je;
    json_t *root;
    int rv;

    if (len > ADMIT_LOAD_MSG_MAX)
        return fail(err, errlen, "message of %zu bytes is over the %d byte limit", len,
                    ADMIT_LOAD_MSG_MAX);
    if (len < tl + 1 || memcmp(p, ADMIT_LOAD_TOPIC, tl) != 0 || p[tl] != ' ')
        return fail(err, errlen, "message does not start with the topic '%s '", ADMIT_LOAD_TOPIC);
    root = json_loadb(p + tl + 1, len - tl - 1, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL)
        return fail(err, errlen, "invalid JSON at byte %d: %s", je.position, je.text);
    admit_load_init(out);
    rv = decode_object(root, out, err, errlen);
    json_decref(root);
    return rv;
}
