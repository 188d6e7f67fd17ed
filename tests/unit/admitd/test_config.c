/* Unit tests for option parsing: precedence, validation messages and Dynamo's rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admitd/config.h"

#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A fake environment: pairs of name, value, terminated by NULL. */
static const char *const *fake_env;

static const char *env_fn(const char *name)
{
    for (const char *const *p = fake_env; p && *p; p += 2)
        if (strcmp(p[0], name) == 0)
            return p[1];
    return NULL;
}

static enum cfg_result parse(struct cfg *c, const char *const *env, char *err, size_t errlen,
                             int argc, ...)
{
    char *argv[32];
    va_list ap;

    fake_env = env;
    argv[0] = "admitd";
    va_start(ap, argc);
    for (int i = 1; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    argv[argc] = NULL;
    return cfg_parse(c, argc, argv, env_fn, err, errlen);
}

static void test_overload_status_table(void **state)
{
    static const struct {
        const char *in;
        int want;
    } table[] = {
        {NULL, 529},   {"", 529},     {"abc", 529},  {"99", 529},
        {"100", 529},  {"199", 529},  {"200", 200},  {"503", 503},
        {"529", 529},  {"999", 999},  {"1000", 529}, {" 503 ", 503},
        {"-503", 529}, {"503x", 529}, {"600", 600},  {"99999999999999999999", 529},
    };

    (void) state;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        assert_int_equal(cfg_parse_overload_status(table[i].in), table[i].want);
}

static void test_defaults(void **state)
{
    struct cfg c;
    char err[256];

    (void) state;
    assert_int_equal(parse(&c, NULL, err, sizeof err, 1), CFG_RUN);
    assert_int_equal(c.engine_request_limit, 0);
    assert_int_equal(c.request_queue_limit, 16);
    assert_int_equal(c.overload_status, 529);
    assert_string_equal(c.listen.host, "0.0.0.0");
    assert_int_equal(c.listen.port, 8080);
    assert_int_equal(c.metrics_listen.port, 9091);
    assert_string_equal(c.upstream.host, "127.0.0.1");
    assert_int_equal(c.upstream.port, 8000);
    assert_string_equal(c.upstream.hostport, "127.0.0.1:8000");
    assert_int_equal(c.retry_after_s, 0); /* auto */
    assert_string_equal(c.health_path, "/health");
}

static void test_flag_wins_over_env(void **state)
{
    static const char *const env[] = {"DYN_ENGINE_REQUEST_LIMIT",
                                      "4",
                                      "DYN_DYNAMO_REQUEST_QUEUE_LIMIT",
                                      "8",
                                      "DYN_HTTP_OVERLOAD_STATUS_CODE",
                                      "503",
                                      NULL};
    struct cfg c;
    char err[256];

    (void) state;
    assert_int_equal(parse(&c, env, err, sizeof err, 1), CFG_RUN);
    assert_int_equal(c.engine_request_limit, 4);
    assert_int_equal(c.request_queue_limit, 8);
    assert_int_equal(c.overload_status, 503);
    assert_int_equal(parse(&c, env, err, sizeof err, 5, "--engine-request-limit=7",
                           "--request-queue-limit", "3", "--overload-status-code=429"),
                     CFG_RUN);
    assert_int_equal(c.engine_request_limit, 7);
    assert_int_equal(c.request_queue_limit, 3);
    assert_int_equal(c.overload_status, 429);
}

static void test_engine_limit_must_be_positive(void **state)
{
    static const char *const bad[] = {"0", "-1", "abc", "", "1.5", "4x", "99999999999999999999"};
    struct cfg c;
    char err[256], arg[64];

    (void) state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *const env[] = {"DYN_ENGINE_REQUEST_LIMIT", bad[i], NULL};

        assert_int_equal(parse(&c, env, err, sizeof err, 1), CFG_ERROR);
        assert_non_null(strstr(err, "must be a positive integer"));
        assert_non_null(strstr(err, "DYN_ENGINE_REQUEST_LIMIT"));
        snprintf(arg, sizeof arg, "--engine-request-limit=%s", bad[i]);
        assert_int_equal(parse(&c, NULL, err, sizeof err, 2, arg), CFG_ERROR);
        assert_non_null(strstr(err, "--engine-request-limit"));
        assert_non_null(strstr(err, "must be a positive integer"));
    }
}

static void test_queue_limit_rules(void **state)
{
    static const char *const bad[] = {"1", "0", "abc", "-3", ""};
    struct cfg c;
    char err[256];

    (void) state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *const env[] = {"DYN_ENGINE_REQUEST_LIMIT", "2",
                                   "DYN_DYNAMO_REQUEST_QUEUE_LIMIT", bad[i], NULL};
        assert_int_equal(parse(&c, env, err, sizeof err, 1), CFG_ERROR);
        assert_non_null(strstr(err, "DYN_DYNAMO_REQUEST_QUEUE_LIMIT"));
        /* Without an engine limit the queue variable is not read at all. */
        const char *const env2[] = {"DYN_DYNAMO_REQUEST_QUEUE_LIMIT", bad[i], NULL};
        assert_int_equal(parse(&c, env2, err, sizeof err, 1), CFG_RUN);
        assert_int_equal(c.engine_request_limit, 0);
    }
    const char *const ok[] = {"DYN_ENGINE_REQUEST_LIMIT", "2", "DYN_DYNAMO_REQUEST_QUEUE_LIMIT",
                              "2", NULL};
    assert_int_equal(parse(&c, ok, err, sizeof err, 1), CFG_RUN);
    assert_int_equal(c.request_queue_limit, 2);
}

static void test_bad_addresses_and_options(void **state)
{
    struct cfg c;
    char err[256];

    (void) state;
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--listen=nope"), CFG_ERROR);
    assert_non_null(strstr(err, "--listen"));
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--listen=1.2.3.4:70000"), CFG_ERROR);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--upstream=https://x:1"), CFG_ERROR);
    assert_non_null(strstr(err, "http://"));
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--upstream=http://x:1/v1"), CFG_ERROR);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--bogus=1"), CFG_ERROR);
    assert_non_null(strstr(err, "unknown option"));
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--listen"), CFG_ERROR);
    assert_non_null(strstr(err, "needs a value"));
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "stray"), CFG_ERROR);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--log-level=loud"), CFG_ERROR);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--health-path=health"), CFG_ERROR);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--retry-after=0"), CFG_ERROR);
    assert_int_equal(
        parse(&c, NULL, err, sizeof err, 3, "--listen=[::1]:0", "--upstream=http://[::1]:9000"),
        CFG_RUN);
    assert_string_equal(c.listen.host, "::1");
    assert_string_equal(c.upstream.hostport, "[::1]:9000");
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--help"), CFG_HELP);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--version"), CFG_VERSION);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--mock-engine"), CFG_RUN);
    assert_int_equal(c.mock_engine, 1);
}

/* flag > env > file > default, and file errors carry file:line:column. */
/* --engine-kv-events: off by default, from the environment or a flag, checked as an
 * endpoint; the topic is any text that fits. */
static void test_engine_kv_events(void **state)
{
    static const char *const env[] = {"ADMITD_ENGINE_KV_EVENTS",
                                      "tcp://10.0.0.1:5557",
                                      "ADMITD_ENGINE_KV_EVENTS_TOPIC",
                                      "kv@",
                                      "ADMITD_ENGINE_KV_EVENTS_REPLAY",
                                      "tcp://10.0.0.1:5600",
                                      NULL};
    char err[512], long_topic[300];
    struct cfg c;

    (void) state;
    assert_int_equal(parse(&c, NULL, err, sizeof err, 1), CFG_RUN);
    assert_string_equal(c.engine_kv_events, "");
    assert_string_equal(c.engine_kv_events_topic, "");
    assert_int_equal(parse(&c, env, err, sizeof err, 1), CFG_RUN);
    assert_string_equal(c.engine_kv_events, "tcp://10.0.0.1:5557");
    assert_string_equal(c.engine_kv_events_topic, "kv@");
    assert_string_equal(c.engine_kv_events_replay, "tcp://10.0.0.1:5600");
    assert_int_equal(parse(&c, env, err, sizeof err, 2, "--engine-kv-events=tcp://*:6000"),
                     CFG_RUN);
    assert_string_equal(c.engine_kv_events, "tcp://*:6000");
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--engine-kv-events=udp://h:1"),
                     CFG_ERROR);
    assert_non_null(strstr(err, "--engine-kv-events"));
    assert_int_equal(
        parse(&c, NULL, err, sizeof err, 2, "--engine-kv-events-replay=ipc:///run/vllm-replay"),
        CFG_RUN);
    assert_string_equal(c.engine_kv_events_replay, "ipc:///run/vllm-replay");
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--engine-kv-events-replay=http://h:1"),
                     CFG_ERROR);
    assert_non_null(strstr(err, "--engine-kv-events-replay"));
    memset(long_topic, 'x', sizeof long_topic - 1);
    long_topic[sizeof long_topic - 1] = '\0';
    assert_int_equal(parse(&c, NULL, err, sizeof err, 3, "--engine-kv-events-topic", long_topic),
                     CFG_ERROR);
    assert_non_null(strstr(err, "--engine-kv-events-topic"));
}

/* --role: both by default; prefill or decode from a flag, the environment or the file; any
 * other value an error naming where it came from (the file's with file:line:column). */
static void test_role(void **state)
{
    static const char *const env[] = {"ADMITD_ROLE", "decode", NULL};
    static const char *const bad_env[] = {"ADMITD_ROLE", "Prefill", NULL};
    char path[] = "/tmp/admitd-test-XXXXXX", arg[64], err[256];
    int fd = mkstemp(path);
    struct cfg c;

    (void) state;
    assert_int_equal(parse(&c, NULL, err, sizeof err, 1), CFG_RUN);
    assert_int_equal(c.role, ADMIT_LOAD_ROLE_BOTH);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--role=prefill"), CFG_RUN);
    assert_int_equal(c.role, ADMIT_LOAD_ROLE_PREFILL);
    assert_int_equal(parse(&c, env, err, sizeof err, 1), CFG_RUN);
    assert_int_equal(c.role, ADMIT_LOAD_ROLE_DECODE);
    assert_int_equal(parse(&c, env, err, sizeof err, 2, "--role=both"), CFG_RUN);
    assert_int_equal(c.role, ADMIT_LOAD_ROLE_BOTH);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--role=router"), CFG_ERROR);
    assert_non_null(strstr(err, "--role"));
    assert_non_null(strstr(err, "'router' must be prefill, decode or both"));
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, "--role="), CFG_ERROR);
    assert_int_equal(parse(&c, bad_env, err, sizeof err, 1), CFG_ERROR);
    assert_non_null(strstr(err, "ADMITD_ROLE"));
    assert_true(fd >= 0);
    assert_true(write(fd, "role: prefill\n", 14) == 14);
    close(fd);
    snprintf(arg, sizeof arg, "--config=%s", path);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, arg), CFG_RUN);
    assert_int_equal(c.role, ADMIT_LOAD_ROLE_PREFILL);
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(write(fd, "role: decoder\n", 14) == 14);
    close(fd);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, arg), CFG_ERROR);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, ":1:7: role: 'decoder' must be prefill, decode or both"));
    unlink(path);
}

static void test_config_file_precedence(void **state)
{
    char path[] = "/tmp/admitd-test-XXXXXX";
    int fd = mkstemp(path);
    static const char yaml[] = "# a comment\n"
                               "engine_request_limit: 4\n"
                               "request_queue_limit: 8\n"
                               "retry_after: 9\n"
                               "worker_id: ~\n"
                               "access_log: yes\n";
    char arg[64];
    struct cfg c;
    char err[256];

    (void) state;
    assert_true(fd >= 0);
    assert_int_equal(write(fd, yaml, sizeof yaml - 1), (ssize_t) (sizeof yaml - 1));
    close(fd);
    snprintf(arg, sizeof arg, "--config=%s", path);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, arg), CFG_RUN);
    assert_int_equal(c.engine_request_limit, 4);
    assert_int_equal(c.request_queue_limit, 8);
    assert_int_equal(c.retry_after_s, 9);
    assert_int_equal(c.access_log, 1);
    assert_string_equal(c.worker_id, "");
    {
        const char *const env[] = {"DYN_DYNAMO_REQUEST_QUEUE_LIMIT", "3", "ADMITD_CONFIG", path,
                                   NULL};
        assert_int_equal(parse(&c, env, err, sizeof err, 2, "--engine-request-limit=2"), CFG_RUN);
        assert_int_equal(c.engine_request_limit, 2);
        assert_int_equal(c.request_queue_limit, 3);
        assert_int_equal(c.retry_after_s, 9);
    }
    assert_int_equal(parse(&c, NULL, err, sizeof err, 3, arg, "--check-config"), CFG_CHECK);
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(write(fd, "retry_after: -2\n", 16) == 16);
    close(fd);
    assert_int_equal(parse(&c, NULL, err, sizeof err, 2, arg), CFG_ERROR);
    assert_non_null(strstr(err, ":1:14: retry_after: '-2'"));
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overload_status_table),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_flag_wins_over_env),
        cmocka_unit_test(test_engine_limit_must_be_positive),
        cmocka_unit_test(test_queue_limit_rules),
        cmocka_unit_test(test_bad_addresses_and_options),
        cmocka_unit_test(test_config_file_precedence),
        cmocka_unit_test(test_engine_kv_events),
        cmocka_unit_test(test_role),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
