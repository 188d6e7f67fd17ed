/* h1tok: the byte classes of HTTP/1.1 and the list helpers.
 *
 * The table is computed by the compiler from the grammar's own definitions (the macros
 * below), not typed in as 256 numbers, so each class reads as the RFC writes it. */
#include "wire/h1tok.h"

#define IS_ALPHA(c)            (((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z'))
#define IS_DIGIT(c)            ((c) >= '0' && (c) <= '9')
#define IS_VCHAR(c)            ((c) >= 0x21 && (c) <= 0x7e)
#define IS_OBS(c)              ((c) >= 0x80)
#define ONE_OF3(c, a, b, d)    ((c) == (a) || (c) == (b) || (c) == (d))
#define ONE_OF4(c, a, b, d, e) (ONE_OF3(c, a, b, d) || (c) == (e))
/* tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|"
 *         / "~" / DIGIT / ALPHA */
#define IS_TCHAR(c)                                                                                \
    (IS_ALPHA(c) || IS_DIGIT(c) || ONE_OF4(c, '!', '#', '$', '%') ||                               \
     ONE_OF4(c, '&', '\'', '*', '+') || ONE_OF4(c, '-', '.', '^', '_') ||                          \
     ONE_OF3(c, '`', '|', '~'))
/* field-vchar = VCHAR / obs-text; a value also holds SP and HTAB between them */
#define IS_VALUE(c) (IS_VCHAR(c) || IS_OBS(c) || (c) == ' ' || (c) == '\t')
/* A target is VCHAR but the fragment mark: a fragment is never sent (RFC 9112 3.2), and
 * '#' seen by two parsers as "end of path" or "part of it" is an HAProxy CVE (2023-45539). */
#define IS_TARGET(c) (IS_VCHAR(c) && (c) != '#')
#define IS_HEX(c)    (IS_DIGIT(c) || ((c) >= 'a' && (c) <= 'f') || ((c) >= 'A' && (c) <= 'F'))
/* uri-host [ ":" port ] (RFC 3986 3.2.2): reg-name's unreserved / pct-encoded / sub-delims,
 * and the brackets of an IP-literal. */
#define IS_HOST(c)                                                                                 \
    (IS_ALPHA(c) || IS_DIGIT(c) || ONE_OF4(c, '-', '.', '_', '~') ||                               \
     ONE_OF4(c, '!', '$', '&', '\'') || ONE_OF4(c, '(', ')', '*', '+') ||                          \
     ONE_OF4(c, ',', ';', '=', '%') || ONE_OF3(c, ':', '[', ']'))
/* qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text */
#define IS_QDTEXT(c)                                                                               \
    ((c) == '\t' || (c) == ' ' || (c) == 0x21 || ((c) >= 0x23 && (c) <= 0x5b) ||                   \
     ((c) >= 0x5d && (c) <= 0x7e) || IS_OBS(c))
#define IS_SCHEME(c) (IS_ALPHA(c) || IS_DIGIT(c) || (c) == '+' || (c) == '-' || (c) == '.')

#define C(c)                                                                                       \
    ((IS_TCHAR(c) ? H1_C_TCHAR : 0) | (IS_VALUE(c) ? H1_C_VALUE : 0) |                             \
     (IS_TARGET(c) ? H1_C_TARGET : 0) | (IS_HEX(c) ? H1_C_HEX : 0) |                               \
     (IS_HOST(c) ? H1_C_HOST : 0) | (IS_QDTEXT(c) ? H1_C_QDTEXT : 0) |                             \
     (IS_SCHEME(c) ? H1_C_SCHEME : 0))
#define C4(c)  C(c), C((c) + 1), C((c) + 2), C((c) + 3)
#define C16(c) C4(c), C4((c) + 4), C4((c) + 8), C4((c) + 12)
#define C64(c) C16(c), C16((c) + 16), C16((c) + 32), C16((c) + 48)

const uint8_t h1_ctype[256] = {C64(0), C64(64), C64(128), C64(192)};

static unsigned char lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char) (c | 0x20) : c;
}

int h1_ieq(struct h1_str s, const char *lit)
{
    size_t i = 0;

    for (; i < s.len && lit[i] != '\0'; i++) {
        if (lower((unsigned char) s.p[i]) != lower((unsigned char) lit[i]))
            return 0;
    }
    return i == s.len && lit[i] == '\0';
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

int h1_list_next(const char **at, const char *end, struct h1_str *elem)
{
    const char *p = *at, *e;

    if (p == NULL)
        return 0;
    for (e = p; e < end && *e != ','; e++)
        ;
    *at = e < end ? e + 1 : NULL; /* past the comma; NULL once the last one is out */
    while (p < e && is_ows(*p))
        p++;
    while (e > p && is_ows(e[-1]))
        e--;
    elem->p = p;
    elem->len = (size_t) (e - p);
    return 1;
}

int h1_list_has(struct h1_str list, const char *token)
{
    const char *at = list.p;
    struct h1_str e;

    if (list.p == NULL)
        return 0;
    while (h1_list_next(&at, list.p + list.len, &e)) {
        if (h1_ieq(e, token))
            return 1;
    }
    return 0;
}

const char *h1_value_problem(unsigned char c)
{
    return c == '\0' ? H1_R_NUL : H1_R_CTL;
}
