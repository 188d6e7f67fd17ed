/* jscan: a strict, allocation-free, single-pass JSON scanner, for decoders that know their
 * schema.
 *
 * A decoder walks the text itself (it knows which keys it wants and what they hold) and asks
 * the scanner for one token at a time; whatever it does not want it hands to jscan_skip(),
 * which validates it just as strictly and throws it away. Nothing is built: a string is
 * returned as the span of its raw contents, to be compared or copied (decoded) only when
 * wanted, and a number as its integer value when it is one.
 *
 * Within its limits (below) it accepts exactly what jansson 2.14's json_loadb() with
 * JSON_REJECT_DUPLICATES accepts (the library admitd read JSON with before), which is RFC 8259
 * JSON with three choices made: strings must be UTF-8 without overlong forms, surrogates or
 * \u0000 (escaped NUL is refused, in keys and values); an integer (no fraction, no exponent)
 * must fit in 64 bits and a number with a fraction or exponent in a double; and an object may
 * not hold a key twice (compared decoded, "\u0061" equals "a"), at any depth. The one
 * difference: jansson drops a single NUL byte that follows a number or a literal ("1\0" reads
 * as 1, a bug of its reader); JSON has no place for a NUL outside a string, and this scanner
 * refuses it.
 *
 * The state has fixed room for JSCAN_DEPTH_MAX nested containers and for JSCAN_KEYS_MAX keys
 * in the objects open at once; a text that needs more is refused ("too deeply nested", "too
 * many keys"), so a caller that must accept every valid text checks that its longest one
 * cannot reach them (every level takes two bytes, every key four). */
#ifndef ADMIT_JSCAN_H
#define ADMIT_JSCAN_H

#include <stddef.h>
#include <stdint.h>

/* Longest text a scan takes: key positions are kept in 16 bits. */
#define JSCAN_TEXT_MAX 65535
/* Containers that may be open at once (the outermost one included). */
#define JSCAN_DEPTH_MAX 1024
/* Keys kept for the duplicate check: those of every object open at once. */
#define JSCAN_KEYS_MAX 512

/* A string as it stands in the text: its raw contents between the quotes, escapes and all.
 * esc is 0 when it has no backslash, and then the raw bytes are the decoded ones. */
struct jscan_str {
    const unsigned char *raw;
    size_t len;
    int esc;
};

/* A number: integer is 1 for one without fraction or exponent, and then i is its value. */
struct jscan_num {
    int integer;
    int64_t i;
};

/* A key of an open object, for the duplicate check: where it is, and a hash of it decoded. */
struct jscan_key {
    uint16_t off, len;
    uint32_t hash;
};

/* One scan. Large (keys and levels have fixed room) but never cleared: jscan_init() sets the
 * few fields that need it, so a scan on the stack costs nothing to start. */
struct jscan {
    const unsigned char *p;          /* the next byte */
    const unsigned char *end;        /* one past the last */
    const unsigned char *base;       /* the first, for positions */
    const char *why;                 /* after a failure: what was wrong (a static string) */
    size_t at;                       /* ... and at which byte of the text */
    unsigned depth;                  /* containers open */
    unsigned nkeys;                  /* keys[] used */
    uint16_t level[JSCAN_DEPTH_MAX]; /* per open container: its first key, or JSCAN_ARRAY */
    struct jscan_key keys[JSCAN_KEYS_MAX];
};

/* The level[] mark of an array (objects record where their keys start). */
#define JSCAN_ARRAY 0xffff

/** starts a scan of text[0 .. len); 0, or -1 (why set) when len is over JSCAN_TEXT_MAX */
int jscan_init(struct jscan *s, const void *text, size_t len);
/** records why the scan fails at the current byte; returns -1 */
int jscan_fail(struct jscan *s, const char *why);

/** skips whitespace; the next byte (not consumed), or -1 at the end of the text */
static inline int jscan_peek(struct jscan *s)
{
    if (s->p<s->end && * s->p> ' ') /* compact JSON: none to skip */
        return *s->p;
    while (s->p < s->end) {
        unsigned c = *s->p;
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t')
            return (int) c;
        s->p++;
    }
    return -1;
}

/** reads the string that starts at the next byte (a '"'); 0, or -1 when it is invalid */
int jscan_string(struct jscan *s, struct jscan_str *out);
/** reads the number that starts at the next byte; 0, or -1 when it is not a valid number */
int jscan_number(struct jscan *s, struct jscan_num *out);
/** reads null if it is the next token: 1 (consumed), 0 (something else), -1 (invalid) */
int jscan_null(struct jscan *s);
/** reads and discards one value of any type (nested ones whole); 0, or -1 when invalid */
int jscan_skip(struct jscan *s);

/** opens an object whose '{' was just consumed: its keys are checked against each other */
int jscan_open_object(struct jscan *s);
/** closes the innermost open container, forgetting its keys */
void jscan_close(struct jscan *s);
/** registers a key of the innermost open object; 0, or -1 when it holds the key already */
int jscan_key(struct jscan *s, const struct jscan_str *key);

/** the length of the valid multi-byte UTF-8 character at p (avail bytes there), or 0 when it
 *  is not one (overlong, a surrogate, past U+10FFFF, cut short, or ASCII) */
size_t jscan_utf8_char(const unsigned char *p, size_t avail);
/** decodes str into buf (cap bytes, a NUL after when it fits); its decoded length, which is
 *  over cap when it did not fit (what did is written) */
size_t jscan_str_copy(const struct jscan_str *str, char *buf, size_t cap);

#endif
