/* jscan: the strict JSON scanner (see jscan.h for what it accepts and why).
 *
 * Strings are validated in one pass over their raw bytes and never copied here; a caller that
 * wants the value decodes it (jscan_str_copy) into room of its own. Nested values are skipped
 * without recursion: level[] remembers, per open container, whether it is an array or where
 * its keys start in keys[], so the duplicate check of an object sees its own keys only and
 * closing it forgets them. A key is compared decoded, through a hash first, so that the check
 * costs little even for an object of hundreds of keys. */
#include "util/jscan.h"

#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

int jscan_init(struct jscan *s, const void *text, size_t len)
{
    s->base = s->p = text;
    s->end = s->base + len;
    s->why = NULL;
    s->at = 0;
    s->depth = 0;
    s->nkeys = 0;
    if (len > JSCAN_TEXT_MAX) {
        s->end = s->p;
        return jscan_fail(s, "text too long");
    }
    return 0;
}

int jscan_fail(struct jscan *s, const char *why)
{
    s->why = why;
    s->at = (size_t) (s->p - s->base);
    return -1;
}

/* ---- strings ---------------------------------------------------------------------------- */

/* 1 for a byte that stands for itself inside a string: printable ASCII but for the quote and
 * the backslash (control bytes are refused, bytes from 0x80 start UTF-8 sequences). */
static int plain(unsigned c)
{
    return c - 0x20 < 0x60 && c != '"' && c != '\\';
}

/* The bytes of w (8 from the text, the first the least significant) that are not plain, each
 * as its high bit, all at once: a byte under 0x20, or a quote or a backslash (which xor makes
 * 0), borrows when 0x20 (or 1) is taken from it and so sets its high bit, which it did not
 * have; a byte from 0x80 has it already. A plain byte below the first that is not plain
 * borrows nothing and is never flagged, so the lowest flag is the first byte to stop at (those
 * above it may be flagged wrongly, by its borrow, and are not looked at). */
static uint64_t stops8(const unsigned char *p)
{
    const uint64_t ones = 0x0101010101010101u, high = ones * 0x80;
    uint64_t w, q, b;

    memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    q = w ^ (ones * '"');
    b = w ^ (ones * '\\');
    return ((((w - ones * 0x20) | (q - ones) | (b - ones)) & ~w) | w) & high;
}

size_t jscan_utf8_char(const unsigned char *p, size_t avail)
{
    unsigned c = p[0], need, cp;

    if (c >= 0xc2 && c <= 0xdf)
        need = 1, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        need = 2, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        need = 3, cp = c & 0x07;
    else
        return 0; /* ASCII, a continuation byte, or a lead byte no valid sequence has */
    if (avail <= need)
        return 0;
    for (unsigned k = 1; k <= need; k++) {
        if ((p[k] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[k] & 0x3f);
    }
    /* Overlong forms (a shorter sequence would do), surrogates, and past U+10FFFF. */
    if ((need == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (need == 3 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return need + 1;
}

/* The value of four hex digits at p, or -1. */
static long hex4(const unsigned char *p)
{
    long v = 0;

    for (int i = 0; i < 4; i++) {
        unsigned c = p[i];
        if (c >= '0' && c <= '9')
            v = v * 16 + (c - '0');
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            v = v * 16 + ((c | 0x20) - 'a' + 10);
        else
            return -1;
    }
    return v;
}

/* The length of the valid escape at p (a backslash), or 0 with *why set. A \u escape must
 * not be NUL (a C string could not hold it), nor half of a surrogate pair on its own. */
static size_t escape_len(const unsigned char *p, const unsigned char *end, const char **why)
{
    long cp, lo;

    *why = "invalid escape";
    if (end - p < 2)
        return 0;
    if (strchr("\"\\/bfnrt", p[1]) != NULL && p[1] != '\0')
        return 2;
    if (p[1] != 'u' || end - p < 6 || (cp = hex4(p + 2)) < 0)
        return 0;
    *why = "invalid Unicode escape";
    if (cp == 0) {
        *why = "\\u0000 is not allowed";
        return 0;
    }
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return 0;
    if (cp < 0xd800 || cp > 0xdbff)
        return 6;
    if (end - p < 12 || p[6] != '\\' || p[7] != 'u' || (lo = hex4(p + 8)) < 0xdc00 || lo > 0xdfff)
        return 0;
    return 12;
}

int jscan_string(struct jscan *s, struct jscan_str *out)
{
    const unsigned char *p = s->p + 1, *end = s->end;
    const char *why;
    size_t n;
    int esc = 0;

    for (;;) {
        uint64_t stop = 0;
#if defined(__SSE2__)
        /* x86-64 has SSE2 always: 16 bytes a step; a signed compare with 0x20 catches the
         * bytes under it and those from 0x80 (negative) at once */
        const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
        const __m128i space = _mm_set1_epi8(0x20);
        unsigned bits = 0;

        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *) (const void *) p);
            __m128i m =
                _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                             _mm_cmplt_epi8(v, space));

            if ((bits = (unsigned) _mm_movemask_epi8(m)) != 0)
                break;
            p += 16;
        }
        if (bits != 0)
            p += __builtin_ctz(bits);
        else
#endif
            while (end - p >= 8 && (stop = stops8(p)) == 0)
                p += 8;
        if (stop != 0)
            p += __builtin_ctzll(stop) / 8;
        else
            while (p < end && plain(*p))
                p++;
        if (p == end) {
            s->p = p;
            return jscan_fail(s, "premature end of input in a string");
        }
        if (*p == '"') {
            out->raw = s->p + 1;
            out->len = (size_t) (p - out->raw);
            out->esc = esc;
            s->p = p + 1;
            return 0;
        }
        if (*p == '\\') {
            n = escape_len(p, end, &why);
            esc = 1;
        } else if (*p < 0x20) {
            n = 0;
            why = "control character in a string";
        } else {
            n = jscan_utf8_char(p, (size_t) (end - p));
            why = "invalid UTF-8";
        }
        if (n == 0) {
            s->p = p;
            return jscan_fail(s, why);
        }
        p += n;
    }
}

/* Walks the decoded bytes of a valid string, one at a time, for hashing and comparing keys
 * with escapes without room to decode them into. */
struct decoder {
    const unsigned char *p, *end;
    unsigned char u[4]; /* the UTF-8 of a \u escape, u[i .. n) still to give */
    unsigned i, n;
};

static int dec_next(struct decoder *d)
{
    static const char decoded[] = "\"\\/\b\f\n\r\t", named[] = "\"\\/bfnrt";
    long cp;

    if (d->i < d->n)
        return d->u[d->i++];
    if (d->p == d->end)
        return -1;
    if (*d->p != '\\')
        return *d->p++;
    if (d->p[1] != 'u') {
        d->p += 2;
        return (unsigned char) decoded[strchr(named, d->p[-1]) - named];
    }
    cp = hex4(d->p + 2);
    d->p += 6;
    if (cp >= 0xd800 && cp <= 0xdbff) { /* validated: a low surrogate follows */
        cp = 0x10000 + ((cp - 0xd800) << 10) + (hex4(d->p + 2) - 0xdc00);
        d->p += 6;
    }
    if (cp < 0x80) {
        d->u[0] = (unsigned char) cp, d->n = 1;
    } else if (cp < 0x800) {
        d->u[0] = (unsigned char) (0xc0 | (cp >> 6)), d->n = 2;
    } else if (cp < 0x10000) {
        d->u[0] = (unsigned char) (0xe0 | (cp >> 12)), d->n = 3;
    } else {
        d->u[0] = (unsigned char) (0xf0 | (cp >> 18)), d->n = 4;
    }
    for (unsigned k = 1; k < d->n; k++)
        d->u[k] = (unsigned char) (0x80 | ((cp >> (6 * (d->n - 1 - k))) & 0x3f));
    d->i = 1;
    return d->u[0];
}

static void dec_start(struct decoder *d, const unsigned char *raw, size_t len)
{
    d->p = raw;
    d->end = raw + len;
    d->i = d->n = 0;
}

size_t jscan_str_copy(const struct jscan_str *str, char *buf, size_t cap)
{
    struct decoder d;
    size_t n = 0;
    int c;

    if (!str->esc) {
        n = str->len > cap ? cap : str->len;
        memcpy(buf, str->raw, n);
        if (n < cap)
            buf[n] = '\0';
        return str->len > cap ? cap + 1 : n;
    }
    dec_start(&d, str->raw, str->len);
    while ((c = dec_next(&d)) >= 0) {
        if (n == cap)
            return cap + 1;
        buf[n++] = (char) c;
    }
    if (n < cap)
        buf[n] = '\0';
    return n;
}

/* ---- numbers ---------------------------------------------------------------------------- */

/* 2^1024 - 2^970, halfway between DBL_MAX and 2^1024: the least number that strtod rounds to
 * infinity (a tie goes to the even 2^1024). Its 309 digits. */
static const char dbl_limit[] =
    "17976931348623158079372897140530341507993413271003782693617377898044496829276475094664901"
    "79775872070963302864166928879109465555478519404026306574886715058206819089020007083836762"
    "73854845817711531764475730270069855571366959622842914819860834936475292719074168444365510"
    "704342711559699508093042880177904174497792";

/* 1 when int[0 .. ni) "." frac[0 .. nf) times 10^exp is past what a double holds, exactly as
 * strtod would answer (with ERANGE), but without converting: by its decimal exponent, and for
 * the one exponent where that does not decide, digit by digit against dbl_limit. */
static int real_overflows(const unsigned char *ip, size_t ni, const unsigned char *fp, size_t nf,
                          long exp)
{
    const unsigned char *d = ip, *dend = ip + ni;
    long e; /* the number is 0.DDD... x 10^e, its first digit not 0 */
    size_t z = 0;

    if (ip[0] != '0') {
        e = (long) ni + exp;
    } else {
        while (z < nf && fp[z] == '0')
            z++;
        if (z == nf)
            return 0; /* zero, whatever the exponent */
        e = exp - (long) z;
        d = fp + z, dend = fp + nf;
    }
    if (e != 309) /* DBL_MAX is 0.17976... x 10^309 */
        return e > 309;
    for (size_t i = 0; i < sizeof dbl_limit - 1; i++) {
        unsigned char c = '0';
        if (d == dend && dend != fp + nf)
            d = fp, dend = fp + nf; /* from the integer digits on to the fraction's */
        if (d < dend)
            c = *d++;
        if (c != (unsigned char) dbl_limit[i])
            return c > (unsigned char) dbl_limit[i];
    }
    return 1; /* the limit itself or more */
}

static int is_digit(const unsigned char *p, const unsigned char *end)
{
    return p < end && (unsigned) (*p - '0') < 10;
}

/* Any number, with its checks: the whole grammar, the integer's range, the real's. */
static int number(struct jscan *s, struct jscan_num *out)
{
    const unsigned char *p = s->p, *end = s->end, *ip, *fp;
    uint64_t mag = 0;
    long exp = 0;
    size_t ni, nf = 0;
    int neg = 0, eneg = 0;

    if (p < end && *p == '-')
        neg = 1, p++;
    ip = p;
    if (!is_digit(p, end))
        return jscan_fail(s, "invalid token");
    if (*p == '0' && is_digit(p + 1, end))
        return jscan_fail(s, "invalid number (a leading zero)");
    while (is_digit(p, end))
        mag = mag * 10 + (uint64_t) (*p++ - '0'); /* wraps past 19 digits: judged by ni */
    ni = (size_t) (p - ip);
    fp = p;
    if (p == end || (*p != '.' && *p != 'e' && *p != 'E')) {
        if (ni > 19 || mag > (uint64_t) INT64_MAX + (uint64_t) neg) {
            s->p = ip;
            return jscan_fail(s, neg ? "too big negative integer" : "too big integer");
        }
        out->integer = 1;
        out->i = neg && mag > 0 ? -(int64_t) (mag - 1) - 1 : (int64_t) mag;
        s->p = p;
        return 0;
    }
    if (*p == '.') {
        fp = ++p;
        while (is_digit(p, end))
            p++;
        nf = (size_t) (p - fp);
        if (nf == 0) {
            s->p = p;
            return jscan_fail(s, "invalid number (no digit after the point)");
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        if (!is_digit(p, end)) {
            s->p = p;
            return jscan_fail(s, "invalid number (no digit in the exponent)");
        }
        for (; is_digit(p, end); p++)
            if (exp < 1000000) /* decides already: a text has fewer digits than that */
                exp = exp * 10 + (*p - '0');
    }
    if (real_overflows(ip, ni, fp, nf, eneg ? -exp : exp)) {
        s->p = ip;
        return jscan_fail(s, "real number overflow");
    }
    out->integer = 0;
    out->i = 0;
    s->p = p;
    return 0;
}

int jscan_number(struct jscan *s, struct jscan_num *out)
{
    const unsigned char *p = s->p, *end = s->end;
    uint64_t mag = 0;
    unsigned d;

    /* Nearly every number is a small non-negative integer: up to 18 digits (which cannot
     * overflow), not 0 before another digit, not followed by a fraction or an exponent. */
    while (p < end && (d = (unsigned) (*p - '0')) < 10 && p - s->p < 18) {
        mag = mag * 10 + d;
        p++;
    }
    if (p == s->p || (p - s->p > 1 && *s->p == '0') ||
        (p < end && ((unsigned) (*p - '0') < 10 || *p == '.' || *p == 'e' || *p == 'E')))
        return number(s, out);
    out->integer = 1;
    out->i = (int64_t) mag;
    s->p = p;
    return 0;
}

/* ---- literals, keys, and skipping ------------------------------------------------------- */

/* Consumes the literal word (4 or 5 bytes) if it is next: 1, else 0. */
static int word(struct jscan *s, const char *w, size_t n)
{
    if ((size_t) (s->end - s->p) < n || memcmp(s->p, w, n) != 0)
        return 0;
    s->p += n;
    return 1;
}

int jscan_null(struct jscan *s)
{
    if (jscan_peek(s) != 'n')
        return 0;
    return word(s, "null", 4) ? 1 : jscan_fail(s, "invalid token");
}

int jscan_open_object(struct jscan *s)
{
    if (s->depth == JSCAN_DEPTH_MAX)
        return jscan_fail(s, "too deeply nested");
    s->level[s->depth++] = (uint16_t) s->nkeys;
    return 0;
}

static int open_array(struct jscan *s)
{
    if (s->depth == JSCAN_DEPTH_MAX)
        return jscan_fail(s, "too deeply nested");
    s->level[s->depth++] = JSCAN_ARRAY;
    return 0;
}

void jscan_close(struct jscan *s)
{
    uint16_t first = s->level[--s->depth];

    if (first != JSCAN_ARRAY)
        s->nkeys = first;
}

/* FNV-1a over the decoded bytes. */
static uint32_t key_hash(const unsigned char *raw, size_t len, int esc)
{
    struct decoder d;
    uint32_t h = 2166136261u;
    int c;

    if (!esc) {
        for (size_t i = 0; i < len; i++)
            h = (h ^ raw[i]) * 16777619u;
        return h;
    }
    dec_start(&d, raw, len);
    while ((c = dec_next(&d)) >= 0)
        h = (h ^ (unsigned) c) * 16777619u;
    return h;
}

/* 1 when the two raw strings decode to the same bytes. */
static int key_equal(const unsigned char *a, size_t alen, const unsigned char *b, size_t blen)
{
    struct decoder da, db;
    int c;

    if (memchr(a, '\\', alen) == NULL && memchr(b, '\\', blen) == NULL)
        return alen == blen && memcmp(a, b, alen) == 0;
    dec_start(&da, a, alen);
    dec_start(&db, b, blen);
    do {
        c = dec_next(&da);
        if (c != dec_next(&db))
            return 0;
    } while (c >= 0);
    return 1;
}

int jscan_key(struct jscan *s, const struct jscan_str *key)
{
    uint32_t h = key_hash(key->raw, key->len, key->esc);
    struct jscan_key *k;

    for (unsigned i = s->level[s->depth - 1]; i < s->nkeys; i++) {
        k = &s->keys[i];
        if (k->hash == h && key_equal(s->base + k->off, k->len, key->raw, key->len)) {
            s->p = key->raw - 1;
            return jscan_fail(s, "duplicate object key");
        }
    }
    if (s->nkeys == JSCAN_KEYS_MAX)
        return jscan_fail(s, "too many keys");
    k = &s->keys[s->nkeys++];
    k->off = (uint16_t) (key->raw - s->base);
    k->len = (uint16_t) key->len;
    k->hash = h;
    return 0;
}

/* A state machine rather than recursion: "value" reads one value, opening containers as it
 * meets them; "after" decides, once a value ends, whether its container goes on (a key or a
 * value next) or closes; it returns when the container it started in is back. */
int jscan_skip(struct jscan *s)
{
    unsigned floor = s->depth;
    struct jscan_str str;
    struct jscan_num num;
    int c, obj;

value:
    c = jscan_peek(s);
    if (c == '{' || c == '[') {
        s->p++;
        if ((c == '{' ? jscan_open_object(s) : open_array(s)) != 0)
            return -1;
        if (jscan_peek(s) == (c == '{' ? '}' : ']')) {
            s->p++;
            jscan_close(s);
            goto after;
        }
        if (c == '{')
            goto key;
        goto value;
    }
    if (c == '"') {
        if (jscan_string(s, &str) != 0)
            return -1;
    } else if (c == 't' || c == 'f' || c == 'n') {
        if (!word(s, "true", 4) && !word(s, "false", 5) && !word(s, "null", 4))
            return jscan_fail(s, "invalid token");
    } else if (jscan_number(s, &num) != 0) {
        return -1;
    }
after:
    while (s->depth > floor) {
        obj = s->level[s->depth - 1] != JSCAN_ARRAY;
        c = jscan_peek(s);
        if (c == ',') {
            s->p++;
            if (obj)
                goto key;
            goto value;
        }
        if (c != (obj ? '}' : ']'))
            return jscan_fail(s, obj ? "',' or '}' expected" : "',' or ']' expected");
        s->p++;
        jscan_close(s);
    }
    return 0;
key:
    if (jscan_peek(s) != '"')
        return jscan_fail(s, "string expected");
    if (jscan_string(s, &str) != 0 || jscan_key(s, &str) != 0)
        return -1;
    if (jscan_peek(s) != ':')
        return jscan_fail(s, "':' expected");
    s->p++;
    goto value;
}
