/* libFuzzer harness for pdbody (src/router/pdbody.c): any bytes as a client's body and as a
 * prefill worker's answer. What the flow writes must always be JSON the next leg can read: a
 * prefill body is an object with stream false and max_tokens 1, and the splice makes the body
 * the jansson tree makes (the same verdict, value, member order and facts); a handoff's params
 * are an object, and a decode body made with them carries them; a finished answer's SSE
 * stream is "data: " events of JSON objects ending in [DONE]. The first byte picks the
 * client's facts for the answer's part. */
#include "router/pdbody.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts unless out is "data: <JSON object>\n\n" events, the last one "data: [DONE]\n\n". */
static void check_sse(const struct buf *out)
{
    const char *p = out->data, *end = out->data + out->len;

    for (;;) {
        const char *e = strstr(p, "\n\n");
        json_t *j;

        if (strncmp(p, "data: ", 6) != 0 || e == NULL)
            abort();
        if (e - p == 12 && memcmp(p + 6, "[DONE]", 6) == 0) {
            if (e + 2 != end)
                abort();
            return;
        }
        j = json_loadb(p + 6, (size_t) (e - p - 6), 0, NULL);
        if (!json_is_object(j)) /* a macro: its argument is read twice */
            abort();
        json_decref(j);
        p = e + 2;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char client[] = "{\"model\":\"m\",\"prompt\":\"x\",\"stream\":true}";
    const char *s = (const char *) data + (size ? 1 : 0);
    size_t n = size ? size - 1 : 0;
    struct pd_facts f = {0};
    struct buf out, params, dec;
    json_t *j;

    if (size) {
        f.stream = data[0] & 1;
        f.include_usage = (data[0] >> 1) & 1;
        f.one_token = (data[0] >> 2) & 1;
        f.chat = (data[0] >> 3) & 1;
    }
    buf_init(&out);
    buf_init(&params);
    buf_init(&dec);
    /* As a client's body: the splice against the tree. */
    {
        struct pd_facts fs, ft;
        struct buf tree;
        int rs = pd_prefill_body(s, n, &out, &fs), rt;

        buf_init(&tree);
        rt = pd_prefill_body_tree(s, n, &tree, &ft);
        if (rs != rt || (rs != 0 && out.len != 0))
            abort();
        if (rs == 0) {
            json_t *t = json_loadb(tree.data, tree.len, 0, NULL);
            const char *ka, *kb;
            void *ia, *ib;

            j = json_loadb(out.data, out.len, 0, NULL);
            if (!json_is_object(j) || !json_is_false(json_object_get(j, "stream")) ||
                json_integer_value(json_object_get(j, "max_tokens")) != 1 || !json_equal(j, t) ||
                memcmp(&fs, &ft, sizeof fs) != 0)
                abort();
            for (ia = json_object_iter(j), ib = json_object_iter(t); ia != NULL || ib != NULL;
                 ia = json_object_iter_next(j, ia), ib = json_object_iter_next(t, ib)) {
                ka = ia ? json_object_iter_key(ia) : NULL;
                kb = ib ? json_object_iter_key(ib) : NULL;
                if (ka == NULL || kb == NULL || strcmp(ka, kb) != 0)
                    abort();
            }
            json_decref(t);
            json_decref(j);
        }
        buf_free(&tree);
    }
    /* As a prefill answer. */
    switch (pd_answer_read(s, n, &f, &params)) {
    case PD_HANDOFF:
        j = json_loadb(params.data, params.len, 0, NULL);
        if (!json_is_object(j))
            abort();
        if (pd_decode_body(client, sizeof client - 1, params.data, params.len, &dec) != 0)
            abort();
        json_t *d = json_loadb(dec.data, dec.len, 0, NULL);

        if (!json_equal(json_object_get(d, "kv_transfer_params"), j))
            abort();
        json_decref(d);
        json_decref(j);
        break;
    case PD_DONE:
    case PD_INVALID:
        if (params.len != 0)
            abort();
        break;
    }
    buf_free(&out);
    buf_init(&out);
    if (pd_answer_sse(s, n, &f, &out) == 0)
        check_sse(&out);
    buf_free(&out);
    buf_free(&params);
    buf_free(&dec);
    return 0;
}
