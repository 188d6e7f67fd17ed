/* promparse: line-by-line parser of the Prometheus text format, tolerant of hostile input.
 *
 * Each line is copied into one scratch buffer with a NUL sentinel after it, then parsed in
 * place: names and label values are NUL-terminated where their delimiter was, and escapes
 * are undone by writing behind the read position. So the scratch never needs more than the
 * line plus one byte, and the sentinel stops every scan without a length check. Lines with
 * NUL bytes are rejected before the copy, which keeps that sentinel the only NUL. */
#include "wire/promparse.h"

#include "util/xmalloc.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What one line turned out to be. */
enum promparse_kind {
    PROMPARSE_SKIP,   /* blank or comment */
    PROMPARSE_SAMPLE, /* a well-formed sample */
    PROMPARSE_BAD,    /* malformed */
};

static int promparse_is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static int promparse_is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int promparse_is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static char *promparse_skip_blank(char *p)
{
    while (promparse_is_blank(*p))
        p++;
    return p;
}

/* Reads a sample value the way Prometheus writes one: a decimal float or one of the special
 * spellings. strtod alone is too lenient (hex, "inf", "nan(...)", leading blanks), so the
 * characters are checked first. admitd never calls setlocale, so '.' is the decimal point. */
static int promparse_value(const char *tok, double *out)
{
    char *end;

    if (strcmp(tok, "NaN") == 0) {
        *out = NAN;
        return 0;
    }
    if (strcmp(tok, "+Inf") == 0 || strcmp(tok, "Inf") == 0) {
        *out = INFINITY;
        return 0;
    }
    if (strcmp(tok, "-Inf") == 0) {
        *out = -INFINITY;
        return 0;
    }
    if (tok[strspn(tok, "0123456789.eE+-")] != '\0')
        return -1;
    *out = strtod(tok, &end);
    /* Only overflow yields an infinity here: the spellings were handled above. Like Go's
     * ParseFloat, overflow is an error while underflow quietly gives (nearly) zero. */
    if (end == tok || *end != '\0' || isinf(*out))
        return -1;
    return 0;
}

/* Checks a timestamp: an optional sign and decimal digits that fit in an int64. */
static int promparse_timestamp(const char *tok)
{
    uint64_t v = 0;
    uint64_t limit = (uint64_t) INT64_MAX;

    if (*tok == '+' || *tok == '-') {
        if (*tok == '-')
            limit++;
        tok++;
    }
    if (*tok == '\0')
        return -1;
    for (; *tok != '\0'; tok++) {
        if (!promparse_is_digit(*tok))
            return -1;
        if (v > (limit - (uint64_t) (*tok - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t) (*tok - '0');
    }
    return 0;
}

/* Reads one quoted label value starting after its opening quote; unescapes it in place and
 * returns the position after the closing quote, or NULL. */
static char *promparse_quoted(char *p, char **value)
{
    char *w = p;
    char c;

    *value = p;
    for (;;) {
        c = *p++;
        if (c == '\0')
            return NULL;
        if (c == '"')
            break;
        if (c == '\\') {
            c = *p++;
            if (c == 'n')
                c = '\n';
            else if (c != '\\' && c != '"')
                return NULL;
        }
        *w++ = c;
    }
    /* w is at most the closing quote's position, so this never touches unread bytes. */
    *w = '\0';
    return p;
}

/* Reads the label list starting after '{'; returns the position after '}', or NULL. */
static char *promparse_labels(char *p, struct promparse_label *labels, size_t *nlabels)
{
    size_t n = 0;
    char *name, *name_end, *value;

    for (;;) {
        p = promparse_skip_blank(p);
        if (*p == '}')
            break;
        if (!promparse_is_alpha(*p) || n == PROMPARSE_MAX_LABELS)
            return NULL;
        name = p;
        while (promparse_is_alpha(*p) || promparse_is_digit(*p))
            p++;
        name_end = p;
        p = promparse_skip_blank(p);
        if (*p != '=')
            return NULL;
        /* Only now: name_end may be the '=' that was just checked. */
        *name_end = '\0';
        p = promparse_skip_blank(p + 1);
        if (*p != '"')
            return NULL;
        p = promparse_quoted(p + 1, &value);
        if (p == NULL)
            return NULL;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(labels[i].name, name) == 0)
                return NULL;
        }
        labels[n].name = name;
        labels[n].value = value;
        n++;
        p = promparse_skip_blank(p);
        if (*p == ',')
            p++;
        else if (*p != '}')
            return NULL;
    }
    *nlabels = n;
    return p + 1;
}

/* Parses one NUL-terminated line (its only NUL) in place; labels needs PROMPARSE_MAX_LABELS. */
static enum promparse_kind promparse_parse_line(char *p, struct promparse_label *labels,
                                                struct promparse_sample *s)
{
    char *name_end, *tok;
    char c;

    p = promparse_skip_blank(p);
    if (*p == '\0' || *p == '#')
        return PROMPARSE_SKIP;
    if (!promparse_is_alpha(*p) && *p != ':')
        return PROMPARSE_BAD;
    s->name = p;
    while (promparse_is_alpha(*p) || promparse_is_digit(*p) || *p == ':')
        p++;
    name_end = p;
    /* Without labels a blank must follow the name, or "up1" would read as "up" and "1". */
    if (*p != '{' && !promparse_is_blank(*p))
        return PROMPARSE_BAD;
    p = promparse_skip_blank(p);
    s->labels = labels;
    s->nlabels = 0;
    if (*p == '{') {
        p = promparse_labels(p + 1, labels, &s->nlabels);
        if (p == NULL)
            return PROMPARSE_BAD;
        p = promparse_skip_blank(p);
    }
    /* The label list lies after name_end, so the name can be terminated only now. */
    *name_end = '\0';
    tok = p;
    while (*p != '\0' && !promparse_is_blank(*p))
        p++;
    if (p == tok)
        return PROMPARSE_BAD;
    c = *p;
    *p = '\0';
    if (promparse_value(tok, &s->value) != 0)
        return PROMPARSE_BAD;
    if (c == '\0')
        return PROMPARSE_SAMPLE;
    p = promparse_skip_blank(p + 1);
    if (*p == '\0')
        return PROMPARSE_SAMPLE;
    tok = p;
    while (*p != '\0' && !promparse_is_blank(*p))
        p++;
    c = *p;
    *p = '\0';
    if (promparse_timestamp(tok) != 0)
        return PROMPARSE_BAD;
    if (c != '\0' && *promparse_skip_blank(p + 1) != '\0')
        return PROMPARSE_BAD;
    return PROMPARSE_SAMPLE;
}

int promparse(const char *text, size_t len, promparse_cb cb, void *arg)
{
    struct promparse_label labels[PROMPARSE_MAX_LABELS];
    struct promparse_sample s;
    size_t pos = 0, n;
    const char *line, *nl;
    int bad = 0;
    char *buf;

    if (text == NULL || len == 0)
        return 0;
    /* Every line that gets parsed fits: n <= len and n <= PROMPARSE_MAX_LINE. */
    buf = xmalloc((len < PROMPARSE_MAX_LINE ? len : PROMPARSE_MAX_LINE) + 1);
    while (pos < len) {
        line = text + pos;
        nl = memchr(line, '\n', len - pos);
        n = nl != NULL ? (size_t) (nl - line) : len - pos;
        pos += n + (nl != NULL);
        if (n > 0 && line[n - 1] == '\r')
            n--;
        if (n > PROMPARSE_MAX_LINE || memchr(line, '\0', n) != NULL) {
            bad += bad < INT_MAX;
            continue;
        }
        memcpy(buf, line, n);
        buf[n] = '\0';
        switch (promparse_parse_line(buf, labels, &s)) {
        case PROMPARSE_SKIP:
            break;
        case PROMPARSE_BAD:
            bad += bad < INT_MAX;
            break;
        case PROMPARSE_SAMPLE:
            if (cb != NULL && cb(&s, arg) != 0)
                pos = len;
            break;
        }
    }
    free(buf);
    return bad;
}
