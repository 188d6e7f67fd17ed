/* h1chunk: the chunked decoder, one state per grammar position, resumable at any byte.
 *
 *   chunked-body = *chunk last-chunk trailer-section CRLF
 *   chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
 *   chunk-ext    = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] ); ext-val = token / quoted
 *
 * Only data is taken in bulk; every other byte goes through the switch, so a split can fall
 * anywhere, and the reasons for a refusal are the same whatever the split. */
#include "wire/h1chunk.h"

#include <string.h>

enum {
    S_SIZE0,       /* the size's first digit */
    S_SIZE,        /* more digits, or what follows them */
    S_SIZE_BWS,    /* whitespace after the size: only ';' may follow */
    S_EXT_BWS,     /* after ';': whitespace, then a name */
    S_EXT_NAME,    /* an extension's name */
    S_EXT_NAME_WS, /* whitespace after it: '=' or ';' may follow */
    S_EXT_EQ_BWS,  /* after '=': whitespace, then a value */
    S_EXT_TOKEN,   /* a token value */
    S_EXT_QS,      /* inside a quoted value */
    S_EXT_QP,      /* after a backslash in it */
    S_EXT_VAL_END, /* after a value: ';', CR or whitespace */
    S_EXT_VAL_WS,  /* whitespace after a value: only ';' may follow */
    S_SIZE_LF,     /* the chunk line's CR seen: its LF */
    S_DATA,        /* chunk data */
    S_DATA_CR,     /* the CR after the data */
    S_DATA_LF,     /* ... and its LF */
    S_TR_LINE,     /* the start of a trailer line, or of the final blank line */
    S_TR_NAME,     /* a trailer field's name */
    S_TR_VALUE,    /* ... its value */
    S_TR_VALUE_LF, /* its CR seen: the LF */
    S_END_LF,      /* the final CR seen: the LF */
    S_DONE,
    S_ERR
};

#define R_LINE "invalid character in chunk size line"
#define R_EXT  "malformed chunk extension"

void h1c_init(struct h1_chunked *c, uint64_t max_body)
{
    memset(c, 0, sizeof *c);
    c->_max = max_body;
    c->_state = S_SIZE0;
}

static int fail(struct h1_chunked *c, int status, const char *reason, size_t off, size_t *used)
{
    c->err_status = status;
    c->err_reason = reason;
    c->_state = S_ERR;
    *used = off;
    return H1_ERROR;
}

static int is_ws(unsigned char ch)
{
    return ch == ' ' || ch == '\t';
}

static unsigned hexval(unsigned char ch)
{
    return ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10;
}

/* After an extension's name, or whitespace following it: '=', ';' or more whitespace. */
static uint8_t after_name(unsigned char ch)
{
    return ch == '=' ? S_EXT_EQ_BWS : ch == ';' ? S_EXT_BWS : is_ws(ch) ? S_EXT_NAME_WS : S_ERR;
}

/* After an extension's value: ';' or whitespace (a CR is the caller's). */
static uint8_t after_value(unsigned char ch)
{
    return ch == ';' ? S_EXT_BWS : is_ws(ch) ? S_EXT_VAL_WS : S_ERR;
}

/* The chunk line's state after byte ch, in the states that stand in the line (size and
 * extensions); S_ERR with *why set when ch may not be there. CR and LF are the caller's. */
static uint8_t line_step(uint8_t s, unsigned char ch, const char **why)
{
    int tchar = h1_is(ch, H1_C_TCHAR);

    *why = R_EXT;
    switch (s) {
    case S_SIZE:
        if (ch == ';')
            return S_EXT_BWS;
        if (is_ws(ch))
            return S_SIZE_BWS;
        *why = R_LINE;
        return S_ERR;
    case S_SIZE_BWS:
        *why = "whitespace in chunk size line";
        return ch == ';' ? S_EXT_BWS : is_ws(ch) ? S_SIZE_BWS : S_ERR;
    case S_EXT_BWS:
        return is_ws(ch) ? S_EXT_BWS : tchar ? S_EXT_NAME : S_ERR;
    case S_EXT_NAME:
        return tchar ? S_EXT_NAME : after_name(ch);
    case S_EXT_NAME_WS:
        return after_name(ch);
    case S_EXT_EQ_BWS:
        return is_ws(ch) ? S_EXT_EQ_BWS : ch == '"' ? S_EXT_QS : tchar ? S_EXT_TOKEN : S_ERR;
    case S_EXT_TOKEN:
        return tchar ? S_EXT_TOKEN : after_value(ch);
    case S_EXT_VAL_END:
        return after_value(ch);
    case S_EXT_VAL_WS:
        return ch == ';' ? S_EXT_BWS : is_ws(ch) ? S_EXT_VAL_WS : S_ERR;
    case S_EXT_QS:
        if (ch == '"')
            return S_EXT_VAL_END;
        if (ch == '\\')
            return S_EXT_QP;
        return h1_is(ch, H1_C_QDTEXT) ? S_EXT_QS : S_ERR;
    case S_EXT_QP: /* quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text ) */
        return h1_is(ch, H1_C_VALUE) ? S_EXT_QS : S_ERR;
    default:
        return S_ERR;
    }
}

/* The states where a CR may end the chunk line. */
static int line_may_end(uint8_t s)
{
    return s == S_SIZE || s == S_EXT_NAME || s == S_EXT_TOKEN || s == S_EXT_VAL_END;
}

/* A trailer byte, with the head's field-line rules (h1parse). */
static uint8_t trailer_step(uint8_t s, unsigned char ch, const char **why)
{
    switch (s) {
    case S_TR_LINE:
        if (h1_is(ch, H1_C_TCHAR))
            return S_TR_NAME;
        *why = is_ws(ch) ? H1_R_OBS_FOLD : ch == ':' ? H1_R_EMPTY_NAME : H1_R_NAME_CHAR;
        return S_ERR;
    case S_TR_NAME:
        if (h1_is(ch, H1_C_TCHAR))
            return S_TR_NAME;
        if (ch == ':')
            return S_TR_VALUE;
        *why = is_ws(ch) ? H1_R_WS_COLON : H1_R_NAME_CHAR;
        return S_ERR;
    default: /* S_TR_VALUE */
        if (h1_is(ch, H1_C_VALUE))
            return S_TR_VALUE;
        *why = h1_value_problem(ch);
        return S_ERR;
    }
}

int h1c_feed(struct h1_chunked *c, const char *buf, size_t n, size_t *used, struct h1_str *data)
{
    const unsigned char *b = (const unsigned char *) buf;
    size_t i = 0;

    if (c->_state == S_DONE) {
        *used = 0;
        return H1_DONE;
    }
    for (; i < n; i++) {
        unsigned char ch = b[i];
        const char *why = NULL;
        uint8_t s = c->_state;

        if (s == S_DATA) {
            size_t k = c->left < n - i ? (size_t) c->left : n - i;
            data->p = buf + i;
            data->len = k;
            c->left -= k;
            if (c->left == 0)
                c->_state = S_DATA_CR;
            *used = i + k;
            return H1_DATA;
        }
        if (s == S_ERR)
            return fail(c, c->err_status, c->err_reason, i, used);
        /* The common shape, "CRLF hex CRLF" between two chunks' data, in a few steps; any
         * other byte goes on to the state machine below, which gives the same verdicts. */
        if (s == S_DATA_CR && n - i >= 2 && ch == '\r' && b[i + 1] == '\n') {
            c->size = 0;
            c->_digits = 0;
            c->_state = s = S_SIZE0;
            if ((i += 2) == n)
                break;
            ch = b[i];
        }
        if (s <= S_SIZE && h1_is(ch, H1_C_HEX)) {
            uint64_t size = c->size;
            unsigned digits = c->_digits;
            while (i < n && h1_is(b[i], H1_C_HEX)) {
                if (++digits > H1C_MAX_DIGITS)
                    return fail(c, 400, "chunk size over 16 hex digits", i, used);
                size = size << 4 | hexval(b[i++]);
            }
            c->size = size;
            c->_digits = (uint8_t) digits;
            c->_state = s = S_SIZE;
            if (i == n)
                break;
            ch = b[i];
            if (ch == '\r' && n - i >= 2 && b[i + 1] == '\n' && c->size <= c->_max - c->total) {
                c->total += c->size;
                c->chunks++;
                c->left = c->size;
                c->_state = c->size == 0 ? S_TR_LINE : S_DATA;
                i++; /* and the loop steps past the LF */
                continue;
            }
        }
        if (s >= S_TR_LINE && s <= S_END_LF && ++c->_trailer > H1C_MAX_TRAILER)
            return fail(c, 431, "trailer section too large", i, used);
        if (ch == '\n' && s != S_SIZE_LF && s != S_DATA_LF && s != S_TR_VALUE_LF && s != S_END_LF)
            return fail(c, 400, s == S_DATA_CR ? "chunk data not followed by CRLF" : H1_R_BARE_LF,
                        i, used);
        switch (s) {
        case S_SIZE0:
        case S_SIZE:
            if (h1_is(ch, H1_C_HEX)) {
                if (++c->_digits > H1C_MAX_DIGITS)
                    return fail(c, 400, "chunk size over 16 hex digits", i, used);
                c->size = c->size << 4 | hexval(ch);
                c->_state = S_SIZE;
                continue;
            }
            if (s == S_SIZE0)
                return fail(c, 400, "chunk size has no hex digits", i, used);
            /* The size is complete: refuse it now if it would pass the body's budget. */
            if (c->size > c->_max - c->total)
                return fail(c, 413, "chunked body too large", i, used);
            if (ch == '\r') {
                c->_state = S_SIZE_LF;
                continue;
            }
            break;
        case S_SIZE_LF:
        case S_DATA_LF:
        case S_TR_VALUE_LF:
        case S_END_LF:
            if (ch != '\n')
                return fail(c, 400,
                            s == S_DATA_LF ? "chunk data not followed by CRLF" : H1_R_BARE_CR, i,
                            used);
            if (s == S_END_LF) {
                c->_state = S_DONE;
                *used = i + 1;
                return H1_DONE;
            }
            if (s == S_DATA_LF) {
                c->size = 0;
                c->_digits = 0;
                c->_state = S_SIZE0;
            } else if (s == S_SIZE_LF) {
                c->total += c->size;
                c->chunks++;
                c->left = c->size;
                c->_state = c->size == 0 ? S_TR_LINE : S_DATA;
            } else {
                c->_state = S_TR_LINE;
            }
            continue;
        case S_DATA_CR:
            if (ch != '\r')
                return fail(c, 400, "chunk data not followed by CRLF", i, used);
            c->_state = S_DATA_LF;
            continue;
        case S_TR_LINE:
        case S_TR_NAME:
        case S_TR_VALUE:
            if (ch == '\r' && (s == S_TR_LINE || s == S_TR_VALUE)) {
                c->_state = s == S_TR_LINE ? S_END_LF : S_TR_VALUE_LF;
                continue;
            }
            if (ch == '\r')
                return fail(c, 400, H1_R_NO_COLON, i, used);
            if ((c->_state = trailer_step(s, ch, &why)) == S_ERR)
                return fail(c, 400, why, i, used);
            continue;
        default:
            break;
        }
        /* The rest of a chunk line: the size's end, then extensions. */
        if (ch == '\r') {
            if (!line_may_end(c->_state))
                return fail(c, 400,
                            c->_state == S_SIZE_BWS ? "whitespace in chunk size line" : R_EXT, i,
                            used);
            c->_state = S_SIZE_LF;
            continue;
        }
        if (++c->_ext > H1C_MAX_EXT)
            return fail(c, 400, "chunk extensions too long", i, used);
        if ((c->_state = line_step(c->_state, ch, &why)) == S_ERR)
            return fail(c, 400, why, i, used);
    }
    if (c->_state == S_ERR)
        return fail(c, c->err_status, c->err_reason, 0, used);
    *used = n;
    return H1_AGAIN;
}

int h1c_decode(struct h1_chunked *c, const char *src, size_t n, char *dst, size_t *used,
               size_t *len)
{
    size_t at = 0;

    *len = 0;
    for (;;) {
        struct h1_str data;
        size_t k = 0;
        int rv = h1c_feed(c, src + at, n - at, &k, &data);

        at += k;
        *used = at;
        if (rv != H1_DATA)
            return rv;
        /* The data moves down over the chunk lines before it: never past bytes unread. */
        memmove(dst + *len, data.p, data.len);
        *len += data.len;
    }
}
