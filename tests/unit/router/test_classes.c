/* Unit tests for the router's policy classes: every key and default, a table of bad files with
 * the exact error (position included), the limits, hostile input, and classify(). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "router/classes.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static char err[512];

/* A class that the bad cases below build on: lines 1 to 3. */
#define C1 "policy_classes:\n  - name: a\n    quantum: 1\n"
/* Rules after C1 start at line 4; the first rule's item at 5:5. */
#define R1 C1 "policy_class_rules:\n"

static int parse(const char *text, struct router_classes *c)
{
    memset(err, 'x', sizeof err);
    err[sizeof err - 1] = '\0';
    return router_classes_parse("t.yaml", text, strlen(text), c, err, sizeof err);
}

/* Parses a good text into c; the test fails with the message if it is refused. */
static void parse_ok(const char *text, struct router_classes *c)
{
    if (parse(text, c) != 0)
        fail_msg("unexpected error: %s\nin:\n%s", err, text);
    assert_string_equal(err, "");
}

static void assert_empty(const struct router_classes *c)
{
    assert_int_equal(c->n, 0);
    assert_null(c->c);
    assert_int_equal(c->nrules, 0);
    assert_null(c->rules);
    assert_int_equal(c->default_cls, -1);
}

/* Every key, with the example's values. */
static void test_every_key(void **state)
{
    static const char text[] = "# the router's settings are skipped\n"
                               "worker: \"http://h:1=tcp://h:2\"\n"
                               "policy_classes:\n"
                               "  - name: interactive\n"
                               "    prefill_busy_threshold: 2048\n"
                               "    prefill_busy_threshold_frac: 0.5\n"
                               "    decode_busy_threshold: 0.8\n"
                               "    quantum: 4096\n"
                               "    queue_policy: wspt\n"
                               "    request_queue_limit_per_worker: 64\n"
                               "    queue_timeout_ms: 5000\n"
                               "  - name: batch\n"
                               "    quantum: 1024\n"
                               "listen: 0.0.0.0:8090\n"
                               "default_policy_class: batch\n"
                               "policy_class_rules:\n"
                               "  - by: header\n"
                               "  - by: model\n"
                               "    model: meta-llama/Llama-3.1-8B-Instruct\n"
                               "    class: interactive\n"
                               "  - by: prompt_tokens\n"
                               "    buckets:\n"
                               "      - {min_tokens: 0, class: interactive}\n"
                               "      - {min_tokens: 4096, class: batch}\n";
    struct router_classes c;
    const struct rclass *k;

    (void) state;
    parse_ok(text, &c);
    assert_int_equal(c.n, 2);
    k = &c.c[0];
    assert_string_equal(k->name, "interactive");
    assert_int_equal(k->t.active_prefill_tokens_threshold, 2048);
    assert_true(k->t.active_prefill_tokens_threshold_frac == 0.5);
    assert_true(k->t.active_decode_blocks_threshold == 0.8);
    assert_int_equal(k->quantum, 4096);
    assert_int_equal(k->policy, RCLASS_WSPT);
    assert_int_equal(k->limit_per_worker, 64);
    assert_int_equal(k->queue_timeout_ms, 5000);
    assert_string_equal(c.c[1].name, "batch");
    assert_int_equal(c.c[1].quantum, 1024);
    assert_int_equal(c.default_cls, 1);
    assert_int_equal(c.nrules, 3);
    assert_int_equal(c.rules[0].kind, RRULE_HEADER);
    assert_int_equal(c.rules[0].cls, -1);
    assert_int_equal(c.rules[1].kind, RRULE_MODEL);
    assert_string_equal(c.rules[1].model, "meta-llama/Llama-3.1-8B-Instruct");
    assert_int_equal(c.rules[1].cls, 0);
    assert_int_equal(c.rules[2].kind, RRULE_TOKENS);
    assert_int_equal(c.rules[2].nbuckets, 2);
    assert_int_equal(c.rules[2].buckets[0].min_tokens, 0);
    assert_int_equal(c.rules[2].buckets[0].cls, 0);
    assert_int_equal(c.rules[2].buckets[1].min_tokens, 4096);
    assert_int_equal(c.rules[2].buckets[1].cls, 1);
    assert_int_equal(router_classes_find(&c, "batch"), 1);
    assert_int_equal(router_classes_find(&c, "interactive"), 0);
    assert_int_equal(router_classes_find(&c, "Batch"), -1);
    assert_int_equal(router_classes_find(&c, ""), -1);
    router_classes_free(&c);
    assert_empty(&c);
    router_classes_free(&c); /* twice */
    assert_empty(&c);
}

/* What a class that gives only its name and quantum gets; the first class is the default,
 * and the rules are [by: header]. */
static void test_defaults(void **state)
{
    struct router_classes c;

    (void) state;
    parse_ok("policy_classes:\n  - name: only\n    quantum: 7\n", &c);
    assert_int_equal(c.n, 1);
    assert_true(isnan(c.c[0].t.active_decode_blocks_threshold));
    assert_int_equal(c.c[0].t.active_prefill_tokens_threshold, -1);
    assert_true(isnan(c.c[0].t.active_prefill_tokens_threshold_frac));
    assert_false(busy_thresholds_any(&c.c[0].t));
    assert_int_equal(c.c[0].policy, RCLASS_FCFS);
    assert_int_equal(c.c[0].limit_per_worker, 0);
    assert_int_equal(c.c[0].queue_timeout_ms, 0);
    assert_int_equal(c.default_cls, 0);
    assert_int_equal(c.nrules, 1);
    assert_int_equal(c.rules[0].kind, RRULE_HEADER);
    assert_null(c.rules[0].buckets);
    router_classes_free(&c);
    /* Null keeps the default, as in the flat settings; None/none unset the thresholds. */
    parse_ok("policy_classes:\n"
             "  - name: n\n    quantum: 1\n    queue_policy: ~\n"
             "    request_queue_limit_per_worker: null\n    queue_timeout_ms:\n"
             "    prefill_busy_threshold: None\n    prefill_busy_threshold_frac: none\n"
             "    decode_busy_threshold: ~\n"
             "default_policy_class: ~\npolicy_class_rules: null\n",
             &c);
    assert_int_equal(c.c[0].policy, RCLASS_FCFS);
    assert_int_equal(c.c[0].limit_per_worker, 0);
    assert_int_equal(c.c[0].queue_timeout_ms, 0);
    assert_false(busy_thresholds_any(&c.c[0].t));
    assert_int_equal(c.default_cls, 0);
    assert_int_equal(c.nrules, 1); /* null: as absent, the default rules */
    router_classes_free(&c);
    /* An empty rule list is no rules: every request goes to the default class. */
    parse_ok(C1 "  - name: b\n    quantum: 2\ndefault_policy_class: b\npolicy_class_rules: []\n",
             &c);
    assert_int_equal(c.nrules, 0);
    assert_null(c.rules);
    assert_int_equal(c.default_cls, 1);
    router_classes_free(&c);
}

/* Files without classes: no queue. */
static void test_none(void **state)
{
    static const char *const texts[] = {
        "",
        "# nothing\n",
        "---\n",
        "~\n",
        "worker: \"http://h:1=tcp://h:2\"\nlisten: 0.0.0.0:1\n",
        "policy_classes:\n",
        "policy_classes: ~\n",
        "policy_classes: []\n",
        "policy_classes: []\ndefault_policy_class: ~\npolicy_class_rules: ~\n",
        "\xef\xbb\xbfpolicy_classes: []\r\n",
    };
    struct router_classes c;

    (void) state;
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        parse_ok(texts[i], &c);
        assert_empty(&c);
        router_classes_free(&c);
    }
    assert_int_equal(router_classes_parse("t.yaml", NULL, 0, &c, err, sizeof err), 0);
    assert_empty(&c);
    assert_int_equal(router_classes_classify(&c, NULL, NULL, "m", 5), -1);
    assert_int_equal(router_classes_classify(NULL, NULL, NULL, "m", 5), -1);
    assert_int_equal(router_classes_find(&c, "a"), -1);
}

/* The spellings YAML allows for the same values, and the edges of each range. */
static void test_values(void **state)
{
    struct router_classes c;

    (void) state;
    parse_ok("policy_classes:\n"
             "  - {name: \"q.u-o_t3d\", quantum: !!int 1000000000, queue_policy: 'fcfs',"
             "     prefill_busy_threshold: 1000000000000000000, decode_busy_threshold: 1,"
             "     prefill_busy_threshold_frac: 1e2, request_queue_limit_per_worker: 1000000,"
             "     queue_timeout_ms: 86400000}\n"
             "  - {name: '012345678901234567890123456789012345678901234567890123456789012',"
             "     quantum: 010, prefill_busy_threshold: 0, decode_busy_threshold: 0.0,"
             "     prefill_busy_threshold_frac: !!float 0, queue_policy: \"wspt\"}\n"
             "  - {name: 1.5, quantum: 1, decode_busy_threshold: .25,"
             "     prefill_busy_threshold_frac: 5.}\n"
             "  - {name: None, quantum: 1}\n"
             "default_policy_class: \"None\"\n",
             &c);
    assert_int_equal(c.n, 4);
    assert_string_equal(c.c[0].name, "q.u-o_t3d");
    assert_int_equal(c.c[0].quantum, ROUTER_CLASS_QUANTUM_MAX);
    assert_int_equal(c.c[0].policy, RCLASS_FCFS);
    assert_int_equal(c.c[0].t.active_prefill_tokens_threshold, ROUTER_CLASS_TOKENS_MAX);
    assert_true(c.c[0].t.active_decode_blocks_threshold == 1.0);
    assert_true(c.c[0].t.active_prefill_tokens_threshold_frac == 100.0);
    assert_int_equal(c.c[0].limit_per_worker, ROUTER_CLASS_LIMIT_MAX);
    assert_int_equal(c.c[0].queue_timeout_ms, ROUTER_CLASS_TIMEOUT_MAX);
    assert_int_equal(strlen(c.c[1].name), ROUTER_CLASS_NAME_MAX);
    assert_int_equal(c.c[1].quantum, 10);
    assert_int_equal(c.c[1].t.active_prefill_tokens_threshold, 0);
    assert_true(c.c[1].t.active_decode_blocks_threshold == 0.0);
    assert_true(c.c[1].t.active_prefill_tokens_threshold_frac == 0.0);
    assert_int_equal(c.c[1].policy, RCLASS_WSPT);
    assert_string_equal(c.c[2].name, "1.5"); /* a name, whatever YAML would make of it */
    assert_true(c.c[2].t.active_decode_blocks_threshold == 0.25);
    assert_true(c.c[2].t.active_prefill_tokens_threshold_frac == 5.0);
    assert_string_equal(c.c[3].name, "None"); /* None unsets thresholds; a name it is not */
    assert_int_equal(c.default_cls, 3);
    router_classes_free(&c);
    /* Rules may come before the classes they name; a model may hold any printable text. */
    parse_ok("policy_class_rules:\n"
             "  - {by: model, model: \"org/m \xc3\xa9:1\", class: z}\n"
             "  - by: prompt_tokens\n"
             "    buckets: [{class: z, min_tokens: 0}, {min_tokens: 1, class: y}]\n"
             "default_policy_class: y\n"
             "policy_classes: [{name: y, quantum: 1}, {name: z, quantum: 2}]\n",
             &c);
    assert_int_equal(c.nrules, 2);
    assert_string_equal(c.rules[0].model, "org/m \xc3\xa9:1");
    assert_int_equal(c.rules[0].cls, 1);
    assert_int_equal(c.rules[1].buckets[0].cls, 1);
    assert_int_equal(c.rules[1].buckets[1].cls, 0);
    assert_int_equal(c.default_cls, 0);
    router_classes_free(&c);
}

struct bad {
    const char *text;
    const char *err;
};

/* Bad files: the exact message, at the offending token. */
static const struct bad bad[] = {
    /* policy_classes and its items. */
    {"policy_classes: 5\n",
     "t.yaml:1:17: policy_classes: must be a sequence of policy classes, found a scalar"},
    {"policy_classes: {a: 1}\n",
     "t.yaml:1:17: policy_classes: must be a sequence of policy classes, found a mapping"},
    {"policy_classes:\n  name: a\n",
     "t.yaml:2:3: policy_classes: must be a sequence of policy classes, found a mapping"},
    {"policy_classes: \"a\"\n",
     "t.yaml:1:17: policy_classes: must be a sequence of policy classes, found a scalar"},
    {"policy_classes:\n  - 5\n",
     "t.yaml:2:5: policy_classes: an item must be a policy class (a mapping), found a scalar"},
    {"policy_classes: [[a]]\n",
     "t.yaml:1:18: policy_classes: an item must be a policy class (a mapping), found a sequence"},
    {"policy_classes:\n  - ~\n",
     "t.yaml:2:5: policy_classes: an item must be a policy class (a mapping), found a scalar"},
    {C1 "    colour: red\n",
     "t.yaml:4:5: unknown key 'colour' in a policy class (name, quantum, queue_policy, "
     "prefill_busy_threshold, prefill_busy_threshold_frac, decode_busy_threshold, "
     "request_queue_limit_per_worker, queue_timeout_ms)"},
    {C1 "    Name: b\n", "t.yaml:4:5: unknown key 'Name' in a policy class (name, quantum, "
                         "queue_policy, prefill_busy_threshold, prefill_busy_threshold_frac, "
                         "decode_busy_threshold, request_queue_limit_per_worker, "
                         "queue_timeout_ms)"},
    {"policy_classes:\n  - {[x]: 1}\n",
     "t.yaml:2:6: expected a key of a policy class, found a sequence"},
    {"policy_classes:\n  - {? {x: 1} : 1}\n",
     "t.yaml:2:8: expected a key of a policy class, found a mapping"},
    {C1 "    name: b\n", "t.yaml:4:5: duplicate key 'name' (first at 2:5)"},
    {C1 "    quantum: 1\n", "t.yaml:4:5: duplicate key 'quantum' (first at 3:5)"},
    {C1 "  - name: a\n    quantum: 2\n",
     "t.yaml:4:11: name: duplicate policy class 'a' (first at 2:11)"},
    {C1 "  - {quantum: 2, name: \"a\"}\n",
     "t.yaml:4:24: name: duplicate policy class 'a' (first at 2:11)"},
    {"policy_classes:\n  - quantum: 1\n", "t.yaml:2:5: a policy class needs 'name'"},
    {"policy_classes:\n  - name: a\n", "t.yaml:2:5: policy class 'a' needs 'quantum'"},
    {"policy_classes: [{}]\n", "t.yaml:1:18: a policy class needs 'name'"},
    /* name */
    {"policy_classes:\n  - name: a b\n",
     "t.yaml:2:11: name: 'a b' must be a class name: 1 to 63 of A-Z, a-z, 0-9, '_', '.' and '-'"},
    {"policy_classes:\n  - name: \"\"\n",
     "t.yaml:2:11: name: '' must be a class name: 1 to 63 of A-Z, a-z, 0-9, '_', '.' and '-'"},
    {"policy_classes:\n  - name: "
     "0123456789012345678901234567890123456789012345678901234567890123\n",
     "t.yaml:2:11: name: '012345678901234567890123456789012345678901234567890123456789...' "
     "must be a class name: 1 to 63 of A-Z, a-z, 0-9, '_', '.' and '-'"},
    {"policy_classes:\n  - name: \xc3\xa9t\xc3\xa9\n",
     "t.yaml:2:11: name: '\xc3\xa9t\xc3\xa9' must be a class name: 1 to 63 of A-Z, a-z, 0-9, "
     "'_', '.' and '-'"},
    {"policy_classes:\n  - name: \"a\\nb\"\n",
     "t.yaml:2:11: name: 'a\\x0ab' must be a class name: 1 to 63 of A-Z, a-z, 0-9, '_', '.' and "
     "'-'"},
    {"policy_classes:\n  - name: ~\n", "t.yaml:2:11: name: must be a class name: 1 to 63 of A-Z, "
                                       "a-z, 0-9, '_', '.' and '-', not null"},
    {"policy_classes:\n  - name:\n    quantum: 1\n",
     "t.yaml:2:10: name: must be a class name: 1 to 63 of A-Z, a-z, 0-9, '_', '.' and '-', not "
     "null"},
    {"policy_classes:\n  - name: [a]\n", "t.yaml:2:11: name: must be a class name: 1 to 63 of "
                                         "A-Z, a-z, 0-9, '_', '.' and '-', found a sequence"},
    {"policy_classes:\n  - name: \"a\\0b\"\n",
     "t.yaml:2:11: name: the value contains a NUL character"},
    /* quantum: an integer, 1 to the limit, unquoted */
    {C1 "  - name: b\n    quantum: \"4096\"\n",
     "t.yaml:5:14: quantum: '4096' is a string (quoted or tagged): must be an integer from 1 to "
     "1000000000"},
    {C1 "  - name: b\n    quantum: '4096'\n",
     "t.yaml:5:14: quantum: '4096' is a string (quoted or tagged): must be an integer from 1 to "
     "1000000000"},
    {C1 "  - name: b\n    quantum: !!str 4096\n",
     "t.yaml:5:14: quantum: '4096' is a string (quoted or tagged): must be an integer from 1 to "
     "1000000000"},
    {C1 "  - name: b\n    quantum: |\n      4096\n",
     "t.yaml:5:14: quantum: '4096\\x0a' is a string (quoted or tagged): must be an integer from 1 "
     "to 1000000000"},
    {C1 "  - name: b\n    quantum: abc\n",
     "t.yaml:5:14: quantum: 'abc' must be an integer from 1 to 1000000000"},
    {C1 "  - name: b\n    quantum: true\n",
     "t.yaml:5:14: quantum: 'true' must be an integer from 1 to 1000000000"},
    {C1 "  - name: b\n    quantum: 0\n",
     "t.yaml:5:14: quantum: '0' must be an integer from 1 to 1000000000"},
    {C1 "  - name: b\n    quantum: -1\n",
     "t.yaml:5:14: quantum: '-1' must be an integer from 1 to 1000000000"},
    {C1 "  - name: b\n    quantum: +1\n",
     "t.yaml:5:14: quantum: '+1' must be an integer from 1 to 1000000000"},
    {C1 "  - name: b\n    quantum: 1e3\n",
     "t.yaml:5:14: quantum: '1e3' must be an integer from 1 to 1000000000"},
    {C1 "  - name: b\n    quantum: 0x10\n",
     "t.yaml:5:14: quantum: '0x10' must be an integer from 1 to 1000000000"},
    {C1 "  - name: b\n    quantum: 1_000\n",
     "t.yaml:5:14: quantum: '1_000' must be an integer from 1 to 1000000000"},
    {C1 "  - name: b\n    quantum: 1.0\n",
     "t.yaml:5:14: quantum: '1.0' must be an integer from 1 to 1000000000"},
    {C1 "  - name: b\n    quantum: 1000000001\n",
     "t.yaml:5:14: quantum: '1000000001' must be an integer from 1 to 1000000000"},
    {C1 "  - name: b\n    quantum: 99999999999999999999\n",
     "t.yaml:5:14: quantum: '99999999999999999999' must be an integer from 1 to 1000000000"},
    {C1 "  - name: b\n    quantum: ~\n",
     "t.yaml:5:14: quantum: must be an integer from 1 to 1000000000, not null"},
    {C1 "  - name: b\n    quantum: None\n",
     "t.yaml:5:14: quantum: 'None' must be an integer from 1 to 1000000000"},
    {C1 "  - name: b\n    quantum: [1]\n",
     "t.yaml:5:14: quantum: must be an integer from 1 to 1000000000, found a sequence"},
    {C1 "  - name: b\n    quantum:\n      a: 1\n",
     "t.yaml:6:7: quantum: must be an integer from 1 to 1000000000, found a mapping"},
    {C1 "  - name: b\n    quantum: !!null 5\n",
     "t.yaml:5:14: a !!null value must be empty, '~' or 'null'"},
    /* the thresholds */
    {C1 "    prefill_busy_threshold: -1\n",
     "t.yaml:4:29: prefill_busy_threshold: '-1' must be an integer from 0 to "
     "1000000000000000000, or None"},
    {C1 "    prefill_busy_threshold: 1.5\n",
     "t.yaml:4:29: prefill_busy_threshold: '1.5' must be an integer from 0 to "
     "1000000000000000000, or None"},
    {C1 "    prefill_busy_threshold: 1000000000000000001\n",
     "t.yaml:4:29: prefill_busy_threshold: '1000000000000000001' must be an integer from 0 to "
     "1000000000000000000, or None"},
    {C1 "    prefill_busy_threshold: \"None\"\n",
     "t.yaml:4:29: prefill_busy_threshold: 'None' is a string (quoted or tagged): must be an "
     "integer from 0 to 1000000000000000000, or None"},
    {C1 "    prefill_busy_threshold: {}\n",
     "t.yaml:4:29: prefill_busy_threshold: must be an integer from 0 to 1000000000000000000, or "
     "None, found a mapping"},
    {C1 "    prefill_busy_threshold_frac: -0.5\n",
     "t.yaml:4:34: prefill_busy_threshold_frac: '-0.5' must be a number >= 0, or None"},
    {C1 "    prefill_busy_threshold_frac: .inf\n",
     "t.yaml:4:34: prefill_busy_threshold_frac: '.inf' must be a number >= 0, or None"},
    {C1 "    prefill_busy_threshold_frac: inf\n",
     "t.yaml:4:34: prefill_busy_threshold_frac: 'inf' must be a number >= 0, or None"},
    {C1 "    prefill_busy_threshold_frac: nan\n",
     "t.yaml:4:34: prefill_busy_threshold_frac: 'nan' must be a number >= 0, or None"},
    {C1 "    prefill_busy_threshold_frac: 0x1p1\n",
     "t.yaml:4:34: prefill_busy_threshold_frac: '0x1p1' must be a number >= 0, or None"},
    {C1 "    prefill_busy_threshold_frac: 1e999\n",
     "t.yaml:4:34: prefill_busy_threshold_frac: '1e999' must be a number >= 0, or None"},
    {C1 "    prefill_busy_threshold_frac: 1.5.2\n",
     "t.yaml:4:34: prefill_busy_threshold_frac: '1.5.2' must be a number >= 0, or None"},
    {C1 "    prefill_busy_threshold_frac: \"0.5\"\n",
     "t.yaml:4:34: prefill_busy_threshold_frac: '0.5' is a string (quoted or tagged): must be a "
     "number >= 0, or None"},
    {C1 "    decode_busy_threshold: 1.5\n",
     "t.yaml:4:28: decode_busy_threshold: '1.5' must be a number from 0 to 1, or None"},
    {C1 "    decode_busy_threshold: 1.0000001\n",
     "t.yaml:4:28: decode_busy_threshold: '1.0000001' must be a number from 0 to 1, or None"},
    {C1 "    decode_busy_threshold: -0.0\n",
     "t.yaml:4:28: decode_busy_threshold: '-0.0' must be a number from 0 to 1, or None"},
    {C1 "    decode_busy_threshold: [0.5]\n",
     "t.yaml:4:28: decode_busy_threshold: must be a number from 0 to 1, or None, found a "
     "sequence"},
    /* the queue */
    {C1 "    queue_policy: lcfs\n", "t.yaml:4:19: queue_policy: 'lcfs' must be fcfs or wspt"},
    {C1 "    queue_policy: FCFS\n", "t.yaml:4:19: queue_policy: 'FCFS' must be fcfs or wspt"},
    {C1 "    queue_policy: [fcfs]\n",
     "t.yaml:4:19: queue_policy: must be fcfs or wspt, found a sequence"},
    {C1 "    request_queue_limit_per_worker: 1000001\n",
     "t.yaml:4:37: request_queue_limit_per_worker: '1000001' must be an integer from 0 to "
     "1000000"},
    {C1 "    request_queue_limit_per_worker: -1\n",
     "t.yaml:4:37: request_queue_limit_per_worker: '-1' must be an integer from 0 to 1000000"},
    {C1 "    queue_timeout_ms: 86400001\n",
     "t.yaml:4:23: queue_timeout_ms: '86400001' must be an integer from 0 to 86400000"},
    {C1 "    queue_timeout_ms: 5s\n",
     "t.yaml:4:23: queue_timeout_ms: '5s' must be an integer from 0 to 86400000"},
    /* default_policy_class and policy_class_rules */
    {"default_policy_class: a\n",
     "t.yaml:1:1: default_policy_class needs at least one class in policy_classes"},
    {"policy_class_rules:\n  - by: header\n",
     "t.yaml:1:1: policy_class_rules needs at least one class in policy_classes"},
    {"policy_classes: []\npolicy_class_rules: []\n",
     "t.yaml:2:1: policy_class_rules needs at least one class in policy_classes"},
    {"listen: x\npolicy_class_rules: []\ndefault_policy_class: a\n",
     "t.yaml:2:1: policy_class_rules needs at least one class in policy_classes"},
    {"default_policy_class: a\npolicy_class_rules: []\npolicy_classes: ~\n",
     "t.yaml:1:1: default_policy_class needs at least one class in policy_classes"},
    {C1 "default_policy_class: b\n", "t.yaml:4:23: default_policy_class: unknown policy class 'b'"},
    {C1 "default_policy_class: A\n", "t.yaml:4:23: default_policy_class: unknown policy class 'A'"},
    {C1 "default_policy_class: [a]\n",
     "t.yaml:4:23: default_policy_class: must be a class name: 1 to 63 of A-Z, a-z, 0-9, '_', "
     "'.' and '-', found a sequence"},
    {C1 "default_policy_class: a b\n",
     "t.yaml:4:23: default_policy_class: 'a b' must be a class name: 1 to 63 of A-Z, a-z, 0-9, "
     "'_', '.' and '-'"},
    {C1 "policy_class_rules: header\n",
     "t.yaml:4:21: policy_class_rules: must be a sequence of rules, found a scalar"},
    {C1 "policy_class_rules: {by: header}\n",
     "t.yaml:4:21: policy_class_rules: must be a sequence of rules, found a mapping"},
    {R1 "  - header\n",
     "t.yaml:5:5: policy_class_rules: an item must be a rule (a mapping), found a scalar"},
    /* rules */
    {R1 "  - by: nope\n", "t.yaml:5:9: by: 'nope' must be header, model or prompt_tokens"},
    {R1 "  - by: Header\n", "t.yaml:5:9: by: 'Header' must be header, model or prompt_tokens"},
    {R1 "  - by: ~\n", "t.yaml:5:9: by: must be header, model or prompt_tokens, not null"},
    {R1 "  - by: [header]\n",
     "t.yaml:5:9: by: must be header, model or prompt_tokens, found a sequence"},
    {R1 "  - model: m\n    class: a\n",
     "t.yaml:5:5: a rule needs 'by' (header, model or prompt_tokens)"},
    {R1 "  - {}\n", "t.yaml:5:5: a rule needs 'by' (header, model or prompt_tokens)"},
    {R1 "  - by: header\n    header: x\n",
     "t.yaml:6:5: unknown key 'header' in a rule (by, model, class, buckets)"},
    {R1 "  - by: header\n    by: model\n", "t.yaml:6:5: duplicate key 'by' (first at 5:5)"},
    {R1 "  - by: header\n    class: a\n", "t.yaml:6:5: a header rule takes no 'class'"},
    {R1 "  - {by: header, model: m, class: a}\n", "t.yaml:5:18: a header rule takes no 'model'"},
    {R1 "  - {class: a, by: header, model: m}\n", "t.yaml:5:6: a header rule takes no 'class'"},
    {R1 "  - by: model\n    class: a\n", "t.yaml:5:5: a model rule needs 'model'"},
    {R1 "  - by: model\n    model: m\n", "t.yaml:5:5: a model rule needs 'class'"},
    {R1 "  - {by: model, model: m, class: a, buckets: [{min_tokens: 0, class: a}]}\n",
     "t.yaml:5:37: a model rule takes no 'buckets'"},
    {R1 "  - by: prompt_tokens\n", "t.yaml:5:5: a prompt_tokens rule needs 'buckets'"},
    {R1 "  - {by: prompt_tokens, class: a, buckets: [{min_tokens: 0, class: a}]}\n",
     "t.yaml:5:25: a prompt_tokens rule takes no 'class'"},
    {R1 "  - {by: model, model: \"\", class: a}\n",
     "t.yaml:5:24: model: '' must be a model name (1 to 255 bytes, no control characters)"},
    {R1 "  - {by: model, model: \"a\\tb\", class: a}\n",
     "t.yaml:5:24: model: 'a\\x09b' must be a model name (1 to 255 bytes, no control characters)"},
    {R1 "  - {by: model, model: ~, class: a}\n",
     "t.yaml:5:24: model: must be a model name (1 to 255 bytes, no control characters), not null"},
    {R1 "  - {by: model, model: [m], class: a}\n",
     "t.yaml:5:24: model: must be a model name (1 to 255 bytes, no control characters), found a "
     "sequence"},
    {R1 "  - {by: model, model: m, class: zz}\n", "t.yaml:5:34: class: unknown policy class 'zz'"},
    {R1 "  - {by: model, model: m, class: a b}\n",
     "t.yaml:5:34: class: 'a b' must be a class name: 1 to 63 of A-Z, a-z, 0-9, '_', '.' and "
     "'-'"},
    /* buckets */
    {R1 "  - by: prompt_tokens\n    buckets: []\n",
     "t.yaml:6:14: buckets: needs at least one bucket"},
    {R1 "  - by: prompt_tokens\n    buckets: 5\n",
     "t.yaml:6:14: buckets: must be a sequence of buckets, found a scalar"},
    {R1 "  - by: prompt_tokens\n    buckets: ~\n",
     "t.yaml:6:14: buckets: must be a sequence of buckets, not null"},
    {R1 "  - by: prompt_tokens\n    buckets: {min_tokens: 0, class: a}\n",
     "t.yaml:6:14: buckets: must be a sequence of buckets, found a mapping"},
    {R1 "  - by: prompt_tokens\n    buckets: [0]\n",
     "t.yaml:6:15: buckets: an item must be a bucket (a mapping), found a scalar"},
    {R1 "  - by: prompt_tokens\n    buckets:\n      - {min_tokens: 5, class: a}\n",
     "t.yaml:7:22: min_tokens: the first bucket must start at 0, not 5"},
    {R1 "  - by: prompt_tokens\n    buckets:\n      - {min_tokens: 0, class: a}\n"
        "      - {class: a, min_tokens: 0}\n",
     "t.yaml:8:32: min_tokens: 0 must be more than the previous bucket's 0 (the floors increase "
     "strictly)"},
    {R1 "  - by: prompt_tokens\n    buckets:\n      - {min_tokens: 0, class: a}\n"
        "      - {min_tokens: 100, class: a}\n      - {min_tokens: 99, class: a}\n",
     "t.yaml:9:22: min_tokens: 99 must be more than the previous bucket's 100 (the floors "
     "increase strictly)"},
    {R1 "  - by: prompt_tokens\n    buckets:\n      - {class: a}\n",
     "t.yaml:7:9: a bucket needs 'min_tokens'"},
    {R1 "  - by: prompt_tokens\n    buckets:\n      - {min_tokens: 0}\n",
     "t.yaml:7:9: a bucket needs 'class'"},
    {R1 "  - by: prompt_tokens\n    buckets:\n      - {min_tokens: 0, class: a, max_tokens: 9}\n",
     "t.yaml:7:35: unknown key 'max_tokens' in a bucket (min_tokens, class)"},
    {R1 "  - by: prompt_tokens\n    buckets:\n      - {min_tokens: 0, min_tokens: 0}\n",
     "t.yaml:7:25: duplicate key 'min_tokens' (first at 7:10)"},
    {R1 "  - by: prompt_tokens\n    buckets:\n      - {min_tokens: \"0\", class: a}\n",
     "t.yaml:7:22: min_tokens: '0' is a string (quoted or tagged): must be an integer from 0 to "
     "1000000000000000000"},
    {R1 "  - by: prompt_tokens\n    buckets:\n      - {min_tokens: -1, class: a}\n",
     "t.yaml:7:22: min_tokens: '-1' must be an integer from 0 to 1000000000000000000"},
    {R1 "  - by: prompt_tokens\n    buckets:\n      - {min_tokens: 0, class: b}\n",
     "t.yaml:7:32: class: unknown policy class 'b'"},
    {R1 "  - by: prompt_tokens\n    buckets:\n      - {min_tokens: 0, class: [a]}\n",
     "t.yaml:7:32: class: must be a class name: 1 to 63 of A-Z, a-z, 0-9, '_', '.' and '-', "
     "found a sequence"},
    /* The first error in file order among those a pass finds: the walk's before the names'. */
    {"policy_class_rules:\n  - {by: model, model: m, class: nope}\n"
     "policy_classes:\n  - {name: a, quantum: 0}\n",
     "t.yaml:4:24: quantum: '0' must be an integer from 1 to 1000000000"},
    {"policy_class_rules:\n  - {by: model, model: m, class: nope}\ndefault_policy_class: zz\n"
     "policy_classes:\n  - {name: a, quantum: 1}\n",
     "t.yaml:2:34: class: unknown policy class 'nope'"},
    /* What cfgfile finds first: the file as a whole, structured keys included. */
    {"policy_classes: &x []\n", "t.yaml:1:17: anchors and aliases are not allowed"},
    {"policy_classes:\n  - name: *x\n", "t.yaml:2:11: anchors and aliases are not allowed"},
    {"policy_classes: !!seq []\n",
     "t.yaml:1:17: tag '!!seq' is not allowed (only !!str, !!int, !!bool, !!null and !!float)"},
    {"policy_classes:\n  - {name: !foo a, quantum: 1}\n",
     "t.yaml:2:12: tag '!foo' is not allowed (only !!str, !!int, !!bool, !!null and !!float)"},
    {"policy_classes: []\npolicy_classes: []\n",
     "t.yaml:2:1: duplicate key 'policy_classes' (first at 1:1)"},
    {"listen: [a]\npolicy_classes: []\n",
     "t.yaml:1:9: expected a single value for 'listen', found a sequence"},
    {"policy_classes:\n  - name: a\n   quantum: 1\n",
     "t.yaml:3:4: did not find expected '-' indicator (while parsing a block collection at 2:3)"},
    {"- policy_classes\n",
     "t.yaml:1:1: expected a mapping of settings at the top level, found a sequence"},
    {"policy_classes: []\n---\npolicy_classes: []\n", "t.yaml:2:1: only one document is allowed"},
    {"policy_classes: [\xff]\n", "t.yaml:1:18: invalid UTF-8"},
    /* Positions after a BOM and CR LF line ends. */
    {"\xef\xbb\xbfpolicy_classes:\r\n  - name: a\r\n    quantum: 0\r\n",
     "t.yaml:3:14: quantum: '0' must be an integer from 1 to 1000000000"},
};

static void test_bad(void **state)
{
    struct router_classes c;
    int failed = 0;

    (void) state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&c, 0x5a, sizeof c); /* whatever it held, it is left empty */
        if (parse(bad[i].text, &c) != -1) {
            print_error("case %zu accepted:\n%s\n", i, bad[i].text);
            router_classes_free(&c);
            failed++;
            continue;
        }
        if (strcmp(err, bad[i].err) != 0) {
            print_error("case %zu:\n%s\ngot  '%s'\nwant '%s'\n", i, bad[i].text, err, bad[i].err);
            failed++;
        }
        assert_empty(&c);
    }
    assert_int_equal(failed, 0);
}

/* Appends n items made by fmt (with %d the item's number) to buf. */
static size_t items(char *buf, size_t o, int n, const char *fmt)
{
    for (int i = 0; i < n; i++)
        o += (size_t) sprintf(buf + o, fmt, i, i);
    return o;
}

/* 64 classes, rules and buckets are accepted; one more is refused at its item. */
static void test_limits(void **state)
{
    char *t = malloc(65536);
    struct router_classes c;
    size_t o;

    (void) state;
    assert_non_null(t);
    o = items(t, (size_t) sprintf(t, "policy_classes:\n"), ROUTER_CLASSES_MAX,
              "  - {name: c%d, quantum: %d1}\n");
    parse_ok(t, &c);
    assert_int_equal(c.n, ROUTER_CLASSES_MAX);
    assert_string_equal(c.c[63].name, "c63");
    assert_int_equal(c.c[63].quantum, 631);
    router_classes_free(&c);
    items(t, o, 1, "  - {name: x%d, quantum: 1%d}\n");
    assert_int_equal(parse(t, &c), -1);
    assert_string_equal(err, "t.yaml:66:5: policy_classes: more than 64 items");
    assert_empty(&c);

    o = items(t, (size_t) sprintf(t, C1 "policy_class_rules:\n"), ROUTER_RULES_MAX,
              "  - {by: model, model: m%d, class: a} # %d\n");
    parse_ok(t, &c);
    assert_int_equal(c.nrules, ROUTER_RULES_MAX);
    assert_string_equal(c.rules[63].model, "m63");
    router_classes_free(&c);
    items(t, o, 1, "  - {by: header} # %d %d\n");
    assert_int_equal(parse(t, &c), -1);
    assert_string_equal(err, "t.yaml:69:5: policy_class_rules: more than 64 items");

    o = items(t, (size_t) sprintf(t, R1 "  - by: prompt_tokens\n    buckets:\n"),
              ROUTER_BUCKETS_MAX, "      - {min_tokens: %d00, class: a} # %d\n");
    parse_ok(t, &c);
    assert_int_equal(c.rules[0].nbuckets, ROUTER_BUCKETS_MAX);
    assert_int_equal(c.rules[0].buckets[63].min_tokens, 6300);
    router_classes_free(&c);
    items(t, o, 1, "      - {min_tokens: 9999%d, class: a} # %d\n");
    assert_int_equal(parse(t, &c), -1);
    assert_string_equal(err, "t.yaml:71:9: buckets: more than 64 items");
    free(t);
}

/* Nesting deeper than the schema is refused at its first extra level; deeper still, cfgfile
 * refuses it first, at its limit, in time linear in the input however deep it goes. */
static void test_deep_nesting(void **state)
{
    const size_t depth = 500000;
    char *t = malloc(2 * depth + 64);
    struct router_classes c;
    size_t o;

    (void) state;
    assert_non_null(t);
    o = (size_t) sprintf(t, "policy_classes: [[1]]\n");
    assert_int_equal(router_classes_parse("t.yaml", t, o, &c, err, sizeof err), -1);
    assert_string_equal(
        err, "t.yaml:1:18: policy_classes: an item must be a policy class (a mapping), found a "
             "sequence");
    o = (size_t) sprintf(t, "policy_classes: ");
    memset(t + o, '[', depth);
    assert_int_equal(router_classes_parse("t.yaml", t, o + depth, &c, err, sizeof err), -1);
    assert_string_equal(err, "t.yaml:1:33: nesting deeper than 16 levels is not allowed");
    assert_empty(&c);
    memset(t + o + depth, ']', depth);
    assert_int_equal(router_classes_parse("t.yaml", t, o + 2 * depth, &c, err, sizeof err), -1);
    assert_string_equal(err, "t.yaml:1:33: nesting deeper than 16 levels is not allowed");
    o = (size_t) sprintf(t, "policy_classes:\n  - name: a\n    quantum: ");
    memset(t + o, '{', depth);
    memset(t + o + depth, '}', depth);
    assert_int_equal(router_classes_parse("t.yaml", t, o + 2 * depth, &c, err, sizeof err), -1);
    assert_string_equal(err, "t.yaml:3:28: nesting deeper than 16 levels is not allowed");
    o = (size_t) sprintf(t, "policy_classes:\n  - name: a\n    quantum: {{{{}}}}\n");
    assert_int_equal(router_classes_parse("t.yaml", t, o, &c, err, sizeof err), -1);
    assert_string_equal(
        err, "t.yaml:3:14: quantum: must be an integer from 1 to 1000000000, found a mapping");
    assert_empty(&c);
    free(t);
}

/* A fake request's headers, looked up ignoring case as HTTP does. */
struct hdrs {
    const char *pairs[8]; /* name, value, ..., NULL */
    int asked;            /* lookups made */
};

static const char *lookup(void *arg, const char *name)
{
    struct hdrs *h = arg;

    h->asked++;
    for (const char *const *p = h->pairs; *p; p += 2)
        if (strcasecmp(p[0], name) == 0)
            return p[1];
    return NULL;
}

static int classify(const struct router_classes *c, const char *model, int64_t tokens, ...)
{
    struct hdrs h = {{NULL}, 0};
    va_list ap;
    int n = 0;

    va_start(ap, tokens);
    for (const char *s; (s = va_arg(ap, const char *)) != NULL && n < 6;)
        h.pairs[n++] = s;
    va_end(ap);
    return router_classes_classify(c, lookup, &h, model, tokens);
}

static const char rules_text[] = "policy_classes:\n"
                                 "  - {name: interactive, quantum: 4}\n"
                                 "  - {name: batch, quantum: 1}\n"
                                 "  - {name: long, quantum: 2}\n"
                                 "default_policy_class: batch\n"
                                 "policy_class_rules:\n"
                                 "  - by: header\n"
                                 "  - {by: model, model: m1, class: interactive}\n"
                                 "  - by: prompt_tokens\n"
                                 "    buckets:\n"
                                 "      - {min_tokens: 0, class: interactive}\n"
                                 "      - {min_tokens: 4096, class: long}\n"
                                 "      - {min_tokens: 100000, class: batch}\n";

enum { INTERACTIVE, BATCH, LONG };

static void test_classify_header(void **state)
{
    struct router_classes c;

    (void) state;
    parse_ok(rules_text, &c);
    assert_int_equal(classify(&c, "", 0, "x-dynamo-meta-policy-class", "long", NULL), LONG);
    assert_int_equal(classify(&c, "", 0, "X-Dynamo-Meta-Policy-Class", "batch", NULL), BATCH);
    assert_int_equal(classify(&c, "", 0, "x-admit-class", "long", NULL), LONG);
    assert_int_equal(classify(&c, "", 0, "X-ADMIT-CLASS", "long", NULL), LONG);
    /* Dynamo's name first; an empty value is no value. */
    assert_int_equal(
        classify(&c, "", 0, "x-admit-class", "batch", "x-dynamo-meta-policy-class", "long", NULL),
        LONG);
    assert_int_equal(
        classify(&c, "", 0, "x-dynamo-meta-policy-class", "", "x-admit-class", "long", NULL), LONG);
    assert_int_equal(classify(&c, "", 0, "x-admit-class", " \t long\t ", NULL), LONG);
    /* A name that is no class: the default class, not the rules that follow (model m1 and
     * the buckets would both say interactive). Names are exact. */
    assert_int_equal(classify(&c, "m1", 0, "x-admit-class", "nope", NULL), BATCH);
    assert_int_equal(classify(&c, "m1", 0, "x-admit-class", "Long", NULL), BATCH);
    assert_int_equal(classify(&c, "m1", 0, "x-admit-class", "lon", NULL), BATCH);
    assert_int_equal(classify(&c, "m1", 0, "x-admit-class", "longer", NULL), BATCH);
    /* No header (or only blanks): the next rules decide. */
    assert_int_equal(classify(&c, "m1", 9999, NULL), INTERACTIVE);
    assert_int_equal(classify(&c, "m1", 9999, "x-admit-class", "  ", NULL), INTERACTIVE);
    assert_int_equal(classify(&c, "m1", 9999, "x-other", "long", NULL), INTERACTIVE);
    assert_int_equal(router_classes_classify(&c, NULL, NULL, "m2", 9999), LONG);
    router_classes_free(&c);
}

static void test_classify_model_and_tokens(void **state)
{
    struct router_classes c;
    struct hdrs h = {{NULL}, 0};

    (void) state;
    parse_ok(rules_text, &c);
    assert_int_equal(classify(&c, "m1", 100000, NULL), INTERACTIVE);
    /* Models are exact: the buckets then decide, at their boundaries. */
    assert_int_equal(classify(&c, "M1", 0, NULL), INTERACTIVE);
    assert_int_equal(classify(&c, "m1 ", 4095, NULL), INTERACTIVE);
    assert_int_equal(classify(&c, "m", 4096, NULL), LONG);
    assert_int_equal(classify(&c, NULL, 4097, NULL), LONG);
    assert_int_equal(classify(&c, "", 99999, NULL), LONG);
    assert_int_equal(classify(&c, "", 100000, NULL), BATCH);
    assert_int_equal(classify(&c, "", INT64_MAX, NULL), BATCH);
    /* An unknown size matches no bucket: the default class. */
    assert_int_equal(classify(&c, "", -1, NULL), BATCH);
    assert_int_equal(classify(&c, "m1", -1, NULL), INTERACTIVE);
    /* The header rule asks for both names, in lower case. */
    assert_int_equal(router_classes_classify(&c, lookup, &h, "", 5), INTERACTIVE);
    assert_int_equal(h.asked, 2);
    router_classes_free(&c);
}

static void test_classify_order_and_defaults(void **state)
{
    struct router_classes c;

    (void) state;
    /* The first rule that matches wins, however specific a later one is. */
    parse_ok(
        "policy_classes: [{name: a, quantum: 1}, {name: b, quantum: 1}, {name: c, quantum: 1}]\n"
        "policy_class_rules:\n"
        "  - {by: model, model: m, class: b}\n"
        "  - {by: prompt_tokens, buckets: [{min_tokens: 0, class: c}]}\n"
        "  - {by: model, model: n, class: a}\n"
        "  - by: header\n",
        &c);
    assert_int_equal(classify(&c, "m", 5, "x-admit-class", "a", NULL), 1);
    assert_int_equal(classify(&c, "n", 5, "x-admit-class", "a", NULL), 2);
    assert_int_equal(classify(&c, "n", -1, "x-admit-class", "b", NULL), 0);
    assert_int_equal(classify(&c, "o", -1, "x-admit-class", "b", NULL), 1);
    assert_int_equal(classify(&c, "o", -1, NULL), 0); /* the default: the first class */
    router_classes_free(&c);
    /* No rules given: [by: header]. */
    parse_ok("policy_classes: [{name: a, quantum: 1}, {name: b, quantum: 1}]\n", &c);
    assert_int_equal(classify(&c, "m", 5, "x-admit-class", "b", NULL), 1);
    assert_int_equal(classify(&c, "m", 5, "x-admit-class", "z", NULL), 0);
    assert_int_equal(classify(&c, "m", 5, NULL), 0);
    assert_int_equal(router_classes_classify(&c, NULL, NULL, NULL, 5), 0);
    router_classes_free(&c);
    /* An empty list: no rule, every request the default class, headers or not. */
    parse_ok("policy_classes: [{name: a, quantum: 1}, {name: b, quantum: 1}]\n"
             "default_policy_class: b\npolicy_class_rules: []\n",
             &c);
    assert_int_equal(classify(&c, "m", 5, "x-admit-class", "a", NULL), 1);
    router_classes_free(&c);
}

/* Loading from disk: the path in messages; a file that cannot be read. */
static void test_load(void **state)
{
    char path[] = "/tmp/test_classes_XXXXXX", want[600];
    static const char text[] = "policy_classes:\n  - name: a\n    quantum: x\n";
    struct router_classes c;
    int fd = mkstemp(path);

    (void) state;
    assert_true(fd >= 0);
    assert_int_equal(write(fd, C1, strlen(C1)), (ssize_t) strlen(C1));
    close(fd);
    assert_int_equal(router_classes_load(path, &c, err, sizeof err), 0);
    assert_int_equal(c.n, 1);
    router_classes_free(&c);
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t) strlen(text));
    close(fd);
    assert_int_equal(router_classes_load(path, &c, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:3:14: quantum: 'x' must be an integer from 1 to 1000000000",
             path);
    assert_string_equal(err, want);
    assert_empty(&c);
    unlink(path);
    assert_int_equal(router_classes_load(path, &c, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: cannot read: No such file or directory", path);
    assert_string_equal(err, want);
    assert_empty(&c);
    /* A zeroed struct frees, and a NULL or tiny error buffer is fine. */
    memset(&c, 0, sizeof c);
    router_classes_free(&c);
    assert_int_equal(router_classes_parse("t.yaml", "policy_classes: 5", 17, &c, NULL, 0), -1);
    assert_int_equal(router_classes_parse("t.yaml", "policy_classes: 5", 17, &c, err, 8), -1);
    assert_string_equal(err, "t.yaml:");
}

#ifdef ADMIT_SOURCE_ROOT
/* The shipped example of classes loads and says what its comments say. */
static void test_example(void **state)
{
    struct router_classes c;

    (void) state;
    if (router_classes_load(ADMIT_SOURCE_ROOT "/examples/admit-router-classes.yaml", &c, err,
                            sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(c.n, 2);
    assert_string_equal(c.c[0].name, "interactive");
    assert_string_equal(c.c[c.default_cls].name, "batch");
    assert_int_equal(c.nrules, 3);
    router_classes_free(&c);
    /* The settings' example has none. */
    assert_int_equal(
        router_classes_load(ADMIT_SOURCE_ROOT "/examples/admit-router.yaml", &c, err, sizeof err),
        0);
    assert_empty(&c);
}
#endif

/* Random bytes and mutated good files: 0, or -1 with "t.yaml:L:C: ..." and nothing kept. */
static void test_random(void **state)
{
    static const char alphabet[] = "ab: -?[]{},#&*!|>'\"\n\t~0159.e_"
                                   "policy_classes name quantum by buckets min_tokens class";
    uint32_t seed = 4242;
    char t[512];
    struct router_classes c;

    (void) state;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = strlen(rules_text) < sizeof t ? strlen(rules_text) : sizeof t;
        int rc, line, col;

        memcpy(t, rules_text, len);
        for (int k = 0; k < 1 + iter % 4; k++) {
            seed = seed * 1103515245u + 12345u;
            t[(seed >> 16) % len] = alphabet[(seed >> 8) % (sizeof alphabet - 1)];
        }
        rc = router_classes_parse("t.yaml", t, len, &c, err, sizeof err);
        if (rc == 0) {
            assert_true(c.n >= 1 && c.default_cls >= 0 && (size_t) c.default_cls < c.n);
            for (size_t i = 0; i < c.nrules; i++)
                for (size_t b = 0; b < c.rules[i].nbuckets; b++)
                    assert_true(c.rules[i].buckets[b].cls >= 0);
            (void) router_classes_classify(&c, NULL, NULL, "m1", (int64_t) seed % 200000);
            router_classes_free(&c);
            continue;
        }
        assert_int_equal(rc, -1);
        assert_int_equal(sscanf(err, "t.yaml:%d:%d: ", &line, &col), 2);
        assert_true(line >= 1 && col >= 1);
        assert_empty(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_key),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_none),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_classify_header),
        cmocka_unit_test(test_classify_model_and_tokens),
        cmocka_unit_test(test_classify_order_and_defaults),
        cmocka_unit_test(test_load),
#ifdef ADMIT_SOURCE_ROOT
        cmocka_unit_test(test_example),
#endif
        cmocka_unit_test(test_random),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
