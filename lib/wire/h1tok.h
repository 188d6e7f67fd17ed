/* h1tok: the lexical rules of HTTP/1.1 (RFC 9110 5.6, RFC 9112), shared by the head parser
 * (h1parse) and the chunked decoder (h1chunk).
 *
 * One table classifies every byte, so a parser tests a class with one load. The rejection
 * reasons both parsers give for the same broken byte are spelled here once, so a bare LF in
 * a header and one in a chunk line read the same in a log and in a test table. */
#ifndef ADMIT_H1TOK_H
#define ADMIT_H1TOK_H

#include <stddef.h>
#include <stdint.h>

/* What a parse step returns: a verdict, a wait for more bytes, or the end. */
#define H1_ERROR (-1) /* refused: the parser's status and reason say why */
#define H1_AGAIN 0    /* every byte given was consumed; call again with more */
#define H1_DONE  1    /* the head (or the chunked body) is complete */
#define H1_DATA  2    /* h1chunk only: a slice of body data, in place */

/* A slice of the caller's buffer: not NUL-terminated, never copied. */
struct h1_str {
    const char *p;
    size_t len;
};

/* Byte classes of h1_ctype. */
#define H1_C_TCHAR  0x01 /* tchar: a token's bytes (RFC 9110 5.6.2) */
#define H1_C_VALUE  0x02 /* field-vchar, obs-text, SP and HTAB: a field value's bytes */
#define H1_C_TARGET 0x04 /* a request target's bytes: VCHAR but '#' */
#define H1_C_HEX    0x08 /* HEXDIG */
#define H1_C_HOST   0x10 /* a Host value's bytes: unreserved, sub-delims, '%', ':', '[' ']' */
#define H1_C_QDTEXT 0x20 /* qdtext: a quoted string's plain bytes (RFC 9110 5.6.4) */
#define H1_C_SCHEME 0x40 /* a URI scheme's bytes after the first: ALPHA DIGIT '+' '-' '.' */

/* Reasons both parsers give (the status is 400 for a request, 502 for a response). */
#define H1_R_BARE_LF    "bare LF line end"
#define H1_R_BARE_CR    "bare CR"
#define H1_R_OBS_FOLD   "obs-fold line folding"
#define H1_R_NUL        "NUL in field value"
#define H1_R_CTL        "control character in field value"
#define H1_R_WS_COLON   "whitespace before the colon"
#define H1_R_NAME_CHAR  "invalid character in field name"
#define H1_R_EMPTY_NAME "empty field name"
#define H1_R_NO_COLON   "field line without a colon"

/** the class bits (H1_C_*) of each byte */
extern const uint8_t h1_ctype[256];

/** true when byte c is in class cls */
static inline int h1_is(unsigned char c, uint8_t cls)
{
    return (h1_ctype[c] & cls) != 0;
}

/** true when s is exactly lit, ASCII case-insensitive */
int h1_ieq(struct h1_str s, const char *lit);
/** the next element of a comma-separated list (RFC 9110 5.6.1) from *at before end, OWS
 *  trimmed, empty ones included (len 0); returns 0 when the list is done */
int h1_list_next(const char **at, const char *end, struct h1_str *elem);
/** true when the list names token (case-insensitive), as "Connection: close, Upgrade" does */
int h1_list_has(struct h1_str list, const char *token);
/** why byte c, not a value byte and neither CR nor LF, may not stand in a field value */
const char *h1_value_problem(unsigned char c);

#endif
