/* Unit tests for listen-address and upstream-URL parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/netaddr.h"

#include <string.h>

static void test_hostport(void **state)
{
    struct hostport hp;
    char err[256];

    (void) state;
    assert_int_equal(hostport_parse("127.0.0.1:8080", &hp, err, sizeof err), 0);
    assert_string_equal(hp.host, "127.0.0.1");
    assert_int_equal(hp.port, 8080);
    assert_int_equal(hostport_parse(":9091", &hp, err, sizeof err), 0);
    assert_string_equal(hp.host, "0.0.0.0");
    assert_int_equal(hostport_parse("*:0", &hp, err, sizeof err), 0);
    assert_int_equal(hp.port, 0);
    assert_int_equal(hostport_parse("[::1]:443", &hp, err, sizeof err), 0);
    assert_string_equal(hp.host, "::1");
    static const char *const bad[] = {"",     "8080",  "host:", "host:x", "host:65536",
                                      "[::1", "[::1]", "h:-1",  "h:1 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(hostport_parse(bad[i], &hp, err, sizeof err), -1);
        assert_true(strlen(err) > 0);
    }
}

static void test_http_url(void **state)
{
    struct http_url u;
    char err[256];

    (void) state;
    assert_int_equal(http_url_parse("http://127.0.0.1:8000", &u, err, sizeof err), 0);
    assert_string_equal(u.hostport, "127.0.0.1:8000");
    assert_int_equal(http_url_parse("HTTP://engine/", &u, err, sizeof err), 0);
    assert_int_equal(u.port, 80);
    assert_string_equal(u.hostport, "engine:80");
    assert_int_equal(http_url_parse("http://[fe80::1]:81", &u, err, sizeof err), 0);
    assert_string_equal(u.host, "fe80::1");
    assert_string_equal(u.hostport, "[fe80::1]:81");
    static const char *const bad[] = {"https://x",   "x:80",         "http://",
                                      "http://:80",  "http://x:0",   "http://x:99999",
                                      "http://x/v1", "http://u@x:1", "http://x:1?q"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(http_url_parse(bad[i], &u, err, sizeof err), -1);
}

/* POST /admission trusts loopback peers only; anything else needs the admin token. */
static void test_loopback_peers(void **state)
{
    (void) state;
    assert_true(net_is_loopback("127.0.0.1"));
    assert_true(net_is_loopback("127.9.8.7"));
    assert_true(net_is_loopback("::1"));
    assert_true(net_is_loopback("::ffff:127.0.0.1"));
    assert_false(net_is_loopback("10.0.0.1"));
    assert_false(net_is_loopback("192.168.1.127"));
    assert_false(net_is_loopback("1127.0.0.1"));
    assert_false(net_is_loopback("::2"));
    assert_false(net_is_loopback("::1:5"));
    assert_false(net_is_loopback("fe80::1"));
    assert_false(net_is_loopback(""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostport),
        cmocka_unit_test(test_http_url),
        cmocka_unit_test(test_loopback_peers),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
