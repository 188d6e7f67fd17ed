/* pdbody: the prefill and decode legs' bodies (see pdbody.h).
 *
 * A client's body is rewritten twice per request, and a long prompt's is large, so the legs'
 * bodies are spliced, not rebuilt: one strict pass of the scanner (util/jscan.h, as strict
 * as jansson with duplicate keys refused) finds the top-level members, those the leg replaces
 * are left out, the others copied as they stand, the leg's own appended. A body past the
 * scanner's limits (64 KiB) is read into a tree by jansson instead: the same members, the
 * same values. The prefill's answer is small, and read by jansson. */
#include "pdbody.h"
#include "util/jscan.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Dumps root compactly into out, keys in their order; 0 or -1. */
static int dump(const json_t *root, struct buf *out)
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

/* ---- splicing ------------------------------------------------------------------------ */

/* Longest key the splice tells apart (a longer one is kept: none of ours is so long). */
#define KEY_MAX 32

/* The members a prefill leg replaces or drops. */
static const char *const prefill_drop[] = {
    "kv_transfer_params",    "stream",     "stream_options",       "max_tokens",
    "max_completion_tokens", "min_tokens", "min_completion_tokens"};

/* 1 when name is one of set[0 .. n). */
static int in_set(const char *name, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, set[i]) == 0)
            return 1;
    return 0;
}

/* 1 when the JSON object text v[0 .. n) has "include_usage": true (stream_options). */
static int include_usage(const unsigned char *v, size_t n)
{
    json_t *o = json_loadb((const char *) v, n, 0, NULL);
    int yes = json_is_true(json_object_get(o, "include_usage"));

    json_decref(o);
    return yes;
}

/* Copies the members of the JSON object body to out as "{m1,m2,...", leaving out those whose
 * key is in drop[0 .. ndrop), and notes the client's facts in f (NULL: none wanted), with
 * *has_mct when it has max_completion_tokens. 0, or -1 when the scanner does not take the text
 * (invalid, not an object, past its limits): out is then unchanged. */
static int splice(const char *body, size_t len, const char *const *drop, size_t ndrop,
                  struct buf *out, struct pd_facts *f, int *has_mct)
{
    struct jscan s;
    struct jscan_str key;
    size_t mark = out->len, members = 0;
    int c;

    if (jscan_init(&s, body, len) != 0 || jscan_peek(&s) != '{')
        return -1;
    s.p++;
    if (jscan_open_object(&s) != 0)
        return -1;
    buf_append(out, "{", 1);
    if (jscan_peek(&s) == '}') {
        s.p++;
    } else {
        for (;;) {
            const unsigned char *k0 = s.p, *v0;
            char name[KEY_MAX + 1];
            size_t kl;
            struct jscan_num num;

            if (jscan_peek(&s) != '"' || (k0 = s.p, jscan_string(&s, &key) != 0) ||
                jscan_key(&s, &key) != 0 || jscan_peek(&s) != ':')
                goto fail;
            s.p++;
            kl = jscan_str_copy(&key, name, sizeof name);
            if (kl > KEY_MAX)
                name[0] = '\0'; /* not one of ours */
            c = jscan_peek(&s);
            v0 = s.p;
            if (f != NULL && (c == '-' || (c >= '0' && c <= '9')) &&
                (strcmp(name, "max_tokens") == 0 || strcmp(name, "max_completion_tokens") == 0)) {
                if (jscan_number(&s, &num) != 0)
                    goto fail;
                f->one_token |= num.integer && num.i == 1;
            } else if (jscan_skip(&s) != 0) {
                goto fail;
            }
            if (f != NULL) {
                if (strcmp(name, "stream") == 0)
                    f->stream = s.p - v0 == 4 && memcmp(v0, "true", 4) == 0;
                else if (strcmp(name, "stream_options") == 0)
                    f->include_usage = c == '{' && include_usage(v0, (size_t) (s.p - v0));
                else if (strcmp(name, "messages") == 0)
                    f->chat = 1;
                else if (strcmp(name, "max_completion_tokens") == 0)
                    *has_mct = 1;
            }
            if (!in_set(name, drop, ndrop)) {
                if (members++ > 0)
                    buf_append(out, ",", 1);
                buf_append(out, (const char *) k0, (size_t) (s.p - k0));
            }
            if ((c = jscan_peek(&s)) == '}') {
                s.p++;
                break;
            }
            if (c != ',')
                goto fail;
            s.p++;
        }
    }
    jscan_close(&s);
    if (jscan_peek(&s) != -1)
        goto fail;
    if (members > 0)
        buf_append(out, ",", 1);
    return 0;
fail:
    out->len = mark;
    if (out->data != NULL)
        out->data[mark] = '\0';
    return -1;
}

/* The prefill leg's own members, after the client's (splice() left a ',' or a '{'). A client
 * that asked for one token gets its answer from this leg: it asks for no transfer, so that the
 * prefill worker keeps no KV for a decoder that will not come (vLLM holds it 480 s). */
static void prefill_members(struct buf *out, int has_mct, int one_token)
{
    if (!one_token)
        buf_puts(out,
                 "\"kv_transfer_params\":{\"do_remote_decode\":true,\"do_remote_prefill\":false,"
                 "\"remote_engine_id\":null,\"remote_block_ids\":null,\"remote_host\":null,"
                 "\"remote_port\":null},");
    buf_puts(out, "\"stream\":false,\"max_tokens\":1");
    if (has_mct)
        buf_puts(out, ",\"max_completion_tokens\":1");
    buf_append(out, "}", 1);
}

/* ---- the legs ---------------------------------------------------------------------------- */

int pd_prefill_body(const char *body, size_t len, struct buf *out, struct pd_facts *f)
{
    int has_mct = 0;

    memset(f, 0, sizeof *f);
    if (splice(body, len, prefill_drop, sizeof prefill_drop / sizeof *prefill_drop, out, f,
               &has_mct) == 0) {
        prefill_members(out, has_mct, f->one_token);
        return 0;
    }
    return pd_prefill_body_tree(body, len, out, f);
}

int pd_prefill_body_tree(const char *body, size_t len, struct buf *out, struct pd_facts *f)
{
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL), *kv;
    const json_t *so;
    int rv, has_mct;

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
    has_mct = json_object_get(root, "max_completion_tokens") != NULL;
    /* Out, then in again at the end: the members in the order the splice writes them. */
    for (size_t i = 0; i < sizeof prefill_drop / sizeof *prefill_drop; i++)
        json_object_del(root, prefill_drop[i]);
    if (!f->one_token) {
        kv = json_pack("{s:b, s:b, s:n, s:n, s:n, s:n}", "do_remote_decode", 1, "do_remote_prefill",
                       0, "remote_engine_id", "remote_block_ids", "remote_host", "remote_port");
        json_object_set_new(root, "kv_transfer_params", kv);
    }
    json_object_set_new(root, "stream", json_false());
    json_object_set_new(root, "max_tokens", json_integer(1));
    if (has_mct)
        json_object_set_new(root, "max_completion_tokens", json_integer(1));
    rv = dump(root, out);
    json_decref(root);
    return rv;
}

int pd_decode_body(const char *body, size_t len, const char *params, size_t plen, struct buf *out)
{
    static const char *const drop[] = {"kv_transfer_params"};

    if (splice(body, len, drop, 1, out, NULL, NULL) == 0) {
        buf_puts(out, "\"kv_transfer_params\":");
        buf_append(out, params, plen);
        buf_append(out, "}", 1);
        return 0;
    }
    return pd_decode_body_tree(body, len, params, plen, out);
}

int pd_decode_body_tree(const char *body, size_t len, const char *params, size_t plen,
                        struct buf *out)
{
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    json_t *kv = json_loadb(params, plen, JSON_DECODE_ANY, NULL);
    int rv = -1;

    if (json_is_object(root) && kv != NULL) {
        json_object_del(root, "kv_transfer_params"); /* at the end, as the splice puts it */
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
        a = dump(kv, params) == 0 ? PD_HANDOFF : PD_INVALID;
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
