/* pdbody: the prefill and decode legs' bodies (see pdbody.h). On jansson: a disaggregated
 * request is read and written whole twice, at a cost measured in docs/benchmarks.md. */
#include "pdbody.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Dumps root compactly into out, keys in their order; 0 or -1. */
static int dump(json_t *root, struct buf *out)
{
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);

    if (s == NULL)
        return -1;
    buf_puts(out, s);
    free(s);
    return 0;
}

/* 1 when key of o is the integer 1. */
static int is_one(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);

    return json_is_integer(v) && json_integer_value(v) == 1;
}

int pd_prefill_body(const char *body, size_t len, struct buf *out, struct pd_facts *f)
{
    static const char *const drop[] = {"stream_options", "min_tokens", "min_completion_tokens"};
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL), *kv;
    const json_t *so;
    int rv;

    if (!json_is_object(root)) {
        json_decref(root);
        return -1;
    }
    memset(f, 0, sizeof *f);
    f->stream = json_is_true(json_object_get(root, "stream"));
    so = json_object_get(root, "stream_options");
    f->include_usage = json_is_true(json_object_get(so, "include_usage"));
    f->one_token = is_one(root, "max_tokens") || is_one(root, "max_completion_tokens");
    f->chat = json_object_get(root, "messages") != NULL;
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
        json_object_del(root, drop[i]);
    kv = json_pack("{s:b, s:b, s:n, s:n, s:n, s:n}", "do_remote_decode", 1, "do_remote_prefill", 0,
                   "remote_engine_id", "remote_block_ids", "remote_host", "remote_port");
    json_object_set_new(root, "kv_transfer_params", kv);
    json_object_set_new(root, "stream", json_false());
    json_object_set_new(root, "max_tokens", json_integer(1));
    if (json_object_get(root, "max_completion_tokens") != NULL)
        json_object_set_new(root, "max_completion_tokens", json_integer(1));
    rv = dump(root, out);
    json_decref(root);
    return rv;
}

int pd_decode_body(const char *body, size_t len, const char *params, size_t plen, struct buf *out)
{
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    json_t *kv = json_loadb(params, plen, JSON_DECODE_ANY, NULL);
    int rv = -1;

    if (json_is_object(root) && kv != NULL) {
        json_object_set(root, "kv_transfer_params", kv);
        rv = dump(root, out);
    }
    json_decref(kv);
    json_decref(root);
    return rv;
}

/* The first choice's finish_reason (NULL when it has none). */
static const char *finish_reason(const json_t *root)
{
    const json_t *c = json_array_get(json_object_get(root, "choices"), 0);

    return json_string_value(json_object_get(c, "finish_reason"));
}

enum pd_answer pd_answer_read(const char *ans, size_t len, const struct pd_facts *f,
                              struct buf *params)
{
    json_t *root = json_loadb(ans, len, 0, NULL);
    const json_t *kv = json_object_get(root, "kv_transfer_params");
    const char *fr = finish_reason(root);
    enum pd_answer a = PD_INVALID;

    if (!json_is_object(root) || !json_is_array(json_object_get(root, "choices")) ||
        json_array_size(json_object_get(root, "choices")) == 0)
        goto out;
    if (f->one_token || (fr != NULL && strcmp(fr, "length") != 0)) {
        a = PD_DONE; /* the one token ended it: nothing is left to decode */
    } else if (json_is_object(kv)) {
        json_t *copy = json_deep_copy(kv);

        a = dump(copy, params) == 0 ? PD_HANDOFF : PD_INVALID;
        json_decref(copy);
    }
out:
    json_decref(root);
    return a;
}

/* One event "data: <obj>\n\n" into out. */
static void event(json_t *obj, struct buf *out)
{
    buf_puts(out, "data: ");
    dump(obj, out);
    buf_puts(out, "\n\n");
}

int pd_answer_sse(const char *ans, size_t len, const struct pd_facts *f, struct buf *out)
{
    json_t *root = json_loadb(ans, len, 0, NULL);
    json_t *choices = json_object_get(root, "choices"), *chunk, *cs;
    size_t i;
    json_t *c;

    if (!json_is_object(root) || !json_is_array(choices)) {
        json_decref(root);
        return -1;
    }
    chunk = json_object();
    cs = json_array();
    json_object_set(chunk, "id", json_object_get(root, "id"));
    json_object_set_new(chunk, "object",
                        json_string(f->chat ? "chat.completion.chunk" : "text_completion"));
    json_object_set(chunk, "created", json_object_get(root, "created"));
    json_object_set(chunk, "model", json_object_get(root, "model"));
    json_array_foreach(choices, i, c)
    {
        json_t *o = json_object();

        json_object_set(o, "index", json_object_get(c, "index"));
        if (f->chat) {
            const json_t *msg = json_object_get(c, "message");
            json_t *delta = json_object();

            json_object_set_new(delta, "role", json_string("assistant"));
            json_object_set(delta, "content", json_object_get(msg, "content"));
            json_object_set_new(o, "delta", delta);
        } else {
            json_object_set(o, "text", json_object_get(c, "text"));
        }
        json_object_set(o, "finish_reason", json_object_get(c, "finish_reason"));
        json_array_append_new(cs, o);
    }
    json_object_set_new(chunk, "choices", cs);
    event(chunk, out);
    if (f->include_usage && json_object_get(root, "usage") != NULL) {
        json_object_set_new(chunk, "choices", json_array());
        json_object_set(chunk, "usage", json_object_get(root, "usage"));
        event(chunk, out);
    }
    buf_puts(out, "data: [DONE]\n\n");
    json_decref(chunk);
    json_decref(root);
    return 0;
}
