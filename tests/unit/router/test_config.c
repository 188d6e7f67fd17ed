/* Unit tests for admit-router's option table: defaults, workers, thresholds, lists, env. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "router/config.h"
#include "../testenv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define W1 "http://127.0.0.1:8080=tcp://127.0.0.1:5557"
#define W2 "http://[::1]:8081=ipc:///tmp/w2.ipc"

static char err[512];

/* Parses the NULL-terminated flags with env; the previous result's lists are freed first. */
static enum opt_result parse(struct router_cfg *c, const char *const *env, ...)
{
    char *argv[32];
    int argc;
    va_list ap;

    router_cfg_free(c);
    testenv_set(env);
    va_start(ap, env);
    argc = testenv_args(argv, 32, "admit-router", ap);
    va_end(ap);
    return router_cfg_parse(c, argc, argv, testenv_get, err, sizeof err);
}

/* l's items, comma-joined, are want. */
static void assert_items(const struct opt_list *l, const char *want)
{
    char buf[512];

    assert_string_equal(testenv_join(l, buf, sizeof buf), want);
}

static void test_defaults(void **state)
{
    static struct router_cfg c;

    (void) state;
    assert_int_equal(parse(&c, NULL, "--worker=" W1, NULL), OPT_RUN);
    assert_items(&c.workers, W1);
    assert_int_equal(c.models.n, 0);
    assert_string_equal(c.listen.host, "0.0.0.0");
    assert_int_equal(c.listen.port, 8090);
    assert_int_equal(c.metrics_listen.port, 9092);
    assert_true(isnan(c.t.active_decode_blocks_threshold));
    assert_int_equal(c.t.active_prefill_tokens_threshold, -1);
    assert_true(isnan(c.t.active_prefill_tokens_threshold_frac));
    assert_false(busy_thresholds_any(&c.t));
    assert_int_equal(c.overload_status, 529);
    assert_int_equal(c.missed_heartbeats, 3);
    assert_int_equal(c.max_heartbeat_ms, 60000);
    assert_int_equal(c.upstream_timeout_ms, 600000);
    assert_int_equal(c.client_timeout_ms, 60000);
    assert_int_equal(c.max_header_bytes, 65536);
    assert_int_equal(c.max_body_bytes, 33554432);
    assert_int_equal(c.upstream_keepalive, 64);
    assert_int_equal(c.stream_buffer_bytes, 262144);
    assert_int_equal(c.retry_after_s, 0);
    assert_int_equal(c.drain_timeout_ms, 30000);
    assert_string_equal(c.admin_token, "");
    assert_int_equal(c.log_level, LOG_INFO);
    assert_int_equal(c.log_json, 0);
    assert_int_equal(c.access_log, 0);
    assert_int_equal(c.listen.port, 8090);
    assert_int_equal(c.metrics_listen.port, 9092);
    assert_int_equal(c.subscriber_nng, 0); /* auto */
    assert_int_equal(c.load_batch_ms, 2);
    assert_int_equal(c.dns_family, RC_DNS_V4);
    router_cfg_free(&c);
}

/* --dns-family names one of four, from a flag or the environment. */
static void test_dns_family(void **state)
{
    static struct router_cfg c;
    const char *const env[] = {"ADMIT_ROUTER_DNS_FAMILY", "v6-preferred", NULL};

    (void) state;
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--dns-family=v6", NULL), OPT_RUN);
    assert_int_equal(c.dns_family, RC_DNS_V6);
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--dns-family=v4-preferred", NULL), OPT_RUN);
    assert_int_equal(c.dns_family, RC_DNS_V4_PREFERRED);
    assert_int_equal(parse(&c, env, "--worker=" W1, NULL), OPT_RUN);
    assert_int_equal(c.dns_family, RC_DNS_V6_PREFERRED);
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--dns-family=ipv6", NULL), OPT_ERROR);
    assert_non_null(strstr(err, "--dns-family"));
    assert_non_null(strstr(err, "must be v4, v6, v4-preferred or v6-preferred"));
    router_cfg_free(&c);
}

/* --subscriber is auto or nng, from a flag or the environment; --load-batch-ms 0..10. */
static void test_subscriber(void **state)
{
    static struct router_cfg c;
    const char *const env[] = {"ADMIT_ROUTER_SUBSCRIBER", "nng", NULL};

    (void) state;
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--subscriber=nng", NULL), OPT_RUN);
    assert_int_equal(c.subscriber_nng, 1);
    assert_int_equal(parse(&c, env, "--worker=" W1, NULL), OPT_RUN);
    assert_int_equal(c.subscriber_nng, 1);
    assert_int_equal(parse(&c, env, "--worker=" W1, "--subscriber=auto", NULL), OPT_RUN);
    assert_int_equal(c.subscriber_nng, 0);
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--subscriber=zmq", NULL), OPT_ERROR);
    assert_non_null(strstr(err, "--subscriber"));
    assert_non_null(strstr(err, "must be auto or nng"));
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--load-batch-ms=0", NULL), OPT_RUN);
    assert_int_equal(c.load_batch_ms, 0);
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--load-batch-ms=11", NULL), OPT_ERROR);
    /* Both need a restart: a reload that changes them keeps what runs. */
    {
        static struct router_cfg next;
        char *argv[] = {"admit-router", "--worker=" W1, "--subscriber=nng", "--load-batch-ms=5",
                        NULL};

        assert_int_equal(parse(&c, NULL, "--worker=" W1, NULL), OPT_RUN);
        testenv_set(NULL);
        assert_int_equal(router_cfg_reparse(&next, 4, argv, testenv_get, err, sizeof err), 0);
        assert_int_equal(router_cfg_diff(&c, &next), 2);
        assert_int_equal(next.subscriber_nng, 0);
        assert_int_equal(next.load_batch_ms, 2);
        router_cfg_free(&next);
    }
    router_cfg_free(&c);
}

/* Every setting the proxy, admission and the router read is parsed into its field. */
static void test_proxy_copy(void **state)
{
    static struct router_cfg c;

    (void) state;
    assert_int_equal(
        parse(&c, NULL, "--worker=" W1, "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:7",
              "--overload-status-code=503", "--upstream-timeout-ms=11", "--client-timeout-ms=12",
              "--max-header-bytes=2048", "--max-body-bytes=14", "--upstream-keepalive=15",
              "--stream-buffer-bytes=8192", "--retry-after=17", "--drain-timeout-ms=18",
              "--admin-token=0123456789abcdef", "--log-level=debug", "--log-format=json",
              "--access-log", NULL),
        OPT_RUN);
    assert_string_equal(c.listen.host, "127.0.0.1");
    assert_int_equal(c.listen.port, 0);
    assert_int_equal(c.metrics_listen.port, 7);
    assert_int_equal(c.overload_status, 503);
    assert_int_equal(c.upstream_timeout_ms, 11);
    assert_int_equal(c.client_timeout_ms, 12);
    assert_int_equal(c.max_header_bytes, 2048);
    assert_int_equal(c.max_body_bytes, 14);
    assert_int_equal(c.upstream_keepalive, 15);
    assert_int_equal(c.stream_buffer_bytes, 8192);
    assert_int_equal(c.retry_after_s, 17);
    assert_int_equal(c.drain_timeout_ms, 18);
    assert_string_equal(c.admin_token, "0123456789abcdef");
    assert_int_equal(c.log_level, LOG_DEBUG);
    assert_int_equal(c.log_json, 1);
    assert_int_equal(c.access_log, 1);
    router_cfg_free(&c);
}

static void test_worker_errors(void **state)
{
    static const struct {
        const char *arg, *want;
    } cases[] = {
        {"--worker=http://h:1", "--worker: 'http://h:1' must be PROXY_URL=PUB_URL"},
        {"--worker=https://h:1=tcp://h:2", "--worker: 'https://h:1=tcp://h:2': "},
        {"--worker=http://h:1/v1=tcp://h:2", "--worker: 'http://h:1/v1=tcp://h:2': "},
        {"--worker=http://h:1=udp://h:2", "the load publisher must be tcp://HOST:PORT"},
        {"--worker=http://h:1=", "the load publisher must be"},
        {"--worker==tcp://h:2", "--worker: '=tcp://h:2': "},
    };
    static struct router_cfg c;

    (void) state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(parse(&c, NULL, cases[i].arg, NULL), OPT_ERROR);
        if (strstr(err, cases[i].want) == NULL)
            fail_msg("%s: got '%s', want '%s'", cases[i].arg, err, cases[i].want);
        assert_int_equal(c.workers.n, 0); /* nothing is kept after an error */
    }
    /* A bad worker in the environment names the variable. */
    {
        const char *const env[] = {"ADMIT_ROUTER_WORKER", W1 ",nonsense", NULL};
        assert_int_equal(parse(&c, env, NULL), OPT_ERROR);
        assert_string_equal(err, "ADMIT_ROUTER_WORKER: 'nonsense' must be PROXY_URL=PUB_URL");
    }
}

/* No worker at all is an error that --check-config reports too. */
static void test_missing_worker(void **state)
{
    static struct router_cfg c;

    (void) state;
    assert_int_equal(parse(&c, NULL, NULL), OPT_ERROR);
    assert_non_null(strstr(err, "no worker"));
    assert_non_null(strstr(err, "--worker=PROXY_URL=PUB_URL"));
    assert_non_null(strstr(err, "--workers-file=FILE"));
    assert_non_null(strstr(err, "--worker-dns=NAME:HTTP_PORT:PUB_PORT"));
    assert_int_equal(parse(&c, NULL, "--check-config", NULL), OPT_ERROR);
    assert_non_null(strstr(err, "no worker"));
    assert_int_equal(parse(&c, NULL, "--check-config", "--worker=" W1, NULL), OPT_CHECK);
    assert_int_equal(parse(&c, NULL, "--worker=,", NULL), OPT_ERROR); /* no item in it */
    assert_int_equal(parse(&c, NULL, "--help", NULL), OPT_HELP);      /* help needs no worker */
    assert_int_equal(parse(&c, NULL, "--version", NULL), OPT_VERSION);
    router_cfg_free(&c);
}

/* Discovery: the workers file (read with the config, errors at file:line), DNS names, their
 * interval and nameserver; any one of the three sources is enough. */
static void test_discovery(void **state)
{
    static struct router_cfg c;
    char path[64] = "", farg[96], cpath[64] = "", carg[96];

    (void) state;
    testenv_write(path, "# two\n" W1 "\nhttp://h:9=tcp://h:10\n");
    snprintf(farg, sizeof farg, "--workers-file=%s", path);
    assert_int_equal(parse(&c, NULL, farg, NULL), OPT_RUN);
    assert_int_equal(c.workers.n, 0);
    assert_string_equal(c.workers_file, path);
    assert_int_equal(c.file_workers.n, 2);
    assert_string_equal(c.file_workers.items[0], W1);
    assert_string_equal(c.file_workers.items[1], "http://h:9=tcp://h:10");
    assert_int_equal(c.dns_interval_ms, 5000);
    assert_string_equal(c.dns_nameserver, "");
    /* A bad file is a bad config, at its line; --check-config reads it too. */
    testenv_write(path, W1 "\nhttp://h:9\n");
    assert_int_equal(parse(&c, NULL, farg, "--check-config", NULL), OPT_ERROR);
    assert_non_null(strstr(err, ":2: 'http://h:9' must be PROXY_URL=PUB_URL"));
    assert_int_equal(c.file_workers.n, 0);
    unlink(path);
    assert_int_equal(parse(&c, NULL, farg, NULL), OPT_ERROR);
    assert_non_null(strstr(err, "cannot read"));
    assert_int_equal(parse(&c, NULL, "--workers-file=workers.txt", NULL), OPT_ERROR);
    assert_non_null(strstr(err, "--workers-file"));
    /* DNS names, repeatable, or comma-separated in the file and the environment. */
    assert_int_equal(parse(&c, NULL, "--worker-dns=a.svc:8080:5557", "--worker-dns=b:1:2",
                           "--dns-interval-ms=250", "--dns-nameserver=127.0.0.1:5353", NULL),
                     OPT_RUN);
    assert_items(&c.worker_dns, "a.svc:8080:5557,b:1:2");
    assert_int_equal(c.dns_interval_ms, 250);
    assert_string_equal(c.dns_nameserver, "127.0.0.1:5353");
    assert_int_equal(parse(&c, NULL, "--worker-dns=b:1:2", "--dns-nameserver=[::1]:53", NULL),
                     OPT_RUN);
    assert_string_equal(c.dns_nameserver, "[::1]:53");
    testenv_write(cpath, "worker_dns: \"a:1:2,b:3:4\"\ndns_interval_ms: 1000\n");
    snprintf(carg, sizeof carg, "--config=%s", cpath);
    assert_int_equal(parse(&c, NULL, carg, NULL), OPT_RUN);
    assert_items(&c.worker_dns, "a:1:2,b:3:4");
    assert_int_equal(c.dns_interval_ms, 1000);
    unlink(cpath);
    {
        const char *const env[] = {"ADMIT_ROUTER_WORKER_DNS", "x:1:2", NULL};
        assert_int_equal(parse(&c, env, "--check-config", NULL), OPT_CHECK);
        assert_items(&c.worker_dns, "x:1:2");
    }
    assert_int_equal(parse(&c, NULL, "--worker-dns=a:8080", NULL), OPT_ERROR);
    assert_non_null(strstr(err, "--worker-dns: 'a:8080' must be NAME:HTTP_PORT:PUB_PORT"));
    assert_int_equal(parse(&c, NULL, "--worker-dns=a:1:2", "--dns-interval-ms=99", NULL),
                     OPT_ERROR);
    assert_int_equal(parse(&c, NULL, "--worker-dns=a:1:2", "--dns-interval-ms=3600001", NULL),
                     OPT_ERROR);
    assert_int_equal(parse(&c, NULL, "--worker-dns=a:1:2", "--dns-nameserver=dns.local:53", NULL),
                     OPT_ERROR);
    assert_non_null(strstr(err, "--dns-nameserver: 'dns.local:53' must be a numeric IP:PORT"));
    assert_int_equal(parse(&c, NULL, "--worker-dns=a:1:2", "--dns-nameserver=127.0.0.1", NULL),
                     OPT_ERROR);
    router_cfg_free(&c);
}

/* Workers with a role (issue 27): --prefill-worker, --decode-worker and their DNS forms, from
 * flags, the environment and the file; each is enough; a bad one names its option; a worker or
 * a name given two roles is refused. */
static void test_roles(void **state)
{
    static struct router_cfg c;
    char cpath[64] = "", carg[96];

    (void) state;
    assert_int_equal(parse(&c, NULL, "--prefill-worker=" W1, "--decode-worker=" W2, NULL), OPT_RUN);
    assert_int_equal(c.workers.n, 0);
    assert_items(&c.prefill_workers, W1);
    assert_items(&c.decode_workers, W2);
    assert_int_equal(parse(&c, NULL, "--decode-worker=" W2, NULL), OPT_RUN);
    assert_int_equal(
        parse(&c, NULL, "--prefill-worker-dns=p.svc:1:2", "--decode-worker-dns=d.svc:1:2", NULL),
        OPT_RUN);
    assert_items(&c.prefill_worker_dns, "p.svc:1:2");
    assert_items(&c.decode_worker_dns, "d.svc:1:2");
    assert_int_equal(parse(&c, NULL, "--decode-worker-dns=d.svc:1:2", NULL), OPT_RUN);
    {
        const char *const env[] = {"ADMIT_ROUTER_PREFILL_WORKER", W1,
                                   "ADMIT_ROUTER_DECODE_WORKER_DNS", "d:3:4", NULL};
        assert_int_equal(parse(&c, env, NULL), OPT_RUN);
        assert_items(&c.prefill_workers, W1);
        assert_items(&c.decode_worker_dns, "d:3:4");
    }
    testenv_write(cpath, "decode_worker: \"" W1 "," W2 "\"\nprefill_worker_dns: p:1:2\n");
    snprintf(carg, sizeof carg, "--config=%s", cpath);
    assert_int_equal(parse(&c, NULL, carg, NULL), OPT_RUN);
    assert_items(&c.decode_workers, W1 "," W2);
    assert_items(&c.prefill_worker_dns, "p:1:2");
    unlink(cpath);
    /* Bad values name their option. */
    assert_int_equal(parse(&c, NULL, "--prefill-worker=http://h:1", NULL), OPT_ERROR);
    assert_string_equal(err, "--prefill-worker: 'http://h:1' must be PROXY_URL=PUB_URL");
    assert_int_equal(parse(&c, NULL, "--decode-worker=http://h:1=udp://h:2", NULL), OPT_ERROR);
    assert_non_null(strstr(err, "--decode-worker: 'http://h:1=udp://h:2': the load publisher"));
    assert_int_equal(parse(&c, NULL, "--decode-worker-dns=d", NULL), OPT_ERROR);
    assert_non_null(strstr(err, "--decode-worker-dns: 'd' must be NAME:HTTP_PORT:PUB_PORT"));
    assert_int_equal(parse(&c, NULL, "--prefill-worker-dns=p:0:1", NULL), OPT_ERROR);
    assert_non_null(strstr(err, "--prefill-worker-dns: "));
    /* Twice with one role is one worker; with two (as published counts as one), an error. */
    assert_int_equal(parse(&c, NULL, "--prefill-worker=" W1, "--prefill-worker=" W1, NULL),
                     OPT_RUN);
    assert_int_equal(parse(&c, NULL, "--prefill-worker=" W1,
                           "--decode-worker=http://127.0.0.1:8080/="
                           "tcp://127.0.0.1:9",
                           NULL),
                     OPT_ERROR);
    assert_string_equal(err,
                        "--decode-worker: worker 'http://127.0.0.1:8080/=tcp://127.0.0.1:9' is "
                        "given another role already (prefill): a worker has one role");
    assert_int_equal(c.prefill_workers.n, 0);
    assert_int_equal(parse(&c, NULL, "--worker=" W2, "--decode-worker=" W2, NULL), OPT_ERROR);
    assert_non_null(strstr(err, "another role already (as published)"));
    assert_int_equal(parse(&c, NULL, "--worker-dns=a:1:2", "--decode-worker-dns=a:1:2", NULL),
                     OPT_ERROR);
    assert_string_equal(err, "--decode-worker-dns: 'a:1:2' is given by --worker-dns already: a "
                             "name's workers have one role");
    assert_int_equal(parse(&c, NULL, "--worker-dns=a:1:2", "--decode-worker-dns=a:1:3", NULL),
                     OPT_RUN);
    router_cfg_free(&c);
}

static void test_thresholds(void **state)
{
    static struct router_cfg c;

    (void) state;
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--active-decode-blocks-threshold=0.85",
                           "--active-prefill-tokens-threshold=5000",
                           "--active-prefill-tokens-threshold-frac=1.5", NULL),
                     OPT_RUN);
    assert_true(c.t.active_decode_blocks_threshold == 0.85);
    assert_int_equal(c.t.active_prefill_tokens_threshold, 5000);
    assert_true(c.t.active_prefill_tokens_threshold_frac == 1.5);
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--active-decode-blocks-threshold=1.5", NULL),
                     OPT_ERROR);
    assert_non_null(strstr(err, "--active-decode-blocks-threshold"));
    assert_non_null(strstr(err, "between 0"));
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--active-decode-blocks-threshold=-0.1", NULL),
                     OPT_ERROR);
    assert_non_null(strstr(err, "between 0"));
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--active-prefill-tokens-threshold=-1", NULL),
                     OPT_ERROR);
    assert_non_null(strstr(err, "must be a token count"));
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--active-prefill-tokens-threshold=1.5", NULL),
                     OPT_ERROR);
    assert_int_equal(
        parse(&c, NULL, "--worker=" W1, "--active-prefill-tokens-threshold-frac=-2", NULL),
        OPT_ERROR);
    assert_non_null(strstr(err, ">= 0"));
    /* None unsets, whatever a lower source said. */
    {
        const char *const env[] = {"ADMIT_ROUTER_ACTIVE_DECODE_BLOCKS_THRESHOLD", "0.5",
                                   "ADMIT_ROUTER_ACTIVE_PREFILL_TOKENS_THRESHOLD", "7", NULL};
        assert_int_equal(parse(&c, env, "--worker=" W1, NULL), OPT_RUN);
        assert_true(c.t.active_decode_blocks_threshold == 0.5);
        assert_int_equal(c.t.active_prefill_tokens_threshold, 7);
        assert_int_equal(parse(&c, env, "--worker=" W1, "--active-decode-blocks-threshold=None",
                               "--active-prefill-tokens-threshold", "None", NULL),
                         OPT_RUN);
        assert_true(isnan(c.t.active_decode_blocks_threshold));
        assert_int_equal(c.t.active_prefill_tokens_threshold, -1);
    }
    router_cfg_free(&c);
}

static void test_env(void **state)
{
    static struct router_cfg c;

    (void) state;
    {
        const char *const env[] = {"ADMIT_ROUTER_ADMIN_TOKEN", "short", NULL};
        assert_int_equal(parse(&c, env, "--worker=" W1, NULL), OPT_ERROR);
        assert_non_null(strstr(err, "ADMIT_ROUTER_ADMIN_TOKEN must be 16"));
        assert_null(strstr(err, "short")); /* a secret is not repeated */
    }
    {
        const char *const env[] = {"ADMIT_ROUTER_ADMIN_TOKEN",
                                   "router-token-0123456789",
                                   "ADMIT_ROUTER_LISTEN",
                                   "127.0.0.1:0",
                                   "DYN_HTTP_OVERLOAD_STATUS_CODE",
                                   "503",
                                   "ADMIT_ROUTER_MISSED_HEARTBEATS",
                                   "5",
                                   "ADMIT_ROUTER_LOG_FORMAT",
                                   "json",
                                   "ADMIT_ROUTER_WORKER",
                                   W1 "," W2,
                                   NULL};
        assert_int_equal(parse(&c, env, NULL), OPT_RUN);
        assert_string_equal(c.admin_token, "router-token-0123456789");
        assert_int_equal(c.listen.port, 0);
        assert_int_equal(c.overload_status, 503);
        assert_int_equal(c.missed_heartbeats, 5);
        assert_int_equal(c.log_json, 1);
        assert_items(&c.workers, W1 "," W2);
        /* Flags win over the environment. */
        assert_int_equal(parse(&c, env, "--missed-heartbeats=2", "--worker=" W2, NULL), OPT_RUN);
        assert_int_equal(c.missed_heartbeats, 2);
        assert_items(&c.workers, W2);
        /* The longest heartbeat counted: 10 ms to an hour. */
        assert_int_equal(parse(&c, env, "--max-heartbeat-ms=500", NULL), OPT_RUN);
        assert_int_equal(c.max_heartbeat_ms, 500);
        assert_int_equal(parse(&c, env, "--max-heartbeat-ms=9", NULL), OPT_ERROR);
        assert_int_equal(parse(&c, env, "--max-heartbeat-ms=3600001", NULL), OPT_ERROR);
    }
    {
        const char *const env[] = {"ADMIT_ROUTER_MISSED_HEARTBEATS", "0", NULL};
        assert_int_equal(parse(&c, env, "--worker=" W1, NULL), OPT_ERROR);
        assert_string_equal(
            err, "ADMIT_ROUTER_MISSED_HEARTBEATS: '0' must be an integer from 1 to 1000");
    }
    router_cfg_free(&c);
}

/* Lists from the file, and flags that replace them. */
static void test_file(void **state)
{
    static struct router_cfg c;
    char path[64] = "", arg[96];

    (void) state;
    testenv_write(path, "worker: \"" W1 "," W2 "\"\n"
                        "model: \"m1,m2\"\n"
                        "listen: \"127.0.0.1:0\"\n"
                        "active_prefill_tokens_threshold: 5000\n"
                        "active_decode_blocks_threshold: None\n"
                        "retry_after: 3\n");
    snprintf(arg, sizeof arg, "--config=%s", path);
    assert_int_equal(parse(&c, NULL, arg, NULL), OPT_RUN);
    assert_items(&c.workers, W1 "," W2);
    assert_items(&c.models, "m1,m2");
    assert_int_equal(c.t.active_prefill_tokens_threshold, 5000);
    assert_true(isnan(c.t.active_decode_blocks_threshold));
    assert_int_equal(c.retry_after_s, 3);
    assert_string_equal(c.config_path, path);
    assert_int_equal(parse(&c, NULL, arg, "--model=m3", "--worker=" W2, "--worker=" W1, NULL),
                     OPT_RUN);
    assert_items(&c.models, "m3");
    assert_items(&c.workers, W2 "," W1);
    {
        const char *const env[] = {"ADMIT_ROUTER_CONFIG", path, "ADMIT_ROUTER_MODEL", "m4", NULL};
        assert_int_equal(parse(&c, env, NULL), OPT_RUN);
        assert_items(&c.models, "m4");
        assert_items(&c.workers, W1 "," W2);
    }
    testenv_write(path, "worker: \"http://h:1=tcp://h:2\"\nbogus: 1\n");
    assert_int_equal(parse(&c, NULL, arg, NULL), OPT_ERROR);
    assert_non_null(strstr(err, ":2:1: unknown setting 'bogus' (examples/admit-router.yaml"));
    testenv_write(path, "worker: \"http://h:1\"\n");
    assert_int_equal(parse(&c, NULL, arg, "--check-config", NULL), OPT_ERROR);
    assert_non_null(strstr(err, ":1:9: worker: 'http://h:1' must be PROXY_URL=PUB_URL"));
    testenv_write(path, "model: m\n");
    assert_int_equal(parse(&c, NULL, arg, "--check-config", NULL), OPT_ERROR);
    assert_non_null(strstr(err, "no worker"));
    unlink(path);
    router_cfg_free(&c);
}

/* The example file loads and sets what its comments say. */
static void test_example(void **state)
{
    static struct router_cfg c;

    (void) state;
    assert_int_equal(parse(&c, NULL, "--config=" ADMIT_SOURCE_ROOT "/examples/admit-router.yaml",
                           "--check-config", NULL),
                     OPT_CHECK);
    assert_int_equal(c.workers.n, 2);
    assert_true(c.t.active_decode_blocks_threshold == 0.85);
    assert_int_equal(c.classes.n, 0); /* the classes have an example of their own */
    router_cfg_free(&c);
}

/* The policy classes come from the same file as the settings, and from nowhere else. */
static void test_classes(void **state)
{
    static struct router_cfg c;
    char path[64] = "", arg[96], want[256];

    (void) state;
    testenv_write(path, "worker: \"" W1 "\"\n"
                        "policy_classes:\n"
                        "  - {name: a, quantum: 5}\n"
                        "  - {name: b, quantum: 1}\n"
                        "default_policy_class: b\n"
                        "missed_heartbeats: 4\n");
    snprintf(arg, sizeof arg, "--config=%s", path);
    assert_int_equal(parse(&c, NULL, arg, NULL), OPT_RUN);
    assert_int_equal(c.missed_heartbeats, 4);
    assert_int_equal(c.classes.n, 2);
    assert_string_equal(c.classes.c[0].name, "a");
    assert_int_equal(c.classes.c[0].quantum, 5);
    assert_int_equal(c.classes.default_cls, 1);
    assert_int_equal(c.classes.nrules, 1);
    assert_int_equal(c.classes.rules[0].kind, RRULE_HEADER);
    assert_int_equal(parse(&c, NULL, arg, "--check-config", NULL), OPT_CHECK);
    assert_int_equal(c.classes.n, 2);
    /* Read, then freed when a later source fails (ASan would see a leak). */
    assert_int_equal(parse(&c, NULL, arg, "--missed-heartbeats=0", NULL), OPT_ERROR);
    assert_int_equal(c.classes.n, 0);
    assert_null(c.classes.c);
    /* No file, or a file without classes: none. */
    assert_int_equal(parse(&c, NULL, "--worker=" W1, NULL), OPT_RUN);
    assert_int_equal(c.classes.n, 0);
    assert_int_equal(c.classes.default_cls, -1);
    assert_int_equal(router_classes_classify(&c.classes, NULL, NULL, "m", 1), -1);
    /* A bad class is the file's error, at its position, for --check-config too. */
    testenv_write(path, "worker: \"" W1 "\"\npolicy_classes:\n  - {name: a}\n");
    assert_int_equal(parse(&c, NULL, arg, "--check-config", NULL), OPT_ERROR);
    snprintf(want, sizeof want, "%s:3:5: policy class 'a' needs 'quantum'", path);
    assert_string_equal(err, want);
    assert_int_equal(c.classes.n, 0);
    assert_int_equal(c.workers.n, 0);
    /* The settings are read first: a bad one is reported before a bad class. */
    testenv_write(path, "policy_classes: 5\nworker: \"http://h:1\"\n");
    assert_int_equal(parse(&c, NULL, arg, NULL), OPT_ERROR);
    assert_non_null(strstr(err, ":2:9: worker: 'http://h:1' must be PROXY_URL=PUB_URL"));
    /* A setting's value still cannot be a structure. */
    testenv_write(path, "worker: [\"" W1 "\"]\n");
    assert_int_equal(parse(&c, NULL, arg, NULL), OPT_ERROR);
    assert_non_null(strstr(err, ":1:9: expected a single value for 'worker', found a sequence"));
    unlink(path);
    /* No flag and no variable: both refused, naming the file as the place. */
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--policy-classes=x", NULL), OPT_ERROR);
    assert_string_equal(err, "--policy-classes: policy_classes can be set only in the config file "
                             "(--config FILE or ADMIT_ROUTER_CONFIG)");
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--default-policy-class", "a", NULL),
                     OPT_ERROR);
    assert_string_equal(err, "--default-policy-class: default_policy_class can be set only in the "
                             "config file (--config FILE or ADMIT_ROUTER_CONFIG)");
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--policy_class_rules=[]", NULL), OPT_ERROR);
    assert_non_null(strstr(err, "--policy_class_rules: policy_class_rules can be set only in"));
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--policy-classes-x=1", NULL), OPT_ERROR);
    assert_string_equal(err, "unknown option '--policy-classes-x=1' (see --help)");
    assert_int_equal(parse(&c, NULL, "--worker=" W1, "--policy-class=1", NULL), OPT_ERROR);
    assert_string_equal(err, "unknown option '--policy-class=1' (see --help)");
    {
        const char *const env[] = {"ADMIT_ROUTER_POLICY_CLASS_RULES", "", NULL};
        assert_int_equal(parse(&c, env, "--worker=" W1, NULL), OPT_ERROR);
        assert_string_equal(err, "ADMIT_ROUTER_POLICY_CLASS_RULES: policy_class_rules can be set "
                                 "only in the config file (--config FILE or ADMIT_ROUTER_CONFIG)");
        assert_int_equal(parse(&c, env, "--help", NULL), OPT_HELP); /* help still helps */
    }
    {
        const char *const env[] = {"ADMIT_ROUTER_POLICY_CLASSES", "- name: a", NULL};
        assert_int_equal(parse(&c, env, "--worker=" W1, NULL), OPT_ERROR);
        assert_non_null(strstr(err, "ADMIT_ROUTER_POLICY_CLASSES: policy_classes can be set"));
    }
    {
        const char *const env[] = {"ADMIT_ROUTER_DEFAULT_POLICY_CLASS", "a", NULL};
        assert_int_equal(parse(&c, env, "--worker=" W1, NULL), OPT_ERROR);
        assert_non_null(strstr(err, "ADMIT_ROUTER_DEFAULT_POLICY_CLASS: default_policy_class"));
    }
    router_cfg_free(&c);
}

/* The example of classes is a whole configuration: settings and classes. */
static void test_classes_example(void **state)
{
    static struct router_cfg c;

    (void) state;
    assert_int_equal(parse(&c, NULL,
                           "--config=" ADMIT_SOURCE_ROOT "/examples/admit-router-classes.yaml",
                           "--check-config", NULL),
                     OPT_CHECK);
    assert_int_equal(c.workers.n, 2);
    assert_int_equal(c.classes.n, 2);
    assert_int_equal(c.classes.nrules, 3);
    router_cfg_free(&c);
    router_cfg_free(&c); /* twice */
}

/* A reload reads the same sources with the same precedence and checks, but not the workers
 * file; what changed is told apart: a setting that needs a restart keeps its running value,
 * a live one takes the new; each class of the old config has its place in the new. */
static void test_reload(void **state)
{
    static struct router_cfg cur, next;
    char path[64] = "", wpath[64] = "", arg[96], warg[96];
    char *argv[8] = {"admit-router", arg, warg, "--listen=127.0.0.1:7000", NULL};
    int map[3];

    (void) state;
    testenv_write(wpath, W1 "\n");
    snprintf(warg, sizeof warg, "--workers-file=%s", wpath);
    testenv_write(path, "listen: \"127.0.0.1:1\"\n"
                        "metrics_listen: \"127.0.0.1:2\"\n"
                        "active_prefill_tokens_threshold: 100\n"
                        "upstream_keepalive: 8\n"
                        "policy_classes:\n"
                        "  - {name: a, quantum: 5}\n"
                        "  - {name: b, quantum: 1}\n"
                        "  - {name: c, quantum: 1}\n");
    snprintf(arg, sizeof arg, "--config=%s", path);
    testenv_set(NULL);
    assert_int_equal(router_cfg_parse(&cur, 4, argv, testenv_get, err, sizeof err), OPT_RUN);
    assert_int_equal(cur.file_workers.n, 1);
    /* The file edited; the flag still wins over it; the workers file now bad, not read. */
    testenv_write(wpath, "nonsense\n");
    testenv_write(path, "listen: \"127.0.0.1:3\"\n"
                        "metrics_listen: \"127.0.0.1:4\"\n"
                        "active_prefill_tokens_threshold: 50\n"
                        "upstream_keepalive: 9\n"
                        "log_level: debug\n"
                        "policy_classes:\n"
                        "  - {name: c, quantum: 2}\n"
                        "  - {name: d, quantum: 1}\n"
                        "default_policy_class: d\n");
    assert_int_equal(router_cfg_reparse(&next, 4, argv, testenv_get, err, sizeof err), 0);
    assert_int_equal(next.file_workers.n, 0);
    assert_int_equal(next.listen.port, 7000);
    assert_int_equal(next.metrics_listen.port, 4);
    assert_int_equal(router_cfg_diff(&cur, &next), 2); /* metrics_listen, upstream_keepalive */
    assert_int_equal(next.listen.port, 7000);
    assert_int_equal(next.metrics_listen.port, 2);
    assert_int_equal(next.upstream_keepalive, 8);
    assert_int_equal(next.t.active_prefill_tokens_threshold, 50); /* live */
    assert_int_equal(next.log_level, LOG_DEBUG);
    assert_int_equal(router_cfg_diff(&cur, &next), 0);
    /* a and b are gone: the new default, d; c stays c. */
    router_cfg_class_map(&cur.classes, &next.classes, map);
    assert_int_equal(map[0], 1);
    assert_int_equal(map[1], 1);
    assert_int_equal(map[2], 0);
    router_cfg_free(&next);
    /* No class left: nowhere to go. */
    testenv_write(path, "listen: \"127.0.0.1:1\"\n");
    assert_int_equal(router_cfg_reparse(&next, 4, argv, testenv_get, err, sizeof err), 0);
    router_cfg_class_map(&cur.classes, &next.classes, map);
    assert_int_equal(map[0], -1);
    assert_int_equal(map[2], -1);
    router_cfg_free(&next);
    /* A bad file: -1, the reason at file:line:column, and nothing kept of it. */
    testenv_write(path, "listen: \"127.0.0.1:1\"\nactive_decode_blocks_threshold: 2\n");
    assert_int_equal(router_cfg_reparse(&next, 4, argv, testenv_get, err, sizeof err), -1);
    assert_non_null(strstr(err, ":2:33: active_decode_blocks_threshold"));
    assert_int_equal(next.classes.n, 0);
    testenv_write(path, "policy_classes:\n  - {name: a}\n");
    assert_int_equal(router_cfg_reparse(&next, 4, argv, testenv_get, err, sizeof err), -1);
    assert_non_null(strstr(err, ":2:5: "));
    unlink(path);
    unlink(wpath);
    router_cfg_free(&cur);
}

static void test_usage(void **state)
{
    static const char *const want[] = {"--worker=V",
                                       "ADMIT_ROUTER_WORKER, comma-separated",
                                       "--model=V",
                                       "--active-decode-blocks-threshold=V",
                                       "ADMIT_ROUTER_ACTIVE_PREFILL_TOKENS_THRESHOLD_FRAC",
                                       "env DYN_HTTP_OVERLOAD_STATUS_CODE; default 529",
                                       "env ADMIT_ROUTER_LISTEN; default 0.0.0.0:8090",
                                       "env ADMIT_ROUTER_ADMIN_TOKEN",
                                       "env ADMIT_ROUTER_CONFIG",
                                       "--check-config",
                                       "examples/admit-router-classes.yaml"};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    (void) state;
    assert_non_null(f);
    router_cfg_usage(f);
    fclose(f);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (strstr(text, want[i]) == NULL)
            fail_msg("'%s' not in the help", want[i]);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_proxy_copy),
        cmocka_unit_test(test_worker_errors),
        cmocka_unit_test(test_missing_worker),
        cmocka_unit_test(test_roles),
        cmocka_unit_test(test_thresholds),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_example),
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_classes_example),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_discovery),
        cmocka_unit_test(test_reload),
        cmocka_unit_test(test_subscriber),
        cmocka_unit_test(test_dns_family),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
