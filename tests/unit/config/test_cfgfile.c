/* Unit tests for the YAML configuration file reader: a table of good files with the items
 * they yield and of bad files with the exact error (position included), then loading from
 * disk, limits, hostile input and the shipped example. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "config/cfgfile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Text with its length, so that cases may hold NUL bytes. */
#define TEXT(s) s, sizeof(s) - 1

struct tcase {
    const char *text;
    size_t len;
    const char *items; /* what the recorder logs; NULL for bad files that fail before any item */
    const char *err;   /* NULL: the file is good */
};

/* Items as "key@line:col=[value]@line:col;" (a null value as ~), plus test rejections. */
struct rec {
    char log[8192];
    int n;
};

static int record(const struct cfgfile_item *it, void *arg, char *msg, size_t msglen, int *at_key)
{
    struct rec *r = arg;
    size_t o = strlen(r->log);

    assert_non_null(it->key);
    assert_true(it->key[0] != '\0');
    assert_true(it->line >= 1 && it->column >= 1 && it->key_line >= 1 && it->key_column >= 1);
    if (it->is_null)
        assert_string_equal(it->value, "");
    r->n++;
    snprintf(r->log + o, sizeof r->log - o, "%s@%d:%d=%s%s%s@%d:%d;", it->key, it->key_line,
             it->key_column, it->is_null ? "~" : "[", it->value, it->is_null ? "" : "]", it->line,
             it->column);
    if (strncmp(it->key, "unknown", 7) == 0) {
        snprintf(msg, msglen, "unknown key '%s'", it->key);
        *at_key = 1;
        return -1;
    }
    if (strcmp(it->value, "bad") == 0) {
        snprintf(msg, msglen, "'%s' is not a number", it->value);
        *at_key = 0;
        return -1;
    }
    if (strcmp(it->key, "silent") == 0)
        return -1; /* no message, default position */
    if (strcmp(it->key, "silentkey") == 0) {
        *at_key = 1;
        return -1;
    }
    return 0;
}

static void write_temp(char *path, const char *text, size_t len);

/* The structured keys of the skip cases. */
static const char *const skip[] = {"classes", "rules"};

/* Runs a case; skipping: through cfgfile_parse_skip with skip[]. */
static void check_case(const struct tcase *c, int skipping)
{
    struct rec r;
    char err[512];
    int rc;

    memset(&r, 0, sizeof r);
    memset(err, 'x', sizeof err);
    if (skipping)
        rc = cfgfile_parse_skip("t.yaml", c->text, c->len, skip, 2, record, &r, err, sizeof err);
    else
        rc = cfgfile_parse("t.yaml", c->text, c->len, record, &r, err, sizeof err);
    if (c->err == NULL) {
        if (rc != 0)
            print_error("unexpected error: %s\n", err);
        assert_int_equal(rc, 0);
        assert_string_equal(err, "");
    } else {
        assert_int_equal(rc, -1);
        assert_string_equal(err, c->err);
    }
    assert_string_equal(r.log, c->items ? c->items : "");
}

static void run_case(void **state)
{
    check_case(*state, 0);
}

static void run_skip_case(void **state)
{
    check_case(*state, 1);
}

/* Good files: what the callback sees, positions included. */
static const struct tcase good[] = {
    {TEXT(""), "", NULL},
    {TEXT("# only a comment\n\n   # another\n"), "", NULL},
    {TEXT("---\n"), "", NULL},
    {TEXT("--- # nothing\n...\n"), "", NULL},
    {TEXT("~\n"), "", NULL},
    {TEXT("listen: 0.0.0.0:8080\nrequest_queue_limit: 16 # Q\n"),
     "listen@1:1=[0.0.0.0:8080]@1:9;request_queue_limit@2:1=[16]@2:22;", NULL},
    {TEXT("a: 1"), "a@1:1=[1]@1:4;", NULL},
    {TEXT("\"listen\": '0.0.0.0:80'\n'health_path': \"/h\"\n"),
     "listen@1:1=[0.0.0.0:80]@1:11;health_path@2:1=[/h]@2:16;", NULL},
    {TEXT("a: 'it''s'\nb: \"tab\\there \\u00e9\"\n"), "a@1:1=[it's]@1:4;b@2:1=[tab\there é]@2:4;",
     NULL},
    {TEXT("a: ~\nb: null\nc: Null\nd: NULL\ne:\nf: \"~\"\ng: 'null'\nh: !!str ~\ni: !!null\n"),
     "a@1:1=~@1:4;b@2:1=~@2:4;c@3:1=~@3:4;d@4:1=~@4:4;e@5:1=~@5:3;f@6:1=[~]@6:4;"
     "g@7:1=[null]@7:4;h@8:1=[~]@8:4;i@9:1=~@9:4;",
     NULL},
    {TEXT("a: yes\nb: on\nc: Off\nd: 010\ne: 1e3\n"),
     "a@1:1=[yes]@1:4;b@2:1=[on]@2:4;c@3:1=[Off]@3:4;d@4:1=[010]@4:4;e@5:1=[1e3]@5:4;", NULL},
    {TEXT("a: 1\r\nb: two words\r\n\r\nc: x\r\n"),
     "a@1:1=[1]@1:4;b@2:1=[two words]@2:4;c@4:1=[x]@4:4;", NULL},
    {TEXT("\xef\xbb\xbf"
          "a: 1\nb: 2\n"),
     "a@1:1=[1]@1:4;b@2:1=[2]@2:4;", NULL},
    {TEXT("a: |\n  line 1\n  line 2\nb: >\n  folded\n  text\n\n  para\nc: |-\n  kept\n"),
     "a@1:1=[line 1\nline 2\n]@1:4;b@4:1=[folded text\npara\n]@4:4;c@9:1=[kept]@9:4;", NULL},
    {TEXT("a: one\n  two\n  three\nb: 2\n"), "a@1:1=[one two three]@1:4;b@4:1=[2]@4:4;", NULL},
    {TEXT("worker_id: \xc3\xa9t\xc3\xa9\n\xe5\x90\x8d\xe5\x89\x8d: \xe5\x80\xa4 \xf0\x9f\x9a\x80\n"
          "z: x\n"),
     "worker_id@1:1=[été]@1:12;名前@2:1=[値 🚀]@2:5;z@3:1=[x]@3:4;", NULL},
    {TEXT("{a: 1, \"b\": x y, c: }\n"), "a@1:2=[1]@1:5;b@1:8=[x y]@1:13;c@1:18=~@1:21;", NULL},
    {TEXT("%YAML 1.1\n---\na: 1\n...\n"), "a@3:1=[1]@3:4;", NULL},
    {TEXT("? a\n: 1\n"), "a@1:3=[1]@2:3;", NULL},
    {TEXT("a: !!str 1\nb: !!int 2\nc: !!bool yes\nd: !!float 1.5\n!!str e: "
          "!<tag:yaml.org,2002:str> x\n"),
     "a@1:1=[1]@1:4;b@2:1=[2]@2:4;c@3:1=[yes]@3:4;d@4:1=[1.5]@4:4;e@5:1=[x]@5:10;", NULL},
};

/* Bad files: the exact message, at the offending token. */
static const struct tcase bad[] = {
    /* libyaml's scanner and parser: its problem and context, 1-based. */
    {TEXT("a: 1\n- b\n"), "a@1:1=[1]@1:4;",
     "t.yaml:2:1: did not find expected key (while parsing a block mapping at 1:1)"},
    {TEXT("a: 1\nb\nc: 2\n"), "a@1:1=[1]@1:4;",
     "t.yaml:3:1: could not find expected ':' (while scanning a simple key at 2:1)"},
    {TEXT("a: 1\n  b: 2\n"), "a@1:1=[1 b]@1:4;",
     "t.yaml:2:4: mapping values are not allowed in this context"},
    {TEXT("a: \"open\n"), NULL,
     "t.yaml:2:1: found unexpected end of stream (while scanning a quoted scalar at 1:4)"},
    {TEXT("a:\tb\n\tc: 1\n"), NULL,
     "t.yaml:2:1: found a tab character that violates indentation (while scanning a plain "
     "scalar at 1:4)"},
    {TEXT("a: @x\n"), NULL,
     "t.yaml:1:4: found character that cannot start any token (while scanning for the next "
     "token at 1:4)"},
    {TEXT(": 1\n"), NULL,
     "t.yaml:1:1: did not find expected key (while parsing a block mapping at 1:1)"},
    {TEXT("a: 1\r\nb\r\nc: 2\r\n"), "a@1:1=[1]@1:4;",
     "t.yaml:3:1: could not find expected ':' (while scanning a simple key at 2:1)"},
    /* The reader: a byte offset turned into line:column (columns count characters). */
    {TEXT("a: 1\nb: \xff\n"), NULL, "t.yaml:2:4: invalid UTF-8"},
    {TEXT("a: \xc3\xa9\xc3\xa9\xe2\x82\xac\x80x\n"), NULL, "t.yaml:1:7: invalid UTF-8"},
    {TEXT("a: 1\r\nb: 2\r\nc: \xc3"), "a@1:1=[1]@1:4;b@2:1=[2]@2:4;", "t.yaml:3:4: invalid UTF-8"},
    {TEXT("a: \xed\xa0\x80\n"), NULL, "t.yaml:1:4: invalid UTF-8"},
    {TEXT("a: 1\rb: \xfe"), NULL, "t.yaml:2:4: invalid UTF-8"},
    {TEXT("a: x\xc2\x85y\xe2\x80\xa8z\xe2\x80\xa9 \xff"), NULL, "t.yaml:4:2: invalid UTF-8"},
    {TEXT("\xff\xfe"
          "a\0:\0 \0"
          "1\0"),
     NULL, "t.yaml:1:1: invalid UTF-8"},
    {TEXT("a: 1\nb: x\0y\n"), NULL, "t.yaml:2:5: NUL byte is not allowed"},
    {TEXT("a: \x01\n"), NULL, "t.yaml:1:4: character U+0001 is not allowed"},
    /* The shape of the file. */
    {TEXT("- a\n- b\n"), NULL,
     "t.yaml:1:1: expected a mapping of settings at the top level, found a sequence"},
    {TEXT("# settings\nlisten\n"), NULL,
     "t.yaml:2:1: expected a mapping of settings at the top level, found a scalar"},
    {TEXT("\"\"\n"), NULL,
     "t.yaml:1:1: expected a mapping of settings at the top level, found a scalar"},
    {TEXT("a: 1\nlisten:\n  host: x\n"), "a@1:1=[1]@1:4;",
     "t.yaml:3:3: expected a single value for 'listen', found a mapping"},
    {TEXT("listen: [a, b]\n"), NULL,
     "t.yaml:1:9: expected a single value for 'listen', found a sequence"},
    {TEXT("listen:\n- a\n"), NULL,
     "t.yaml:2:1: expected a single value for 'listen', found a sequence"},
    {TEXT("{a: 1, b: {c: 2}}\n"), "a@1:2=[1]@1:5;",
     "t.yaml:1:11: expected a single value for 'b', found a mapping"},
    {TEXT("[a]: 1\n"), NULL, "t.yaml:1:1: expected a setting name, found a sequence"},
    {TEXT("? {a: 1}\n: 2\n"), NULL, "t.yaml:1:3: expected a setting name, found a mapping"},
    {TEXT("\"\": 1\n"), NULL, "t.yaml:1:1: expected a setting name, found an empty key"},
    {TEXT("listen: 1\nx: 2\nlisten: 3\n"), "listen@1:1=[1]@1:9;x@2:1=[2]@2:4;",
     "t.yaml:3:1: duplicate key 'listen' (first at 1:1)"},
    {TEXT("  listen: 1\n  'listen': 2\n"), "listen@1:3=[1]@1:11;",
     "t.yaml:2:3: duplicate key 'listen' (first at 1:3)"},
    {TEXT("\"a\\0b\": 1\n"), NULL, "t.yaml:1:1: key 'a\\x00b' contains a NUL character"},
    {TEXT("\"a\\nb\": 1\n\"a\\nb\": 2\n"), "a\nb@1:1=[1]@1:9;",
     "t.yaml:2:1: duplicate key 'a\\x0ab' (first at 1:1)"},
    {TEXT("listen: \"0.0.0.0\\0:80\"\n"), NULL,
     "t.yaml:1:9: value of 'listen' contains a NUL character"},
    /* Anchors, aliases, tags, documents. */
    {TEXT("a: &x 1\nb: *x\n"), NULL, "t.yaml:1:4: anchors and aliases are not allowed"},
    {TEXT("a: 1\nb: *x\n"), "a@1:1=[1]@1:4;", "t.yaml:2:4: anchors and aliases are not allowed"},
    {TEXT("&k a: 1\n"), NULL, "t.yaml:1:1: anchors and aliases are not allowed"},
    {TEXT("--- &root\na: 1\n"), NULL, "t.yaml:1:5: anchors and aliases are not allowed"},
    {TEXT("a: !foo 1\n"), NULL,
     "t.yaml:1:4: tag '!foo' is not allowed (only !!str, !!int, !!bool, !!null and !!float)"},
    {TEXT("a: !!binary aGk=\n"), NULL,
     "t.yaml:1:4: tag '!!binary' is not allowed (only !!str, !!int, !!bool, !!null and "
     "!!float)"},
    {TEXT("a: !!map {}\n"), NULL,
     "t.yaml:1:4: tag '!!map' is not allowed (only !!str, !!int, !!bool, !!null and !!float)"},
    {TEXT("!!map\na: 1\n"), NULL,
     "t.yaml:1:1: tag '!!map' is not allowed (only !!str, !!int, !!bool, !!null and !!float)"},
    {TEXT("a: ! 1\n"), NULL,
     "t.yaml:1:4: tag '!' is not allowed (only !!str, !!int, !!bool, !!null and !!float)"},
    {TEXT("%TAG !! tag:example.com,2000:\n---\na: !!str x\n"), NULL,
     "t.yaml:3:4: tag 'tag:example.com,2000:str' is not allowed (only !!str, !!int, !!bool, "
     "!!null and !!float)"},
    {TEXT("a: !!null x\n"), NULL, "t.yaml:1:4: a !!null value must be empty, '~' or 'null'"},
    {TEXT("a: 1\n---\nb: 2\n"), "a@1:1=[1]@1:4;", "t.yaml:2:1: only one document is allowed"},
    {TEXT("---\n---\n"), NULL, "t.yaml:2:1: only one document is allowed"},
    {TEXT("a: 1\n...\n--- # again\nb: 2\n"), "a@1:1=[1]@1:4;",
     "t.yaml:3:1: only one document is allowed"},
    {TEXT("a: 1\n...\nb: 2\n"), "a@1:1=[1]@1:4;",
     "t.yaml:3:1: did not find expected <document start>"},
    /* Positions survive a BOM and CR LF line ends. */
    {TEXT("\xef\xbb\xbf"
          "a: 1\nb: [\n"),
     "a@1:1=[1]@1:4;", "t.yaml:2:4: expected a single value for 'b', found a sequence"},
    {TEXT("a: 1\r\n\r\nb:\r\n  - x\r\n"), "a@1:1=[1]@1:4;",
     "t.yaml:4:3: expected a single value for 'b', found a sequence"},
    /* The callback's verdict, at the key or at the value. */
    {TEXT("a: 1\nunknown_key: 2\n"), "a@1:1=[1]@1:4;unknown_key@2:1=[2]@2:14;",
     "t.yaml:2:1: unknown key 'unknown_key'"},
    {TEXT("a: 1\nlimit:   bad\n"), "a@1:1=[1]@1:4;limit@2:1=[bad]@2:10;",
     "t.yaml:2:10: 'bad' is not a number"},
    {TEXT("silent: x\n"), "silent@1:1=[x]@1:9;", "t.yaml:1:9: invalid value for 'silent'"},
    {TEXT("  silentkey: x\n"), "silentkey@1:3=[x]@1:14;", "t.yaml:1:3: unknown key 'silentkey'"},
};

/* Files with structured keys (skip[]): their values, of any shape, are checked as YAML and not
 * delivered; everything else is as without them. */
static const struct tcase skipped[] = {
    {TEXT("classes: x\n"), "", NULL},
    {TEXT("classes: ~\nrules:\n"), "", NULL},
    {TEXT("a: 1\nclasses:\n  - name: a\n    q: [1, 2, {b: c}]\n  - x\nb: 2\n"),
     "a@1:1=[1]@1:4;b@6:1=[2]@6:4;", NULL},
    {TEXT("classes: {a: {b: {c: [d]}}}\nrules: [[[], {}], x]\nz: 1\n"), "z@3:1=[1]@3:4;", NULL},
    {TEXT("{classes: [1, {a: b}], x: 1, rules: {}}\n"), "x@1:24=[1]@1:27;", NULL},
    {TEXT("classes:\n- a: !!str 1\n  b: !!int 2\n  c: |\n    text\nd: 4\n"), "d@6:1=[4]@6:4;",
     NULL},
    {TEXT("classes: [[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]\n"), "", NULL}, /* 16 deep: the limit */
    {TEXT("classes: [[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]\n"), NULL,
     "t.yaml:1:26: nesting deeper than 16 levels is not allowed"},
    {TEXT("classes:\n  - {a: [1]}\nclasses: []\n"), NULL,
     "t.yaml:3:1: duplicate key 'classes' (first at 1:1)"},
    {TEXT("a: 1\nclasses:\n  - &x {a: 1}\n"), "a@1:1=[1]@1:4;",
     "t.yaml:3:5: anchors and aliases are not allowed"},
    {TEXT("classes:\n  - *x\n"), NULL, "t.yaml:2:5: anchors and aliases are not allowed"},
    {TEXT("classes:\n  - !!map {a: 1}\n"), NULL,
     "t.yaml:2:5: tag '!!map' is not allowed (only !!str, !!int, !!bool, !!null and !!float)"},
    {TEXT("classes:\n  - {a: !x 1}\n"), NULL,
     "t.yaml:2:9: tag '!x' is not allowed (only !!str, !!int, !!bool, !!null and !!float)"},
    {TEXT("classes: [1\n"), NULL,
     "t.yaml:2:1: did not find expected ',' or ']' (while parsing a flow sequence at 1:10)"},
    {TEXT("classes: [\xff]\n"), NULL, "t.yaml:1:11: invalid UTF-8"},
    /* Other keys are flat as ever, whatever their names are like. */
    {TEXT("classes: [1]\nclasses_x: [1]\n"), NULL,
     "t.yaml:2:12: expected a single value for 'classes_x', found a sequence"},
    {TEXT("rule: {a: 1}\n"), NULL,
     "t.yaml:1:7: expected a single value for 'rule', found a mapping"},
    {TEXT("classes: [1]\n[rules]: 1\n"), NULL,
     "t.yaml:2:1: expected a setting name, found a sequence"},
    {TEXT("classes: [1]\nunknown: 2\n"), "unknown@2:1=[2]@2:10;",
     "t.yaml:2:1: unknown key 'unknown'"},
    {TEXT("- classes\n"), NULL,
     "t.yaml:1:1: expected a mapping of settings at the top level, found a sequence"},
};

/* A skipped value nested deep, however deep, is refused at the limit in linear time (libyaml
 * alone would take minutes over this one). */
static void test_skip_deep(void **state)
{
    const size_t depth = CFGFILE_MAX_BYTES - 16;
    char *t = malloc(depth + 16), err[256];
    struct rec r;

    (void) state;
    assert_non_null(t);
    memset(&r, 0, sizeof r);
    memcpy(t, "rules: ", 7);
    memset(t + 7, '[', depth);
    assert_int_equal(
        cfgfile_parse_skip("t.yaml", t, depth + 7, skip, 2, record, &r, err, sizeof err), -1);
    assert_string_equal(err, "t.yaml:1:24: nesting deeper than 16 levels is not allowed");
    memset(t + 7, '{', depth);
    assert_int_equal(
        cfgfile_parse_skip("t.yaml", t, depth + 7, skip, 2, record, &r, err, sizeof err), -1);
    assert_string_equal(err, "t.yaml:1:24: nesting deeper than 16 levels is not allowed");
    /* Block style nests by indentation: the limit is the same. */
    {
        size_t o = (size_t) sprintf(t, "rules:\n");

        for (int i = 0; i < 17; i++)
            o += (size_t) sprintf(t + o, "%*s-\n", i * 2, "");
        assert_int_equal(cfgfile_parse_skip("t.yaml", t, o, skip, 2, record, &r, err, sizeof err),
                         -1);
        assert_string_equal(err, "t.yaml:18:33: nesting deeper than 16 levels is not allowed");
    }
    assert_int_equal(r.n, 0);
    free(t);
}

/* cfgfile_read: the text with a NUL after it, or the reason it cannot be had. */
static void test_read(void **state)
{
    char path[64], err[512], want[600], *text = (char *) 1;
    size_t len = 1;

    (void) state;
    write_temp(path, "a: 1\n", 5);
    assert_int_equal(cfgfile_read(path, &text, &len, err, sizeof err), 0);
    assert_int_equal(len, 5);
    assert_string_equal(text, "a: 1\n");
    assert_string_equal(err, "");
    free(text);
    write_temp(path, "", 0);
    assert_int_equal(cfgfile_read(path, &text, &len, err, sizeof err), 0);
    assert_int_equal(len, 0);
    assert_string_equal(text, "");
    free(text);
    unlink(path);
    assert_int_equal(cfgfile_read(path, &text, &len, err, sizeof err), -1);
    assert_null(text);
    assert_int_equal(len, 0);
    snprintf(want, sizeof want, "%s: cannot read: No such file or directory", path);
    assert_string_equal(err, want);
    assert_int_equal(cfgfile_read("/", &text, &len, NULL, 0), -1);
}

/* The helpers other readers of the file share. */
static void test_helpers(void **state)
{
    char out[CFGFILE_SHOW_BUF], want[128];

    (void) state;
    assert_int_equal(cfgfile_is_null("", NULL, 1), 1);
    assert_int_equal(cfgfile_is_null("~", NULL, 1), 1);
    assert_int_equal(cfgfile_is_null("NULL", NULL, 1), 1);
    assert_int_equal(cfgfile_is_null("~", NULL, 0), 0); /* "~" quoted is text */
    assert_int_equal(cfgfile_is_null("None", NULL, 1), 0);
    assert_int_equal(cfgfile_is_null("", "tag:yaml.org,2002:null", 0), 1);
    assert_int_equal(cfgfile_is_null("x", "tag:yaml.org,2002:null", 1), -1);
    assert_int_equal(cfgfile_is_null("~", "tag:yaml.org,2002:str", 1), 0);
    assert_string_equal(cfgfile_show(out, "a\tb\x7f", 4), "a\\x09b\\x7f");
    memset(want, 'y', 70);
    assert_string_equal(cfgfile_show(out, want, 70),
                        "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy...");
}

static void test_deep_nesting(void **state)
{
    const size_t depth = 100000;
    char *t = malloc(depth + 8), err[256];
    struct rec r;

    (void) state;
    assert_non_null(t);
    memset(&r, 0, sizeof r);
    memset(t, '[', depth);
    assert_int_equal(cfgfile_parse("t.yaml", t, depth, record, &r, err, sizeof err), -1);
    assert_string_equal(err, "t.yaml:1:1: expected a mapping of settings at the top level, found a "
                             "sequence");
    memcpy(t, "a: ", 3);
    memset(t + 3, '{', depth - 3);
    assert_int_equal(cfgfile_parse("t.yaml", t, depth, record, &r, err, sizeof err), -1);
    assert_string_equal(err, "t.yaml:1:4: expected a single value for 'a', found a mapping");
    memset(t, '[', depth); /* a key that nests: refused at its first '[' */
    memcpy(t + depth - 3, "]: 1", 4);
    assert_int_equal(cfgfile_parse("t.yaml", t, depth + 1, record, &r, err, sizeof err), -1);
    assert_string_equal(err, "t.yaml:1:1: expected a mapping of settings at the top level, found a "
                             "sequence");
    assert_int_equal(r.n, 0);
    free(t);
}

/* Appends "k<i>: <i>\n" lines for i in [0, n). */
static char *many_keys(int n, size_t *len)
{
    char *t = malloc((size_t) n * 24 + 1);
    size_t o = 0;

    assert_non_null(t);
    for (int i = 0; i < n; i++)
        o += (size_t) sprintf(t + o, "k%d: %d\n", i, i);
    *len = o;
    return t;
}

static int count(const struct cfgfile_item *it, void *arg, char *msg, size_t msglen, int *at_key)
{
    (void) it;
    (void) msg;
    (void) msglen;
    (void) at_key;
    ++*(int *) arg;
    return 0;
}

static void test_key_limit(void **state)
{
    size_t len;
    char *t = many_keys(CFGFILE_MAX_KEYS + 1, &len), err[256];
    size_t last = len - strlen("k10000: 10000\n");
    int n = 0;

    (void) state;
    assert_int_equal(cfgfile_parse("t.yaml", t, last, count, &n, err, sizeof err), 0);
    assert_int_equal(n, CFGFILE_MAX_KEYS);
    n = 0;
    assert_int_equal(cfgfile_parse("t.yaml", t, len, count, &n, err, sizeof err), -1);
    assert_string_equal(err, "t.yaml:10001:1: too many keys (the limit is 10000)");
    /* The duplicate check is by hash: a late duplicate is found among thousands. */
    memcpy(t + last, "k9998: 1\n", 9);
    assert_int_equal(cfgfile_parse("t.yaml", t, last + 9, count, &n, err, sizeof err), -1);
    assert_string_equal(err, "t.yaml:10001:1: duplicate key 'k9998' (first at 9999:1)");
    free(t);
}

static void test_long_key_is_cut_in_message(void **state)
{
    char t[512], err[512], want[256];
    size_t o = 0;

    (void) state;
    for (int i = 0; i < 2; i++) {
        memset(t + o, 'k', 59);
        o += 59;
        memcpy(t + o, "\xc3\xa9\xc3\xa9: 1\n", 8); /* 'é' straddles the 60-byte cut */
        o += 8;
    }
    assert_int_equal(cfgfile_parse("t.yaml", t, o, NULL, NULL, err, sizeof err), -1);
    snprintf(want, sizeof want, "t.yaml:2:1: duplicate key '%.59s...' (first at 1:1)", t);
    assert_string_equal(err, want);
}

static void test_error_buffer(void **state)
{
    char err[16];

    (void) state;
    memset(err, 'x', sizeof err);
    assert_int_equal(cfgfile_parse("t.yaml", TEXT("- a\n"), NULL, NULL, err, sizeof err), -1);
    assert_string_equal(err, "t.yaml:1:1: exp");
    assert_int_equal(cfgfile_parse("t.yaml", TEXT("- a\n"), NULL, NULL, NULL, 0), -1);
    assert_int_equal(cfgfile_parse("t.yaml", TEXT("a: 1\n"), NULL, NULL, err, 1), 0);
    assert_int_equal(cfgfile_parse("t.yaml", NULL, 0, NULL, NULL, err, sizeof err), 0);
    assert_string_equal(err, "");
}

/* Writes len bytes to a new temporary file; its path goes into path (64 bytes). */
static void write_temp(char *path, const char *text, size_t len)
{
    int fd;

    strcpy(path, "/tmp/test_cfgfile_XXXXXX");
    fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t) len);
    close(fd);
}

static void test_load(void **state)
{
    static const char crlf[] = "# admitd\r\nlisten: \"[::1]:8080\"\r\nlog_level: debug\r\n";
    char path[64], err[512], want[600];
    struct rec r;

    (void) state;
    memset(&r, 0, sizeof r);
    write_temp(path, crlf, sizeof crlf - 1);
    assert_int_equal(cfgfile_load(path, record, &r, err, sizeof err), 0);
    assert_string_equal(r.log, "listen@2:1=[[::1]:8080]@2:9;log_level@3:1=[debug]@3:12;");
    unlink(path);
    write_temp(path, "a: 1\nb: {}\n", 11);
    assert_int_equal(cfgfile_load(path, record, &r, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:2:4: expected a single value for 'b', found a mapping", path);
    assert_string_equal(err, want);
    unlink(path);
    assert_int_equal(cfgfile_load("/nonexistent/admitd.yaml", record, &r, err, sizeof err), -1);
    assert_string_equal(err, "/nonexistent/admitd.yaml: cannot read: No such file or directory");
    assert_int_equal(cfgfile_load("/", record, &r, err, sizeof err), -1);
    assert_string_equal(err, "/: cannot read: Is a directory");
}

/* A file of exactly 1 MiB (one long value) loads; one byte more does not. */
static void test_load_one_mib(void **state)
{
    char *t = malloc(CFGFILE_MAX_BYTES + 1), path[64], err[512], want[600];
    int n = 0;

    (void) state;
    assert_non_null(t);
    memset(t, 'x', CFGFILE_MAX_BYTES + 1);
    memcpy(t, "key: \"", 6);
    memcpy(t + CFGFILE_MAX_BYTES - 2, "\"\n", 2);
    write_temp(path, t, CFGFILE_MAX_BYTES);
    assert_int_equal(cfgfile_load(path, count, &n, err, sizeof err), 0);
    assert_int_equal(n, 1);
    unlink(path);
    memcpy(t + CFGFILE_MAX_BYTES - 1, "\"\n", 2);
    write_temp(path, t, CFGFILE_MAX_BYTES + 1);
    assert_int_equal(cfgfile_load(path, count, &n, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: file is larger than 1 MiB", path);
    assert_string_equal(err, want);
    unlink(path);
    free(t);
}

/* Checks the invariants of any outcome: 0 with no message, or -1 with "t.yaml:L:C: ...". */
static void check_outcome(const char *t, size_t len)
{
    char err[512];
    struct rec r;
    int rc, line, col;

    memset(&r, 0, sizeof r);
    rc = cfgfile_parse("t.yaml", t, len, record, &r, err, sizeof err);
    if (rc == 0) {
        assert_string_equal(err, "");
        return;
    }
    assert_int_equal(rc, -1);
    assert_int_equal(sscanf(err, "t.yaml:%d:%d: ", &line, &col), 2);
    assert_true(line >= 1 && col >= 1 && (size_t) line <= len + 1);
}

static void test_random_bytes(void **state)
{
    static const char base[] = "listen: 0.0.0.0:8080\nupstream: \"http://h:1\"\nx: [1]\n";
    static const char alphabet[] = "ab: -?[]{},#&*!|>'\"%@`\n\r\t\\~0\xc3\xa9\xff";
    uint32_t seed = 12345;
    char t[256];

    (void) state;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = (seed = seed * 1103515245u + 12345u) >> 24;

        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            /* Half the inputs are raw bytes, half are YAML-ish. */
            t[i] = iter & 1 ? (char) (seed >> 16) : alphabet[(seed >> 16) % (sizeof alphabet - 1)];
        }
        check_outcome(t, len);
        memcpy(t, base, sizeof base - 1); /* a good file with a few bytes changed */
        for (int k = 0; k < 3; k++) {
            seed = seed * 1103515245u + 12345u;
            t[(seed >> 16) % (sizeof base - 1)] = alphabet[(seed >> 8) % (sizeof alphabet - 1)];
        }
        check_outcome(t, sizeof base - 1);
    }
}

#ifdef ADMIT_SOURCE_ROOT
/* Every admitd setting, as the example must document it. */
static const char *const settings[] = {"engine_request_limit",
                                       "request_queue_limit",
                                       "listen",
                                       "upstream",
                                       "metrics_listen",
                                       "overload_status_code",
                                       "retry_after",
                                       "upstream_timeout_ms",
                                       "client_timeout_ms",
                                       "client_header_timeout_ms",
                                       "max_client_connections",
                                       "max_header_bytes",
                                       "max_body_bytes",
                                       "upstream_keepalive",
                                       "stream_buffer_bytes",
                                       "health_path",
                                       "health_interval_ms",
                                       "log_level",
                                       "mock_engine",
                                       "publish",
                                       "publisher",
                                       "worker_id",
                                       "role",
                                       "heartbeat_ms",
                                       "engine_metrics_url",
                                       "engine_metrics_interval_ms",
                                       "engine_models_interval_ms",
                                       "block_size",
                                       "max_num_batched_tokens",
                                       "data_parallel_size",
                                       "engine_kv_events",
                                       "engine_kv_events_topic",
                                       "chars_per_token",
                                       "queue_timeout_ms",
                                       "drain_timeout_ms",
                                       "admin_token",
                                       "log_format",
                                       "access_log"};
#define NSETTINGS (sizeof settings / sizeof settings[0])

static int known(const struct cfgfile_item *it, void *arg, char *msg, size_t msglen, int *at_key)
{
    int *seen = arg;

    for (size_t i = 0; i < NSETTINGS; i++)
        if (strcmp(it->key, settings[i]) == 0) {
            seen[i]++;
            return 0;
        }
    snprintf(msg, msglen, "unknown key '%s'", it->key);
    *at_key = 1;
    return -1;
}

/* The shipped example parses, sets only real settings, and mentions each one (settings that
 * are unset by default appear commented out). */
static void test_example_config(void **state)
{
    const char *path = ADMIT_SOURCE_ROOT "/examples/admitd.yaml";
    int seen[NSETTINGS] = {0};
    char err[512], *text, line[256];
    FILE *f;
    size_t len;

    (void) state;
    if (cfgfile_load(path, known, seen, err, sizeof err) != 0)
        fail_msg("%s", err);
    f = fopen(path, "rb");
    assert_non_null(f);
    text = malloc(CFGFILE_MAX_BYTES);
    assert_non_null(text);
    len = fread(text, 1, CFGFILE_MAX_BYTES - 1, f);
    text[len] = '\0';
    fclose(f);
    for (size_t i = 0; i < NSETTINGS; i++) {
        snprintf(line, sizeof line, "\n# %s: ", settings[i]);
        if (seen[i] != 1 && strstr(text, line) == NULL)
            fail_msg("examples/admitd.yaml does not document %s", settings[i]);
    }
    free(text);
}
#endif

int main(void)
{
    enum {
        NGOOD = sizeof good / sizeof good[0],
        NBAD = sizeof bad / sizeof bad[0],
        NSKIP = sizeof skipped / sizeof skipped[0]
    };
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_skip_deep),      cmocka_unit_test(test_read),
        cmocka_unit_test(test_helpers),        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_key_limit),      cmocka_unit_test(test_long_key_is_cut_in_message),
        cmocka_unit_test(test_error_buffer),   cmocka_unit_test(test_load),
        cmocka_unit_test(test_load_one_mib),   cmocka_unit_test(test_random_bytes),
#ifdef ADMIT_SOURCE_ROOT
        cmocka_unit_test(test_example_config),
#endif
    };
    static char names[NGOOD + NBAD + NSKIP][32];
    struct CMUnitTest tests[NGOOD + NBAD + NSKIP + sizeof fixed / sizeof fixed[0]];
    size_t n = 0;

    /* One test per table row, named after it, so a failure says which file. */
    for (size_t i = 0; i < NGOOD + NBAD; i++) {
        snprintf(names[i], sizeof names[i], i < NGOOD ? "good_file_%zu" : "bad_file_%zu",
                 i < NGOOD ? i : i - NGOOD);
        tests[n++] = (struct CMUnitTest){names[i], run_case, NULL, NULL,
                                         (void *) (i < NGOOD ? &good[i] : &bad[i - NGOOD])};
    }
    for (size_t i = 0; i < NSKIP; i++) {
        snprintf(names[NGOOD + NBAD + i], sizeof names[0], "skip_file_%zu", i);
        tests[n++] = (struct CMUnitTest){names[NGOOD + NBAD + i], run_skip_case, NULL, NULL,
                                         (void *) &skipped[i]};
    }
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        tests[n++] = fixed[i];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
