/* bt_api: the /busy_threshold endpoint (see bt_api.h). Responses are written by hand rather
 * than with json_dumps so that doubles come out in their shortest round-trip form ("0.9", not
 * jansson's "0.90000000000000002") and a model name containing NUL survives the echo. */
#include "admission/bt_api.h"

#include "wire/httputil.h"
#include "util/xmalloc.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest token threshold accepted: 2^53 - 1, exact in every JSON implementation. */
#define BT_INT_MAX 9007199254740991LL

#define BT_DECODE "active_decode_blocks_threshold"
#define BT_TOKENS "active_prefill_tokens_threshold"
#define BT_FRAC   "active_prefill_tokens_threshold_frac"

/* The fields POST /busy_threshold set for a model, which a new set of defaults leaves alone. */
enum { BT_SET_DECODE = 1, BT_SET_TOKENS = 2, BT_SET_FRAC = 4 };

struct bt_model {
    char *name;
    struct busy_thresholds t;
    unsigned set; /* BT_SET_* */
    int learned;  /* from a worker's list alone, not from the config: bt_registry_forget() */
};

struct bt_registry {
    struct busy_thresholds defaults;
    struct bt_model *models; /* in registration order, which GET preserves */
    size_t n, cap;
};

struct bt_registry *bt_registry_new(const struct busy_thresholds *defaults)
{
    struct bt_registry *r = xcalloc(1, sizeof *r);

    r->defaults = *defaults;
    return r;
}

void bt_registry_free(struct bt_registry *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n; i++)
        free(r->models[i].name);
    free(r->models);
    free(r);
}

/* Names are compared with their length because a name from a request may contain NUL. */
static struct bt_model *bt_find(const struct bt_registry *r, const char *name, size_t len)
{
    for (size_t i = 0; i < r->n; i++)
        if (strlen(r->models[i].name) == len && memcmp(r->models[i].name, name, len) == 0)
            return &r->models[i];
    return NULL;
}

/* Registers model (learned or declared); one there already is returned as it is. NULL when
 * the registry is full or the name is not UTF-8. */
static struct bt_model *bt_add(struct bt_registry *r, const char *model, int learned)
{
    struct bt_model *m = bt_find(r, model, strlen(model));
    json_t *probe;

    if (m != NULL || r->n >= BT_API_MODELS_MAX)
        return m;
    /* A name that is not UTF-8 could never arrive in a JSON request nor be listed as JSON. */
    probe = json_string(model);
    if (probe == NULL)
        return NULL;
    json_decref(probe);
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 8;
        r->models = xrealloc(r->models, r->cap * sizeof *r->models);
    }
    m = &r->models[r->n++];
    m->name = xstrdup(model);
    m->t = r->defaults;
    m->set = 0;
    m->learned = learned;
    return m;
}

void bt_registry_add_model(struct bt_registry *r, const char *model)
{
    struct bt_model *m = bt_add(r, model, 0);

    if (m != NULL)
        m->learned = 0; /* declared now, if a worker's list brought it first */
}

int bt_registry_learn(struct bt_registry *r, const char *model)
{
    return bt_add(r, model, 1) != NULL ? 0 : -1;
}

void bt_registry_forget(struct bt_registry *r, const char *model)
{
    struct bt_model *m = bt_find(r, model, strlen(model));
    size_t i;

    /* What an operator named stays: a model of the config, or one a POST set. */
    if (m == NULL || !m->learned || m->set != 0)
        return;
    i = (size_t) (m - r->models);
    free(m->name);
    memmove(m, m + 1, (r->n - i - 1) * sizeof *m); /* the order GET lists them in stays */
    r->n--;
}

void bt_registry_set_defaults(struct bt_registry *r, const struct busy_thresholds *defaults)
{
    r->defaults = *defaults;
    for (size_t i = 0; i < r->n; i++) {
        struct bt_model *m = &r->models[i];

        if (!(m->set & BT_SET_DECODE))
            m->t.active_decode_blocks_threshold = defaults->active_decode_blocks_threshold;
        if (!(m->set & BT_SET_TOKENS))
            m->t.active_prefill_tokens_threshold = defaults->active_prefill_tokens_threshold;
        if (!(m->set & BT_SET_FRAC))
            m->t.active_prefill_tokens_threshold_frac =
                defaults->active_prefill_tokens_threshold_frac;
    }
}

void bt_registry_get(const struct bt_registry *r, const char *model, struct busy_thresholds *out)
{
    const struct bt_model *m = bt_find(r, model, strlen(model));

    *out = m ? m->t : r->defaults;
}

/* The shortest %g form that reads back as the same double. */
static void bt_format_double(double d, char *s, size_t cap)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(s, cap, "%.*g", prec, d);
        if (strtod(s, NULL) == d)
            return;
    }
}

static void bt_put_double(struct buf *out, double d)
{
    char s[40];

    bt_format_double(d, s, sizeof s);
    buf_puts(out, s);
    /* Keep it a JSON real, so clients typed on it see a float as Dynamo sends. */
    if (strpbrk(s, ".e") == NULL)
        buf_puts(out, ".0");
}

static void bt_put_thresholds(struct buf *out, const struct busy_thresholds *t)
{
    buf_puts(out, ",\"" BT_DECODE "\":");
    if (isnan(t->active_decode_blocks_threshold))
        buf_puts(out, "null");
    else
        bt_put_double(out, t->active_decode_blocks_threshold);
    buf_puts(out, ",\"" BT_TOKENS "\":");
    if (t->active_prefill_tokens_threshold < 0)
        buf_puts(out, "null");
    else
        buf_printf(out, "%lld", (long long) t->active_prefill_tokens_threshold);
    buf_puts(out, ",\"" BT_FRAC "\":");
    if (isnan(t->active_prefill_tokens_threshold_frac))
        buf_puts(out, "null");
    else
        bt_put_double(out, t->active_prefill_tokens_threshold_frac);
}

static void bt_put_model(struct buf *out, const char *name, size_t len,
                         const struct busy_thresholds *t)
{
    buf_puts(out, "{\"model\":");
    httpu_json_string(out, name, len);
    bt_put_thresholds(out, t);
    buf_puts(out, "}");
}

static int bt_error(struct buf *out, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bt_error(struct buf *out, int status, const char *fmt, ...)
{
    va_list ap;
    char *msg;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    msg = xmalloc((size_t) n + 1);
    va_start(ap, fmt);
    vsnprintf(msg, (size_t) n + 1, fmt, ap);
    va_end(ap);
    buf_reset(out);
    buf_puts(out, "{\"error\":");
    httpu_json_string(out, msg, (size_t) n);
    buf_puts(out, "}");
    free(msg);
    return status;
}

static int bt_list(const struct bt_registry *r, struct buf *out)
{
    buf_puts(out, "{\"thresholds\":[");
    for (size_t i = 0; i < r->n; i++) {
        if (i > 0)
            buf_puts(out, ",");
        bt_put_model(out, r->models[i].name, strlen(r->models[i].name), &r->models[i].t);
    }
    buf_puts(out, "]}");
    return 200;
}

/* Reads one optional number field into *v; a JSON null is "not given". 1 given, 0 not, -1 bad. */
static int bt_get_number(const json_t *root, const char *key, double *v)
{
    const json_t *j = json_object_get(root, key);

    if (j == NULL || json_is_null(j))
        return 0;
    if (!json_is_number(j))
        return -1;
    *v = json_number_value(j);
    return 1;
}

/* Like bt_get_number for the token count, which must be an integer in 0..2^53-1. */
static int bt_get_tokens(const json_t *root, int64_t *v)
{
    const json_t *j = json_object_get(root, BT_TOKENS);

    if (j == NULL || json_is_null(j))
        return 0;
    if (!json_is_integer(j) || json_integer_value(j) < 0 || json_integer_value(j) > BT_INT_MAX)
        return -1;
    *v = (int64_t) json_integer_value(j);
    return 1;
}

static int bt_post(struct bt_registry *r, const json_t *root, struct buf *out)
{
    const json_t *jm = json_object_get(root, "model");
    struct busy_thresholds set, none;
    struct bt_model *m;
    const char *name;
    size_t len;
    int d, k, f;
    char err[160];

    if (!json_is_object(root))
        return bt_error(out, 422, "Request body must be a JSON object");
    if (jm == NULL)
        return bt_error(out, 422, "missing field `model`");
    if (!json_is_string(jm))
        return bt_error(out, 422, "model must be a string");
    name = json_string_value(jm);
    len = json_string_length(jm);
    busy_thresholds_unset(&set);
    d = bt_get_number(root, BT_DECODE, &set.active_decode_blocks_threshold);
    k = bt_get_tokens(root, &set.active_prefill_tokens_threshold);
    f = bt_get_number(root, BT_FRAC, &set.active_prefill_tokens_threshold_frac);
    if (d < 0)
        return bt_error(out, 422, BT_DECODE " must be a number");
    if (k < 0)
        return bt_error(out, 422, BT_TOKENS " must be a non-negative integer");
    if (f < 0)
        return bt_error(out, 422, BT_FRAC " must be a number");
    if (busy_thresholds_validate(&set, err, sizeof err) != 0)
        return bt_error(out, 400, "%s", err);

    m = bt_find(r, name, len);
    if (d + k + f == 0) {
        /* A get: an unknown model reads as all null, as Dynamo answers. */
        busy_thresholds_unset(&none);
        bt_put_model(out, name, len, m ? &m->t : &none);
        return 200;
    }
    if (m == NULL)
        return bt_error(out, 404,
                        "Model '%.*s' not found. Thresholds can only be set for discovered models.",
                        (int) len, name);
    if (d)
        m->t.active_decode_blocks_threshold = set.active_decode_blocks_threshold;
    if (k)
        m->t.active_prefill_tokens_threshold = set.active_prefill_tokens_threshold;
    if (f)
        m->t.active_prefill_tokens_threshold_frac = set.active_prefill_tokens_threshold_frac;
    m->set |= (d ? BT_SET_DECODE : 0) | (k ? BT_SET_TOKENS : 0) | (f ? BT_SET_FRAC : 0);
    bt_put_model(out, name, len, &m->t);
    return 200;
}

int bt_api_handle(struct bt_registry *r, const char *method, const char *content_type,
                  const char *body, size_t len, struct buf *out)
{
    json_error_t je;
    json_t *root;
    enum json_error_code code;
    int status;

    buf_reset(out);
    if (method != NULL && strcmp(method, "GET") == 0)
        return bt_list(r, out);
    if (method == NULL || strcmp(method, "POST") != 0)
        return bt_error(out, 405, "Method not allowed");
    if (!httpu_is_json(content_type))
        return bt_error(out, 415, "Expected request with `Content-Type: application/json`");
    if (len > BT_API_BODY_MAX)
        return bt_error(out, 413, "Request body larger than %d bytes", BT_API_BODY_MAX);
    root = json_loadb(body ? body : "", len,
                      JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
    if (root == NULL) {
        code = json_error_code(&je);
        /* Well-formed JSON that does not fit the schema is 422, as serde's data errors are. */
        if (code == json_error_numeric_overflow)
            return bt_error(out, 422, "A number in the request body is out of range");
        if (code == json_error_duplicate_key)
            return bt_error(out, 422, "A field appears twice in the request body");
        return bt_error(out, 400, "Failed to parse the request body as JSON at line %d column %d",
                        je.line, je.column);
    }
    status = bt_post(r, root, out);
    json_decref(root);
    return status;
}
