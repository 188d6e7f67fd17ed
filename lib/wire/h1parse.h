/* h1parse: a strict, zero-copy, incremental parser of HTTP/1.1 request and response heads
 * (RFC 9112 2-7, RFC 9110 5-8).
 *
 * The parser refuses and never repairs: every input two HTTP parsers could read two ways
 * (the request-smuggling families: bare CR or LF, obs-fold, whitespace before a colon, a
 * Transfer-Encoding beside a Content-Length, ...) is an error with a status and a reason,
 * so what it accepts can be forwarded byte for byte. It allocates nothing and copies
 * nothing: names, values, the method and the target are slices of the caller's buffer, the
 * header slots are the caller's array, and the headers admitd acts on are classified, and
 * their values checked, in the same pass.
 *
 * Incremental: call h1_parse with the bytes so far, then again with the same buffer grown
 * by the next read. It resumes at the byte where it stopped (a CR that ended a read is looked
 * at again, with its LF), so a head costs one pass whatever the split; the verdict, its
 * reason and its offset depend only on the bytes, never on how they arrived. Between calls
 * the bytes already given must stay where they are (the slices point into them); a caller
 * that moves them restarts with h1_req_init, paying one rescan of the head. */
#ifndef ADMIT_H1PARSE_H
#define ADMIT_H1PARSE_H

#include "wire/h1tok.h"

#include <stddef.h>
#include <stdint.h>

/* Methods by name; any other token is H1_M_OTHER (its text is in method_str). */
enum h1_method {
    H1_M_OTHER = 0,
    H1_M_GET,
    H1_M_HEAD,
    H1_M_POST,
    H1_M_PUT,
    H1_M_DELETE,
    H1_M_OPTIONS,
    H1_M_PATCH,
    H1_M_TRACE,
    H1_M_CONNECT,
};

/* The header names admitd acts on, recognised in the parsing pass. */
enum h1_hid {
    H1_H_OTHER = 0,
    H1_H_HOST,
    H1_H_CONTENT_LENGTH,
    H1_H_TRANSFER_ENCODING,
    H1_H_CONNECTION,
    H1_H_EXPECT,
    H1_H_UPGRADE,
    H1_H_CONTENT_TYPE,
    H1_H_ACCEPT,
    H1_H_AUTHORIZATION,
    H1_H_X_ADMIT_WORKER,
    H1_H_X_REQUEST_ID,
    H1_H_KEEP_ALIVE,
    H1_H_TE,
    H1_H_TRAILER,
    H1_H_PROXY_CONNECTION,
    H1_H_COUNT
};

/* How the body is delimited (RFC 9112 6.3). */
enum h1_framing {
    H1_BODY_NONE = 0,   /* no body: a request without CL or TE, 1xx, 204, 304, HEAD's answer */
    H1_BODY_LENGTH,     /* content_length bytes */
    H1_BODY_CHUNKED,    /* the chunked coding: decode with h1chunk */
    H1_BODY_UNTIL_CLOSE /* responses only: the body ends when the server closes */
};

/* flags: what the head asked for */
#define H1_F_CONN_CLOSE      0x01 /* Connection lists close */
#define H1_F_CONN_KEEP_ALIVE 0x02 /* Connection lists keep-alive */
#define H1_F_CONN_OTHER      0x04 /* Connection lists other options: drop the fields it names */
#define H1_F_UPGRADE         0x08 /* an Upgrade field was sent */
#define H1_F_EXPECT_CONTINUE 0x10 /* Expect: 100-continue on HTTP/1.1 (ignored on 1.0) */
#define H1_F_EXPECT_OTHER    0x20 /* an Expect other than 100-continue: 417 is allowed */
#define H1_F_ABSOLUTE_FORM   0x40 /* the target is absolute-form (scheme:...) */
#define H1_F_ASTERISK_FORM   0x80 /* the target is "*" (OPTIONS only) */

/* One field line, as slices of the buffer. */
struct h1_header {
    struct h1_str name;  /* as sent (case kept) */
    struct h1_str value; /* without the whitespace around it */
    size_t line_len;     /* bytes from name.p through the line's CRLF, for verbatim copies */
    enum h1_hid id;      /* H1_H_OTHER unless the name is one admitd acts on */
};

/* One head being parsed. Fill it with h1_req_init or h1_resp_init; the public fields are
 * the result once h1_parse returned H1_DONE, or the verdict once it returned H1_ERROR;
 * the fields starting with '_' are the parser's. */
struct h1_parser {
    enum h1_method method;    /* requests: the method */
    struct h1_str method_str; /* ... its text */
    struct h1_str target;     /* ... the request target */
    int status;               /* responses: the status code (100-599) */
    struct h1_str reason;     /* ... the reason phrase, maybe empty */
    int minor;                /* HTTP/1.minor (0-9): 1 and above follow HTTP/1.1's rules */
    enum h1_framing framing;  /* the body's delimitation */
    uint64_t content_length;  /* with H1_BODY_LENGTH, the body's size */
    int keep_alive;           /* RFC 9112 9.3: the connection persists after this message */
    unsigned flags;           /* H1_F_* */
    struct h1_header *hdr;    /* the caller's slots, nhdr of them filled, in order */
    size_t nhdr;
    uint16_t first[H1_H_COUNT]; /* 1 + the slot of each classified name's first line; 0: none */
    size_t head_len;            /* bytes of the head, blank line and skipped CRLFs included */
    int err_status;             /* on H1_ERROR: 400, 414, 431, 501 or 505; 502 for responses */
    const char *err_reason;     /* ... a static string saying why */
    size_t err_off;             /* ... the offset of the byte that decided it */
    /* private */
    size_t _cap, _max;         /* slots; bytes a head may take */
    size_t _pos;               /* where scanning resumes */
    size_t _line, _mark, _val; /* the current line's start, a field's end, the value's start */
    uint64_t _cl;              /* the Content-Length seen */
    uint8_t _phase, _resp, _req_head, _blank, _hosts, _tes, _has_cl, _chunked, _te_other, _hid;
};

/** prepares p for a request head: nslots field lines at most (more: 431), max_head bytes at
 *  most (more: 414 while in the request line, 431 after) */
void h1_req_init(struct h1_parser *p, struct h1_header *slots, size_t nslots, size_t max_head);
/** prepares p for the head of the response to a request with method req (HEAD's answer
 *  has no body); every refusal is 502 */
void h1_resp_init(struct h1_parser *p, struct h1_header *slots, size_t nslots, size_t max_head,
                  enum h1_method req);
/** parses buf[0..len), the same buffer as the last call, maybe grown; returns H1_DONE (head
 *  complete, head_len bytes), H1_AGAIN (need more) or H1_ERROR (err_status, err_reason) */
int h1_parse(struct h1_parser *p, const char *buf, size_t len);
/** parses the final response head at buf[0..len) past any 1xx interim ones (a 101 is refused:
 *  no upgrade is ever asked for), with h1_resp_init's arguments; *used is the bytes of the
 *  heads taken, interim ones included even with H1_AGAIN; returns as h1_parse */
int h1_parse_final(struct h1_parser *p, struct h1_header *slots, size_t nslots, size_t max_head,
                   enum h1_method req, const char *buf, size_t len, size_t *used);
/** the first field line of a classified name, or NULL */
const struct h1_header *h1_get(const struct h1_parser *p, enum h1_hid id);
/** the first field line called name (case-insensitive), or NULL */
const struct h1_header *h1_find(const struct h1_parser *p, const char *name);
/** the name of a method ("GET"), or NULL for H1_M_OTHER */
const char *h1_method_name(enum h1_method m);

#endif
