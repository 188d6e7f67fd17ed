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
    n = admit_load_encode(&m, buf, sizeof buf);
    assert_int_equal(n, 1295);
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
        cmocka_unit_test(test_longest_message),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_table_newest_wins_and_staleness),
        cmocka_unit_test(test_table_order_and_expiry),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
