/* Unit tests for the router's worker lists (src/router/wlist.c): entries checked and made
 * canonical, the difference of two lists (what discovery adds and retires), workers files in
 * both forms with their errors at file:line, --worker-dns values, and DNS answers; the roles
 * entries carry (issue 27). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "router/wlist.h"
#include "admit/load.h"
#include "../testenv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char err[512];

/* l's items, comma-joined, are want. */
static void assert_list(const struct wlist *l, const char *want)
{
    char buf[2048] = "";

    for (size_t i = 0; i < l->n; i++) {
        if (i)
            strcat(buf, ",");
        strcat(buf, l->items[i]);
    }
    assert_string_equal(buf, want);
}

/* A list of the given canonical entries, NULL-terminated. */
static void fill(struct wlist *l, ...)
{
    va_list ap;
    const char *s;

    wlist_free(l);
    va_start(ap, l);
    while ((s = va_arg(ap, const char *)) != NULL)
        assert_int_equal(wlist_add(l, s), 1);
    va_end(ap);
}

static void test_canon(void **state)
{
    char out[600], msg[300];

    (void) state;
    assert_int_equal(wlist_canon("http://gpu1=tcp://gpu1:5557", out, sizeof out, msg, sizeof msg),
                     0);
    assert_string_equal(out, "http://gpu1:80=tcp://gpu1:5557");
    assert_int_equal(
        wlist_canon("http://10.0.0.1:8080/=ipc:///tmp/a.ipc", out, sizeof out, msg, sizeof msg), 0);
    assert_string_equal(out, "http://10.0.0.1:8080=ipc:///tmp/a.ipc");
    assert_int_equal(wlist_canon("http://[::1]:81=tcp://[::1]:5", out, sizeof out, msg, sizeof msg),
                     0);
    assert_string_equal(out, "http://[::1]:81=tcp://[::1]:5");
    assert_int_equal(wlist_check("http://a:1", msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "must be PROXY_URL=PUB_URL"));
    assert_int_equal(wlist_check("https://a:1=tcp://a:2", msg, sizeof msg), -1);
    assert_int_equal(wlist_check("http://a:1=udp://a:2", msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "tcp://HOST:PORT or ipc:///PATH"));
    assert_int_equal(wlist_check("http://a:1=tcp://a:2", msg, sizeof msg), 0);
}

static void test_split(void **state)
{
    char proxy[64], pub[64];

    (void) state;
    assert_int_equal(
        wlist_split("http://a:1=tcp://a:2", proxy, sizeof proxy, pub, sizeof pub, NULL), 0);
    assert_string_equal(proxy, "http://a:1");
    assert_string_equal(pub, "tcp://a:2");
    assert_int_equal(wlist_split("http://a:1", proxy, sizeof proxy, pub, sizeof pub, NULL), -1);
    assert_int_equal(wlist_split("http://a:1=tcp://a:2", proxy, 5, pub, sizeof pub, NULL), -1);
    assert_int_equal(wlist_split("http://a:1=tcp://a:2", proxy, sizeof proxy, pub, 4, NULL), -1);
}

/* Sorted, unique; removal keeps the order. */
static void test_add_remove(void **state)
{
    struct wlist l = {0};

    (void) state;
    assert_int_equal(wlist_add(&l, "c"), 1);
    assert_int_equal(wlist_add(&l, "a"), 1);
    assert_int_equal(wlist_add(&l, "b"), 1);
    assert_int_equal(wlist_add(&l, "a"), 0);
    assert_list(&l, "a,b,c");
    assert_true(wlist_has(&l, "b"));
    assert_false(wlist_has(&l, "d"));
    assert_int_equal(wlist_remove(&l, "b"), 1);
    assert_int_equal(wlist_remove(&l, "b"), 0);
    assert_list(&l, "a,c");
    for (int i = 0; l.n < WLIST_MAX; i++) {
        char s[16];

        snprintf(s, sizeof s, "x%05d", i);
        assert_int_equal(wlist_add(&l, s), 1);
    }
    assert_int_equal(wlist_add(&l, "zzz"), -1);
    assert_int_equal(wlist_add(&l, "a"), 0); /* there already: not "full" */
    wlist_free(&l);
    assert_int_equal(l.n, 0);
    wlist_free(&l);
}

/* What discovery does with a new reading: adds what is new, retires what is gone. */
static void test_diff(void **state)
{
    struct wlist cur = {0}, next = {0}, add = {0}, gone = {0};

    (void) state;
    fill(&cur, "a", "b", "c", NULL);
    fill(&next, "b", "c", "d", "e", NULL);
    wlist_diff(&cur, &next, &add, &gone);
    assert_list(&add, "d,e");
    assert_list(&gone, "a");
    /* The same: nothing changes. */
    wlist_diff(&next, &next, &add, &gone);
    assert_int_equal(add.n, 0);
    assert_int_equal(gone.n, 0);
    /* From nothing, and to nothing. */
    wlist_free(&cur);
    wlist_diff(&cur, &next, &add, &gone);
    assert_list(&add, "b,c,d,e");
    assert_int_equal(gone.n, 0);
    wlist_diff(&next, &cur, &add, &gone);
    assert_int_equal(add.n, 0);
    assert_list(&gone, "b,c,d,e");
    /* Disjoint, interleaved. */
    fill(&cur, "a", "c", "e", NULL);
    fill(&next, "b", "d", "f", NULL);
    wlist_diff(&cur, &next, &add, &gone);
    assert_list(&add, "b,d,f");
    assert_list(&gone, "a,c,e");
    /* A worker whose publisher changed is two entries: one gone, one new. */
    fill(&cur, "http://a:1=tcp://a:2", NULL);
    fill(&next, "http://a:1=tcp://a:3", NULL);
    wlist_diff(&cur, &next, &add, &gone);
    assert_list(&add, "http://a:1=tcp://a:3");
    assert_list(&gone, "http://a:1=tcp://a:2");
    /* move */
    wlist_move(&cur, &next);
    assert_list(&cur, "http://a:1=tcp://a:3");
    assert_int_equal(next.n, 0);
    wlist_free(&cur);
    wlist_free(&add);
    wlist_free(&gone);
}

static int parse(const char *text, struct wlist *out)
{
    return wlist_parse("w.txt", text, strlen(text), out, err, sizeof err);
}

static void test_file_lines(void **state)
{
    struct wlist l = {0};

    (void) state;
    assert_int_equal(parse("", &l), 0);
    assert_int_equal(l.n, 0);
    assert_int_equal(parse("# nobody yet\n\n   \n", &l), 0);
    assert_int_equal(l.n, 0);
    assert_int_equal(parse("http://b:2=tcp://b:3\n"
                           "  # a comment\n"
                           "\thttp://a:1=tcp://a:2   # the first\r\n"
                           "http://b:2=tcp://b:3\n" /* twice: once */
                           "http://c=ipc:///tmp/c", /* no newline at the end */
                           &l),
                     0);
    assert_list(&l, "http://a:1=tcp://a:2,http://b:2=tcp://b:3,http://c:80=ipc:///tmp/c");
    /* Errors name the line, and leave nothing. */
    assert_int_equal(parse("http://a:1=tcp://a:2\n\nhttp://b:2\n", &l), -1);
    assert_int_equal(l.n, 0);
    assert_non_null(strstr(err, "w.txt:3: "));
    assert_non_null(strstr(err, "must be PROXY_URL=PUB_URL"));
    assert_int_equal(parse("http://a:1=tcp://a:2 http://b:2=tcp://b:3\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:1: one worker a line"));
    assert_int_equal(parse("# x\nhttp://a:1=udp://a:2\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:2: "));
    wlist_free(&l);
}

static void test_file_yaml(void **state)
{
    struct wlist l = {0};

    (void) state;
    assert_int_equal(parse("# the fleet\n"
                           "- http://b:2=tcp://b:3\n"
                           "- \"http://a:1=tcp://a:2\"   # quoted\n",
                           &l),
                     0);
    assert_list(&l, "http://a:1=tcp://a:2,http://b:2=tcp://b:3");
    assert_int_equal(parse("[http://a:1=tcp://a:2, 'http://c:3=tcp://c:4']", &l), 0);
    assert_list(&l, "http://a:1=tcp://a:2,http://c:3=tcp://c:4");
    assert_int_equal(parse("---\n- http://a:1=tcp://a:2\n", &l), 0);
    assert_list(&l, "http://a:1=tcp://a:2");
    assert_int_equal(parse("[]\n", &l), 0);
    assert_int_equal(l.n, 0);
    /* Errors: a bad entry, a list in the list, a mapping, YAML itself; all at their line. */
    assert_int_equal(parse("- http://a:1=tcp://a:2\n- http://b:2\n", &l), -1);
    assert_int_equal(l.n, 0);
    assert_non_null(strstr(err, "w.txt:2: "));
    assert_int_equal(parse("- http://a:1=tcp://a:2\n- [x]\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:2: a worker must be a string"));
    assert_int_equal(parse("- http://a:1=tcp://a:2\n- {a: b}\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:2:4: unknown key 'a'"));
    assert_int_equal(parse("- &x http://a:1=tcp://a:2\n- *x\n", &l), -1);
    assert_non_null(strstr(err, "anchors and aliases"));
    assert_int_equal(parse("- http://a:1=tcp://a:2\n- \"unterminated\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:"));
    assert_int_equal(l.n, 0);
    wlist_free(&l);
}

/* Roles: the canonical entry carries one (" role=ROLE"), split gives it back, and a change of
 * role is a worker gone and one new. */
static void test_roles(void **state)
{
    char out[600], msg[300], proxy[64], pub[64];
    struct wlist cur = {0}, next = {0}, add = {0}, gone = {0};
    int role = 99, other = 99;

    (void) state;
    assert_int_equal(wlist_canon_role("http://a:1/=tcp://a:2", ADMIT_LOAD_ROLE_PREFILL, out,
                                      sizeof out, msg, sizeof msg),
                     0);
    assert_string_equal(out, "http://a:1=tcp://a:2 role=prefill");
    assert_int_equal(wlist_split(out, proxy, sizeof proxy, pub, sizeof pub, &role), 0);
    assert_string_equal(proxy, "http://a:1");
    assert_string_equal(pub, "tcp://a:2");
    assert_int_equal(role, ADMIT_LOAD_ROLE_PREFILL);
    assert_int_equal(
        wlist_canon_role("http://a:1=tcp://a:2", WLIST_ROLE_NONE, out, sizeof out, msg, sizeof msg),
        0);
    assert_string_equal(out, "http://a:1=tcp://a:2");
    assert_int_equal(wlist_split(out, proxy, sizeof proxy, pub, sizeof pub, &role), 0);
    assert_int_equal(role, WLIST_ROLE_NONE);
    assert_int_equal(wlist_canon_role("http://a:1=tcp://a:2", ADMIT_LOAD_ROLE_BOTH, out, sizeof out,
                                      msg, sizeof msg),
                     0);
    assert_string_equal(out, "http://a:1=tcp://a:2 role=both");
    assert_int_equal(
        wlist_split("http://a:1=tcp://a:2 role=x", proxy, sizeof proxy, pub, sizeof pub, &role),
        -1);
    assert_int_equal(
        wlist_split("http://a:1=tcp://a:2 x=decode", proxy, sizeof proxy, pub, sizeof pub, &role),
        -1);
    /* The role's suffix does not count against the publisher's room. */
    assert_int_equal(
        wlist_split("http://a:1=tcp://a:2 role=decode", proxy, sizeof proxy, pub, 10, &role), 0);
    assert_int_equal(role, ADMIT_LOAD_ROLE_DECODE);
    assert_string_equal(wlist_role_label(WLIST_ROLE_NONE), "as published");
    assert_string_equal(wlist_role_label(ADMIT_LOAD_ROLE_DECODE), "decode");

    /* prefill -> decode: retired and added; the other worker untouched. */
    fill(&cur, "http://a:1=tcp://a:2 role=prefill", "http://b:1=tcp://b:2", NULL);
    fill(&next, "http://a:1=tcp://a:2 role=decode", "http://b:1=tcp://b:2", NULL);
    wlist_diff(&cur, &next, &add, &gone);
    assert_list(&add, "http://a:1=tcp://a:2 role=decode");
    assert_list(&gone, "http://a:1=tcp://a:2 role=prefill");

    /* A clash: the same worker (whatever its publisher) with another role. */
    assert_int_equal(wlist_role_clash(&cur, "http://a:1=tcp://a:2 role=prefill", &other), 0);
    assert_int_equal(wlist_role_clash(&cur, "http://a:1=tcp://a:9 role=prefill", &other), 0);
    assert_int_equal(wlist_role_clash(&cur, "http://a:1=tcp://a:2", &other), 1);
    assert_int_equal(other, ADMIT_LOAD_ROLE_PREFILL);
    assert_int_equal(wlist_role_clash(&cur, "http://b:1=tcp://b:2 role=both", &other), 1);
    assert_int_equal(other, WLIST_ROLE_NONE);
    assert_int_equal(wlist_role_clash(&cur, "http://a:10=tcp://a:2", &other), 0);
    assert_int_equal(wlist_role_clash(&cur, "http://c:1=tcp://a:2", &other), 0);
    wlist_free(&cur);
    wlist_free(&next);
    wlist_free(&add);
    wlist_free(&gone);
}

static void test_file_roles(void **state)
{
    struct wlist l = {0};

    (void) state;
    assert_int_equal(parse("http://a:1=tcp://a:2 role=prefill   # the prefill one\n"
                           "http://b:1=tcp://b:2\trole=decode\n"
                           "http://c:1=tcp://c:2 # as published\n"
                           "http://d:1=tcp://d:2 role=both\n"
                           "http://a:1=tcp://a:2 role=prefill\n", /* twice, the same: once */
                           &l),
                     0);
    assert_list(&l, "http://a:1=tcp://a:2 role=prefill,http://b:1=tcp://b:2 role=decode,"
                    "http://c:1=tcp://c:2,http://d:1=tcp://d:2 role=both");
    /* An unknown role: its line and the column of its name; nothing left. */
    assert_int_equal(parse("http://a:1=tcp://a:2\n  http://b:1=tcp://b:2 role=prefil\n", &l), -1);
    assert_int_equal(l.n, 0);
    assert_non_null(strstr(err, "w.txt:2:29: unknown role 'prefil'"));
    assert_int_equal(parse("http://b:1=tcp://b:2 role=\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:1:27: unknown role ''"));
    assert_int_equal(parse("http://b:1=tcp://b:2 rol=decode\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:1: one worker a line"));
    assert_int_equal(parse("http://b:1=tcp://b:2 role=decode extra\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:1: one worker a line"));
    /* One worker, two roles, in one file: an error at the second. */
    assert_int_equal(parse("http://a:1=tcp://a:2 role=prefill\n# x\nhttp://a:1/=tcp://a:2\n", &l),
                     -1);
    assert_non_null(strstr(err, "w.txt:3: worker 'http://a:1/=tcp://a:2' is named again with "
                                "another role (as published, and prefill before)"));
    assert_int_equal(l.n, 0);

    /* YAML: strings as lines have them, and mappings. */
    assert_int_equal(parse("- http://a:1=tcp://a:2 role=prefill\n"
                           "- {url: 'http://b:1', publish: tcp://b:2, role: decode}\n"
                           "- url: http://c:1\n"
                           "  publish: tcp://c:2\n"
                           "- http://d:1=tcp://d:2\n",
                           &l),
                     0);
    assert_list(&l, "http://a:1=tcp://a:2 role=prefill,http://b:1=tcp://b:2 role=decode,"
                    "http://c:1=tcp://c:2,http://d:1=tcp://d:2");
    assert_int_equal(parse("- http://a:1=tcp://a:2\n- url: http://b:1\n  publish: tcp://b:2\n"
                           "  role: mixed\n",
                           &l),
                     -1);
    assert_int_equal(l.n, 0);
    assert_non_null(strstr(err, "w.txt:4:9: unknown role 'mixed'"));
    assert_int_equal(parse("- \"http://a:1=tcp://a:2 role=x\"\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:1:30: unknown role 'x'"));
    assert_int_equal(parse("- {url: http://b:1, role: decode}\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:1: a worker's mapping needs url and publish"));
    assert_int_equal(parse("- {url: http://b:1, url: http://b:1, publish: tcp://b:2}\n", &l), -1);
    assert_non_null(strstr(err, "'url' given twice"));
    assert_int_equal(parse("- {url: http://b:1, publish: [tcp://b:2]}\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:1: a worker must be a string"));
    assert_int_equal(parse("- {url: http://b:1=x, publish: tcp://b:2}\n", &l), -1);
    assert_non_null(strstr(err, "is not a worker's url"));
    assert_int_equal(parse("- {url: http://b:1, publish: udp://b:2}\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:1: 'http://b:1=udp://b:2'"));
    assert_int_equal(parse("- http://a:1=tcp://a:2 role=decode\n"
                           "- {url: http://a:1, publish: tcp://a:2, role: prefill}\n",
                           &l),
                     -1);
    assert_non_null(strstr(err, "w.txt:2: worker 'http://a:1=tcp://a:2' is named again"));
    assert_int_equal(parse("- http://a:1=tcp://a:2 role=decode x\n", &l), -1);
    assert_non_null(strstr(err, "w.txt:1: a worker must be PROXY_URL=PUB_URL [role=ROLE]"));
    wlist_free(&l);
}

static void test_file_read(void **state)
{
    struct wlist l = {0};
    char path[64] = "";

    (void) state;
    testenv_write(path, "http://a:1=tcp://a:2\n");
    assert_int_equal(wlist_read(path, &l, err, sizeof err), 0);
    assert_list(&l, "http://a:1=tcp://a:2");
    unlink(path);
    assert_int_equal(wlist_read(path, &l, err, sizeof err), -1);
    assert_int_equal(l.n, 0);
    assert_non_null(strstr(err, "cannot read"));
    wlist_free(&l);
}

static void test_dns_spec(void **state)
{
    char name[WLIST_DNS_NAME_MAX + 1], msg[300], longname[300];
    unsigned h = 0, p = 0;

    (void) state;
    assert_int_equal(
        wlist_dns_spec("admitd.llm.svc.cluster.local:8080:5557", name, &h, &p, msg, sizeof msg), 0);
    assert_string_equal(name, "admitd.llm.svc.cluster.local");
    assert_int_equal(h, 8080);
    assert_int_equal(p, 5557);
    assert_int_equal(wlist_dns_spec("w_1:1:65535", name, &h, &p, msg, sizeof msg), 0);
    assert_int_equal(p, 65535);
    assert_int_equal(wlist_dns_spec("w:8080", name, &h, &p, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "NAME:HTTP_PORT:PUB_PORT"));
    assert_int_equal(wlist_dns_spec(":1:2", name, &h, &p, msg, sizeof msg), -1);
    assert_int_equal(wlist_dns_spec("w:0:2", name, &h, &p, msg, sizeof msg), -1);
    assert_int_equal(wlist_dns_spec("w:1:65536", name, &h, &p, msg, sizeof msg), -1);
    assert_int_equal(wlist_dns_spec("w:1:", name, &h, &p, msg, sizeof msg), -1);
    assert_int_equal(wlist_dns_spec("w:x:2", name, &h, &p, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "must be ports"));
    assert_int_equal(wlist_dns_spec("w w:1:2", name, &h, &p, msg, sizeof msg), -1);
    assert_int_equal(wlist_dns_spec("[::1]:1:2", name, &h, &p, msg, sizeof msg), -1);
    memset(longname, 'a', 254);
    strcpy(longname + 254, ":1:2");
    assert_int_equal(wlist_dns_spec(longname, name, &h, &p, msg, sizeof msg), -1);
    strcpy(longname + 253, ":1:2");
    assert_int_equal(wlist_dns_spec(longname, name, &h, &p, msg, sizeof msg), 0);
    assert_int_equal(strlen(name), 253);
}

static void test_from_ipv4(void **state)
{
    static const unsigned char addrs[] = {127, 0, 0, 3, 10, 1, 2, 254, 127, 0, 0, 3};
    struct wlist l = {0};

    (void) state;
    wlist_from_ipv4(addrs, 3, 8080, 5557, WLIST_ROLE_NONE, &l);
    assert_list(&l, "http://10.1.2.254:8080=tcp://10.1.2.254:5557,"
                    "http://127.0.0.3:8080=tcp://127.0.0.3:5557");
    /* Its entries are canonical: a file naming the same worker is the same entry. */
    for (size_t i = 0; i < l.n; i++) {
        char out[600], msg[300];

        assert_int_equal(wlist_canon(l.items[i], out, sizeof out, msg, sizeof msg), 0);
        assert_string_equal(out, l.items[i]);
    }
    wlist_from_ipv4(addrs, 3, 8080, 5557, ADMIT_LOAD_ROLE_DECODE, &l);
    assert_list(&l, "http://10.1.2.254:8080=tcp://10.1.2.254:5557 role=decode,"
                    "http://127.0.0.3:8080=tcp://127.0.0.3:5557 role=decode");
    wlist_from_ipv4(addrs, 0, 1, 2, WLIST_ROLE_NONE, &l);
    assert_int_equal(l.n, 0);
    wlist_free(&l);
}

static void test_from_ipv6(void **state)
{
    unsigned char addrs[3 * 16] = {0};
    struct wlist l = {0};

    (void) state;
    addrs[15] = 1; /* ::1 */
    addrs[16] = 0xfd, addrs[17] = 0x00, addrs[18] = 0x0a, addrs[19] = 0xbc, addrs[31] = 0x2a;
    memcpy(addrs + 32, addrs + 16, 16); /* the same address twice: one worker */
    wlist_from_ipv6(addrs, 3, 8080, 5557, WLIST_ROLE_NONE, &l);
    assert_list(&l, "http://[::1]:8080=tcp://[::1]:5557,"
                    "http://[fd00:abc::2a]:8080=tcp://[fd00:abc::2a]:5557");
    for (size_t i = 0; i < l.n; i++) {
        char out[600], msg[300];

        assert_int_equal(wlist_canon(l.items[i], out, sizeof out, msg, sizeof msg), 0);
        assert_string_equal(out, l.items[i]);
    }
    wlist_free(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_canon),      cmocka_unit_test(test_split),
        cmocka_unit_test(test_add_remove), cmocka_unit_test(test_diff),
        cmocka_unit_test(test_file_lines), cmocka_unit_test(test_file_yaml),
        cmocka_unit_test(test_roles),      cmocka_unit_test(test_file_roles),
        cmocka_unit_test(test_file_read),  cmocka_unit_test(test_dns_spec),
        cmocka_unit_test(test_from_ipv4),  cmocka_unit_test(test_from_ipv6),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
