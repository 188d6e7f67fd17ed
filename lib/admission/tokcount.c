/* tokcount: one-pass prompt token counter for OpenAI-compatible request bodies.
 *
 * The scanner is an iterative JSON syntax checker: a cursor, a "what may come next" state and
 * a stack with one byte per open container. Each stack byte holds the container's role (what
 * its direct values mean for the count) and whether it is an object. The meaning of the next
 * value is a kind, derived from the enclosing role and, in objects, from the key just read.
 *
 * Invariants: the cursor only moves forward and never passes the end; a count is added only
 * once the bytes that justify it have been read (a token id once the byte after it is seen,
 * an escape once all its bytes are seen), so a prefix never counts more than the whole body. */
#include "admission/tokcount.h"

#include <float.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Roles of open containers. */
enum {
    ROLE_NONE,         /* nothing inside counts */
    ROLE_TOP,          /* the top-level object */
    ROLE_MESSAGES,     /* "messages": its objects are messages */
    ROLE_MESSAGE,      /* one message object */
    ROLE_CONTENT,      /* a "content" array: its objects are parts */
    ROLE_PART,         /* one content part object */
    ROLE_PROMPT,       /* a "prompt" array: strings, ids or arrays of ids */
    ROLE_IDS,          /* an array of token ids */
    ROLE_BATCH,        /* "input_ids": ids or arrays of ids */
    ROLE_OBJECT = 0x80 /* flag: the container is an object */
};

/* Kinds of the next value. */
enum {
    KIND_NONE,
    KIND_ROOT,
    KIND_TEXT,
    KIND_MESSAGES,
    KIND_MESSAGE,
    KIND_CONTENT,
    KIND_PART,
    KIND_PROMPT,
    KIND_PROMPT_ITEM,
    KIND_ID,
    KIND_IDS,
    KIND_BATCH,
    KIND_BATCH_ITEM,
    KIND_ROLE /* a message's "role": counts nothing, told to a sink */
};

/* For a kind: whether a string is text, whether an integer is an id, and the role an array or
 * an object opened there takes. */
static const struct {
    unsigned char text, id, array, object;
} tokcount_kinds[] = {
    [KIND_NONE] = {0, 0, ROLE_NONE, ROLE_NONE},
    [KIND_ROOT] = {0, 0, ROLE_NONE, ROLE_TOP},
    [KIND_TEXT] = {1, 0, ROLE_NONE, ROLE_NONE},
    [KIND_MESSAGES] = {0, 0, ROLE_MESSAGES, ROLE_NONE},
    [KIND_MESSAGE] = {0, 0, ROLE_NONE, ROLE_MESSAGE},
    [KIND_CONTENT] = {1, 0, ROLE_CONTENT, ROLE_NONE},
    [KIND_PART] = {0, 0, ROLE_NONE, ROLE_PART},
    [KIND_PROMPT] = {1, 0, ROLE_PROMPT, ROLE_NONE},
    [KIND_PROMPT_ITEM] = {1, 1, ROLE_IDS, ROLE_NONE},
    [KIND_ID] = {0, 1, ROLE_NONE, ROLE_NONE},
    [KIND_IDS] = {0, 0, ROLE_IDS, ROLE_NONE},
    [KIND_BATCH] = {0, 0, ROLE_BATCH, ROLE_NONE},
    [KIND_BATCH_ITEM] = {0, 1, ROLE_IDS, ROLE_NONE},
    [KIND_ROLE] = {0, 0, ROLE_NONE, ROLE_NONE},
};

/* The kind of every element of an array, by the array's role. */
static const unsigned char tokcount_items[] = {
    [ROLE_NONE] = KIND_NONE,          [ROLE_TOP] = KIND_NONE,     [ROLE_MESSAGES] = KIND_MESSAGE,
    [ROLE_MESSAGE] = KIND_NONE,       [ROLE_CONTENT] = KIND_PART, [ROLE_PART] = KIND_NONE,
    [ROLE_PROMPT] = KIND_PROMPT_ITEM, [ROLE_IDS] = KIND_ID,       [ROLE_BATCH] = KIND_BATCH_ITEM,
};

/* The keys that give a value meaning, by the role of their object. */
#define TOKCOUNT_KEY_MAX 16
static const struct {
    unsigned char role, kind;
    size_t len;
    const char *name;
} tokcount_keys[] = {
    {ROLE_TOP, KIND_MESSAGES, 8, "messages"},     {ROLE_TOP, KIND_PROMPT, 6, "prompt"},
    {ROLE_TOP, KIND_IDS, 16, "prompt_token_ids"}, {ROLE_TOP, KIND_BATCH, 9, "input_ids"},
    {ROLE_MESSAGE, KIND_CONTENT, 7, "content"},   {ROLE_PART, KIND_TEXT, 4, "text"},
    {ROLE_MESSAGE, KIND_ROLE, 4, "role"},
};

struct tokcount_scan {
    const char *p, *end; /* cursor; p <= end always */
    uint64_t ids, text, messages;
    const struct tokcount_sink *sink; /* NULL when only counting */
};

/* Tells the sink the UTF-8 of code point cp (a lone surrogate half as its 3 bytes). */
static void tokcount_emit_cp(const struct tokcount_sink *k, unsigned cp)
{
    unsigned char u[4];
    size_t n;

    if (cp < 0x80) {
        u[0] = (unsigned char) cp, n = 1;
    } else if (cp < 0x800) {
        u[0] = (unsigned char) (0xC0 | cp >> 6), u[1] = (unsigned char) (0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (unsigned char) (0xE0 | cp >> 12);
        u[1] = (unsigned char) (0x80 | (cp >> 6 & 0x3F));
        u[2] = (unsigned char) (0x80 | (cp & 0x3F)), n = 3;
    } else {
        u[0] = (unsigned char) (0xF0 | cp >> 18);
        u[1] = (unsigned char) (0x80 | (cp >> 12 & 0x3F));
        u[2] = (unsigned char) (0x80 | (cp >> 6 & 0x3F));
        u[3] = (unsigned char) (0x80 | (cp & 0x3F)), n = 4;
    }
    k->text(k->ctx, (const char *) u, n);
}

#define TOKCOUNT_ONES  0x0101010101010101ULL
#define TOKCOUNT_HIGHS 0x8080808080808080ULL
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define TOKCOUNT_CTZ(m) __builtin_ctzll(m)
#endif

/* Returns the first byte at or after p that is a quote, a backslash or a control byte (the
 * bytes that end a plain run in a string), or end. String bytes are most of a body, so this
 * checks 8 bytes per step: after xor with c a byte is zero exactly when it equals c, and in
 * (v - ONES) & ~v & HIGHS the lowest set bit marks the first zero byte of v (with 0x20 for
 * ONES, the first byte below 0x20); bits above it may be spurious, which does not matter. */
static const char *tokcount_plain(const char *p, const char *end)
{
#if defined(__SSE2__) && defined(TOKCOUNT_CTZ)
    /* x86-64 has SSE2 always: 16 bytes a step, a byte under 0x20 being one that max_epu8
     * with 0x1f leaves at 0x1f */
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
    const __m128i ctl = _mm_set1_epi8(0x1f);

    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *) (const void *) p);
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                 _mm_cmpeq_epi8(_mm_max_epu8(v, ctl), ctl));
        unsigned bits = (unsigned) _mm_movemask_epi8(m);

        if (bits)
            return p + __builtin_ctz(bits);
        p += 16;
    }
#endif
    while (end - p >= 8) {
        uint64_t w, q, b, m;

        memcpy(&w, p, sizeof w);
        q = w ^ (TOKCOUNT_ONES * '"');
        b = w ^ (TOKCOUNT_ONES * '\\');
        m = (((q - TOKCOUNT_ONES) & ~q) | ((b - TOKCOUNT_ONES) & ~b) |
             ((w - TOKCOUNT_ONES * 0x20) & ~w)) &
            TOKCOUNT_HIGHS;
        if (m) {
#ifdef TOKCOUNT_CTZ
            return p + (TOKCOUNT_CTZ(m) >> 3);
#else
            break;
#endif
        }
        p += 8;
    }
    while (p < end && *p != '"' && *p != '\\' && (unsigned char) *p >= 0x20)
        p++;
    return p;
}

/* The character each one-letter escape stands for; 0 for letters that are not escapes. */
static const unsigned char tokcount_escapes[256] = {
    ['"'] = '"',  ['\\'] = '\\', ['/'] = '/',  ['b'] = '\b',
    ['f'] = '\f', ['n'] = '\n',  ['r'] = '\r', ['t'] = '\t',
};

static int tokcount_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
        return (c | 0x20) - 'a' + 10;
    return -1;
}

/* Scans the string whose opening quote is at s->p, adding its decoded length to s->text when
 * count is set. When key is not NULL it receives the decoded string and *keylen its length,
 * or TOKCOUNT_KEY_MAX + 1 (matching no key) when it is longer or has non-ASCII escapes.
 * Returns 1 with s->p after the closing quote; 0 on a syntax error or the end of input, with
 * the bytes before the offending escape or byte counted. */
static int tokcount_string(struct tokcount_scan *s, int count, char *key, size_t *keylen)
{
    const char *start = s->p + 1, *p = start, *end = s->end;
    const char *pair = NULL; /* just after a \uD800-\uDBFF escape: a low half here pairs */
    uint64_t saved = 0;      /* bytes of the escapes so far beyond their UTF-8 length */
    const struct tokcount_sink *sink = count ? s->sink : NULL;
    unsigned high = 0; /* a high surrogate half not yet told to the sink */
    size_t klen = 0, n;
    unsigned cp;
    int i, h;

    for (;;) {
        /* back-to-back escapes (a body of "\n\n...") skip the word scan, 4x faster */
        const char *q = p < end && *p == '\\' ? p : tokcount_plain(p, end);

        if (key && klen + (size_t) (q - p) <= TOKCOUNT_KEY_MAX)
            memcpy(key + klen, p, (size_t) (q - p));
        if (sink && q > p) {
            if (high)
                tokcount_emit_cp(sink, high), high = 0;
            sink->text(sink->ctx, p, (size_t) (q - p));
        }
        klen += (size_t) (q - p);
        p = q;
        if (p == end || *p != '\\' || end - p < 2)
            break;
        if (p[1] != 'u') {
            cp = tokcount_escapes[(unsigned char) p[1]];
            if (cp == 0)
                break;
            saved += 1;
            n = 2;
        } else {
            if (end - p < 6)
                break;
            for (cp = 0, i = 2; i < 6; i++) {
                if ((h = tokcount_hex(p[i])) < 0)
                    break;
                cp = cp << 4 | (unsigned) h;
            }
            if (i < 6)
                break;
            /* a surrogate pair is 4 bytes of UTF-8: 3 for the high half (its length alone,
             * as WTF-8 has it) and 1 for the low half that completes it */
            saved += 6 - (cp < 0x80                                    ? 1
                          : cp < 0x800                                 ? 2
                          : (p == pair && cp >= 0xDC00 && cp < 0xE000) ? 1
                                                                       : 3);
            if (sink) {
                /* a pair is told as the one character it stands for, as if written raw */
                if (high && p == pair && cp >= 0xDC00 && cp < 0xE000)
                    cp = 0x10000 + ((high - 0xD800) << 10) + (cp - 0xDC00), high = 0;
                else if (high)
                    tokcount_emit_cp(sink, high), high = 0;
            }
            pair = cp >= 0xD800 && cp < 0xDC00 ? p + 6 : NULL;
            n = 6;
        }
        if (sink) {
            if (cp >= 0xD800 && cp < 0xDC00)
                high = cp;
            else
                tokcount_emit_cp(sink, cp);
        }
        if (key && klen < TOKCOUNT_KEY_MAX && cp < 0x80)
            key[klen] = (char) cp;
        klen += cp < 0x80 ? 1 : TOKCOUNT_KEY_MAX + 1;
        p += n;
    }
    /* a half cut off by the end of input is not told: the whole body may pair it */
    if (high && p < end && *p == '"')
        tokcount_emit_cp(sink, high);
    /* each escape is counted only once all its bytes were read, so a cut body counts less */
    if (count)
        s->text += (uint64_t) (p - start) - saved;
    s->p = p;
    if (p == end || *p != '"')
        return 0;
    s->p++;
    if (key)
        *keylen = klen <= TOKCOUNT_KEY_MAX ? klen : TOKCOUNT_KEY_MAX + 1;
    return 1;
}

static int tokcount_digit(const char *p, const char *end)
{
    return p < end && *p >= '0' && *p <= '9';
}

/* Scans the number at s->p; *integer tells whether it has no fraction and no exponent, and
 * *value is its magnitude when it is one (saturated; UINT64_MAX for a negative one).
 * Returns 2 when it ends before the end of input, 1 when it runs to the end (complete only as
 * a top-level value), 0 on a syntax error or a number cut short. */
static int tokcount_number(struct tokcount_scan *s, int *integer, uint64_t *value)
{
    const char *p = s->p, *end = s->end;
    uint64_t v;

    *integer = 1;
    if (*p == '-')
        p++;
    if (!tokcount_digit(p, end))
        return 0;
    v = (uint64_t) (*p - '0');
    if (*p++ != '0')
        while (tokcount_digit(p, end)) {
            v = v > (UINT64_MAX - 9) / 10 ? UINT64_MAX : v * 10 + (uint64_t) (*p - '0');
            p++;
        }
    *value = *s->p == '-' ? UINT64_MAX : v;
    if (p < end && *p == '.') {
        *integer = 0;
        if (!tokcount_digit(++p, end))
            return 0;
        while (tokcount_digit(p, end))
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *integer = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (!tokcount_digit(p, end))
            return 0;
        while (tokcount_digit(p, end))
            p++;
    }
    s->p = p;
    return p < end ? 2 : 1;
}

/* Skips the container whose opening bracket is at s->p without looking at what it holds, as
 * nothing that counts is nested that deep. Returns 1 with s->p after its closing bracket, 0
 * at the end of input or on a bad string. */
static int tokcount_skip(struct tokcount_scan *s)
{
    size_t open = 0;

    while (s->p < s->end) {
        char c = *s->p;

        if (c == '"') {
            if (!tokcount_string(s, 0, NULL, NULL))
                return 0;
            continue;
        }
        s->p++;
        if (c == '[' || c == '{')
            open++;
        else if ((c == ']' || c == '}') && --open == 0)
            return 1;
    }
    return 0;
}

static unsigned char tokcount_key_kind(unsigned char role, const char *key, size_t len)
{
    size_t i;

    for (i = 0; i < sizeof tokcount_keys / sizeof tokcount_keys[0]; i++)
        if (tokcount_keys[i].role == role && tokcount_keys[i].len == len &&
            memcmp(tokcount_keys[i].name, key, len) == 0)
            return tokcount_keys[i].kind;
    return KIND_NONE;
}

/* What may come next. */
enum {
    WANT_VALUE,
    WANT_VALUE_OR_CLOSE,
    WANT_KEY,
    WANT_KEY_OR_CLOSE,
    WANT_COLON,
    WANT_NEXT,
    WANT_END
};

/* Runs the scan; returns 1 when the body is one well-formed value with nothing but
 * whitespace after it. Sets *deep when it skipped a container (unchecked inside). */
static int tokcount_scan(struct tokcount_scan *s, int *deep)
{
    unsigned char stack[TOKCOUNT_MAX_DEPTH]; /* roles, ROLE_OBJECT set for objects */
    size_t depth = 0;
    unsigned char kind = KIND_ROOT, role = ROLE_NONE; /* role of stack[depth - 1] */
    const struct tokcount_sink *sink = s->sink;
    int want = WANT_VALUE, integer;
    uint64_t value;
    char key[TOKCOUNT_KEY_MAX], c;
    size_t keylen;

    for (;; want = depth ? WANT_NEXT : WANT_END) {
    next:
        while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
            s->p++;
        if (s->p == s->end)
            return want == WANT_END;
        c = *s->p;
        if (((c == ']' && want == WANT_VALUE_OR_CLOSE) || (c == '}' && want == WANT_KEY_OR_CLOSE) ||
             ((c == ']' || c == '}') && want == WANT_NEXT)) &&
            (c == '}') == ((role & ROLE_OBJECT) != 0)) {
            s->p++;
            if (sink && role == (ROLE_MESSAGE | ROLE_OBJECT))
                sink->mark(sink->ctx, TOKCOUNT_MESSAGE_END, NULL, 0);
            else if (sink && role == ROLE_IDS && depth > 1 &&
                     (stack[depth - 2] == ROLE_PROMPT || stack[depth - 2] == ROLE_BATCH))
                sink->mark(sink->ctx, TOKCOUNT_ITEM_END, NULL, 0);
            role = --depth ? stack[depth - 1] : ROLE_NONE;
            continue;
        }
        switch (want) {
        case WANT_VALUE:
        case WANT_VALUE_OR_CLOSE:
            if (c == '[' || c == '{') {
                if (depth == TOKCOUNT_MAX_DEPTH) {
                    *deep = 1;
                    if (!tokcount_skip(s))
                        return 0;
                    continue;
                }
                s->p++;
                if (c == '{') {
                    role = tokcount_kinds[kind].object | ROLE_OBJECT;
                    s->messages += role == (ROLE_MESSAGE | ROLE_OBJECT);
                    want = WANT_KEY_OR_CLOSE;
                } else {
                    role = tokcount_kinds[kind].array;
                    kind = tokcount_items[role];
                    want = WANT_VALUE_OR_CLOSE;
                }
                stack[depth++] = role;
                goto next;
            }
            if (c == '"' && sink && kind == KIND_ROLE) {
                if (!tokcount_string(s, 0, key, &keylen))
                    return 0;
                sink->mark(sink->ctx, TOKCOUNT_ROLE, key, keylen <= TOKCOUNT_KEY_MAX ? keylen : 0);
            } else if (c == '"') {
                if (!tokcount_string(s, tokcount_kinds[kind].text, NULL, NULL))
                    return 0;
                if (sink && kind == KIND_PROMPT_ITEM)
                    sink->mark(sink->ctx, TOKCOUNT_ITEM_END, NULL, 0);
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                int r = tokcount_number(s, &integer, &value);

                if (r == 0 || (r == 1 && depth > 0))
                    return 0;
                s->ids += integer && tokcount_kinds[kind].id;
                if (sink && integer && tokcount_kinds[kind].id)
                    sink->id(sink->ctx, value);
            } else if (s->end - s->p >= 4 &&
                       (memcmp(s->p, "true", 4) == 0 || memcmp(s->p, "null", 4) == 0)) {
                s->p += 4;
            } else if (s->end - s->p >= 5 && memcmp(s->p, "false", 5) == 0) {
                s->p += 5;
            } else {
                return 0;
            }
            continue;
        case WANT_KEY:
        case WANT_KEY_OR_CLOSE:
            if (c != '"' || !tokcount_string(s, 0, key, &keylen))
                return 0;
            kind = tokcount_key_kind(role & ~ROLE_OBJECT, key, keylen);
            want = WANT_COLON;
            goto next;
        case WANT_COLON:
            if (c != ':')
                return 0;
            s->p++;
            want = WANT_VALUE;
            goto next;
        case WANT_NEXT:
            if (c != ',')
                return 0;
            s->p++;
            want = role & ROLE_OBJECT ? WANT_KEY : WANT_VALUE;
            kind = tokcount_items[role & ~ROLE_OBJECT];
            goto next;
        default:
            return 0;
        }
    }
}

/* ceil(bytes / chars_per_token), saturated; a nonsensical ratio means 4. */
static uint64_t tokcount_text_tokens(uint64_t bytes, double chars_per_token)
{
    double q;
    uint64_t t;

    if (!(chars_per_token > 0 && chars_per_token <= DBL_MAX))
        chars_per_token = 4.0;
    q = (double) bytes / chars_per_token;
    if (!(q < 18446744073709551616.0))
        return UINT64_MAX;
    t = (uint64_t) q;
    return t + ((double) t < q);
}

void tokcount_body(const char *body, size_t len, double chars_per_token, struct tokcount *out)
{
    tokcount_walk(body, len, chars_per_token, NULL, out);
}

void tokcount_walk(const char *body, size_t len, double chars_per_token,
                   const struct tokcount_sink *sink, struct tokcount *out)
{
    struct tokcount_scan s;
    uint64_t text_tokens;
    int deep = 0, ok;

    if (body == NULL)
        body = "", len = 0;
    memset(&s, 0, sizeof s);
    s.p = body;
    s.end = body + len;
    s.sink = sink;
    ok = tokcount_scan(&s, &deep);
    text_tokens = tokcount_text_tokens(s.text, chars_per_token);
    out->id_tokens = s.ids;
    out->text_bytes = s.text;
    out->tokens = s.ids + 4 * s.messages;
    out->tokens = UINT64_MAX - out->tokens < text_tokens ? UINT64_MAX : out->tokens + text_tokens;
    out->exact = s.text == 0 && s.messages == 0 && s.ids > 0;
    out->complete = ok && !deep;
}
