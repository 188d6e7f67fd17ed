/* Unit tests for the option engine: precedence, every kind, lists, the file, the help. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/log.h"
#include "util/netaddr.h"
#include "config/opt.h"
#include "../testenv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One field of every kind. */
struct t {
    unsigned num, needy, retry;
    struct hostport addr;
    struct http_url url;
    int status, flag, json, odd;
    enum log_level level;
    char path[32], pub[64], id[16], token[32];
    double ratio, frac, scale;
    int64_t count;
    struct opt_list items;
    char config[128];
};

/* OPT_LIST's check: refuses the item "bad". */
static int check_item(void *obj, const char *raw, char *msg, size_t msglen)
{
    (void) obj;
    if (strcmp(raw, "bad") != 0)
        return 0;
    snprintf(msg, msglen, "'%s' is a bad item", raw);
    return -1;
}

/* OPT_CUSTOM: an odd number, into t.odd. */
static int parse_odd(void *obj, const char *raw, char *msg, size_t msglen)
{
    int v = atoi(raw);

    if (v % 2 == 0) {
        snprintf(msg, msglen, "'%s' is not odd", raw);
        return -1;
    }
    ((struct t *) obj)->odd = v;
    return 0;
}

#define AT(m) OPT_AT(struct t, m)

static const struct opt_def defs[] = {
    OPT("num", "T_NUM", OPT_UINT, AT(num), 1, 100, "5", "a number"),
    OPT("needy", "T_NEEDY", OPT_UINT, AT(needy), 2, 100, "7", "read only with --num", "must be 2+",
        "num"),
    OPT("addr", "T_ADDR", OPT_HOSTPORT, AT(addr), 0, 0, "127.0.0.1:1", "an address"),
    OPT("url", "T_URL", OPT_URL, AT(url), 0, 0, "http://h:2", "a URL"),
    OPT("status", "T_STATUS", OPT_STATUS, AT(status), 200, 999, "529", "a lenient status"),
    OPT("level", "T_LEVEL", OPT_LOGLEVEL, AT(level), 0, 0, "info", "a log level"),
    OPT("path", "T_PATH", OPT_PATH, AT(path), 0, 0, "/p", "a path"),
    OPT("flag", "T_FLAG", OPT_BOOL, AT(flag), 0, 0, "0", "a switch"),
    OPT("pub", "T_PUB", OPT_PUBURL, AT(pub), 0, 0, "none", "an nng URL"),
    OPT("id", "T_ID", OPT_ID, AT(id), 0, 0, NULL, "an id"),
    OPT("ratio", "T_RATIO", OPT_DOUBLE, AT(ratio), 0.5, 10, "1", "a ratio"),
    OPT("retry", "T_RETRY", OPT_RETRY, AT(retry), 1, 60, "auto", "seconds or auto"),
    OPT("token", "T_TOKEN", OPT_TOKEN, AT(token), 0, 0, NULL, "a secret"),
    OPT("format", "T_FORMAT", OPT_LOGFMT, AT(json), 0, 0, "text", "text or json"),
    OPT("frac", "T_FRAC", OPT_FRACTION, AT(frac), 0, 0, "None", "0..1 or None"),
    OPT("scale", "T_SCALE", OPT_SCALE, AT(scale), 0, 0, "None", ">= 0 or None"),
    OPT("count", "T_COUNT", OPT_COUNT, AT(count), 0, 1000, "None", "a count or None"),
    OPT("item", "T_ITEM", OPT_LIST, AT(items), 0, 0, NULL, "a list", NULL, NULL, check_item),
    OPT("odd", "T_ODD", OPT_CUSTOM, AT(odd), 0, 0, "1", "an odd number", NULL, NULL, parse_odd),
    OPT("a-very-long-option-name-indeed", "T_LONG", OPT_BOOL, AT(flag), 0, 0, NULL, "long"),
};

static const struct opt_spec spec = {
    "tprog", "[--option=value ...]",       "The intro.\n", "T_CONFIG", "examples/t.yaml",
    defs,    sizeof defs / sizeof defs[0], AT(config),     NULL,       0,
    NULL,
};

static char err[512];

/* Parses argv (NULL-terminated, without the program name) with env into a zeroed t. */
static enum opt_result parse(struct t *t, const char *const *env, ...)
{
    char *argv[32];
    int argc;
    va_list ap;

    memset(t, 0, sizeof *t);
    testenv_set(env);
    va_start(ap, env);
    argc = testenv_args(argv, 32, "tprog", ap);
    va_end(ap);
    return opt_parse(&spec, t, argc, argv, testenv_get, err, sizeof err);
}

/* l's items, comma-joined, are want. */
static void assert_items(const struct opt_list *l, const char *want)
{
    char buf[256];

    assert_string_equal(testenv_join(l, buf, sizeof buf), want);
}

static void test_defaults(void **state)
{
    struct t t;

    (void) state;
    assert_int_equal(parse(&t, NULL, NULL), OPT_RUN);
    assert_int_equal(t.num, 5);
    assert_int_equal(t.needy, 7);
    assert_string_equal(t.addr.host, "127.0.0.1");
    assert_int_equal(t.url.port, 2);
    assert_int_equal(t.status, 529);
    assert_int_equal(t.level, LOG_INFO);
    assert_string_equal(t.path, "/p");
    assert_int_equal(t.flag, 0);
    assert_string_equal(t.pub, "");
    assert_string_equal(t.id, "");
    assert_true(t.ratio == 1.0);
    assert_int_equal(t.retry, 0);
    assert_string_equal(t.token, "");
    assert_int_equal(t.json, 0);
    assert_true(isnan(t.frac) && isnan(t.scale));
    assert_int_equal(t.count, -1);
    assert_int_equal(t.items.n, 0);
    assert_int_equal(t.odd, 1);
    assert_string_equal(t.config, "");
    opt_free(&spec, &t);
}

/* default < file < env < flag, for a scalar and for a list. */
static void test_precedence(void **state)
{
    char path[64] = "", arg[96];
    struct t t;

    (void) state;
    testenv_write(path, "num: 10\nitem: \"a,b\"\nlevel: ~\n");
    snprintf(arg, sizeof arg, "--config=%s", path);
    {
        const char *const env[] = {"T_NUM", "20", "T_ITEM", "c", NULL};
        assert_int_equal(parse(&t, env, arg, "--num=30", "--item=d", "--item", "e,f", NULL),
                         OPT_RUN);
        assert_int_equal(t.num, 30);
        assert_items(&t.items, "d,e,f"); /* flags replace the env's list, and append */
        assert_string_equal(t.config, path);
        opt_free(&spec, &t);
        assert_int_equal(parse(&t, env, arg, NULL), OPT_RUN);
        assert_int_equal(t.num, 20);
        assert_items(&t.items, "c"); /* the env's list replaces the file's */
        opt_free(&spec, &t);
    }
    {
        const char *const env[] = {"T_CONFIG", path, NULL};
        assert_int_equal(parse(&t, env, NULL), OPT_RUN);
        assert_int_equal(t.num, 10);
        assert_items(&t.items, "a,b");
        assert_int_equal(t.level, LOG_INFO); /* null in the file: the default */
        opt_free(&spec, &t);
    }
    assert_int_equal(parse(&t, NULL, NULL), OPT_RUN);
    assert_int_equal(t.num, 5);
    /* A bad value that a higher source overrides is never read. */
    {
        const char *const env[] = {"T_NUM", "zero", NULL};
        assert_int_equal(parse(&t, env, "--num=3", NULL), OPT_RUN);
        assert_int_equal(t.num, 3);
        assert_int_equal(parse(&t, env, NULL), OPT_ERROR);
        assert_string_equal(err, "T_NUM: 'zero' must be an integer from 1 to 100");
    }
    unlink(path);
}

/* Every kind: a value it takes, and one it refuses with its message. */
static void test_kinds(void **state)
{
    static const struct {
        const char *arg, *want; /* want: NULL = accepted, else part of the error */
    } cases[] = {
        {"--num=100", NULL},
        {"--num=101", "--num: '101' must be an integer from 1 to 100"},
        {"--num= 7 ", NULL},
        {"--num=-1", "must be an integer"},
        {"--num=1.5", "must be an integer"},
        {"--num=99999999999999999999999", "must be an integer"},
        {"--addr=[::1]:0", NULL},
        {"--addr=nope", "--addr: "},
        {"--url=http://x:9", NULL},
        {"--url=https://x:9", "--url: "},
        {"--status=200", NULL},
        {"--status=junk", NULL}, /* lenient: the default */
        {"--level=debug", NULL},
        {"--level=loud", "--level: 'loud' must be error, warn, info or debug"},
        {"--path=/x/y", NULL},
        {"--path=x", "must be a path starting with / (at most 31 bytes)"},
        {"--flag", NULL},
        {"--flag=off", NULL},
        {"--flag=maybe", "--flag: 'maybe' must be true or false"},
        {"--pub=ipc:///tmp/x", NULL},
        {"--pub=udp://x:1", "must be tcp://HOST:PORT, ipc:///PATH or none"},
        {"--id=w-1", NULL},
        {"--id=a b", "must be printable ASCII"},
        {"--id=0123456789abcdef", "--id: must be 1 to 15 characters"},
        {"--ratio=0.5", NULL},
        {"--ratio=0.4", "--ratio: '0.4' must be a number from 0.5 to 10"},
        {"--ratio=nan", "must be a number"},
        {"--retry=60", NULL},
        {"--retry=0", "--retry: '0' must be auto or seconds from 1 to 60"},
        {"--token=0123456789abcdef", NULL},
        {"--token=short", "--token must be 16 to 31 characters without blanks"},
        {"--token=0123456789 abcdef", "without blanks"},
        {"--format=json", NULL},
        {"--format=xml", "--format: 'xml' must be text or json"},
        {"--frac=1", NULL},
        {"--frac=None", NULL},
        {"--frac=1.5", "--frac: '1.5' must be a number between 0 and 1, or None"},
        {"--frac=-0.1", "between 0"},
        {"--frac=inf", "between 0"},
        {"--scale=64", NULL},
        {"--scale=none", NULL},
        {"--scale=-1", "--scale: '-1' must be a number >= 0, or None"},
        {"--count=1000", NULL},
        {"--count=None", NULL},
        {"--count=-1", "--count: '-1' must be an integer from 0 to 1000, or None"},
        {"--count=1001", "must be an integer from 0 to 1000"},
        {"--item=a,,b", NULL},
        {"--item=bad", "--item: 'bad' is a bad item"},
        {"--odd=3", NULL},
        {"--odd=4", "--odd: '4' is not odd"},
    };
    struct t t;

    (void) state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum opt_result r = parse(&t, NULL, cases[i].arg, NULL);

        if (cases[i].want == NULL) {
            if (r != OPT_RUN)
                fail_msg("%s: %s", cases[i].arg, err);
            opt_free(&spec, &t);
        } else {
            assert_int_equal(r, OPT_ERROR);
            if (strstr(err, cases[i].want) == NULL)
                fail_msg("%s: got '%s', want '%s'", cases[i].arg, err, cases[i].want);
        }
    }
}

/* The values land where they should. */
static void test_values(void **state)
{
    struct t t;

    (void) state;
    assert_int_equal(parse(&t, NULL, "--status=503", "--flag", "--format=json", "--frac=0.25",
                           "--scale=1.5", "--count=12", "--retry=9", "--item=a,,b", "--odd=9",
                           "--pub=tcp://127.0.0.1:0", NULL),
                     OPT_RUN);
    assert_int_equal(t.status, 503);
    assert_int_equal(t.flag, 1);
    assert_int_equal(t.json, 1);
    assert_true(t.frac == 0.25 && t.scale == 1.5);
    assert_int_equal(t.count, 12);
    assert_int_equal(t.retry, 9);
    assert_items(&t.items, "a,b"); /* empty items are dropped */
    assert_int_equal(t.odd, 9);
    assert_string_equal(t.pub, "tcp://127.0.0.1:0");
    opt_free(&spec, &t);
    opt_free(&spec, &t); /* twice is fine */
    assert_int_equal(parse(&t, NULL, "--status=1000", "--frac=0.5", "--frac=None", NULL), OPT_RUN);
    assert_int_equal(t.status, 529);
    assert_true(isnan(t.frac)); /* the last flag wins */
}

/* "requires": without num, needy's env and flag are not read, and the file's is checked
 * but the default stays. */
static void test_requires(void **state)
{
    const char *const env[] = {"T_NEEDY", "1", NULL};
    const char *const env_ok[] = {"T_NEEDY", "9", NULL};
    char path[64] = "", arg[96];
    struct t t;

    (void) state;
    assert_int_equal(parse(&t, env, NULL), OPT_RUN);
    assert_int_equal(t.needy, 7);
    assert_int_equal(parse(&t, NULL, "--needy=1", NULL), OPT_RUN);
    assert_int_equal(t.needy, 7);
    assert_int_equal(parse(&t, env, "--num=4", NULL), OPT_ERROR);
    assert_string_equal(err, "T_NEEDY: '1' must be 2+");
    assert_int_equal(parse(&t, env_ok, "--num=4", NULL), OPT_RUN);
    assert_int_equal(t.needy, 9);
    testenv_write(path, "needy: 1\n");
    snprintf(arg, sizeof arg, "--config=%s", path);
    assert_int_equal(parse(&t, NULL, arg, NULL), OPT_ERROR);
    assert_non_null(strstr(err, ":1:8: needy: '1' must be 2+"));
    testenv_write(path, "needy: 50\n");
    assert_int_equal(parse(&t, NULL, arg, NULL), OPT_RUN);
    assert_int_equal(t.needy, 7);
    testenv_write(path, "needy: 50\nnum: 2\n");
    assert_int_equal(parse(&t, NULL, arg, NULL), OPT_RUN);
    assert_int_equal(t.needy, 50);
    unlink(path);
}

static void test_command_line_errors(void **state)
{
    struct t t;

    (void) state;
    assert_int_equal(parse(&t, NULL, "--bogus=1", NULL), OPT_ERROR);
    assert_string_equal(err, "unknown option '--bogus=1' (see --help)");
    assert_int_equal(parse(&t, NULL, "--num", NULL), OPT_ERROR);
    assert_string_equal(err, "option '--num' needs a value");
    assert_int_equal(parse(&t, NULL, "stray", NULL), OPT_ERROR);
    assert_non_null(strstr(err, "unexpected argument 'stray'"));
    /* The lists gathered before an error are released (ASan would report them). */
    assert_int_equal(parse(&t, NULL, "--item=a", "--num=0", NULL), OPT_ERROR);
    assert_int_equal(t.items.n, 0);
    assert_int_equal(parse(&t, NULL, "--help", NULL), OPT_HELP);
    assert_int_equal(parse(&t, NULL, "-V", NULL), OPT_VERSION);
    assert_int_equal(parse(&t, NULL, "--check-config", NULL), OPT_CHECK);
    assert_int_equal(parse(&t, NULL, "--check-config", "--num=0", NULL), OPT_ERROR);
}

static void test_file_errors(void **state)
{
    char path[64] = "", arg[96];
    struct t t;

    (void) state;
    testenv_write(path, "num: 3\n# a comment\nbogus: 1\n");
    snprintf(arg, sizeof arg, "--config=%s", path);
    assert_int_equal(parse(&t, NULL, arg, NULL), OPT_ERROR);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, ":3:1: unknown setting 'bogus' (examples/t.yaml lists them all)"));
    testenv_write(path, "item: \"a,bad\"\n");
    assert_int_equal(parse(&t, NULL, arg, "--check-config", NULL), OPT_ERROR);
    assert_non_null(strstr(err, ":1:7: item: 'bad' is a bad item"));
    testenv_write(path, "token: short\n");
    assert_int_equal(parse(&t, NULL, arg, NULL), OPT_ERROR);
    assert_non_null(strstr(err, ":1:8: token must be 16"));
    testenv_write(path, "a_very_long_option_name_indeed: yes\nitem: x\n");
    assert_int_equal(parse(&t, NULL, arg, "--check-config", NULL), OPT_CHECK);
    assert_int_equal(t.flag, 1);
    assert_items(&t.items, "x");
    opt_free(&spec, &t);
    unlink(path);
    assert_int_equal(parse(&t, NULL, arg, NULL), OPT_ERROR);
    assert_non_null(strstr(err, "cannot read"));
}

/* The help lists every option with its variable and default. */
static void test_usage(void **state)
{
    char *text = NULL, want[128];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    (void) state;
    assert_non_null(f);
    opt_usage(&spec, f);
    fclose(f);
    assert_non_null(strstr(text, "usage: tprog [--option=value ...]\n\nThe intro.\n"));
    for (size_t i = 0; i < spec.ndefs; i++) {
        snprintf(want, sizeof want, "--%s", defs[i].flag);
        assert_non_null(strstr(text, want));
        snprintf(want, sizeof want, "env %s%s; default %s\n", defs[i].env,
                 defs[i].kind == OPT_LIST ? ", comma-separated" : "",
                 defs[i].def ? defs[i].def : "unset");
        if (strstr(text, want) == NULL)
            fail_msg("'%s' not in the help", want);
    }
    assert_non_null(strstr(text, "  --a-very-long-option-name-indeed\n"));
    assert_non_null(strstr(text, "  --config=FILE"));
    assert_non_null(strstr(text, "env T_CONFIG"));
    assert_non_null(strstr(text, "examples/t.yaml"));
    assert_non_null(strstr(text, "--check-config"));
    free(text);
}

static void test_helpers(void **state)
{
    (void) state;
    assert_int_equal(opt_lenient_int(NULL, 200, 999, 529), 529);
    assert_int_equal(opt_lenient_int(" 503 ", 200, 999, 529), 503);
    assert_int_equal(opt_lenient_int("-503", 200, 999, 529), 529);
    assert_int_equal(opt_lenient_int("1000", 200, 999, 529), 529);
    assert_int_equal(opt_lenient_int("99999999999999999999", 200, 999, 529), 529);
    assert_true(opt_nng_url_ok("tcp://h:1", 64));
    assert_true(opt_nng_url_ok("ipc:///x", 64));
    assert_false(opt_nng_url_ok("tcp://", 64));
    assert_false(opt_nng_url_ok("tcp://h:1", 9));
    assert_false(opt_nng_url_ok("tcp://h 1", 64));
    assert_false(opt_nng_url_ok("http://h:1", 64));
}

/* A list holds OPT_LIST_MAX items at most. */
static void test_list_limit(void **state)
{
    size_t n = OPT_LIST_MAX + 1;
    char *many = malloc(2 * n + 16), arg[] = "--item";
    char *argv[] = {"tprog", arg, many, NULL};
    struct t t;

    (void) state;
    assert_non_null(many);
    for (size_t i = 0; i < n; i++)
        memcpy(many + 2 * i, "x,", 2);
    many[2 * n - 1] = '\0';
    memset(&t, 0, sizeof t);
    assert_int_equal(opt_parse(&spec, &t, 3, argv, NULL, err, sizeof err), OPT_ERROR);
    assert_non_null(strstr(err, "--item: more than 1024 items"));
    many[2 * (n - 1) - 1] = '\0';
    assert_int_equal(opt_parse(&spec, &t, 3, argv, NULL, err, sizeof err), OPT_RUN);
    assert_int_equal(t.items.n, OPT_LIST_MAX);
    opt_free(&spec, &t);
    free(many);
}

/* A table whose field does not fit its kind is caught, not written past. */
static void test_bad_table(void **state)
{
    static const struct opt_def bad_defs[] = {
        OPT("n", "T_N", OPT_UINT, AT(count), 0, 10, "1", "an unsigned in an int64_t"),
    };
    struct opt_spec s = spec;
    struct t t;
    char *argv[] = {"tprog", NULL};

    (void) state;
    s.defs = bad_defs;
    s.ndefs = 1;
    memset(&t, 0, sizeof t);
    assert_int_equal(opt_parse(&s, &t, 1, argv, NULL, err, sizeof err), OPT_ERROR);
    assert_non_null(strstr(err, "--n: the table's field does not fit its kind"));
}

/* What the file hook saw. */
static struct {
    int calls;
    unsigned num; /* t.num when it ran: the file's settings are applied first */
    char path[96], text[256];
    size_t len;
} hooked;

/* A file hook: keeps what it is given, refuses a text that says "refuse". */
static int file_hook(void *obj, const char *path, const char *text, size_t len, char *e,
                     size_t elen)
{
    hooked.calls++;
    hooked.num = ((struct t *) obj)->num;
    snprintf(hooked.path, sizeof hooked.path, "%s", path);
    snprintf(hooked.text, sizeof hooked.text, "%s", text);
    hooked.len = len;
    assert_int_equal(text[len], '\0');
    if (strstr(text, "refuse") == NULL)
        return 0;
    snprintf(e, elen, "%s:9:9: refused", path);
    return -1;
}

/* File-only keys: let through the file whatever their shape, handed to the hook with the
 * file's text, and refused as flags and variables. */
static void test_file_keys(void **state)
{
    static const struct opt_file_key keys[] = {{"deep_thing", "T_DEEP_THING"}, {"other", NULL}};
    static const char text[] = "num: 9\ndeep_thing:\n  - {a: [1, 2]}\nother: x\n";
    struct opt_spec s = spec;
    char path[64] = "", arg[96], *argv[4] = {"tprog", arg, NULL, NULL};
    struct t t;

    (void) state;
    s.file_keys = keys;
    s.nfile_keys = 2;
    s.file_hook = file_hook;
    testenv_write(path, text);
    snprintf(arg, sizeof arg, "--config=%s", path);
    memset(&t, 0, sizeof t);
    memset(&hooked, 0, sizeof hooked);
    testenv_set(NULL);
    assert_int_equal(opt_parse(&s, &t, 2, argv, testenv_get, err, sizeof err), OPT_RUN);
    assert_int_equal(t.num, 9);
    assert_int_equal(hooked.calls, 1);
    assert_int_equal(hooked.num, 9);
    assert_string_equal(hooked.path, path);
    assert_string_equal(hooked.text, text);
    assert_int_equal(hooked.len, strlen(text));
    /* The hook's error is the parse's. */
    testenv_write(path, "num: 9\nother: refuse\n");
    memset(&t, 0, sizeof t);
    assert_int_equal(opt_parse(&s, &t, 2, argv, testenv_get, err, sizeof err), OPT_ERROR);
    assert_non_null(strstr(err, ":9:9: refused"));
    /* The settings are still checked first, and strictly. */
    testenv_write(path, "deep_thing: refuse\nnum: [9]\n");
    hooked.calls = 0;
    assert_int_equal(opt_parse(&s, &t, 2, argv, testenv_get, err, sizeof err), OPT_ERROR);
    assert_non_null(strstr(err, ":2:6: expected a single value for 'num', found a sequence"));
    assert_int_equal(hooked.calls, 0);
    testenv_write(path, "deep_thing: 1\ndeep_thing: 2\n");
    assert_int_equal(opt_parse(&s, &t, 2, argv, testenv_get, err, sizeof err), OPT_ERROR);
    assert_non_null(strstr(err, ":2:1: duplicate key 'deep_thing' (first at 1:1)"));
    unlink(path);
    /* No file: no hook. */
    argv[1] = "--num=3";
    assert_int_equal(opt_parse(&s, &t, 2, argv, testenv_get, err, sizeof err), OPT_RUN);
    assert_int_equal(hooked.calls, 0);
    /* As flags, in either spelling, with or without a value: refused, saying where they go. */
    argv[1] = "--deep-thing=1";
    assert_int_equal(opt_parse(&s, &t, 2, argv, testenv_get, err, sizeof err), OPT_ERROR);
    assert_string_equal(err, "--deep-thing: deep_thing can be set only in the config file "
                             "(--config FILE or T_CONFIG)");
    argv[1] = "--deep_thing";
    assert_int_equal(opt_parse(&s, &t, 2, argv, testenv_get, err, sizeof err), OPT_ERROR);
    assert_non_null(strstr(err, "--deep_thing: deep_thing can be set only in the config file"));
    argv[1] = "--other";
    argv[2] = "x";
    assert_int_equal(opt_parse(&s, &t, 3, argv, testenv_get, err, sizeof err), OPT_ERROR);
    assert_non_null(strstr(err, "--other: other can be set only"));
    argv[2] = NULL;
    /* Not a prefix or an extension of one. */
    argv[1] = "--deep";
    assert_int_equal(opt_parse(&s, &t, 2, argv, testenv_get, err, sizeof err), OPT_ERROR);
    assert_string_equal(err, "unknown option '--deep' (see --help)");
    argv[1] = "--deep-thing-2";
    assert_int_equal(opt_parse(&s, &t, 2, argv, testenv_get, err, sizeof err), OPT_ERROR);
    assert_string_equal(err, "unknown option '--deep-thing-2' (see --help)");
    argv[1] = "--";
    assert_int_equal(opt_parse(&s, &t, 2, argv, testenv_get, err, sizeof err), OPT_RUN);
    /* As a variable, when it has one; --help and --version still answer. */
    {
        const char *const env[] = {"T_DEEP_THING", "x", NULL};

        testenv_set(env);
        argv[1] = "--num=3";
        assert_int_equal(opt_parse(&s, &t, 2, argv, testenv_get, err, sizeof err), OPT_ERROR);
        assert_string_equal(err, "T_DEEP_THING: deep_thing can be set only in the config file "
                                 "(--config FILE or T_CONFIG)");
        argv[1] = "--help";
        assert_int_equal(opt_parse(&s, &t, 2, argv, testenv_get, err, sizeof err), OPT_HELP);
        argv[1] = "--num=3";
        assert_int_equal(opt_parse(&s, &t, 2, argv, NULL, err, sizeof err), OPT_RUN);
        testenv_set(NULL);
    }
    /* Without file keys the same names are plain unknowns. */
    argv[1] = "--deep-thing=1";
    assert_int_equal(opt_parse(&spec, &t, 2, argv, testenv_get, err, sizeof err), OPT_ERROR);
    assert_string_equal(err, "unknown option '--deep-thing=1' (see --help)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),    cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_kinds),       cmocka_unit_test(test_values),
        cmocka_unit_test(test_requires),    cmocka_unit_test(test_command_line_errors),
        cmocka_unit_test(test_file_errors), cmocka_unit_test(test_usage),
        cmocka_unit_test(test_helpers),     cmocka_unit_test(test_list_limit),
        cmocka_unit_test(test_bad_table),   cmocka_unit_test(test_file_keys),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
