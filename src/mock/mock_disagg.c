/* mock_disagg: kv_transfer_params in (a request's leg) and out (a prefill leg's answer).
 *
 * vLLM's NixlConnector reads the flags by truth value and a decode leg's block ids as a list;
 * the mock is stricter where a mistake would otherwise pass silently: a flag that is not a
 * boolean, both legs at once, or block ids that are not ids are a 400 naming the field, so
 * that a router's test sees its own malformed forwarding at once. */
#include "mock_disagg.h"
#include "util/buf.h"
#include "wire/prom.h"

#include <limits.h>
#include <stdio.h>

/* A flag of kv_transfer_params: absent or null is false; else it must be a boolean. */
static int kvx_flag(const json_t *kv, const char *name, int *out, const char **param, char *err,
                    size_t errlen)
{
    const json_t *v = json_object_get(kv, name);

    *out = json_is_true(v);
    if (v == NULL || json_is_null(v) || json_is_boolean(v))
        return 0;
    snprintf(err, errlen, "'kv_transfer_params.%s' must be a boolean", name);
    *param = name;
    return -1;
}

int mock_kvx_parse(const json_t *body, struct mock_kvx *x, const char **param, char *err,
                   size_t errlen)
{
    const json_t *kv = json_object_get(body, "kv_transfer_params");
    const json_t *ids, *id;
    int decode, prefill;
    size_t i;

    x->leg = MOCK_KVX_NONE;
    x->present = 0;
    x->remote_blocks = 0;
    *param = NULL;
    if (kv == NULL || json_is_null(kv))
        return 0;
    if (!json_is_object(kv)) {
        snprintf(err, errlen, "'kv_transfer_params' must be an object");
        *param = "kv_transfer_params";
        return -1;
    }
    x->present = 1;
    if (kvx_flag(kv, "do_remote_decode", &decode, param, err, errlen) != 0 ||
        kvx_flag(kv, "do_remote_prefill", &prefill, param, err, errlen) != 0)
        return -1;
    if (decode && prefill) {
        snprintf(err, errlen,
                 "'kv_transfer_params': do_remote_decode and do_remote_prefill "
                 "cannot both be true");
        *param = "kv_transfer_params";
        return -1;
    }
    if (decode) {
        x->leg = MOCK_KVX_PREFILL;
        return 0;
    }
    if (!prefill)
        return 0;
    ids = json_object_get(kv, "remote_block_ids");
    json_array_foreach(ids, i, id)
    {
        if (!json_is_integer(id) || json_integer_value(id) < 0)
            break;
    }
    if (!json_is_array(ids) || i < json_array_size(ids)) {
        snprintf(err, errlen,
                 "'kv_transfer_params.remote_block_ids' must be an array of non-negative "
                 "integers when do_remote_prefill is true");
        *param = "remote_block_ids";
        return -1;
    }
    x->leg = MOCK_KVX_DECODE;
    x->remote_blocks = json_array_size(ids);
    return 0;
}

unsigned mock_kvx_transferred(size_t remote_blocks, unsigned block_size, unsigned prompt_tokens)
{
    /* Divide rather than multiply: a list of millions of ids must not wrap. */
    if (block_size == 0 || remote_blocks >= (prompt_tokens + (size_t) block_size - 1) / block_size)
        return prompt_tokens;
    return (unsigned) (remote_blocks * block_size);
}

/* A full block the prefix cache holds goes by its index in the rank's pool, so the same
 * prompt on the same rank names the same leading blocks. The mock does not index the others
 * (the partial last block, a block the full pool could not cache, every block without the
 * cache): they get ids above the pool's, distinct until the counter wraps. */
size_t mock_kvx_block_ids(const uint32_t *held, size_t nheld, unsigned prompt_tokens,
                          unsigned block_size, unsigned pool, uint32_t *next, uint32_t *out)
{
    size_t bs = block_size > 0 ? block_size : 1;
    size_t n = (prompt_tokens + bs - 1) / bs, full = prompt_tokens / bs;

    for (size_t i = 0; i < n; i++) {
        if (i < full && i < nheld) {
            out[i] = held[i];
            continue;
        }
        if (*next < pool || *next == UINT32_MAX)
            *next = pool;
        out[i] = (*next)++;
    }
    return n;
}

/* The counters by which tests tell a decode leg that received its KV from one that did not. */
void mock_kvx_metrics(struct buf *out, const char *role, const struct mock_kvx_counts *c)
{
    /* In leg order: MOCK_KVX_PREFILL, then MOCK_KVX_DECODE. */
    static const char *const sides[] = {"prefill", "decode"};
    struct buf l;

    buf_init(&l);
    prom_family(out, "admit_mock_role_info", "gauge", "The engine's --role (reported only)");
    prom_label(&l, "role", role);
    prom_sample(out, "admit_mock_role_info", l.data, 1);
    buf_free(&l);
    prom_labelled(
        out, "admit_mock_kv_transfers_total", "counter",
        "Disaggregated legs: prefill answers with kv_transfer_params, decode legs started "
        "with remote blocks",
        "side", sides, &c->transfers[MOCK_KVX_PREFILL], 2);
    prom_labelled(out, "admit_mock_kv_transfer_tokens_total", "counter",
                  "Prompt tokens of those legs: a prefill's prompt, the tokens a decode received",
                  "side", sides, &c->tokens[MOCK_KVX_PREFILL], 2);
    prom_family(out, "admit_mock_prompt_tokens_computed_total", "counter",
                "Prompt tokens prefilled (their time spent): neither cached nor received");
    prom_sample(out, "admit_mock_prompt_tokens_computed_total", NULL, (double) c->computed);
}

json_t *mock_kvx_answer(const struct mock_kvx_site *s, const uint32_t *ids, size_t n,
                        const char *rid)
{
    json_t *blocks = json_array();

    for (size_t i = 0; i < n; i++)
        json_array_append_new(blocks, json_integer((json_int_t) ids[i]));
    /* vLLM's NixlConnectorScheduler.request_finished, key for key. */
    return json_pack("{s:b, s:b, s:o, s:s, s:s, s:s, s:i, s:i}", "do_remote_prefill", 1,
                     "do_remote_decode", 0, "remote_block_ids", blocks, "remote_engine_id",
                     s->engine_id, "remote_request_id", rid, "remote_host", s->host, "remote_port",
                     MOCK_KVX_SIDE_PORT + (int) s->dp_rank, "tp_size", 1);
}
