/* mock: options, engine lifecycle and the HTTP surface of the mock engine.
 *
 * This file owns routing, request validation, the small GET endpoints and /metrics; the
 * scheduling of generation requests lives in mock_sched.c. */
#include "mock.h"
#include "util/buf.h"
#include "mock_kvpub.h"
#include "mock_sched.h"
#include "http/netsock.h"
#include "wire/prom.h"
#include "util/xmalloc.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#ifndef ADMIT_VERSION
#define ADMIT_VERSION "unknown"
#endif

/* Request bodies larger than this are refused by evhttp with 413. */
#define MOCK_MAX_BODY_BYTES (64 * 1024 * 1024)
/* max_tokens when a request names none (the OpenAI completions default). */
#define MOCK_DEFAULT_MAX_TOKENS 16

/* ---- replies ---- */

/* An OpenAI error object, its param the field at fault (NULL: null). msg may quote client
 * bytes that are not UTF-8, which jansson refuses; then a generic message goes out instead. */
static void reply_error_param(struct evhttp_request *req, int code, const char *type,
                              const char *msg, const char *param)
{
    json_t *j = json_pack("{s:{s:s, s:s, s:s?, s:i}}", "error", "message", msg, "type", type,
                          "param", param, "code", code);

    if (j == NULL)
        j = json_pack("{s:{s:s, s:s, s:s?, s:i}}", "error", "message", "invalid request", "type",
                      type, "param", param, "code", code);
    mock_reply_json(req, code, j);
}

static void reply_error(struct evhttp_request *req, int code, const char *type, const char *msg)
{
    reply_error_param(req, code, type, msg, NULL);
}

/* ---- the client's request id ---- */

/* The request's X-Request-Id if it is one the mock echoes: 1 to MOCK_REQUEST_ID_MAX visible
 * ASCII characters other than '"' and '\\', so that it goes into the reply head and into
 * JSON strings as it is. Anything else (or a second X-Request-Id) is ignored, as if absent:
 * the reply then carries the engine's own id, as without the header. */
static const char *request_id_of(struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *v = NULL;
    size_t n;

    for (struct evkeyval *kv = TAILQ_FIRST(h); kv != NULL; kv = TAILQ_NEXT(kv, next)) {
        if (evutil_ascii_strcasecmp(kv->key, "X-Request-Id") != 0)
            continue;
        if (v != NULL)
            return NULL;
        v = kv->value;
    }
    if (v == NULL)
        return NULL;
    for (n = 0; v[n] != '\0'; n++) {
        unsigned char c = (unsigned char) v[n];

        if (n == MOCK_REQUEST_ID_MAX || c < 0x21 || c > 0x7e || c == '"' || c == '\\')
            return NULL;
    }
    return n > 0 ? v : NULL;
}

/* ---- generation requests ---- */

/* Checks the fields the engine uses; err gets the OpenAI error message, *param the field at
 * fault when the error names one for the error's param. */
static int gen_parse(const struct mock_engine *e, const json_t *body, enum mock_api api,
                     struct mock_gen *g, const char **param, char *err, size_t errlen)
{
    const json_t *model = json_object_get(body, "model");
    const json_t *stream = json_object_get(body, "stream");
    const json_t *opts = json_object_get(body, "stream_options");
    const json_t *mt = json_object_get(body, "max_tokens");
    const json_t *salt = json_object_get(body, "cache_salt");
    const char *mt_name = "max_tokens";
    json_int_t n = MOCK_DEFAULT_MAX_TOKENS;

    memset(g, 0, sizeof *g);
    *param = NULL;
    g->api = api;
    if (model != NULL && !json_is_null(model) && !json_is_string(model)) {
        snprintf(err, errlen, "'model' must be a string");
        return -1;
    }
    g->model = json_is_string(model) ? json_string_value(model) : e->o.model;
    if (stream != NULL && !json_is_null(stream) && !json_is_boolean(stream)) {
        snprintf(err, errlen, "'stream' must be a boolean");
        return -1;
    }
    g->stream = json_is_true(stream);
    g->include_usage = json_is_true(json_object_get(opts, "include_usage"));
    if (mt == NULL || json_is_null(mt)) {
        mt = json_object_get(body, "max_completion_tokens");
        mt_name = "max_completion_tokens";
    }
    if (mt != NULL && !json_is_null(mt)) {
        if (!json_is_integer(mt)) {
            snprintf(err, errlen, "'%s' must be an integer", mt_name);
            return -1;
        }
        n = json_integer_value(mt);
    }
    if (n < 1) {
        snprintf(err, errlen, "'%s' must be at least 1, got %lld", mt_name, (long long) n);
        return -1;
    }
    g->max_tokens = n > MOCK_MAX_TOKENS_CAP ? MOCK_MAX_TOKENS_CAP : (unsigned) n;
    /* vLLM's: a non-empty string, or absent (null) */
    if (salt != NULL && !json_is_null(salt)) {
        if (!json_is_string(salt) || json_string_length(salt) == 0) {
            snprintf(err, errlen, "Parameter 'cache_salt' must be a non-empty string if provided.");
            return -1;
        }
        g->kv_seed = mock_kvc_salt(json_string_value(salt), json_string_length(salt));
    }
    return mock_kvx_parse(body, &g->kvx, param, err, errlen);
}

static void handle_generation(struct mock_engine *e, struct evhttp_request *req, enum mock_api api,
                              const char *request_id)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    json_t *body = NULL;
    json_error_t jerr;
    struct mock_gen g;
    const char *param = NULL;
    char err[256];

    e->requests_total++;
    if (len > 0)
        body = json_loadb((const char *) evbuffer_pullup(in, -1), len, 0, &jerr);
    if (body == NULL) {
        if (len == 0)
            snprintf(err, sizeof err, "the request body must be a JSON object");
        else
            snprintf(err, sizeof err, "invalid JSON at line %d column %d: %s", jerr.line,
                     jerr.column, jerr.text);
        reply_error(req, 400, "invalid_request_error", err);
        return;
    }
    if (!json_is_object(body)) {
        reply_error(req, 400, "invalid_request_error", "the request body must be a JSON object");
    } else if (gen_parse(e, body, api, &g, &param, err, sizeof err) != 0) {
        reply_error_param(req, 400, "invalid_request_error", err, param);
    } else {
        struct mock_toks t = {0};

        /* One tokenizer for the count, the cache and /tokenize. */
        mock_tok_body(&t, body, api);
        g.ids = t.ids;
        g.nids = t.n;
        g.prompt_tokens = t.n > UINT_MAX ? UINT_MAX : (unsigned) t.n;
        g.request_id = request_id;
        mock_sched_submit(e, req, &g); /* copies g.model and g.request_id, takes g.ids */
    }
    json_decref(body);
}

/* ---- /tokenize ---- */

/* The longest context the engine reports (vLLM's max_model_len): what one rank's KV holds. */
static json_int_t max_model_len(const struct mock_engine *e)
{
    unsigned long long n = (unsigned long long) e->o.block_size * e->o.num_gpu_blocks;

    return n > INT32_MAX ? INT32_MAX : (json_int_t) n;
}

/* vLLM's POST /tokenize: {"prompt": text} or {"messages": [...], "add_generation_prompt":
 * bool (default true)}, answered with {"count", "max_model_len", "tokens"}. The ids are those
 * a generation request with the same prompt is counted and cached by. */
static void handle_tokenize(struct mock_engine *e, struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    json_t *body =
        len > 0 ? json_loadb((const char *) evbuffer_pullup(in, -1), len, 0, NULL) : NULL;
    const json_t *messages = json_object_get(body, "messages");
    const json_t *prompt = json_object_get(body, "prompt");
    struct mock_toks t = {0};
    json_t *tokens;

    /* Tokenizers that fail, for the router's fallback: held, evhttp frees the request with
     * its connection when the client leaves. */
    if (e->o.tokenize_hang || e->o.tokenize_status != 0) {
        json_decref(body);
        if (!e->o.tokenize_hang)
            reply_error(req, (int) e->o.tokenize_status, "internal_error",
                        "tokenizer failing (--tokenize-status)");
        return;
    }
    if (!json_is_object(body) ||
        (!json_is_array(messages) && !json_is_string(prompt) && !json_is_array(prompt))) {
        json_decref(body);
        reply_error(req, 400, "invalid_request_error",
                    "the body must be a JSON object with 'prompt' or 'messages'");
        return;
    }
    if (json_is_array(messages))
        mock_tok_chat(&t, messages, !json_is_false(json_object_get(body, "add_generation_prompt")));
    else
        mock_tok_body(&t, body, MOCK_API_COMPLETIONS);
    json_decref(body);
    tokens = json_array();
    for (size_t i = 0; i < t.n; i++)
        json_array_append_new(tokens, json_integer(t.ids[i]));
    mock_reply_json(req, 200,
                    json_pack("{s:I, s:I, s:o}", "count", (json_int_t) t.n, "max_model_len",
                              max_model_len(e), "tokens", tokens));
    mock_toks_free(&t);
}

/* ---- GET endpoints ---- */

static json_t *model_entry(const struct mock_engine *e, const char *name)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", name, "object", "model", "created",
                     (json_int_t) e->started, "owned_by", "admit-mock-engine");
}

static void handle_models(const struct mock_engine *e, struct evhttp_request *req)
{
    json_t *data = json_array();

    json_array_append_new(data, model_entry(e, e->o.model));
    for (unsigned i = 0; i < e->o.nserved; i++)
        json_array_append_new(data, model_entry(e, e->o.served[i]));
    mock_reply_json(req, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

enum rank_stat {
    RS_RUNNING,
    RS_WAITING,
    RS_KV_USAGE,
    RS_PROMPT,
    RS_GENERATION,
    RS_PREFIX_QUERIES,
    RS_PREFIX_HITS,
    RS_CACHED_BLOCKS,
    RS_EVICTIONS,
    RS_STALLS,
    RS_STALL_SECONDS
};

static double rank_stat(const struct mock_engine *e, const struct mock_rank *r, enum rank_stat s)
{
    double kv = (double) mock_rank_kv_blocks(r) / e->o.num_gpu_blocks;

    switch (s) {
    case RS_RUNNING:
        return r->nrunning;
    case RS_WAITING:
        return r->nwaiting;
    case RS_KV_USAGE:
        return kv > 1 ? 1 : kv;
    case RS_PROMPT:
        return (double) r->prompt_tokens_total;
    case RS_GENERATION:
        return (double) r->generation_tokens_total;
    case RS_PREFIX_QUERIES:
        return (double) r->prefix_queries;
    case RS_PREFIX_HITS:
        return (double) r->prefix_hits;
    case RS_CACHED_BLOCKS:
        return r->cache != NULL ? (double) mock_kvc_cached(r->cache) : 0;
    case RS_EVICTIONS:
        return r->cache != NULL ? (double) mock_kvc_evictions(r->cache) : 0;
    case RS_STALLS:
        return (double) r->decode_stalls;
    case RS_STALL_SECONDS:
        return (double) r->decode_stall_us / 1e6;
    }
    return 0;
}

static void rank_labels(const struct mock_engine *e, unsigned rank, struct buf *l)
{
    char idx[16];

    snprintf(idx, sizeof idx, "%u", rank);
    prom_label(l, "engine", idx);
    prom_label(l, "model_name", e->o.model);
}

/* One family with a sample per data-parallel rank. */
static void rank_family(struct buf *out, const struct mock_engine *e, const char *name,
                        const char *type, const char *help, enum rank_stat s)
{
    struct buf l;

    buf_init(&l);
    prom_family(out, name, type, help);
    for (unsigned i = 0; i < e->o.data_parallel_size; i++) {
        buf_reset(&l);
        rank_labels(e, i, &l);
        prom_sample(out, name, l.data, rank_stat(e, &e->ranks[i], s));
    }
    buf_free(&l);
}

static void global_family(struct buf *out, const char *name, const char *type, const char *help,
                          double v)
{
    prom_family(out, name, type, help);
    prom_sample(out, name, NULL, v);
}

static void render_metrics(const struct mock_engine *e, struct buf *out)
{
    unsigned waiting = 0;
    char num[32];
    struct buf l;

    rank_family(out, e, "vllm:num_requests_running", "gauge",
                "Number of requests in model execution batches.", RS_RUNNING);
    rank_family(out, e, "vllm:num_requests_waiting", "gauge",
                "Number of requests waiting to be processed.", RS_WAITING);
    rank_family(out, e, "vllm:kv_cache_usage_perc", "gauge",
                "KV-cache usage. 1 means 100 percent usage.", RS_KV_USAGE);
    prom_family(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
    buf_init(&l);
    for (unsigned i = 0; i < e->o.data_parallel_size; i++) {
        buf_reset(&l);
        snprintf(num, sizeof num, "%u", e->o.block_size);
        prom_label(&l, "block_size", num);
        snprintf(num, sizeof num, "%u", e->o.num_gpu_blocks);
        prom_label(&l, "num_gpu_blocks", num);
        rank_labels(e, i, &l);
        prom_sample(out, "vllm:cache_config_info", l.data, 1);
        waiting += e->ranks[i].nwaiting;
    }
    buf_free(&l);
    rank_family(out, e, "vllm:prompt_tokens_total", "counter",
                "Number of prefill tokens processed.", RS_PROMPT);
    rank_family(out, e, "vllm:generation_tokens_total", "counter",
                "Number of generation tokens processed.", RS_GENERATION);
    rank_family(out, e, "vllm:prefix_cache_queries_total", "counter",
                "Prefix cache queries, in terms of number of queried tokens.", RS_PREFIX_QUERIES);
    rank_family(out, e, "vllm:prefix_cache_hits_total", "counter",
                "Prefix cache hits, in terms of number of cached tokens.", RS_PREFIX_HITS);
    rank_family(out, e, "admit_mock_prefix_cache_blocks", "gauge",
                "KV blocks holding a cached prefix block, in use or evictable", RS_CACHED_BLOCKS);
    rank_family(out, e, "admit_mock_prefix_cache_evictions_total", "counter",
                "Cached KV blocks evicted (least recently used first) for new ones", RS_EVICTIONS);
    rank_family(out, e, "admit_mock_decode_stalls_total", "counter",
                "Decode tokens that waited for the rank's prefills (--prefill-interference)",
                RS_STALLS);
    rank_family(out, e, "admit_mock_decode_stall_seconds_total", "counter",
                "Time decode tokens waited for the rank's prefills", RS_STALL_SECONDS);
    global_family(out, "admit_mock_requests_running_peak", "gauge",
                  "Most requests ever running at once, over all ranks", e->running_peak);
    global_family(out, "admit_mock_requests_total", "counter",
                  "Generation requests received (valid or not)", (double) e->requests_total);
    global_family(out, "admit_mock_requests_cancelled_total", "counter",
                  "Generation requests whose client left before the end",
                  (double) e->cancelled_total);
    global_family(out, "admit_mock_requests_in_flight", "gauge",
                  "Generation requests running or waiting, over all ranks",
                  (double) e->running_total + waiting);
    global_family(out, "admit_mock_requests_in_flight_max", "gauge",
                  "Most generation requests ever running or waiting at once, over all ranks",
                  e->in_flight_max);
    global_family(out, "admit_mock_connections_total", "counter",
                  "Client connections accepted (shows whether a proxy reuses them)",
                  (double) e->connections_total);
    global_family(out, "admit_mock_max_num_batched_tokens", "gauge",
                  "Configured --max-num-batched-tokens", e->o.max_num_batched_tokens);
    mock_kvx_metrics(out, admit_load_role_name(e->o.role), &e->kvx);
}

static void handle_metrics(const struct mock_engine *e, struct evhttp_request *req)
{
    struct evbuffer *b = evbuffer_new();
    struct buf text;

    if (b == NULL)
        fatal("evbuffer_new failed");
    buf_init(&text);
    render_metrics(e, &text);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", PROM_CONTENT_TYPE);
    if (evhttp_request_get_command(req) != EVHTTP_REQ_HEAD)
        evbuffer_add(b, text.data, text.len);
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
    buf_free(&text);
}

static void mock_on_request(struct evhttp_request *req, void *arg)
{
    struct mock_engine *e = arg;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    int get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    const char *rid = request_id_of(req);
    char msg[160];

    /* Tokens are small writes that must leave at once, not wait for Nagle. */
    net_set_nodelay(bufferevent_getfd(evhttp_connection_get_bufferevent(evcon)));
    /* Every answer, errors included, names the request it answers (vLLM with
     * --enable-request-id-headers): tests prove with it that each client got its own. */
    if (rid != NULL)
        evhttp_add_header(evhttp_request_get_output_headers(req), "X-Request-Id", rid);
    if (path == NULL)
        path = "";
    if (cmd == EVHTTP_REQ_POST && strcmp(path, "/v1/chat/completions") == 0) {
        handle_generation(e, req, MOCK_API_CHAT, rid);
    } else if (cmd == EVHTTP_REQ_POST && strcmp(path, "/v1/completions") == 0) {
        handle_generation(e, req, MOCK_API_COMPLETIONS, rid);
    } else if (cmd == EVHTTP_REQ_POST && strcmp(path, "/tokenize") == 0) {
        handle_tokenize(e, req);
    } else if (get && strcmp(path, "/v1/models") == 0) {
        handle_models(e, req);
    } else if (get && strcmp(path, "/health") == 0) {
        evhttp_send_reply(req, 200, "OK", NULL);
    } else if (get && strcmp(path, "/metrics") == 0) {
        handle_metrics(e, req);
    } else {
        snprintf(msg, sizeof msg, "no route for %s %.100s",
                 cmd == EVHTTP_REQ_POST   ? "POST"
                 : cmd == EVHTTP_REQ_HEAD ? "HEAD"
                                          : "GET",
                 path);
        reply_error(req, 404, "not_found_error", msg);
    }
}

/* ---- lifecycle ---- */

/* evhttp asks for a bufferevent once per accepted connection: the one place to count them. */
static struct bufferevent *mock_on_connection(struct event_base *base, void *arg)
{
    struct mock_engine *e = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);

    if (bev == NULL)
        fatal("bufferevent_socket_new failed");
    e->connections_total++;
    return bev;
}

struct mock_engine *mock_engine_new(struct event_base *base, const struct mock_opts *o)
{
    struct mock_engine *e = xcalloc(1, sizeof *e);

    e->base = base;
    e->o = *o;
    /* A caller that filled the struct by hand may leave zeros: they mean the defaults. */
    if (e->o.block_size == 0)
        e->o.block_size = MOCK_DEFAULT_BLOCK_SIZE;
    if (e->o.num_gpu_blocks == 0)
        e->o.num_gpu_blocks = MOCK_DEFAULT_NUM_GPU_BLOCKS;
    if (e->o.max_num_seqs == 0)
        e->o.max_num_seqs = MOCK_DEFAULT_MAX_NUM_SEQS;
    if (e->o.data_parallel_size == 0)
        e->o.data_parallel_size = 1;
    if (e->o.model[0] == '\0')
        snprintf(e->o.model, sizeof e->o.model, "%s", MOCK_DEFAULT_MODEL);
    e->o.model[sizeof e->o.model - 1] = '\0';
    if (e->o.nserved > MOCK_MAX_SERVED)
        e->o.nserved = MOCK_MAX_SERVED;
    e->started = (long long) time(NULL);
    /* Until a listener names them better (mock_engine_bind). */
    snprintf(e->engine_id, sizeof e->engine_id, "mock-pid%ld", (long) getpid());
    snprintf(e->kv_host, sizeof e->kv_host, "127.0.0.1");
    e->ranks = xcalloc(e->o.data_parallel_size, sizeof *e->ranks);
    for (unsigned i = 0; i < e->o.data_parallel_size; i++) {
        e->ranks[i].index = i;
        TAILQ_INIT(&e->ranks[i].waiting);
        TAILQ_INIT(&e->ranks[i].running);
        if (!e->o.no_prefix_caching)
            e->ranks[i].cache = mock_kvc_new(e->o.num_gpu_blocks, e->o.block_size);
    }
    e->block_ids = xmalloc((size_t) e->o.block_size * sizeof *e->block_ids);
    e->scratch = evbuffer_new();
    e->http = evhttp_new(base);
    if (e->scratch == NULL || e->http == NULL)
        fatal("cannot create the mock engine's HTTP server");
    /* No evhttp_set_timeout: evhttp reads while it writes a reply, so a server timeout would
     * cut long streams. Idle keep-alive connections stay until the client closes them. */
    evhttp_set_allowed_methods(e->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD);
    evhttp_set_default_content_type(e->http, NULL);
    evhttp_set_max_body_size(e->http, MOCK_MAX_BODY_BYTES);
    evhttp_set_gencb(e->http, mock_on_request, e);
    evhttp_set_bevcb(e->http, mock_on_connection, e);
    return e;
}

/* A prefill leg's remote_engine_id and remote_host, from the first listener's "host:port"
 * ("[v6]:port"): one id per process and listener, as vLLM's engine id is one per engine. A
 * wildcard host is not an address to read from: loopback instead. */
static void name_engine(struct mock_engine *e, const char *bound)
{
    const char *colon = strrchr(bound, ':');
    size_t n = colon != NULL ? (size_t) (colon - bound) : strlen(bound);

    if (n >= 2 && bound[0] == '[' && bound[n - 1] == ']') {
        bound++;
        n -= 2;
    }
    if (n == 0 || n >= sizeof e->kv_host || (n == 7 && strncmp(bound, "0.0.0.0", n) == 0) ||
        (n == 2 && strncmp(bound, "::", n) == 0))
        snprintf(e->kv_host, sizeof e->kv_host, "127.0.0.1");
    else
        snprintf(e->kv_host, sizeof e->kv_host, "%.*s", (int) n, bound);
    snprintf(e->engine_id, sizeof e->engine_id, "mock-%s:%s", e->kv_host,
             colon != NULL ? colon + 1 : "0");
    e->named = 1;
}

int mock_engine_bind(struct mock_engine *e, const char *host, int port, char *bound,
                     size_t boundlen, char *err, size_t errlen)
{
    struct evhttp_bound_socket *s;

    if (e->o.kv_endpoint[0] != '\0' && e->zctx == NULL) {
        if (e->o.no_prefix_caching)
            log_warn("--kv-events-endpoint: no events without a prefix cache");
        else if ((e->zctx = zmq_ctx_new()) == NULL)
            fatal("cannot create a ZMQ context");
        for (unsigned i = 0; e->zctx != NULL && i < e->o.data_parallel_size; i++) {
            e->ranks[i].kvpub =
                mock_kvpub_new(e->base, e->zctx, &e->o, i, e->ranks[i].cache, err, errlen);
            if (e->ranks[i].kvpub == NULL)
                return -1;
        }
    }
    if (port < 0 || port > 65535) {
        snprintf(err, errlen, "port %d is out of range", port);
        return -1;
    }
    errno = 0;
    s = evhttp_bind_socket_with_handle(e->http, host, (ev_uint16_t) port);
    if (s == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", host, port,
                 errno != 0 ? strerror(errno) : "address not usable");
        return -1;
    }
    if (net_local_name(evhttp_bound_socket_get_fd(s), bound, boundlen) != 0)
        snprintf(bound, boundlen, "%s:%d", host, port);
    if (!e->named)
        name_engine(e, bound);
    return 0;
}

void mock_engine_free(struct mock_engine *e)
{
    if (e == NULL)
        return;
    /* Requests first: freeing the server frees their connections and evhttp requests. */
    mock_sched_drop_all(e);
    evhttp_free(e->http);
    evbuffer_free(e->scratch);
    for (unsigned i = 0; i < e->o.data_parallel_size; i++) {
        mock_kvpub_free(e->ranks[i].kvpub);
        mock_kvc_free(e->ranks[i].cache);
    }
    if (e->zctx != NULL)
        zmq_ctx_term(e->zctx);
    free(e->block_ids);
    free(e->ranks);
    free(e);
}
