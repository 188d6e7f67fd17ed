/* Unit tests for the load message codec and the subscriber's table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admit/load.h"
#include "admission/loadtab.h"

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

/* The list holds these n names, in this order. */
static void assert_names(const struct admit_load_models *l, const char *const *want, int n)
{
    const char *p = NULL;

    assert_int_equal(l->n, n);
    for (int i = 0; i < n; i++) {
        p = admit_load_models_next(l, p);
        assert_non_null(p);
        assert_string_equal(p, want[i]);
    }
    assert_null(admit_load_models_next(l, p));
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
    static const char *const names[] = {"meta-llama/Llama-3.1-8B", "q\"b\\", "caf\xc3\xa9",
                                        "lora-1"};
    char err[256];
    struct admit_load m;
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
    assert_names(&m.models, names, 4);
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

/* ---- the decoder's JSON: what jansson's reader took, it takes, and refuses the rest ---- */

/* A whole valid message around a fragment: HEAD, then the fragment (which may be empty or
 * end with a comma), then the rest of the required fields. */
#define HEAD "{\"v\":1,\"worker_id\":\"w\",\"dp_rank\":0,\"seq\":1,\"ts_ms\":5,"

static const char *decode_with(const char *fragment)
{
    static char json[ADMIT_LOAD_MSG_MAX];

    snprintf(json, sizeof json, HEAD "%s" FULL_TAIL, fragment);
    return decode_err(json);
}

/* What JSON allows anywhere: whitespace between tokens, escapes in any string (keys too),
 * numbers of every form in fields this reader does not know, values of any type nested in
 * them. */
static void test_json_forms_accepted(void **state)
{
    static const char *const unknown[] = {
        "\"x\":-0,", "\"x\":1.5e-7,", "\"x\":1E+300,", "\"x\":-0.0,", "\"x\":0e999999999999,",
        "\"x\":9223372036854775807,", "\"x\":-9223372036854775808,", "\"x\":1e-400,",
        "\"x\":true,\"y\":false,\"z\":null,", "\"x\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\",",
        "\"x\":{\"a\":[1,{\"b\":{}},[[]],\"s\"],\"c\":{\"a\":1}},", "\"x\":[{\"a\":1},{\"a\":1}],",
        "\"x\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\x7f\",", "\"\\u0078\":1,\"y\":1,",
        /* 1.7976931348623157e308 is DBL_MAX; anything that rounds to it still is a double */
        "\"x\":1.7976931348623158e308,", "\"x\":-1.797693134862315807e308,"};
    static const char spaced[] =
        " \t\r\n{ \"v\" : 1 ,\n\"worker_id\"\t:\t\"w\" , \"dp_rank\" : -0 , \"seq\" :1,"
        "\"ts_ms\":5,\"state\" :\r\"draining\",\"heartbeat_ms\":1000,\"kv_used_blocks\":null,"
        "\"kv_total_blocks\" : null , \"active_decode_blocks\":0,\"active_prefill_tokens\":0,"
        "\"max_num_batched_tokens\":null,\"engine_requests\":0,\"engine_request_limit\":4,"
        "\"queued_requests\":0,\"request_queue_limit\":16 ,\"models\" : [ \"a\" , \"b\" ] }\n ";
    char msg[ADMIT_LOAD_MSG_MAX], err[256];
    struct admit_load m;
    int n;

    (void) state;
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        if (strcmp(decode_with(unknown[i]), "") != 0)
            fail_msg("refused %s: %s", unknown[i], decode_with(unknown[i]));
    }
    n = snprintf(msg, sizeof msg, "kv_metrics %s", spaced);
    assert_int_equal(admit_load_decode(msg, (size_t) n, &m, err, sizeof err), 0);
    assert_int_equal(m.dp_rank, 0); /* -0 is the integer 0 */
    assert_int_equal(m.state, ADMIT_LOAD_DRAINING);
    assert_int_equal(m.models.n, 2);
    /* Keys and values spelt with escapes are the same keys and values. */
    n = snprintf(msg, sizeof msg,
                 "kv_metrics {\"\\u0076\":1,\"worker\\u005fid\":\"g\\u00e9\\/1\",\"dp_rank\":2,"
                 "\"s\\u0065q\":1,\"ts_ms\":5,\"\\u0073tate\":\"dr\\u0061ining\",%s",
                 &FULL_TAIL[strlen("\"state\":\"serving\",")]);
    assert_int_equal(admit_load_decode(msg, (size_t) n, &m, err, sizeof err), 0);
    assert_string_equal(m.worker_id, "g\xc3\xa9/1");
    assert_int_equal(m.dp_rank, 2);
    assert_int_equal(m.state, ADMIT_LOAD_DRAINING);
}

/* What JSON (or jansson's reading of it) forbids, wherever it is: a message is refused whole,
 * as "invalid JSON", even when the fault is in a field this reader does not know. */
static void test_json_faults_refused(void **state)
{
    static const char *const bad[] = {
        "\"x\":1,\"x\":2,",               /* a key twice */
        "\"x\":1,\"\\u0078\":2,",         /* ... spelt otherwise */
        "\"x\":{\"a\":1,\"a\":2},",       /* ... in a nested object */
        "\"seq\":1,",                     /* a known key twice */
        "\"x\":\"\\ud800\",",             /* a lone high surrogate */
        "\"x\":\"\\udc00\",",             /* a lone low one */
        "\"x\":\"\\ud800\\u0041\",",      /* a high one without its low one */
        "\"x\":\"\\u0000\",",             /* NUL, escaped: not in a C string */
        "\"x\\u0000\":1,",                /* ... nor in a key */
        "\"x\":\"a\tb\",",                /* a raw control byte */
        "\"x\":\"\\x\",",                 /* an unknown escape */
        "\"x\":\"\\u12g4\",",             /* a short \u escape */
        "\"x\":\"\xc0\xaf\",",            /* overlong UTF-8 */
        "\"x\":\"\xed\xa0\x80\",",        /* a surrogate in UTF-8 */
        "\"x\":\"\xf4\x90\x80\x80\",",    /* past U+10FFFF */
        "\"x\":\"\xc3\",",                /* cut short */
        "\"x\":\"\x80\",",                /* a lone continuation byte */
        "\"x\":01,",                      /* a leading zero */
        "\"x\":-,",                       /* no digits */
        "\"x\":1.,",                      /* none after the point */
        "\"x\":.5,",                      /* none before it */
        "\"x\":1e,",                      /* none in the exponent */
        "\"x\":+1,",                      /* a plus sign */
        "\"x\":9223372036854775808,",     /* past a 64-bit integer */
        "\"x\":-9223372036854775809,",    /* ... below it */
        "\"x\":1e400,",                   /* past a double */
        "\"x\":1e309,",                   /* ... by its exponent alone */
        "\"x\":-1.7976931348623159e308,", /* ... just */
        "\"x\":[1,],",                    /* a trailing comma */
        "\"x\":{\"a\":1,},",              /* ... in an object */
        "\"x\":[1 2],",                   /* no comma */
        "\"x\":{\"a\" 1},",               /* no colon */
        "\"x\":{1:2},",                   /* a key that is not a string */
        "\"x\":tru,",                     /* not a literal */
        "\"x\":nul,",
        "\"x\":NaN,",
        "\"x\":'s',",
        "\"x\":[,",
    };
    char msg[ADMIT_LOAD_MSG_MAX + 64];
    char err[256];
    struct admit_load m;
    int n;

    (void) state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *e = decode_with(bad[i]);
        if (strncmp(e, "invalid JSON at byte ", 21) != 0)
            fail_msg("%s: %s", bad[i], e[0] ? e : "accepted");
    }
    /* After the object: whitespace only, and JSON's (a form feed is not). */
    assert_non_null(strstr(decode_err(HEAD FULL_TAIL " x"), "invalid JSON"));
    assert_non_null(strstr(decode_err(HEAD FULL_TAIL "\f"), "invalid JSON"));
    assert_non_null(strstr(decode_err(HEAD FULL_TAIL "{}"), "invalid JSON"));
    assert_non_null(strstr(decode_err(HEAD "\"x\":1," FULL_TAIL), "")); /* sanity: valid */
    assert_string_equal(decode_err(HEAD "\"x\":1," FULL_TAIL), "");
    assert_non_null(strstr(decode_err("7"), "invalid JSON"));
    assert_non_null(strstr(decode_err("[1,"), "invalid JSON"));
    assert_non_null(strstr(decode_err("{"), "invalid JSON"));
    /* A NUL byte after a number: jansson's reader skipped it (a bug); JSON has no place for
     * it, and this reader refuses it. */
    n = snprintf(msg, sizeof msg, "kv_metrics " HEAD "\"x\":1%c," FULL_TAIL, 'N');
    msg[strchr(msg, 'N') - msg] = '\0';
    assert_int_equal(admit_load_decode(msg, (size_t) n, &m, err, sizeof err), -1);
    assert_non_null(strstr(err, "invalid JSON"));
}

/* Exactly where a number stops fitting a double: 2^1024 - 2^970, halfway between DBL_MAX and
 * the next power of two, rounds up (to even) and overflows; one less does not. */
static void test_json_double_limit(void **state)
{
    static const char limit[] =
        "17976931348623158079372897140530341507993413271003782693617377898044496829276475094664901"
        "79775872070963302864166928879109465555478519404026306574886715058206819089020007083836762"
        "73854845817711531764475730270069855571366959622842914819860834936475292719074168444365510"
        "704342711559699508093042880177904174497792";
    char num[400], frag[512];

    (void) state;
    assert_int_equal(strlen(limit), 309);
    snprintf(frag, sizeof frag, "\"x\":%s.0,", limit); /* the limit itself */
    assert_non_null(strstr(decode_with(frag), "real number overflow"));
    snprintf(num, sizeof num, "%s", limit);
    num[308] = '1'; /* one less */
    snprintf(frag, sizeof frag, "\"x\":%s.999,", num);
    assert_string_equal(decode_with(frag), "");
    snprintf(frag, sizeof frag, "\"x\":0.000%se312,", num); /* the same, written otherwise */
    assert_string_equal(decode_with(frag), "");
    snprintf(frag, sizeof frag, "\"x\":0.%s1e309,", limit); /* the limit and a bit */
    assert_non_null(strstr(decode_with(frag), "overflow"));
    snprintf(frag, sizeof frag, "\"x\":%s,", limit); /* no point: an integer, too big */
    assert_non_null(strstr(decode_with(frag), "too big integer"));
}

/* Deep nesting in a field this reader does not know is fine as long as the message holds it:
 * the deepest a message can hold (the scanner's limits are past it). */
static void test_json_deep_unknown(void **state)
{
    char msg[ADMIT_LOAD_MSG_MAX], err[256];
    struct admit_load m;
    size_t n = 0, depth = (ADMIT_LOAD_MSG_MAX - 11 - 6) / 2;

    (void) state;
    n += (size_t) snprintf(msg, sizeof msg, "kv_metrics {\"x\":");
    memset(msg + n, '[', depth), n += depth;
    memset(msg + n, ']', depth), n += depth;
    msg[n++] = '}';
    assert_true(n <= ADMIT_LOAD_MSG_MAX);
    assert_int_equal(admit_load_decode(msg, n, &m, err, sizeof err), -1);
    assert_string_equal(err, "field 'v' is missing"); /* valid JSON: only the fields lack */
    msg[n - 2] = '}';                                 /* the innermost ']' for a '}': wrong */
    assert_int_equal(admit_load_decode(msg, n, &m, err, sizeof err), -1);
    assert_non_null(strstr(err, "invalid JSON"));
}

/* When a message has several faults, the one reported is the one jansson's reader reported:
 * JSON's first, then the fields' in its order (v first), wherever they stand. */
static void test_error_precedence(void **state)
{
    (void) state;
    /* A JSON fault after a field's. */
    assert_non_null(strstr(decode_with("\"seq\":\"x\",\"y\":01,"), "invalid JSON"));
    /* The version first, even when it comes last. */
    assert_string_equal(decode_err("{\"worker_id\":7,\"state\":1,\"v\":2}"),
                        "unsupported version 2 (this reader knows 1)");
    assert_string_equal(decode_err("{\"worker_id\":7,\"v\":\"1\"}"),
                        "field 'v' must be an integer from 0 to 2^53-1");
    /* Then worker_id, state, dp_rank, seq, ts_ms, heartbeat_ms, the rest, models. */
    assert_string_equal(decode_err("{\"models\":1,\"heartbeat_ms\":0,\"state\":\"x\",\"v\":1}"),
                        "field 'worker_id' must be a string");
    assert_string_equal(
        decode_err("{\"models\":1,\"heartbeat_ms\":0,\"state\":\"x\",\"v\":1,\"worker_id\":\"w\"}"),
        "field 'state' must be \"serving\" or \"draining\"");
    assert_string_equal(
        decode_err("{\"models\":1,\"heartbeat_ms\":0,\"v\":1,\"worker_id\":\"w\",\"state\":"
                   "\"serving\"}"),
        "field 'dp_rank' is missing");
    assert_string_equal(decode_err("{\"models\":1,\"heartbeat_ms\":0,\"v\":1,\"worker_id\":\"w\","
                                   "\"state\":\"serving\",\"ts_ms\":1,\"seq\":1,\"dp_rank\":1}"),
                        "field 'heartbeat_ms' must be an integer from 1 to 2^53-1");
    assert_string_equal(decode_with("\"models\":1,\"kv_block_size\":0,"),
                        "field 'kv_block_size' must be an integer from 1 to 2^53-1 or null");
    assert_string_equal(decode_with("\"models\":[\"a\",\"a\",1],"),
                        "field 'models' lists a name twice");
    assert_string_equal(decode_with("\"models\":[\"a\",1,\"a\"],"),
                        "field 'models' must hold model names of 1 to 127 bytes without "
                        "control characters");
}

/* role: written only when not both (an aggregated worker's message is byte for byte what it was
 * before the field); absent or null read as both; a role's name (escapes decoded) as that role;
 * anything else refuses the message, after every other field's error. */
static void test_role(void **state)
{
    static const struct {
        const char *frag;
        enum admit_load_role want;
    } good[] = {
        {"", ADMIT_LOAD_ROLE_BOTH},
        {"\"role\":null,", ADMIT_LOAD_ROLE_BOTH},
        {"\"role\":\"both\",", ADMIT_LOAD_ROLE_BOTH},
        {"\"role\":\"prefill\",", ADMIT_LOAD_ROLE_PREFILL},
        {"\"role\":\"decode\",", ADMIT_LOAD_ROLE_DECODE},
        {"\"role\" : \"pre\\u0066ill\",", ADMIT_LOAD_ROLE_PREFILL},
        {"\"r\\u006fle\":\"decode\",", ADMIT_LOAD_ROLE_DECODE},
    };
    static const char *const bad[] = {
        "\"role\":\"\",",
        "\"role\":\"Prefill\",",
        "\"role\":\"prefill \",",
        "\"role\":\"prefillx\",",
        "\"role\":\"router\",",
        "\"role\":\"decode\\u0001\",",
        "\"role\":1,",
        "\"role\":0,",
        "\"role\":true,",
        "\"role\":[\"prefill\"],",
        "\"role\":{},",
    };
    char json[ADMIT_LOAD_MSG_MAX], buf[ADMIT_LOAD_MSG_MAX], plain[ADMIT_LOAD_MSG_MAX], err[256];
    struct admit_load m, back;
    int n, n0;

    (void) state;
    sample(&m);
    assert_int_equal(m.role, ADMIT_LOAD_ROLE_BOTH); /* admit_load_init()'s */
    n0 = admit_load_encode(&m, plain, sizeof plain);
    assert_true(n0 > 0);
    assert_null(strstr(plain, "role"));
    for (int r = ADMIT_LOAD_ROLE_PREFILL; r <= ADMIT_LOAD_ROLE_DECODE; r++) {
        char want[32];

        m.role = (enum admit_load_role) r;
        n = admit_load_encode(&m, buf, sizeof buf);
        snprintf(want, sizeof want, ",\"role\":\"%s\"}", admit_load_role_name(m.role));
        assert_int_equal(n, n0 + (int) strlen(want) - 1);
        assert_memory_equal(buf, plain, (size_t) n0 - 1); /* the same message, and the role */
        assert_string_equal(buf + n0 - 1, want);
        memset(&back, 0x55, sizeof back);
        assert_int_equal(admit_load_decode(buf, (size_t) n, &back, err, sizeof err), 0);
        assert_memory_equal(&m, &back, sizeof m);
        assert_int_equal(admit_load_to_json(&m, json, sizeof json), n - 11);
        assert_string_equal(json, buf + 11);
    }
    m.role = ADMIT_LOAD_ROLE_BOTH;
    assert_int_equal(admit_load_encode(&m, buf, sizeof buf), n0);
    assert_string_equal(buf, plain);
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        n = snprintf(buf, sizeof buf, "kv_metrics " HEAD "%s" FULL_TAIL, good[i].frag);
        memset(&back, 0x55, sizeof back);
        if (admit_load_decode(buf, (size_t) n, &back, err, sizeof err) != 0)
            fail_msg("refused %s: %s", good[i].frag, err);
        assert_int_equal(back.role, good[i].want);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (strcmp(decode_with(bad[i]), "field 'role' must be \"prefill\", \"decode\", "
                                        "\"both\" or null") != 0)
            fail_msg("%s: %s", bad[i], decode_with(bad[i]));
    /* Given twice: invalid JSON (as any key). The least of the field errors: after models'. */
    assert_non_null(strstr(decode_with("\"role\":\"prefill\",\"role\":\"decode\","), "duplicate"));
    assert_string_equal(decode_with("\"role\":\"x\",\"models\":1,"),
                        "field 'models' must be an array of strings or null");
    assert_string_equal(decode_err("{\"role\":7,\"v\":1,\"worker_id\":\"w\"}"),
                        "field 'state' must be \"serving\" or \"draining\"");
}

/* Model names are judged decoded: escapes count as the bytes they stand for, a name spelt two
 * ways is the same name, and the bound on the list is its compact length. */
static void test_models_decoded(void **state)
{
    static const char *const names[] = {"\xf0\x9f\x98\x80", "\xc3\xa9", "a/b"};
    char json[1100], list[1024], msg[ADMIT_LOAD_MSG_MAX], err[256];
    struct admit_load m;
    size_t k = 0;
    int n;

    (void) state;
    n = snprintf(msg, sizeof msg,
                 "kv_metrics " HEAD
                 "\"models\":[\"\\ud83d\\ude00\",\"\\u00e9\",\"a\\/b\"]," FULL_TAIL);
    assert_int_equal(admit_load_decode(msg, (size_t) n, &m, err, sizeof err), 0);
    assert_names(&m.models, names, 3);
    assert_int_equal(m.models.json, 2 + 6 + 1 + 4 + 1 + 5); /* ["😀","é","a/b"] */
    assert_string_equal(decode_with("\"models\":[\"a\",\"\\u0061\"],"),
                        "field 'models' lists a name twice");
    assert_non_null(strstr(decode_with("\"models\":[\"\\u001f\"],"), "control characters"));
    /* 127 bytes decoded, though 6 times as many written: a name; 128 is not. */
    for (int i = 0; i < 127; i++)
        k += (size_t) snprintf(list + k, sizeof list - k, "\\u0%s", i ? "06e" : "06E");
    snprintf(json, sizeof json, "\"models\":[\"%s\"],", list);
    assert_string_equal(decode_with(json), "");
    snprintf(json, sizeof json, "\"models\":[\"%sn\"],", list);
    assert_non_null(strstr(decode_with(json), "1 to 127 bytes"));
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
 * the one lib/admission/load.c's header comment states. */
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
    /* And the longer role: 17 bytes more (,"role":"prefill"). */
    m.role = ADMIT_LOAD_ROLE_PREFILL;
    n = admit_load_encode(&m, buf, sizeof buf);
    assert_int_equal(n, 1817 + 17);
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

/* admitd's rule for a worker id (its --worker-id), which admit-router holds messages to. */
static void test_worker_id_rule(void **state)
{
    char longest[ADMIT_LOAD_WORKER_ID_MAX + 2];

    (void) state;
    assert_true(admit_load_worker_id_ok("gpu-7:8080"));
    assert_true(admit_load_worker_id_ok("!~"));
    assert_false(admit_load_worker_id_ok(""));
    assert_false(admit_load_worker_id_ok("a b"));
    assert_false(admit_load_worker_id_ok("a\nb"));
    assert_false(admit_load_worker_id_ok("a\"b"));
    assert_false(admit_load_worker_id_ok("a\\b"));
    assert_false(admit_load_worker_id_ok("a\x7f"));
    assert_false(admit_load_worker_id_ok("g\xc3\xa9"));
    memset(longest, 'w', ADMIT_LOAD_WORKER_ID_MAX);
    longest[ADMIT_LOAD_WORKER_ID_MAX] = '\0';
    assert_true(admit_load_worker_id_ok(longest));
    longest[ADMIT_LOAD_WORKER_ID_MAX] = 'w';
    longest[ADMIT_LOAD_WORKER_ID_MAX + 1] = '\0';
    assert_false(admit_load_worker_id_ok(longest));
}

/* Each entry keeps the monitor's latch (admission/loadtab.h): a message with the engine's numbers
 * unknown (a failed scrape) leaves them as last known, so admit-top's ROOM agrees with the
 * router's monitor. */
static void test_table_latch(void **state)
{
    struct admit_loadtab *t = admit_loadtab_new(3);
    struct busy_thresholds th;
    struct busy_capacity cap;
    struct busy_load row;
    struct admit_load m;

    (void) state;
    busy_thresholds_unset(&th);
    th.active_decode_blocks_threshold = 0.8;
    sample(&m);
    m.kv_used_blocks = 95;
    m.kv_total_blocks = 100;
    m.active_decode_blocks = 10;
    admit_loadtab_update(t, &m, 1000);
    busy_latch_row(loadtab_latch_at(t, 0), &row, &cap);
    assert_false(has_room(&row, &cap, &th));
    /* A failed scrape: kv_used_blocks and kv_total_blocks unknown, admitd's own bookings low. */
    m.seq++;
    m.kv_used_blocks = -1;
    m.kv_total_blocks = -1;
    admit_loadtab_update(t, &m, 1100);
    busy_latch_row(loadtab_latch_at(t, 0), &row, &cap);
    assert_int_equal(row.decode_blocks, 95);
    assert_int_equal(cap.kv_total_blocks, 100);
    assert_false(has_room(&row, &cap, &th));
    /* Known and under: room again. */
    m.seq++;
    m.kv_used_blocks = 20;
    m.kv_total_blocks = 100;
    admit_loadtab_update(t, &m, 1200);
    busy_latch_row(loadtab_latch_at(t, 0), &row, &cap);
    assert_true(has_room(&row, &cap, &th));
    assert_null(loadtab_latch_at(t, 1));
    admit_loadtab_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_rejects_malformed),
        cmocka_unit_test(test_kv_block_size_optional_and_strict),
        cmocka_unit_test(test_models_optional_and_strict),
        cmocka_unit_test(test_json_forms_accepted),
        cmocka_unit_test(test_json_faults_refused),
        cmocka_unit_test(test_json_double_limit),
        cmocka_unit_test(test_json_deep_unknown),
        cmocka_unit_test(test_error_precedence),
        cmocka_unit_test(test_models_decoded),
        cmocka_unit_test(test_models_build),
        cmocka_unit_test(test_role),
        cmocka_unit_test(test_longest_message),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_table_newest_wins_and_staleness),
        cmocka_unit_test(test_table_order_and_expiry),
        cmocka_unit_test(test_table_latch),
        cmocka_unit_test(test_worker_id_rule),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
