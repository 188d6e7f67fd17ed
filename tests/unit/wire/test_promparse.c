/* Unit tests for the Prometheus text format parser. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/promparse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOT_MAX 80

/* What the callback saw: names, labels rendered as "k=v|k2=v2|", values. */
struct got {
    int n;
    int stop_at; /* stop after this many samples; 0 = never */
    char name[GOT_MAX][64];
    char labels[GOT_MAX][256];
    double value[GOT_MAX];
};

static void copy_bounded(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);

    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static int collect(const struct promparse_sample *s, void *arg)
{
    struct got *g = arg;
    char *l;
    size_t used = 0;

    if (g->n < GOT_MAX) {
        copy_bounded(g->name[g->n], sizeof g->name[0], s->name);
        l = g->labels[g->n];
        l[0] = '\0';
        for (size_t i = 0; i < s->nlabels; i++) {
            int w = snprintf(l + used, sizeof g->labels[0] - used, "%s=%s|", s->labels[i].name,
                             s->labels[i].value);
            if (w < 0 || (size_t) w >= sizeof g->labels[0] - used)
                break;
            used += (size_t) w;
        }
        g->value[g->n] = s->value;
    }
    g->n++;
    return g->stop_at != 0 && g->n >= g->stop_at;
}

static int parse(const char *text, struct got *g)
{
    memset(g, 0, sizeof *g);
    return promparse(text, strlen(text), collect, g);
}

static void test_comments_blank_lines_and_samples(void **state)
{
    struct got g;
    const char *text = "# HELP vllm:num_requests_running Number of requests in model execution.\n"
                       "# TYPE vllm:num_requests_running gauge\n"
                       "\n"
                       "   \t \n"
                       "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n"
                       "  # an indented comment\n"
                       "#no space after the hash\n"
                       "up 1\n"
                       "  spaced_name   7  \n"
                       "no_newline_at_end 2";

    (void) state;
    assert_int_equal(parse(text, &g), 0);
    assert_int_equal(g.n, 4);
    assert_string_equal(g.name[0], "vllm:num_requests_running");
    assert_string_equal(g.labels[0], "engine=0|model_name=m|");
    assert_true(g.value[0] == 3.0);
    assert_string_equal(g.name[1], "up");
    assert_string_equal(g.labels[1], "");
    assert_string_equal(g.name[2], "spaced_name");
    assert_true(g.value[2] == 7);
    assert_string_equal(g.name[3], "no_newline_at_end");
    assert_true(g.value[3] == 2);
}

static void test_escaped_label_values(void **state)
{
    struct got g;

    (void) state;
    assert_int_equal(parse("x{a=\"q\\\"uote\",b=\"back\\\\slash\",c=\"new\\nline\",d=\"\"} 1\n"
                           "y{path=\"C:\\\\dir\\\\\",utf8=\"h\xc3\xa9 {}=,#\"} 2\n",
                           &g),
                     0);
    assert_int_equal(g.n, 2);
    assert_string_equal(g.labels[0], "a=q\"uote|b=back\\slash|c=new\nline|d=|");
    assert_string_equal(g.labels[1], "path=C:\\dir\\|utf8=h\xc3\xa9 {}=,#|");
}

static void test_crlf_and_whitespace_between_tokens(void **state)
{
    struct got g;

    (void) state;
    assert_int_equal(parse("# TYPE a gauge\r\n"
                           "a{x=\"1\"} 1\r\n"
                           "\r\n"
                           "b { x = \"2\" , y=\"3\" , } \t 2 \r\n"
                           "c{x=\"1\",} 3\r\n"
                           "d{} 4\r\n"
                           "e{}5\r\n",
                           &g),
                     0);
    assert_int_equal(g.n, 5);
    assert_string_equal(g.name[1], "b");
    assert_string_equal(g.labels[1], "x=2|y=3|");
    assert_string_equal(g.labels[2], "x=1|");
    assert_string_equal(g.labels[3], "");
    assert_true(g.value[4] == 5);
}

static void test_timestamps(void **state)
{
    struct got g;

    (void) state;
    assert_int_equal(parse("a 1 1712345678901\n"
                           "b{l=\"v\"} 2 -5\n"
                           "c 3 +7   \n"
                           "d 4 9223372036854775807\n"
                           "e 5 -9223372036854775808\n"
                           "bad1 1 9223372036854775808\n"
                           "bad2 1 12a\n"
                           "bad3 1 1 2\n"
                           "bad4 1 1.5\n"
                           "bad5 1 -\n",
                           &g),
                     5);
    assert_int_equal(g.n, 5);
    assert_string_equal(g.name[4], "e");
    assert_true(g.value[4] == 5);
}

static void test_special_and_odd_values(void **state)
{
    struct got g;

    (void) state;
    assert_int_equal(parse("a NaN\nb +Inf\nc -Inf\nd Inf\ne -0.5e-3\nf 1e308\ng 1e-400\nh .5\n"
                           "i 1.\nj 7.0e+06\n",
                           &g),
                     0);
    assert_int_equal(g.n, 10);
    assert_true(isnan(g.value[0]));
    assert_true(isinf(g.value[1]) && g.value[1] > 0);
    assert_true(isinf(g.value[2]) && g.value[2] < 0);
    assert_true(isinf(g.value[3]) && g.value[3] > 0);
    assert_true(g.value[4] == -0.5e-3);
    assert_true(g.value[5] == 1e308);
    assert_true(g.value[6] == 0);
    assert_true(g.value[7] == 0.5);
    assert_true(g.value[8] == 1);
    assert_true(g.value[9] == 7e6);
    /* Spellings Prometheus does not write, hex, overflow, and other junk. */
    assert_int_equal(parse("a nan\nb inf\nc +NaN\nd 0x10\ne 1e400\nf 1e\ng 1,5\nh --1\ni .\n"
                           "j 1_000\nk Infinity\nl abc\nm +\n",
                           &g),
                     13);
    assert_int_equal(g.n, 0);
}

static void test_malformed_lines_skipped_and_counted(void **state)
{
    struct got g;
    const char text[] = "good1 1\n"
                        "missing_value\n"
                        "missing_value_after_labels{a=\"b\"}\n"
                        "unterminated{a=\"b} 1\n"
                        "unterminated_escape{a=\"b\\\n"
                        "1bad_name 1\n"
                        "bad-name 1\n"
                        "bad_label{1a=\"b\"} 1\n"
                        "colon_label{a:b=\"c\"} 1\n"
                        "unquoted{a=b} 1\n"
                        "no_equals{a \"b\"} 1\n"
                        "leading_comma{,a=\"b\"} 1\n"
                        "double_comma{a=\"b\",,} 1\n"
                        "unclosed{a=\"b\" 1\n"
                        "duplicate{a=\"b\",a=\"c\"} 1\n"
                        "bad_escape{a=\"\\t\"} 1\n"
                        "junk_value 12abc\n"
                        "name_glued1\n"
                        "nul_byte\0here 1\n"
                        "# a comment with a \0 NUL byte\n"
                        "bare\rcr 1\n"
                        "good2{a=\"b\"} 2\n";

    (void) state;
    memset(&g, 0, sizeof g);
    assert_int_equal(promparse(text, sizeof text - 1, collect, &g), 20);
    assert_int_equal(g.n, 2);
    assert_string_equal(g.name[0], "good1");
    assert_string_equal(g.name[1], "good2");
    assert_string_equal(g.labels[1], "a=b|");
}

static void test_line_length_limit(void **state)
{
    size_t len = 3 * (PROMPARSE_MAX_LINE + 8);
    char *text = malloc(len);
    size_t pos = 0;
    struct got g;

    (void) state;
    assert_non_null(text);
    /* Exactly the limit (CR not counted), then one byte over, then a short line. */
    memset(text + pos, 'a', PROMPARSE_MAX_LINE - 2);
    pos += PROMPARSE_MAX_LINE - 2;
    memcpy(text + pos, " 1\r\n", 4);
    pos += 4;
    memset(text + pos, 'b', PROMPARSE_MAX_LINE - 1);
    pos += PROMPARSE_MAX_LINE - 1;
    memcpy(text + pos, " 2\n", 3);
    pos += 3;
    memcpy(text + pos, "c 3", 3);
    pos += 3;
    memset(&g, 0, sizeof g);
    assert_int_equal(promparse(text, pos, collect, &g), 1);
    assert_int_equal(g.n, 2);
    assert_true(g.value[0] == 1);
    assert_string_equal(g.name[1], "c");
    free(text);
}

static void test_label_count_limit(void **state)
{
    char text[2 * 16 * (PROMPARSE_MAX_LABELS + 1) + 64];
    size_t pos = 0;
    struct got g;

    (void) state;
    for (int line = 0; line < 2; line++) {
        int nlabels = PROMPARSE_MAX_LABELS + line;

        pos += (size_t) sprintf(text + pos, "m%d{", line);
        for (int i = 0; i < nlabels; i++)
            pos += (size_t) sprintf(text + pos, "l%d=\"%d\",", i, i);
        pos += (size_t) sprintf(text + pos, "} 1\n");
    }
    assert_int_equal(parse(text, &g), 1);
    assert_int_equal(g.n, 1);
    assert_string_equal(g.name[0], "m0");
}

static void test_callback_stops(void **state)
{
    struct got g;

    (void) state;
    memset(&g, 0, sizeof g);
    g.stop_at = 2;
    assert_int_equal(promparse("bad\na 1\nb 2\nc 3\nbad\nbad\n", 24, collect, &g), 1);
    assert_int_equal(g.n, 2);
    assert_string_equal(g.name[1], "b");
}

static void test_length_bounds_the_text(void **state)
{
    struct got g;

    (void) state;
    memset(&g, 0, sizeof g);
    /* Not NUL-terminated where len says it ends: "a 1\nb 2" cut after "b 2". */
    assert_int_equal(promparse("a 1\nb 23 junk", 7, collect, &g), 0);
    assert_int_equal(g.n, 2);
    assert_true(g.value[1] == 2);
    assert_int_equal(promparse("", 0, collect, &g), 0);
    assert_int_equal(promparse(NULL, 0, collect, &g), 0);
    assert_int_equal(promparse("\n\n\r\n", 4, collect, &g), 0);
    assert_int_equal(g.n, 2);
}

static void test_random_bytes_do_not_crash(void **state)
{
    static const char alphabet[] = "ab_:{}=\",\\n \t\r\n#01.e+-IfNa\0\xff";
    char text[512];
    uint32_t seed = 12345;
    struct got g;

    (void) state;
    for (int round = 0; round < 20000; round++) {
        size_t len = 0;

        seed = seed * 1664525u + 1013904223u;
        len = (seed >> 8) % sizeof text;
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1664525u + 1013904223u;
            text[i] =
                (round & 1) ? (char) (seed >> 24) : alphabet[(seed >> 16) % (sizeof alphabet - 1)];
        }
        memset(&g, 0, sizeof g);
        assert_true(promparse(text, len, collect, &g) >= 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comments_blank_lines_and_samples),
        cmocka_unit_test(test_escaped_label_values),
        cmocka_unit_test(test_crlf_and_whitespace_between_tokens),
        cmocka_unit_test(test_timestamps),
        cmocka_unit_test(test_special_and_odd_values),
        cmocka_unit_test(test_malformed_lines_skipped_and_counted),
        cmocka_unit_test(test_line_length_limit),
        cmocka_unit_test(test_label_count_limit),
        cmocka_unit_test(test_callback_stops),
        cmocka_unit_test(test_length_bounds_the_text),
        cmocka_unit_test(test_random_bytes_do_not_crash),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
