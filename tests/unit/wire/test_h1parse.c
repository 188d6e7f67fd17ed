/* Unit tests for the HTTP/1.1 head parser: a table of every refusal (status and reason) and
 * every accepted shape (framing, length, persistence), each input fed whole, split at every
 * byte offset and one byte at a time, which must all give the same result. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/h1parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 32
#define MAX   8192

enum { REQ, RESP, RESP_HEAD };

struct tcase {
    const char *name;
    const char *in;
    size_t len;
    int kind;           /* REQ, RESP (to a GET) or RESP_HEAD (to a HEAD) */
    int rc;             /* H1_DONE, H1_ERROR or H1_AGAIN */
    int status;         /* with H1_ERROR */
    const char *reason; /* ... */
    int framing;        /* with H1_DONE */
    uint64_t cl;
    int ka;
    size_t max, slots; /* 0: MAX, SLOTS */
};

#define HOST "Host: a\r\n"
#define REJ(n, s, st, r)                                                                           \
    {                                                                                              \
        n, s, sizeof(s) - 1, REQ, H1_ERROR, st, r, 0, 0, 0, 0, 0                                   \
    }
#define ACC(n, s, f, cl, ka)                                                                       \
    {                                                                                              \
        n, s, sizeof(s) - 1, REQ, H1_DONE, 0, NULL, f, cl, ka, 0, 0                                \
    }
#define RREJ(n, s, r)                                                                              \
    {                                                                                              \
        n, s, sizeof(s) - 1, RESP, H1_ERROR, 502, r, 0, 0, 0, 0, 0                                 \
    }
#define RACC(n, k, s, f, cl, ka)                                                                   \
    {                                                                                              \
        n, s, sizeof(s) - 1, k, H1_DONE, 0, NULL, f, cl, ka, 0, 0                                  \
    }
#define MORE(n, s)                                                                                 \
    {                                                                                              \
        n, s, sizeof(s) - 1, REQ, H1_AGAIN, 0, NULL, 0, 0, 0, 0, 0                                 \
    }

static const struct tcase cases[] = {
    /* ---- line ends: CRLF everywhere (RFC 9112 2.2) ---- */
    REJ("bare LF after request line", "GET / HTTP/1.1\n" HOST "\r\n", 400, H1_R_BARE_LF),
    REJ("bare LF after field", "GET / HTTP/1.1\r\nHost: a\n\r\n", 400, H1_R_BARE_LF),
    REJ("bare LF blank line", "GET / HTTP/1.1\r\n" HOST "\n", 400, H1_R_BARE_LF),
    REJ("bare LF before request", "\nGET / HTTP/1.1\r\n" HOST "\r\n", 400, H1_R_BARE_LF),
    REJ("bare LF in name", "GET / HTTP/1.1\r\n" HOST "X\n\r\n", 400, H1_R_NO_COLON),
    REJ("bare CR in value", "GET / HTTP/1.1\r\n" HOST "X: a\rb\r\n\r\n", 400, H1_R_BARE_CR),
    REJ("bare CR ends request line", "GET / HTTP/1.1\r" HOST "\r\n", 400, H1_R_BARE_CR),
    REJ("bare CR blank line", "GET / HTTP/1.1\r\n" HOST "\rX", 400, H1_R_BARE_CR),
    REJ("bare CR before request", "\rGET / HTTP/1.1\r\n" HOST "\r\n", 400, H1_R_BARE_CR),
    REJ("CR CR LF", "GET / HTTP/1.1\r\n" HOST "X: a\r\r\n\r\n", 400, H1_R_BARE_CR),
    REJ("too many empty lines", "\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n" HOST "\r\n", 400,
        "too many empty lines before the request line"),
    /* ---- field lines (RFC 9112 5, RFC 9110 5.5) ---- */
    REJ("obs-fold SP", "GET / HTTP/1.1\r\n" HOST "X: a\r\n b\r\n\r\n", 400, H1_R_OBS_FOLD),
    REJ("obs-fold HTAB", "GET / HTTP/1.1\r\n" HOST "X: a\r\n\tb\r\n\r\n", 400, H1_R_OBS_FOLD),
    REJ("space after start line", "GET / HTTP/1.1\r\n " HOST "\r\n", 400,
        "whitespace after the start line"),
    REJ("NUL in value", "GET / HTTP/1.1\r\n" HOST "X: a\0b\r\n\r\n", 400, H1_R_NUL),
    REJ("NUL before the line ends", "GET / HTTP/1.1\r\n" HOST "X: a\0", 400, H1_R_NUL),
    REJ("SOH in value", "GET / HTTP/1.1\r\n" HOST "X: a\001b\r\n\r\n", 400, H1_R_CTL),
    REJ("ESC in value", "GET / HTTP/1.1\r\n" HOST "X: \033[0m\r\n\r\n", 400, H1_R_CTL),
    REJ("DEL in value", "GET / HTTP/1.1\r\n" HOST "X: a\177\r\n\r\n", 400, H1_R_CTL),
    REJ("VT in a long value", "GET / HTTP/1.1\r\n" HOST "X: 0123456789abcdef\v0123456789\r\n\r\n",
        400, H1_R_CTL),
    REJ("space before colon", "GET / HTTP/1.1\r\n" HOST "Content-Length : 1\r\n\r\nx", 400,
        H1_R_WS_COLON),
    REJ("tab before colon", "GET / HTTP/1.1\r\n" HOST "Transfer-Encoding\t: chunked\r\n\r\n", 400,
        H1_R_WS_COLON),
    REJ("at in name", "GET / HTTP/1.1\r\n" HOST "X@: b\r\n\r\n", 400, H1_R_NAME_CHAR),
    REJ("quote in name", "GET / HTTP/1.1\r\n" HOST "X\"Y: b\r\n\r\n", 400, H1_R_NAME_CHAR),
    REJ("obs-text in name", "GET / HTTP/1.1\r\n" HOST "\xc3\x84: b\r\n\r\n", 400, H1_R_NAME_CHAR),
    REJ("NUL in name", "GET / HTTP/1.1\r\n" HOST "X\0: b\r\n\r\n", 400, H1_R_NAME_CHAR),
    REJ("empty name", "GET / HTTP/1.1\r\n" HOST ": b\r\n\r\n", 400, H1_R_EMPTY_NAME),
    REJ("no colon", "GET / HTTP/1.1\r\n" HOST "Hosta\r\n\r\n", 400, H1_R_NO_COLON),
    /* ---- Transfer-Encoding (RFC 9112 6.1, 6.3) ---- */
    REJ("TE then CL",
        "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400,
        "Transfer-Encoding with Content-Length"),
    REJ("CL then TE",
        "POST / HTTP/1.1\r\n" HOST "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
        "Transfer-Encoding with Content-Length"),
    REJ("two TE lines",
        "POST / HTTP/1.1\r\n" HOST
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        400, "more than one Transfer-Encoding"),
    REJ("TE chunked, gzip", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked, gzip\r\n\r\n",
        400, "Transfer-Encoding does not end in chunked"),
    REJ("TE gzip", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: gzip\r\n\r\n", 400,
        "Transfer-Encoding does not end in chunked"),
    REJ("TE identity", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: identity\r\n\r\n", 400,
        "Transfer-Encoding does not end in chunked"),
    REJ("TE empty", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: \r\n\r\n", 400,
        "Transfer-Encoding does not end in chunked"),
    REJ("TE chunked twice",
        "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked, chunked\r\n\r\n", 400,
        "chunked applied more than once"),
    REJ("TE on HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
        "Transfer-Encoding on HTTP/1.0"),
    REJ("TE gzip, chunked", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: gzip, chunked\r\n\r\n",
        501, "unsupported transfer coding"),
    REJ("TE x-custom, chunked",
        "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: x-custom;p=1, chunked\r\n\r\n", 501,
        "unsupported transfer coding"),
    REJ("TE chunked with a parameter",
        "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked;q=1\r\n\r\n", 400,
        "malformed Transfer-Encoding"),
    REJ("TE two words", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chun ked\r\n\r\n", 400,
        "malformed Transfer-Encoding"),
    REJ("TE quoted", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: \"chunked\"\r\n\r\n", 400,
        "malformed Transfer-Encoding"),
    REJ("TE chunked with a tab",
        "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\t,x\r\n\r\n", 400,
        "Transfer-Encoding does not end in chunked"),
    /* ---- Content-Length (RFC 9110 8.6, RFC 9112 6.3) ---- */
    REJ("CL plus", "POST / HTTP/1.1\r\n" HOST "Content-Length: +1\r\n\r\nx", 400,
        "invalid Content-Length"),
    REJ("CL minus", "POST / HTTP/1.1\r\n" HOST "Content-Length: -1\r\n\r\nx", 400,
        "invalid Content-Length"),
    REJ("CL hex", "POST / HTTP/1.1\r\n" HOST "Content-Length: 0x1\r\n\r\nx", 400,
        "invalid Content-Length"),
    REJ("CL empty", "POST / HTTP/1.1\r\n" HOST "Content-Length:\r\n\r\nx", 400,
        "invalid Content-Length"),
    REJ("CL blank", "POST / HTTP/1.1\r\n" HOST "Content-Length:  \r\n\r\nx", 400,
        "invalid Content-Length"),
    REJ("CL two numbers", "POST / HTTP/1.1\r\n" HOST "Content-Length: 1 1\r\n\r\nx", 400,
        "invalid Content-Length"),
    REJ("CL trailing comma", "POST / HTTP/1.1\r\n" HOST "Content-Length: 1,\r\n\r\nx", 400,
        "invalid Content-Length"),
    REJ("CL leading comma", "POST / HTTP/1.1\r\n" HOST "Content-Length: ,1\r\n\r\nx", 400,
        "invalid Content-Length"),
    REJ("CL decimal", "POST / HTTP/1.1\r\n" HOST "Content-Length: 1.0\r\n\r\nx", 400,
        "invalid Content-Length"),
    REJ("CL overflow", "POST / HTTP/1.1\r\n" HOST "Content-Length: 99999999999999999999\r\n\r\n",
        400, "Content-Length overflows"),
    REJ("CL 2^63", "POST / HTTP/1.1\r\n" HOST "Content-Length: 9223372036854775808\r\n\r\n", 400,
        "Content-Length overflows"),
    REJ("CL list differs", "POST / HTTP/1.1\r\n" HOST "Content-Length: 1, 2\r\n\r\nx", 400,
        "differing Content-Length values"),
    REJ("CL lines differ",
        "POST / HTTP/1.1\r\n" HOST "Content-Length: 1\r\nContent-Length: 0\r\n\r\nx", 400,
        "differing Content-Length values"),
    /* ---- Host (RFC 9112 3.2) ---- */
    REJ("no Host on 1.1", "GET / HTTP/1.1\r\nX: y\r\n\r\n", 400, "missing Host"),
    REJ("two Host", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "more than one Host"),
    REJ("two identical Host", "GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", 400,
        "more than one Host"),
    REJ("Host with a space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "invalid Host"),
    REJ("Host with userinfo", "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", 400, "invalid Host"),
    REJ("Host with a path", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400, "invalid Host"),
    /* ---- the request line (RFC 9112 3) ---- */
    REJ("two spaces after method", "GET  / HTTP/1.1\r\n" HOST "\r\n", 400,
        "extra space in request line"),
    REJ("two spaces after target", "GET /  HTTP/1.1\r\n" HOST "\r\n", 400,
        "extra space in request line"),
    REJ("space after version", "GET / HTTP/1.1 \r\n" HOST "\r\n", 400,
        "extra space in request line"),
    REJ("space in target", "GET /a b HTTP/1.1\r\n" HOST "\r\n", 400, "malformed HTTP version"),
    REJ("empty version", "GET / \r\n" HOST "\r\n", 400, "missing HTTP version"),
    REJ("version refused at its first wrong byte", "GET / HTTQ", 400, "malformed HTTP version"),
    REJ("leading space", " GET / HTTP/1.1\r\n" HOST "\r\n", 400, "empty method"),
    REJ("tab separator", "GET\t/ HTTP/1.1\r\n" HOST "\r\n", 400, "invalid character in method"),
    REJ("bad method token", "GE@T / HTTP/1.1\r\n" HOST "\r\n", 400, "invalid character in method"),
    REJ("method alone", "GET\r\n" HOST "\r\n", 400, "request line without a target"),
    REJ("no version", "GET /\r\n" HOST "\r\n", 400, "missing HTTP version"),
    REJ("fragment in target", "GET /a#b HTTP/1.1\r\n" HOST "\r\n", 400,
        "fragment in request target"),
    REJ("DEL in target", "GET /\177 HTTP/1.1\r\n" HOST "\r\n", 400,
        "invalid character in request target"),
    REJ("obs-text in target", "GET /\xff HTTP/1.1\r\n" HOST "\r\n", 400,
        "invalid character in request target"),
    REJ("asterisk with GET", "GET * HTTP/1.1\r\n" HOST "\r\n", 400, "invalid request target form"),
    REJ("relative target", "GET foo HTTP/1.1\r\n" HOST "\r\n", 400, "invalid request target form"),
    REJ("scheme with a digit first", "GET 1http://a/ HTTP/1.1\r\n" HOST "\r\n", 400,
        "invalid request target form"),
    REJ("CONNECT", "CONNECT a:443 HTTP/1.1\r\n" HOST "\r\n", 501, "CONNECT is not supported"),
    REJ("lower-case version", "GET / http/1.1\r\n" HOST "\r\n", 400, "malformed HTTP version"),
    REJ("version 1.10", "GET / HTTP/1.10\r\n" HOST "\r\n", 400, "malformed HTTP version"),
    REJ("version 1", "GET / HTTP/1\r\n" HOST "\r\n", 400, "malformed HTTP version"),
    REJ("version 1.x", "GET / HTTP/1.x\r\n" HOST "\r\n", 400, "malformed HTTP version"),
    REJ("version with a tab", "GET / HTTP/1.1\t\r\n" HOST "\r\n", 400, "malformed HTTP version"),
    REJ("long version", "GET / HTTP/1.1.1.1.1", 400, "malformed HTTP version"),
    REJ("HTTP/2.0", "GET / HTTP/2.0\r\n" HOST "\r\n", 505, "HTTP version not supported"),
    REJ("HTTP/0.9", "GET / HTTP/0.9\r\n" HOST "\r\n", 505, "HTTP version not supported"),
    /* ---- accepted requests ---- */
    ACC("minimal GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", H1_BODY_NONE, 0, 1),
    ACC("HTTP/1.0 without Host", "GET / HTTP/1.0\r\n\r\n", H1_BODY_NONE, 0, 0),
    ACC("HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", H1_BODY_NONE, 0,
        1),
    ACC("close", "GET / HTTP/1.1\r\n" HOST "Connection: close\r\n\r\n", H1_BODY_NONE, 0, 0),
    ACC("close wins", "GET / HTTP/1.1\r\n" HOST "Connection: keep-alive, CLOSE\r\n\r\n",
        H1_BODY_NONE, 0, 0),
    ACC("close on a second line",
        "GET / HTTP/1.1\r\n" HOST "Connection: x\r\nConnection: close\r\n\r\n", H1_BODY_NONE, 0, 0),
    ACC("POST with CL", "POST /v1 HTTP/1.1\r\n" HOST "Content-Length: 5\r\n\r\nhello",
        H1_BODY_LENGTH, 5, 1),
    ACC("CL 0", "POST / HTTP/1.1\r\n" HOST "Content-Length: 0\r\n\r\n", H1_BODY_LENGTH, 0, 1),
    ACC("CL list of equal values", "POST / HTTP/1.1\r\n" HOST "Content-Length: 5 ,5,\t5\r\n\r\n",
        H1_BODY_LENGTH, 5, 1),
    ACC("CL repeated",
        "POST / HTTP/1.1\r\n" HOST "Content-Length: 5\r\ncontent-length: 005\r\n\r\n",
        H1_BODY_LENGTH, 5, 1),
    ACC("CL largest", "POST / HTTP/1.1\r\n" HOST "Content-Length: 9223372036854775807\r\n\r\n",
        H1_BODY_LENGTH, 9223372036854775807ull, 1),
    ACC("TE chunked", "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n",
        H1_BODY_CHUNKED, 0, 1),
    ACC("TE Chunked with empty members",
        "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: , CHUNKED ,\r\n\r\n", H1_BODY_CHUNKED, 0, 1),
    ACC("four empty lines first", "\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n" HOST "\r\n", H1_BODY_NONE, 0,
        1),
    ACC("HTTP/1.2 as 1.1", "GET / HTTP/1.2\r\n" HOST "\r\n", H1_BODY_NONE, 0, 1),
    ACC("OPTIONS *", "OPTIONS * HTTP/1.1\r\n" HOST "\r\n", H1_BODY_NONE, 0, 1),
    ACC("absolute form", "GET http://a/b?c=d HTTP/1.1\r\n" HOST "\r\n", H1_BODY_NONE, 0, 1),
    ACC("unknown method", "BREW /pot HTTP/1.1\r\n" HOST "\r\n", H1_BODY_NONE, 0, 1),
    ACC("obs-text in value", "GET / HTTP/1.1\r\n" HOST "X: caf\xc3\xa9\r\n\r\n", H1_BODY_NONE, 0,
        1),
    ACC("empty values", "GET / HTTP/1.1\r\n" HOST "X:\r\nY: \t \r\n\r\n", H1_BODY_NONE, 0, 1),
    ACC("tab inside a value", "GET / HTTP/1.1\r\n" HOST "X: a\tb\r\n\r\n", H1_BODY_NONE, 0, 1),
    ACC("empty Host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", H1_BODY_NONE, 0, 1),
    ACC("IPv6 Host", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", H1_BODY_NONE, 0, 1),
    ACC("Expect 100-continue",
        "POST / HTTP/1.1\r\n" HOST "Expect: 100-Continue\r\nContent-Length: 2\r\n\r\n",
        H1_BODY_LENGTH, 2, 1),
    ACC("Upgrade", "GET / HTTP/1.1\r\n" HOST "Connection: upgrade\r\nUpgrade: websocket\r\n\r\n",
        H1_BODY_NONE, 0, 1),
    ACC("a long value",
        "GET / HTTP/1.1\r\n" HOST
        "Cookie: 0123456789abcdef0123456789abcdef0123456789abcdef\r\n\r\n",
        H1_BODY_NONE, 0, 1),
    /* ---- incomplete heads ---- */
    MORE("empty", ""),
    MORE("no blank line", "GET / HTTP/1.1\r\n" HOST),
    MORE("half the blank line", "GET / HTTP/1.1\r\n" HOST "\r"),
    MORE("half a request line", "GET /v1/chat/completions HT"),
    MORE("blank lines only", "\r\n\r\n\r"),
    /* ---- responses: every refusal is 502 ---- */
    RREJ("response bare LF", "HTTP/1.1 200 OK\n\r\n", H1_R_BARE_LF),
    RREJ("response obs-fold", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", H1_R_OBS_FOLD),
    RREJ("response bare CR", "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", H1_R_BARE_CR),
    RREJ("response NUL", "HTTP/1.1 200 OK\r\nX: \0\r\n\r\n", H1_R_NUL),
    RREJ("response TE and CL",
         "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
         "Transfer-Encoding with Content-Length"),
    RREJ("response TE on 1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
         "Transfer-Encoding on HTTP/1.0"),
    RREJ("response two TE",
         "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
         "more than one Transfer-Encoding"),
    RREJ("response chunked twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
         "chunked applied more than once"),
    RREJ("response bad CL", "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
         "invalid Content-Length"),
    RREJ("response differing CL",
         "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
         "differing Content-Length values"),
    RREJ("status with two digits", "HTTP/1.1 20 OK\r\n\r\n", "invalid status code"),
    RREJ("status with four digits", "HTTP/1.1 2000 OK\r\n\r\n", "invalid status code"),
    RREJ("status 099", "HTTP/1.1 099 OK\r\n\r\n", "invalid status code"),
    RREJ("status 600", "HTTP/1.1 600 OK\r\n\r\n", "invalid status code"),
    RREJ("two spaces before status", "HTTP/1.1  200 OK\r\n\r\n", "invalid status code"),
    RREJ("HTTP/2 status line", "HTTP/2 200 OK\r\n\r\n", "malformed HTTP version"),
    RREJ("status line without a space", "HTTP/1.1\r\n\r\n", "malformed status line"),
    RREJ("response version 2.0", "HTTP/2.0 200 OK\r\n\r\n", "HTTP version not supported"),
    RREJ("control in reason", "HTTP/1.1 200 O\001K\r\n\r\n", "control character in status line"),
    RREJ("blank line before status", "\r\nHTTP/1.1 200 OK\r\n\r\n", "malformed status line"),
    RREJ("response refused at its first wrong byte", "Ge", "malformed status line"),
    RREJ("response version refused early", "HTTQ", "malformed HTTP version"),
    /* ---- accepted responses (RFC 9112 6.3) ---- */
    RACC("200 with CL", RESP, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", H1_BODY_LENGTH, 3,
         1),
    RACC("200 until close", RESP, "HTTP/1.1 200 OK\r\n\r\nabc", H1_BODY_UNTIL_CLOSE, 0, 0),
    RACC("200 chunked", RESP, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
         H1_BODY_CHUNKED, 0, 1),
    RACC("200 gzip", RESP, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
         H1_BODY_UNTIL_CLOSE, 0, 0),
    RACC("200 gzip, chunked", RESP, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
         H1_BODY_CHUNKED, 0, 1),
    RACC("204 with CL", RESP, "HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n", H1_BODY_NONE,
         0, 1),
    RACC("304 with CL", RESP, "HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\n",
         H1_BODY_NONE, 0, 1),
    RACC("100 Continue", RESP, "HTTP/1.1 100 Continue\r\n\r\n", H1_BODY_NONE, 0, 1),
    RACC("HEAD's answer", RESP_HEAD, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", H1_BODY_NONE,
         0, 1),
    RACC("HEAD's chunked answer", RESP_HEAD,
         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", H1_BODY_NONE, 0, 1),
    RACC("no reason, no space", RESP, "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", H1_BODY_LENGTH,
         0, 1),
    RACC("empty reason", RESP, "HTTP/1.1 599 \r\nContent-Length: 0\r\n\r\n", H1_BODY_LENGTH, 0, 1),
    RACC("1.0 keep-alive", RESP,
         "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", H1_BODY_LENGTH,
         0, 1),
    RACC("1.0 closes", RESP, "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", H1_BODY_LENGTH, 0, 0),
    RACC("response CL list", RESP, "HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nab",
         H1_BODY_LENGTH, 2, 1),
    /* ---- limits: the caller's ---- */
    {"request line too long", "GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\n" HOST "\r\n", 51,
     REQ, H1_ERROR, 414, "request line too long", 0, 0, 0, 20, 0},
    {"request line CR at the limit", "GET / HTTP/1.1\r\n" HOST "\r\n", 27, REQ, H1_ERROR, 414,
     "request line too long", 0, 0, 0, 15, 0},
    {"header section too large", "GET / HTTP/1.1\r\n" HOST "X: 0123456789\r\n\r\n", 43, REQ,
     H1_ERROR, 431, "header section too large", 0, 0, 0, 30, 0},
    {"head exactly at the limit", "GET / HTTP/1.1\r\n" HOST "\r\n", 27, REQ, H1_DONE, 0, NULL,
     H1_BODY_NONE, 0, 1, 27, 0},
    {"too many fields", "GET / HTTP/1.1\r\n" HOST "A: 1\r\nB: 2\r\n\r\n", 39, REQ, H1_ERROR, 431,
     "too many header fields", 0, 0, 0, 0, 2},
    {"response too large", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 38, RESP, H1_ERROR, 502,
     "response head too large", 0, 0, 0, 20, 0},
};

#define NCASES (sizeof cases / sizeof cases[0])

/* One run's outcome, everything a caller can read. */
struct outcome {
    int rc;
    struct h1_parser p;
    struct h1_header hdr[SLOTS];
};

static void start(const struct tcase *c, struct outcome *o)
{
    size_t max = c->max ? c->max : MAX, slots = c->slots ? c->slots : SLOTS;

    memset(o, 0, sizeof *o);
    if (c->kind == REQ)
        h1_req_init(&o->p, o->hdr, slots, max);
    else
        h1_resp_init(&o->p, o->hdr, slots, max, c->kind == RESP_HEAD ? H1_M_HEAD : H1_M_GET);
}

/* Parses c->in given in pieces ending at the offsets cuts[0..n) (the last is the length);
 * before each call the bytes past the piece hold garbage, which the parser must not read. */
static void run(const struct tcase *c, const size_t *cuts, size_t n, struct outcome *o)
{
    char *buf = malloc(c->len + 1);

    assert_non_null(buf);
    memset(buf, 0xaa, c->len + 1);
    start(c, o);
    for (size_t k = 0; k < n; k++) {
        memcpy(buf, c->in, cuts[k]);
        o->rc = h1_parse(&o->p, buf, cuts[k]);
        if (o->rc != H1_AGAIN)
            break;
    }
    /* Slices are compared as offsets: the buffer is freed. */
    for (size_t i = 0; i < o->p.nhdr; i++) {
        o->hdr[i].name.p = (const char *) (o->hdr[i].name.p - buf);
        o->hdr[i].value.p = (const char *) (o->hdr[i].value.p - buf);
    }
    o->p.method_str.p = o->p.method_str.p ? (const char *) (o->p.method_str.p - buf) : NULL;
    o->p.target.p = o->p.target.p ? (const char *) (o->p.target.p - buf) : NULL;
    o->p.reason.p = o->p.reason.p ? (const char *) (o->p.reason.p - buf) : NULL;
    free(buf);
}

static void same(const struct tcase *c, const struct outcome *a, const struct outcome *b,
                 const char *how)
{
    if (a->rc != b->rc || a->p.err_reason != b->p.err_reason || a->p.err_off != b->p.err_off)
        print_error("%s (%s): rc %d/%d, %s/%s at %zu/%zu\n", c->name, how, a->rc, b->rc,
                    a->p.err_reason ? a->p.err_reason : "-",
                    b->p.err_reason ? b->p.err_reason : "-", a->p.err_off, b->p.err_off);
    assert_int_equal(a->rc, b->rc);
    assert_ptr_equal(a->p.err_reason, b->p.err_reason);
    assert_int_equal(a->p.err_status, b->p.err_status);
    assert_int_equal(a->p.err_off, b->p.err_off);
    if (a->rc != H1_DONE)
        return;
    assert_int_equal(a->p.head_len, b->p.head_len);
    assert_int_equal(a->p.framing, b->p.framing);
    assert_int_equal(a->p.content_length, b->p.content_length);
    assert_int_equal(a->p.keep_alive, b->p.keep_alive);
    assert_int_equal(a->p.flags, b->p.flags);
    assert_int_equal(a->p.minor, b->p.minor);
    assert_int_equal(a->p.method, b->p.method);
    assert_int_equal(a->p.status, b->p.status);
    assert_memory_equal(&a->p.target, &b->p.target, sizeof a->p.target);
    assert_memory_equal(&a->p.reason, &b->p.reason, sizeof a->p.reason);
    assert_memory_equal(a->p.first, b->p.first, sizeof a->p.first);
    assert_int_equal(a->p.nhdr, b->p.nhdr);
    assert_memory_equal(a->hdr, b->hdr, a->p.nhdr * sizeof a->hdr[0]);
}

static void check_case(const struct tcase *c, const struct outcome *o)
{
    if (o->rc != c->rc ||
        (c->reason != NULL && (o->p.err_reason == NULL || strcmp(o->p.err_reason, c->reason) != 0)))
        print_error("%s: rc %d, %d %s\n", c->name, o->rc, o->p.err_status,
                    o->p.err_reason ? o->p.err_reason : "-");
    assert_int_equal(o->rc, c->rc);
    if (c->rc == H1_ERROR) {
        assert_int_equal(o->p.err_status, c->status);
        assert_string_equal(o->p.err_reason, c->reason);
        assert_false(o->p.keep_alive);
        assert_true(o->p.err_off <= c->len);
    } else if (c->rc == H1_DONE) {
        assert_int_equal(o->p.framing, c->framing);
        assert_int_equal(o->p.content_length, c->cl);
        assert_int_equal(o->p.keep_alive, c->ka);
        assert_true(o->p.head_len <= c->len);
        assert_memory_equal(c->in + o->p.head_len - 4, "\r\n\r\n", o->p.head_len >= 4 ? 4 : 0);
    }
}

static void test_table(void **state)
{
    size_t cuts[2 * MAX];

    (void) state;
    for (size_t i = 0; i < NCASES; i++) {
        const struct tcase *c = &cases[i];
        struct outcome whole, split;
        size_t n = c->len;

        run(c, &n, 1, &whole);
        check_case(c, &whole);
        /* Split at every offset: the first piece, then the rest. */
        for (size_t k = 0; k < n; k++) {
            cuts[0] = k;
            cuts[1] = n;
            run(c, cuts, 2, &split);
            same(c, &whole, &split, "split");
        }
        /* One byte at a time. */
        for (size_t k = 0; k < n; k++)
            cuts[k] = k + 1;
        if (n > 0) {
            run(c, cuts, n, &split);
            same(c, &whole, &split, "bytewise");
        }
    }
}

static int parse_one(const char *in, struct h1_parser *p, struct h1_header *hdr)
{
    h1_req_init(p, hdr, SLOTS, MAX);
    return h1_parse(p, in, strlen(in));
}

static void expect_str(struct h1_str s, const char *want)
{
    if (s.len != strlen(want) || memcmp(s.p, want, s.len) != 0)
        print_error("got [%.*s], want [%s]\n", (int) s.len, s.p, want);
    assert_int_equal(s.len, strlen(want));
    assert_memory_equal(s.p, want, s.len);
}

/* Every name admitd acts on is recognised in any case; slices point into the input. */
static void test_classified(void **state)
{
    static const char in[] = "POST /v1/chat/completions?x=1 HTTP/1.1\r\n"
                             "hOsT: api.example:8000\r\n"
                             "CONTENT-LENGTH: 2\r\n"
                             "connection: keep-alive, X-Trace\r\n"
                             "Expect: 100-continue\r\n"
                             "Upgrade: h2c\r\n"
                             "Content-Type: application/json \r\n"
                             "Accept: text/event-stream\r\n"
                             "Authorization: Bearer t\r\n"
                             "X-Admit-Worker: 3\r\n"
                             "x-request-id:\tabc\r\n"
                             "Keep-Alive: timeout=5\r\n"
                             "TE: trailers\r\n"
                             "Trailer: X\r\n"
                             "Proxy-Connection: close\r\n"
                             "X-Trace: 1\r\n"
                             "Content-Typo: no\r\n"
                             "\r\nok";
    static const struct {
        enum h1_hid id;
        const char *value;
    } want[] = {
        {H1_H_HOST, "api.example:8000"},
        {H1_H_CONTENT_LENGTH, "2"},
        {H1_H_CONNECTION, "keep-alive, X-Trace"},
        {H1_H_EXPECT, "100-continue"},
        {H1_H_UPGRADE, "h2c"},
        {H1_H_CONTENT_TYPE, "application/json"},
        {H1_H_ACCEPT, "text/event-stream"},
        {H1_H_AUTHORIZATION, "Bearer t"},
        {H1_H_X_ADMIT_WORKER, "3"},
        {H1_H_X_REQUEST_ID, "abc"},
        {H1_H_KEEP_ALIVE, "timeout=5"},
        {H1_H_TE, "trailers"},
        {H1_H_TRAILER, "X"},
        {H1_H_PROXY_CONNECTION, "close"},
    };
    struct h1_parser p;
    struct h1_header hdr[SLOTS];

    (void) state;
    assert_int_equal(parse_one(in, &p, hdr), H1_DONE);
    assert_int_equal(p.head_len, sizeof in - 3);
    assert_int_equal(p.method, H1_M_POST);
    expect_str(p.method_str, "POST");
    expect_str(p.target, "/v1/chat/completions?x=1");
    assert_int_equal(p.nhdr, 16);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct h1_header *h = h1_get(&p, want[i].id);
        assert_non_null(h);
        assert_ptr_equal(h, &hdr[i]);
        assert_int_equal(h->id, want[i].id);
        expect_str(h->value, want[i].value);
        assert_true(h->name.p >= in && h->value.p + h->value.len < in + sizeof in);
    }
    assert_int_equal(hdr[14].id, H1_H_OTHER);
    assert_int_equal(hdr[15].id, H1_H_OTHER);
    assert_null(h1_get(&p, H1_H_OTHER));
    assert_ptr_equal(h1_find(&p, "x-trace"), &hdr[14]);
    assert_ptr_equal(h1_find(&p, "CONTENT-TYPE"), &hdr[5]);
    assert_null(h1_find(&p, "X-Missing"));
    /* A line's length runs from its name through its CRLF. */
    assert_int_equal(hdr[5].line_len, strlen("Content-Type: application/json \r\n"));
    assert_int_equal(p.flags,
                     H1_F_CONN_KEEP_ALIVE | H1_F_CONN_OTHER | H1_F_UPGRADE | H1_F_EXPECT_CONTINUE);
    assert_int_equal(p.framing, H1_BODY_LENGTH);
    assert_int_equal(p.content_length, 2);
    assert_int_equal(h1_method_name(p.method)[0], 'P');
    assert_null(h1_method_name(H1_M_OTHER));
}

static void test_request_details(void **state)
{
    struct h1_parser p;
    struct h1_header hdr[SLOTS];

    (void) state;
    assert_int_equal(parse_one("BREW /pot HTTP/1.1\r\nHost: a\r\n\r\n", &p, hdr), H1_DONE);
    assert_int_equal(p.method, H1_M_OTHER);
    expect_str(p.method_str, "BREW");
    assert_int_equal(parse_one("GET http://a/b HTTP/1.1\r\nHost: a\r\n\r\n", &p, hdr), H1_DONE);
    assert_int_equal(p.flags, H1_F_ABSOLUTE_FORM);
    assert_int_equal(parse_one("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", &p, hdr), H1_DONE);
    assert_int_equal(p.flags, H1_F_ASTERISK_FORM);
    assert_int_equal(p.method, H1_M_OPTIONS);
    /* 100-continue is ignored on HTTP/1.0 (RFC 9110 10.1.1); other expectations are flagged. */
    assert_int_equal(parse_one("POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n", &p, hdr),
                     H1_DONE);
    assert_int_equal(p.flags, 0);
    assert_int_equal(parse_one("POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n", &p, hdr),
                     H1_DONE);
    assert_int_equal(p.flags, H1_F_EXPECT_OTHER);
    assert_int_equal(parse_one("GET / HTTP/1.2\r\nHost: a\r\n\r\n", &p, hdr), H1_DONE);
    assert_int_equal(p.minor, 2);
    /* Values keep inner whitespace and lose the outer. */
    assert_int_equal(parse_one("GET / HTTP/1.1\r\nHost: a\r\nX: \t a \t b \t \r\n\r\n", &p, hdr),
                     H1_DONE);
    expect_str(hdr[1].value, "a \t b");
    assert_int_equal(parse_one("GET / HTTP/1.1\r\nHost: a\r\nX:\r\n\r\n", &p, hdr), H1_DONE);
    expect_str(hdr[1].value, "");
    /* The offset of a refusal is the byte that decided it. */
    assert_int_equal(parse_one("GET / HTTP/1.1\r\nHost: a\r\nX: a\001\r\n\r\n", &p, hdr), H1_ERROR);
    assert_int_equal(p.err_off, 29);
    assert_int_equal(parse_one("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", &p, hdr), H1_ERROR);
    assert_int_equal(p.err_off, 25);
    /* A finished parser keeps its verdict. */
    assert_int_equal(h1_parse(&p, "GET / HTTP/1.1\r\n", 16), H1_ERROR);
    assert_int_equal(parse_one("GET / HTTP/1.1\r\nHost: a\r\n\r\nGET", &p, hdr), H1_DONE);
    assert_int_equal(h1_parse(&p, "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET", 30), H1_DONE);
    assert_int_equal(p.head_len, 27);
}

static void test_response_details(void **state)
{
    static const char in[] = "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\n\r\n";
    struct h1_parser p;
    struct h1_header hdr[SLOTS];

    (void) state;
    h1_resp_init(&p, hdr, SLOTS, MAX, H1_M_POST);
    assert_int_equal(h1_parse(&p, in, sizeof in - 1), H1_DONE);
    assert_int_equal(p.status, 429);
    expect_str(p.reason, "Too Many Requests");
    assert_int_equal(p.framing, H1_BODY_UNTIL_CLOSE);
    assert_int_equal(p.keep_alive, 0);
    h1_resp_init(&p, hdr, SLOTS, MAX, H1_M_GET);
    assert_int_equal(h1_parse(&p, "HTTP/1.1 101 Switching\r\nUpgrade: x\r\n\r\n", 38), H1_DONE);
    assert_int_equal(p.status, 101);
    assert_int_equal(p.framing, H1_BODY_NONE);
    assert_int_equal(p.flags, H1_F_UPGRADE);
}

/* The byte classes against the grammar, written out a second way. */
static void test_classes(void **state)
{
    const char *tchar_extra = "!#$%&'*+-.^_`|~";
    const char *host_extra = "-._~!$&'()*+,;=%:[]";

    (void) state;
    for (int c = 0; c < 256; c++) {
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int digit = c >= '0' && c <= '9';
        int vchar = c > 0x20 && c < 0x7f;
        assert_int_equal(h1_is((unsigned char) c, H1_C_TCHAR),
                         alpha || digit || (c && strchr(tchar_extra, c)));
        assert_int_equal(h1_is((unsigned char) c, H1_C_VALUE),
                         vchar || c >= 0x80 || c == ' ' || c == '\t');
        assert_int_equal(h1_is((unsigned char) c, H1_C_TARGET), vchar && c != '#');
        assert_int_equal(h1_is((unsigned char) c, H1_C_HEX),
                         digit || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'));
        assert_int_equal(h1_is((unsigned char) c, H1_C_HOST),
                         alpha || digit || (c && strchr(host_extra, c)));
        assert_int_equal(h1_is((unsigned char) c, H1_C_QDTEXT),
                         c == '\t' || c == ' ' || (vchar && c != '"' && c != '\\') || c >= 0x80);
        assert_int_equal(h1_is((unsigned char) c, H1_C_SCHEME),
                         alpha || digit || c == '+' || c == '-' || c == '.');
    }
}

static void test_lists(void **state)
{
    struct h1_str v = {"close , Upgrade,,x", 18}, e;
    const char *at = v.p;
    const char *want[] = {"close", "Upgrade", "", "x"};
    size_t n = 0;

    (void) state;
    while (h1_list_next(&at, v.p + v.len, &e)) {
        assert_true(n < 4);
        expect_str(e, want[n++]);
    }
    assert_int_equal(n, 4);
    assert_true(h1_list_has(v, "upgrade"));
    assert_true(h1_list_has(v, "CLOSE"));
    assert_false(h1_list_has(v, "clos"));
    assert_false(h1_list_has((struct h1_str){NULL, 0}, "close"));
    assert_true(h1_ieq((struct h1_str){"Chunked", 7}, "chunked"));
    assert_false(h1_ieq((struct h1_str){"chunked", 7}, "chunke"));
    assert_false(h1_ieq((struct h1_str){"chunke", 6}, "chunked"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),           cmocka_unit_test(test_classified),
        cmocka_unit_test(test_request_details), cmocka_unit_test(test_response_details),
        cmocka_unit_test(test_classes),         cmocka_unit_test(test_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
