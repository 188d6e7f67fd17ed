/* Unit tests for the load message codec and the subscriber's table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admit/load.h"

#include <stdio.h>
#include <string.h>

static void sample(struct admit_load *m)
{
    admit_load_init(m);
    strcpy(m->worker_id, "gpu-7:8080");
    m->dp_rank = 1;
    m->seq = 42;
    m->ts_ms = 1795974978879;
    m->kv_used_blocks = 100;
    m->kv_total_blocks = 2048;
    m->kv_block_size = 16;
    m->active_decode_blocks = 90;
    m->active_prefill_tokens = 3000;
    m->max_num_batched_tokens = 8192;
    m->engine_requests = 4;
    m->engine_request_limit = 4;
    m->queued_requests = 2;
    m->request_queue_limit = 16;
    m->heartbeat_ms = 1000;
    admit_load_models_clear(&m->models);
    assert_int_equal(admit_load_models_add(&m->models, "llama", 5), 0);
    assert_int_equal(admit_load_models_add(&m->models, "llama-lora", 10), 0);
}

static void test_round_trip(void **state)
{
    struct admit_load m, back;
    char buf[ADMIT_LOAD_MSG_MAX], err[256];
    int n;

    (void) state;
    sample(&m);
    m.state = ADMIT_LOAD_DRAINING;
    n = admit_load_encode(&m, buf, sizeof buf);
    assert_true(n > 0);
    assert_int_equal(strncmp(buf, "kv_metrics {\"v\":1,", 18), 0);
    assert_int_equal(admit_load_decode(buf, (size_t) n, &back, err, sizeof err), 0);
    assert_memory_equal(&m, &back, sizeof m);
    assert_non_null(strstr(buf, ",\"kv_total_blocks\":2048,\"kv_block_size\":16,"));
    assert_int_equal(back.kv_block_size, 16);
    assert_non_null(strstr(buf, ",\"models\":[\"llama\",\"llama-lora\"]}"));
    assert_true(admit_load_models_equal(&m.models, &back.models));
    /* Unknown values travel as null and come back unknown. */
    m.kv_used_blocks = m.kv_total_blocks = m.kv_block_size = ADMIT_LOAD_UNKNOWN;
    m.engine_request_limit = m.request_queue_limit = ADMIT_LOAD_UNKNOWN;
    n = admit_load_encode(&m, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"kv_used_blocks\":null"));
    assert_non_null(strstr(buf, "\"kv_block_size\":null"));
    assert_int_equal(admit_load_decode(buf, (size_t) n, &back, err, sizeof err), 0);
    assert_memory_equal(&m, &back, sizeof m);
    /* A worker id with characters JSON must escape. */
    strcpy(m.worker_id, "a\"b\\c\x01");
    n = admit_load_encode(&m, buf, sizeof buf);
    assert_int_equal(admit_load_decode(buf, (size_t) n, &back, err, sizeof err), 0);
    assert_string_equal(back.worker_id, "a\"b\\c\x01");
    /* Too small a buffer fails cleanly. */
    assert_int_equal(admit_load_encode(&m, buf, 40), -1);
}

/* Decodes "kv_metrics " + json and returns the error text ("" when it decoded). */
static const char *decode_err(const char *json)
{
    static char err[256];
    char msg[ADMIT_LOAD_MSG_MAX + 64];
    struct admit_load m;
    int n = snprintf(msg, sizeof msg, "kv_metrics %s", json);

    err[0] = '\0';
    if (admit_load_decode(msg, (size_t) n, &m, err, sizeof err) == 0)
        return "";
    assert_true(strlen(err) > 0);
    return err;
}

#define FULL_TAIL                                                                                  \
    "\"state\":\"serving\",\"heartbeat_ms\":1000,\"kv_used_blocks\":null,"                         \
    "\"kv_total_blocks\":null,\"active_decode_blocks\":0,\"active_prefill_tokens\":0,"             \
    "\"max_num_batched_tokens\":null,\"engine_requests\":0,\"engine_request_limit\":4,"            \
    "\"queued_requests\":0,\"request_queue_limit\":16}"

static void test_rejects_malformed(void **state)
{
    char big[4096];
    struct admit_load m;
    char err[256];

    (void) state;
    assert_string_equal(decode_err("{\"v\":1,\"worker_id\":\"w\",\"dp_rank\":0,\"seq\":1,"
                                   "\"ts_ms\":5," FULL_TAIL),
                        "");
    assert_non_null(strstr(decode_err("{\"v\":2,\"worker_id\":\"w\",\"dp_rank\":0,\"seq\":1,"
                                      "\"ts_ms\":5," FULL_TAIL),
                           "unsupported version"));
    assert_non_null(
        strstr(decode_err("{\"worker_id\":\"w\",\"dp_rank\":0,\"seq\":1,\"ts_ms\":5," FULL_TAIL),
               "'v' is missing"));
    assert_non_null(strstr(decode_err("{\"v\":1,\"worker_id\":7,\"dp_rank\":0,\"seq\":1,"
                                      "\"ts_ms\":5," FULL_TAIL),
                           "worker_id"));
    assert_non_null(strstr(decode_err("{\"v\":1,\"worker_id\":\"w\",\"dp_rank\":0,\"seq\":\"1\","
                                      "\"ts_ms\":5," FULL_TAIL),
                           "'seq'"));
    assert_non_null(strstr(decode_err("{\"v\":1,\"worker_id\":\"w\",\"dp_rank\":0,\"seq\":1.5,"
                                      "\"ts_ms\":5," FULL_TAIL),
                           "'seq'"));
    assert_non_null(strstr(decode_err("{\"v\":1,\"worker_id\":\"w\",\"dp_rank\":-1,\"seq\":1,"
                                      "\"ts_ms\":5," FULL_TAIL),
                           "'dp_rank'"));
    /* Huge numbers: past 2^53, and past what a 64-bit integer holds. */
    assert_non_null(strstr(decode_err("{\"v\":1,\"worker_id\":\"w\",\"dp_rank\":0,"
                                      "\"seq\":9007199254740992,\"ts_ms\":5," FULL_TAIL),
                           "'seq'"));
    assert_true(strlen(decode_err("{\"v\":1,\"worker_id\":\"w\",\"dp_rank\":0,"
                                  "\"seq\":99999999999999999999999,\"ts_ms\":5," FULL_TAIL)) > 0);
    /* A missing nullable field is still missing (null must be explicit). */
    assert_non_null(strstr(decode_err("{\"v\":1,\"worker_id\":\"w\",\"dp_rank\":0,\"seq\":1,"
                                      "\"ts_ms\":5,\"state\":\"serving\",\"heartbeat_ms\":1}"),
                           "missing"));
    assert_non_null(strstr(decode_err("{\"v\":1,\"worker_id\":\"w\",\"dp_rank\":0,\"seq\":1,"
                                      "\"ts_ms\":5,\"state\":\"busy\",\"heartbeat_ms\":1}"),
                           "state"));
    assert_non_null(strstr(decode_err("{\"v\":1,\"v\":1}"), "JSON"));
    assert_non_null(strstr(decode_err("{\"v\":1,\"worker_id\":\"w\""), "JSON"));
    assert_non_null(strstr(decode_err("[1,2]"), "not a JSON object"));
    assert_non_null(strstr(decode_err(""), "JSON"));
    /* Wrong topic, no space, oversized. */
    assert_int_equal(admit_load_decode("kv_metricz {}", 13, &m, err, sizeof err), -1);
    assert_int_equal(admit_load_decode("kv_metrics{}", 12, &m, err, sizeof err), -1);
    assert_int_equal(admit_load_decode("kv", 2, &m, err, sizeof err), -1);
    memset(big, ' ', sizeof big);
    memcpy(big, "kv_metrics ", 11);
    assert_int_equal(admit_load_decode(big, sizeof big, &m, err, sizeof err), -1);
    assert_non_null(strstr(err, "limit"));
}

/* kv_block_size came to v1 later: absent is unknown (an older publisher), null is unknown,
 * anything else must be an integer from 1 to 2^53-1. */
static void test_kv_block_size_optional_and_strict(void **state)
{
    static const char head[] = "{\"v\":1,\"worker_id\":\"w\",\"dp_rank\":0,\"seq\":1,\"ts_ms\":5,";
    static const char *const bad[] = {"0",   "-1",   "\"16\"", "16.0",
                                      "1.5", "true", "[16]",   "9007199254740992"};
    char msg[ADMIT_LOAD_MSG_MAX], json[1024], err[256];
    struct admit_load m;
    int n;

    (void) state;
    /* Without the key, as every publisher before it wrote: valid, and unknown. */
    n = snprintf(msg, sizeof msg, "kv_metrics %s" FULL_TAIL, head);
    memset(&m, 0x55, sizeof m);
    assert_int_equal(admit_load_decode(msg, (size_t) n, &m, err, sizeof err), 0);
    assert_int_equal(m.kv_block_size, ADMIT_LOAD_UNKNOWN);
    assert_int_equal(m.engine_request_limit, 4); /* the rest decoded as before */
    /* ... and what such a message re-encodes to says null. */
    assert_true(admit_load_to_json(&m, json, sizeof json) > 0);
    assert_non_null(strstr(json, ",\"kv_block_size\":null,"));
    /* null: unknown. */
    n = snprintf(msg, sizeof msg, "kv_metrics %s\"kv_block_size\":null," FULL_TAIL, head);
    m.kv_block_size = 7;
    assert_int_equal(admit_load_decode(msg, (size_t) n, &m, err, sizeof err), 0);
    assert_int_equal(m.kv_block_size, ADMIT_LOAD_UNKNOWN);
    /* The range's ends. */
    n = snprintf(msg, sizeof msg, "kv_metrics %s\"kv_block_size\":1," FULL_TAIL, head);
    assert_int_equal(admit_load_decode(msg, (size_t) n, &m, err, sizeof err), 0);
    assert_int_equal(m.kv_block_size, 1);
    n = snprintf(msg, sizeof msg, "kv_metrics %s\"kv_block_size\":9007199254740991," FULL_TAIL,
                 head);
    assert_int_equal(admit_load_decode(msg, (size_t) n, &m, err, sizeof err), 0);
    assert_int_equal(m.kv_block_size, ADMIT_LOAD_INT_MAX);
    /* Present but wrong: refused, naming the field and what it must be. */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(json, sizeof json, "%s\"kv_block_size\":%s," FULL_TAIL, head, bad[i]);
        assert_string_equal(decode_err(json), "field 'kv_block_size' must be an integer from 1 "
                                              "to 2^53-1 or null");
    }
    /* Past what a 64-bit integer holds: jansson refuses it already. */
    snprintf(json, sizeof json, "%s\"kv_block_size\":99999999999999999999999," FULL_TAIL, head);
    assert_true(strlen(decode_err(json)) > 0);
    /* Given twice: refused like any duplicate key. */
    snprintf(json, sizeof json, "%s\"kv_block_size\":16,\"kv_block_size\":16," FULL_TAIL, head);
    assert_non_null(strstr(decode_err(json), "JSON"));
}

/* models came to v1 later, like kv_block_size: absent or null is unknown; else an array of
 * distinct names within the bounds, or the message is invalid. */
static void test_models_optional_and_strict(void **state)
{
    static const char head[] = "{\"v\":1,\"worker_id\":\"w\",\"dp_rank\":0,\"seq\":1,\"ts_ms\":5,";
    static const char *const bad[] = {
        "7", "\"a\"", "{}", "[1]", "[null]", "[\"\"]", "[\"tab\\tname\"]", "[[\"a\"]]", "true"};
    char msg[ADMIT_LOAD_MSG_MAX + 256], json[ADMIT_LOAD_MSG_MAX + 1536], list[1024];
    char err[256];
    struct admit_load m;
    const char *p;
    size_t k;
    int n;

    (void) state;
    /* Absent (every publisher before it): valid, unknown; re-encoded as null. */
    n = snprintf(msg, sizeof msg, "kv_metrics %s" FULL_TAIL, head);
    memset(&m, 0x55, sizeof m);
    assert_int_equal(admit_load_decode(msg, (size_t) n, &m, err, sizeof err), 0);
    assert_int_equal(m.models.n, ADMIT_LOAD_UNKNOWN);
    assert_null(admit_load_models_next(&m.models, NULL));
    assert_true(admit_load_to_json(&m, json, sizeof json) > 0);
    assert_non_null(strstr(json, ",\"models\":null}"));
    /* null: unknown. */
    n = snprintf(msg, sizeof msg, "kv_metrics %s\"models\":null," FULL_TAIL, head);
    assert_int_equal(admit_load_decode(msg, (size_t) n, &m, err, sizeof err), 0);
    assert_int_equal(m.models.n, ADMIT_LOAD_UNKNOWN);
    /* [] is a known, empty list. */
    n = snprintf(msg, sizeof msg, "kv_metrics %s\"models\":[]," FULL_TAIL, head);
    assert_int_equal(admit_load_decode(msg, (size_t) n, &m, err, sizeof err), 0);
    assert_int_equal(m.models.n, 0);
    assert_null(admit_load_models_next(&m.models, NULL));
    assert_true(admit_load_to_json(&m, json, sizeof json) > 0);
    assert_non_null(strstr(json, ",\"models\":[]}"));
    /* Names as sent, in order, escapes and UTF-8 included. */
    n = snprintf(msg, sizeof msg,
                 "kv_metrics %s\"models\":[\"meta-llama/Llama-3.1-8B\",\"q\\\"b\\\\\","
                 "\"caf\\u00e9\",\"lora-1\"]," FULL_TAIL,
                 head);
    assert_int_equal(admit_load_decode(msg, (size_t) n, &m, err, sizeof err), 0);
    assert_int_equal(m.models.n, 4);
    p = admit_load_models_next(&m.models, NULL);
    assert_string_equal(p, "meta-llama/Llama-3.1-8B");
    p = admit_load_models_next(&m.models, p);
    assert_string_equal(p, "q\"b\\");
    p = admit_load_models_next(&m.models, p);
    assert_string_equal(p, "caf\xc3\xa9");
    p = admit_load_models_next(&m.models, p);
    assert_string_equal(p, "lora-1");
    assert_null(admit_load_models_next(&m.models, p));
    assert_true(admit_load_models_has(&m.models, "lora-1"));
    assert_false(admit_load_models_has(&m.models, "lora"));
    assert_true(admit_load_to_json(&m, json, sizeof json) > 0);
    assert_non_null(strstr(json, ",\"models\":[\"meta-llama/Llama-3.1-8B\",\"q\\\"b\\\\\","
                                 "\"caf\xc3\xa9\",\"lora-1\"]}"));
    /* Present but wrong. */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(json, sizeof json, "%s\"models\":%s," FULL_TAIL, head, bad[i]);
        assert_non_null(strstr(decode_err(json), "'models'"));
    }
    /* A NUL inside a name: jansson refuses it already. */
    snprintf(json, sizeof json, "%s\"models\":[\"a\\u0000b\"]," FULL_TAIL, head);
    assert_true(strlen(decode_err(json)) > 0);
    /* A name twice. */
    snprintf(json, sizeof json, "%s\"models\":[\"a\",\"b\",\"a\"]," FULL_TAIL, head);
    assert_non_null(strstr(decode_err(json), "twice"));
    /* Names of 127 bytes pass, 128 do not. */
    memset(list, 'n', 127);
    list[127] = '\0';
    snprintf(json, sizeof json, "%s\"models\":[\"%s\"]," FULL_TAIL, head, list);
    assert_string_equal(decode_err(json), "");
    snprintf(json, sizeof json, "%s\"models\":[\"%sn\"]," FULL_TAIL, head, list);
    assert_non_null(strstr(decode_err(json), "'models'"));
    /* 64 names pass, 65 do not. */
    k = 0;
    for (int i = 0; i < ADMIT_LOAD_MODELS_MAX + 1; i++)
        k += (size_t) snprintf(list + k, sizeof list - k, "%s\"%d\"", i ? "," : "", i);
    snprintf(json, sizeof json, "%s\"models\":[%s]," FULL_TAIL, head, list);
    assert_non_null(strstr(decode_err(json), "bounds"));
    *strrchr(list, ',') = '\0';
    snprintf(json, sizeof json, "%s\"models\":[%s]," FULL_TAIL, head, list);
    assert_string_equal(decode_err(json), "");
    /* Over 512 bytes as admitd writes them, though fewer as this message spells them: the
     * bound is on the canonical encoding (5 names of 100 bytes: 2 + 5 * 102 + 4 = 516). */
    k = 0;
    for (int i = 0; i < 5; i++) {
        char name[101];
        memset(name, 'a' + i, 100);
        name[100] = '\0';
        k += (size_t) snprintf(list + k, sizeof list - k, "%s\"%s\"", i ? "," : "", name);
    }
    snprintf(json, sizeof json, "%s\"models\":[%s]," FULL_TAIL, head, list);
    assert_non_null(strstr(decode_err(json), "bounds"));
    /* Given twice: a duplicate key. */
    snprintf(json, sizeof json, "%s\"models\":[],\"models\":[]," FULL_TAIL, head);
    assert_non_null(strstr(decode_err(json), "JSON"));
}

/* Building a list: names kept once, invalid ones and overflows refused with the list as it
 * was, and the equality routers compare lists with. */
static void test_models_build(void **state)
{
    struct admit_load_models a, b;
    char name[ADMIT_LOAD_MODEL_NAME_MAX + 2];

    (void) state;
    admit_load_models_unknown(&a);
    assert_int_equal(admit_load_models_add(&a, "x", 1), -1); /* unknown: clear it first */
    admit_load_models_clear(&a);
    assert_int_equal(a.json, 2);
    assert_int_equal(admit_load_models_add(&a, "x", 1), 0);
    assert_int_equal(admit_load_models_add(&a, "x", 1), 0); /* once */
    assert_int_equal(a.n, 1);
    assert_int_equal(a.json, 5);
    assert_int_equal(admit_load_models_add(&a, "", 0), -1);
    assert_int_equal(admit_load_models_add(&a, "a\nb", 3), -1);
    assert_int_equal(admit_load_models_add(&a, "\xc3", 1), -1);         /* not UTF-8 */
    assert_int_equal(admit_load_models_add(&a, "\xed\xa0\x80", 3), -1); /* a surrogate */
    assert_int_equal(admit_load_models_add(&a, "\xc0\xaf", 2), -1);     /* overlong */
    memset(name, 'n', sizeof name);
    assert_int_equal(admit_load_models_add(&a, name, ADMIT_LOAD_MODEL_NAME_MAX + 1), -1);
    assert_int_equal(admit_load_models_add(&a, name, ADMIT_LOAD_MODEL_NAME_MAX), 0);
    assert_int_equal(a.n, 2);
    assert_int_equal(a.json, 5 + 1 + 129);
    /* Equality: same names in the same order; unknown equals only unknown. */
    admit_load_models_clear(&b);
    assert_false(admit_load_models_equal(&a, &b));
    assert_int_equal(admit_load_models_add(&b, "x", 1), 0);
    assert_int_equal(admit_load_models_add(&b, name, ADMIT_LOAD_MODEL_NAME_MAX), 0);
    assert_true(admit_load_models_equal(&a, &b));
    admit_load_models_unknown(&b);
    assert_false(admit_load_models_equal(&a, &b));
    admit_load_models_unknown(&a);
    assert_true(admit_load_models_equal(&a, &b));
    admit_load_models_clear(&a);
    assert_false(admit_load_models_equal(&a, &b));
    /* 64 names, not 65. */
    for (int i = 0; i < ADMIT_LOAD_MODELS_MAX; i++) {
        int len = snprintf(name, sizeof name, "%d", i);
        assert_int_equal(admit_load_models_add(&a, name, (size_t) len), 0);
    }
    assert_int_equal(admit_load_models_add(&a, "z", 1), -2);
    assert_int_equal(a.n, ADMIT_LOAD_MODELS_MAX);
}

/* The longest message that can be valid still fits in ADMIT_LOAD_MSG_MAX, and its length is
 * the one lib/core/load.c's header comment states. */
static void test_longest_message(void **state)
{
    struct admit_load m, back;
    char buf[ADMIT_LOAD_MSG_MAX], err[256];
    int n;

    (void) state;
    admit_load_init(&m);
    memset(m.worker_id, 0x01, ADMIT_LOAD_WORKER_ID_MAX); /* each escaped as \u0001 */
    m.worker_id[ADMIT_LOAD_WORKER_ID_MAX] = '\0';
    m.dp_rank = m.seq = m.ts_ms = m.heartbeat_ms = ADMIT_LOAD_INT_MAX;
    m.kv_used_blocks = m.kv_total_blocks = m.kv_block_size = ADMIT_LOAD_INT_MAX;
    m.active_decode_blocks = m.active_prefill_tokens = ADMIT_LOAD_INT_MAX;
    m.max_num_batched_tokens = ADMIT_LOAD_INT_MAX;
    m.engine_requests = m.engine_request_limit = ADMIT_LOAD_INT_MAX;
    m.queued_requests = m.request_queue_limit = ADMIT_LOAD_INT_MAX;
    m.state = ADMIT_LOAD_DRAINING;
    /* Without a model list (null): 1295 as before models, and its key and null. */
    n = admit_load_encode(&m, buf, sizeof buf);
    assert_int_equal(n, 1295 + 14);
    /* The widest list: one name of 127 quotes (each escaped: 256 bytes with its quotes), a
     * comma and one of 125 quotes and a letter (253), in brackets: 512 bytes. */
    {
        char q[ADMIT_LOAD_MODEL_NAME_MAX];
        memset(q, '"', sizeof q);
        admit_load_models_clear(&m.models);
        assert_int_equal(admit_load_models_add(&m.models, q, 127), 0);
        q[125] = 'x';
        assert_int_equal(admit_load_models_add(&m.models, q, 126), 0);
        assert_int_equal(m.models.json, ADMIT_LOAD_MODELS_JSON_MAX);
        /* Not one byte more: a third name does not fit, and the list stays. */
        assert_int_equal(admit_load_models_add(&m.models, "y", 1), -2);
        assert_int_equal(m.models.n, 2);
    }
    n = admit_load_encode(&m, buf, sizeof buf);
    assert_int_equal(n, 1817);
    assert_true(n <= ADMIT_LOAD_MSG_MAX);
    assert_int_equal(admit_load_decode(buf, (size_t) n, &back, err, sizeof err), 0);
    assert_memory_equal(&m, &back, sizeof m);
    /* It needs every byte: one fewer and encoding says so. */
    assert_int_equal(admit_load_encode(&m, buf, (size_t) n), -1);
}

/* Every prefix of a valid message is rejected, never crashes. */
static void test_truncations(void **state)
{
    struct admit_load m, back;
    char buf[ADMIT_LOAD_MSG_MAX], err[256];
    int n;

    (void) state;
    sample(&m);
    n = admit_load_encode(&m, buf, sizeof buf);
    for (int i = 0; i < n; i++)
        assert_int_equal(admit_load_decode(buf, (size_t) i, &back, err, sizeof err), -1);
}

static void test_table_newest_wins_and_staleness(void **state)
{
    struct admit_loadtab *t = admit_loadtab_new(3);
    struct admit_load m;
    struct admit_loadtab_entry e;

    (void) state;
    sample(&m);
    assert_int_equal(admit_loadtab_update(t, &m, 1000), 1);
    m.seq = 41; /* older: ignored */
    m.engine_requests = 1;
    assert_int_equal(admit_loadtab_update(t, &m, 1001), 0);
    assert_int_equal(admit_loadtab_get(t, "gpu-7:8080", 1, 1001, &e), 0);
    assert_int_equal(e.load.engine_requests, 4);
    assert_false(e.stale);
    /* Stale after 3 heartbeats (1 s each) of silence, not before. */
    assert_int_equal(admit_loadtab_get(t, "gpu-7:8080", 1, 4000, &e), 0);
    assert_false(e.stale);
    assert_int_equal(admit_loadtab_get(t, "gpu-7:8080", 1, 4001, &e), 0);
    assert_true(e.stale);
    /* A restarted publisher (sequence from 1 again) with a newer clock is taken. */
    m.seq = 1;
    m.ts_ms += 10;
    m.engine_requests = 2;
    assert_int_equal(admit_loadtab_update(t, &m, 1500), 1);
    assert_int_equal(admit_loadtab_get(t, "gpu-7:8080", 1, 1500, &e), 0);
    assert_int_equal(e.load.engine_requests, 2);
    assert_int_equal(admit_loadtab_get(t, "gpu-7:8080", 0, 1500, &e), -1);
    assert_int_equal(admit_loadtab_get(t, "other", 1, 1500, &e), -1);
    admit_loadtab_free(t);
}

static void test_table_order_and_expiry(void **state)
{
    struct admit_loadtab *t = admit_loadtab_new(3);
    struct admit_load m;
    struct admit_loadtab_entry e;
    static const char *const ids[] = {"b", "a", "c", "a", "b"};
    static const int ranks[] = {0, 1, 0, 0, 1};

    (void) state;
    sample(&m);
    for (int i = 0; i < 5; i++) {
        strcpy(m.worker_id, ids[i]);
        m.dp_rank = ranks[i];
        admit_loadtab_update(t, &m, 100 * i);
    }
    assert_int_equal(admit_loadtab_size(t), 5);
    static const char *const want_id[] = {"a", "a", "b", "b", "c"};
    static const int want_rank[] = {0, 1, 0, 1, 0};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(admit_loadtab_at(t, i, 0, &e), 0);
        assert_string_equal(e.load.worker_id, want_id[i]);
        assert_int_equal(e.load.dp_rank, want_rank[i]);
    }
    assert_int_equal(admit_loadtab_at(t, 5, 0, &e), -1);
    /* At t=450, the entries received at 0 and 100 are older than 250 ms; 200 is not. */
    assert_int_equal(admit_loadtab_expire(t, 450, 250), 2);
    assert_int_equal(admit_loadtab_size(t), 3);
    assert_int_equal(admit_loadtab_get(t, "b", 0, 450, &e), -1);
    assert_int_equal(admit_loadtab_get(t, "a", 1, 450, &e), -1);
    assert_int_equal(admit_loadtab_get(t, "c", 0, 450, &e), 0);
    admit_loadtab_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_rejects_malformed),
        cmocka_unit_test(test_kv_block_size_optional_and_strict),
        cmocka_unit_test(test_models_optional_and_strict),
        cmocka_unit_test(test_models_build),
        cmocka_unit_test(test_longest_message),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_table_newest_wins_and_staleness),
        cmocka_unit_test(test_table_order_and_expiry),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
