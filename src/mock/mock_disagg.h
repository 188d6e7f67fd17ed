/* mock_disagg: the two legs of vLLM's disaggregated prefill/decode (NixlConnector's proxy
 * protocol) as the mock plays them: reading a request's kv_transfer_params and writing the
 * kv_transfer_params of a prefill leg's answer.
 *
 * Pure (jansson only): the HTTP surface (mock) parses with it, the scheduler (mock_sched)
 * answers with it, and the unit tests check both without sockets.
 *
 * A proxy sends the prefill leg {"do_remote_decode": true, ...} with max_tokens 1; the answer
 * carries {"do_remote_prefill": true, "remote_block_ids": [...], "remote_engine_id", ...},
 * which the proxy copies into the decode leg. The decode leg skips the prefill of the
 * prompt tokens those blocks hold. */
#ifndef ADMIT_MOCK_DISAGG_H
#define ADMIT_MOCK_DISAGG_H

#include <jansson.h>

#include <stddef.h>
#include <stdint.h>

struct buf;

/* vLLM's NIXL side channel port (VLLM_NIXL_SIDE_CHANNEL_PORT): rank r answers at + r. */
#define MOCK_KVX_SIDE_PORT 5600

/* Which leg a request is. */
enum mock_kvx_leg {
    MOCK_KVX_NONE = 0, /* a whole request (no kv_transfer_params, or neither flag set) */
    MOCK_KVX_PREFILL,  /* do_remote_decode: prefill here, decode elsewhere */
    MOCK_KVX_DECODE    /* do_remote_prefill: the prompt's KV comes from remote_block_ids */
};

/* What a request's kv_transfer_params say. */
struct mock_kvx {
    enum mock_kvx_leg leg;
    int present;          /* the body had a kv_transfer_params object: the answer has the key */
    size_t remote_blocks; /* a decode leg's remote_block_ids, counted */
};

/* Where a prefill leg's blocks can be read from: what its answer names. */
struct mock_kvx_site {
    const char *engine_id; /* remote_engine_id */
    const char *host;      /* remote_host */
    unsigned dp_rank;      /* remote_port is MOCK_KVX_SIDE_PORT + dp_rank */
};

/* What an engine counted of the legs it served, for its /metrics. */
struct mock_kvx_counts {
    uint64_t transfers[3]; /* [MOCK_KVX_PREFILL]: answers with params; [MOCK_KVX_DECODE]: decode
                              legs started with remote blocks */
    uint64_t tokens[3];    /* their prompt tokens: offered; received (whose prefill was skipped) */
    uint64_t computed;     /* prompt tokens prefilled, of every request: neither cached nor
                              received */
};

/** reads body's kv_transfer_params into x; absent or null is MOCK_KVX_NONE, not present. -1 on
 * a malformed one, with the OpenAI error message in err and the field it names in *param */
int mock_kvx_parse(const json_t *body, struct mock_kvx *x, const char **param, char *err,
                   size_t errlen);
/** prompt tokens a decode leg received: remote_blocks whole blocks, at most the prompt */
unsigned mock_kvx_transferred(size_t remote_blocks, unsigned block_size, unsigned prompt_tokens);
/** a prefill leg's remote_block_ids into out (room for ceil(prompt_tokens / block_size)), one
 * per block of the prompt: held[i] for the full blocks its prefix cache holds (nheld, prefix
 * order), the others from *next, kept at or above pool (never a pool index); returns how many */
size_t mock_kvx_block_ids(const uint32_t *held, size_t nheld, unsigned prompt_tokens,
                          unsigned block_size, unsigned pool, uint32_t *next, uint32_t *out);
/** appends the disaggregation families to a Prometheus text: the role, c's counters */
void mock_kvx_metrics(struct buf *out, const char *role, const struct mock_kvx_counts *c);
/** a prefill leg's answer params: its n block ids, site s, remote_request_id rid (new ref) */
json_t *mock_kvx_answer(const struct mock_kvx_site *s, const uint32_t *ids, size_t n,
                        const char *rid);

#endif
