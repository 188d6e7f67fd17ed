/* h1parse: the head parser, a state machine resumable at any byte.
 *
 * Each phase scans as far as the bytes go and saves its position, so a head split over many
 * reads costs one pass. A check that needs the next byte (CR then LF) waits for it rather
 * than guessing. Field lines are checked when their CRLF arrives; the framing rules that
 * depend on several lines (Host twice, TE beside CL) are applied at the line that completes
 * the conflict, so the verdict and its reason are the same for every split of the input. */
#include "wire/h1parse.h"
#include "wire/h1parse_impl.h"

#include <string.h>

enum {
    PH_SKIP,     /* requests: CRLFs before the request line (RFC 9112 2.2) */
    PH_METHOD,   /* the method token */
    PH_TARGET,   /* the request target */
    PH_VERSION,  /* the request's HTTP-version */
    PH_RVERSION, /* a response's HTTP-version */
    PH_STATUS,   /* its status code */
    PH_REASON,   /* its reason phrase */
    PH_START_LF, /* the start line's CR seen: its LF */
    PH_LINE,     /* the start of a field line, or of the blank line */
    PH_NAME,     /* a field name */
    PH_OWS,      /* whitespace after the colon */
    PH_VALUE,    /* a field value */
    PH_VALUE_LF, /* a field line's CR seen: its LF */
    PH_END_LF,   /* the blank line's CR seen: its LF */
    PH_DONE,
    PH_ERR
};

/* RFC 9112 2.2 asks a server to ignore "at least one" empty line before a request (left
 * over from a POST body's CRLF); more than this many is not a client bug any more. */
#define MAX_BLANK_LINES 4

static const char *const method_names[] = {
    [H1_M_GET] = "GET",     [H1_M_HEAD] = "HEAD",     [H1_M_POST] = "POST",
    [H1_M_PUT] = "PUT",     [H1_M_DELETE] = "DELETE", [H1_M_OPTIONS] = "OPTIONS",
    [H1_M_PATCH] = "PATCH", [H1_M_TRACE] = "TRACE",   [H1_M_CONNECT] = "CONNECT",
};

static void init(struct h1_parser *p, struct h1_header *slots, size_t nslots, size_t max_head)
{
    memset(p, 0, sizeof *p);
    p->hdr = slots;
    p->_cap = nslots < UINT16_MAX ? nslots : UINT16_MAX; /* first[] holds slot numbers */
    p->_max = max_head;
}

void h1_req_init(struct h1_parser *p, struct h1_header *slots, size_t nslots, size_t max_head)
{
    init(p, slots, nslots, max_head);
    p->_phase = PH_SKIP;
}

void h1_resp_init(struct h1_parser *p, struct h1_header *slots, size_t nslots, size_t max_head,
                  enum h1_method req)
{
    init(p, slots, nslots, max_head);
    p->_phase = PH_RVERSION;
    p->_resp = 1;
    p->_req_head = req == H1_M_HEAD;
}

int h1p_fail(struct h1_parser *p, int status, const char *reason, size_t off)
{
    p->err_status = p->_resp ? 502 : status;
    p->err_reason = reason;
    p->err_off = off;
    p->_phase = PH_ERR;
    p->keep_alive = 0;
    return H1_ERROR;
}

static struct h1_str slice(const unsigned char *b, size_t from, size_t to)
{
    struct h1_str s = {(const char *) b + from, to - from};
    return s;
}

/* The first byte at or after i that may not be in a field value (or end). Values are most of
 * a head, so they are scanned eight bytes at a time, as HAProxy does: one word test finds
 * any byte below 0x20 or DEL, and on a little-endian machine its lowest flag is the first
 * such byte (a borrow can only flag bytes above a true one). HTAB is the one such byte a
 * value may hold: the scan steps over it and goes on. */
static size_t scan_value(const unsigned char *b, size_t i, size_t end)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;

    while (end - i >= 8) {
        uint64_t w, x, hit;
        memcpy(&w, b + i, 8);
        x = w ^ (0x7f * ones);
        hit = (((w - 0x20 * ones) & ~w) | ((x - ones) & ~x)) & highs;
        if (hit == 0) {
            i += 8;
            continue;
        }
        i += (size_t) __builtin_ctzll(hit) / 8;
        if (b[i] != '\t')
            return i;
        i++;
    }
#endif
    while (i < end && h1_is(b[i], H1_C_VALUE))
        i++;
    return i;
}

/* The end of the token at or after i (or end), four bytes a step while it lasts: one test of
 * the four classes together. */
static size_t scan_token(const unsigned char *b, size_t i, size_t end)
{
    while (end - i >= 4 && (h1_ctype[b[i]] & h1_ctype[b[i + 1]] & h1_ctype[b[i + 2]] &
                            h1_ctype[b[i + 3]] & H1_C_TCHAR))
        i += 4;
    while (i < end && h1_is(b[i], H1_C_TCHAR))
        i++;
    return i;
}

static enum h1_method method_of(struct h1_str m)
{
    for (size_t k = 1; k < sizeof method_names / sizeof method_names[0]; k++) {
        if (strlen(method_names[k]) == m.len && memcmp(method_names[k], m.p, m.len) == 0)
            return (enum h1_method) k;
    }
    return H1_M_OTHER;
}

/* n is lit, ignoring case: with bit 0x20 set, exact for letters and '-', the only bytes of
 * the names we look for (any other tchar that maps onto one is not in them). */
static int is_name(const unsigned char *n, const char *lit, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if ((n[i] | 0x20) != (unsigned char) lit[i])
            return 0;
    }
    return 1;
}

/* The names admitd acts on, by length, then by bytes. */
static enum h1_hid classify(const unsigned char *n, size_t len)
{
#define IS(lit) is_name(n, lit, len)
    switch (len) {
    case 2:
        return IS("te") ? H1_H_TE : H1_H_OTHER;
    case 4:
        return IS("host") ? H1_H_HOST : H1_H_OTHER;
    case 6:
        return IS("accept") ? H1_H_ACCEPT : IS("expect") ? H1_H_EXPECT : H1_H_OTHER;
    case 7:
        return IS("upgrade") ? H1_H_UPGRADE : IS("trailer") ? H1_H_TRAILER : H1_H_OTHER;
    case 10:
        return IS("connection") ? H1_H_CONNECTION : IS("keep-alive") ? H1_H_KEEP_ALIVE : H1_H_OTHER;
    case 12:
        return IS("content-type")   ? H1_H_CONTENT_TYPE
               : IS("x-request-id") ? H1_H_X_REQUEST_ID
                                    : H1_H_OTHER;
    case 13:
        return IS("authorization") ? H1_H_AUTHORIZATION : H1_H_OTHER;
    case 14:
        return IS("content-length")   ? H1_H_CONTENT_LENGTH
               : IS("x-admit-worker") ? H1_H_X_ADMIT_WORKER
                                      : H1_H_OTHER;
    case 16:
        return IS("proxy-connection") ? H1_H_PROXY_CONNECTION : H1_H_OTHER;
    case 17:
        return IS("transfer-encoding") ? H1_H_TRANSFER_ENCODING : H1_H_OTHER;
    default:
        return H1_H_OTHER;
    }
#undef IS
}

/* Byte k of "HTTP/" DIGIT "." DIGIT, case-sensitive (RFC 9112 2.3), checked as it arrives:
 * a wrong byte is refused at once, not at the end of the line. */
static int version_byte(size_t k, unsigned char c)
{
    if (k < 5)
        return c == (unsigned char) "HTTP/"[k];
    if (k == 6)
        return c == '.';
    return k < 8 && c >= '0' && c <= '9';
}

/* The request target's form (RFC 9112 3.2): origin-form, absolute-form, or "*" for OPTIONS.
 * CONNECT's authority-form is not served: admitd tunnels nothing. */
static int on_target(struct h1_parser *p, size_t off)
{
    const unsigned char *t = (const unsigned char *) p->target.p;
    size_t n = p->target.len, i = 1;

    if (p->method == H1_M_CONNECT)
        return h1p_fail(p, 501, "CONNECT is not supported", off);
    if (t[0] == '/')
        return H1_AGAIN;
    if (n == 1 && t[0] == '*' && p->method == H1_M_OPTIONS) {
        p->flags |= H1_F_ASTERISK_FORM;
        return H1_AGAIN;
    }
    if ((t[0] | 0x20) >= 'a' && (t[0] | 0x20) <= 'z') {
        while (i < n && h1_is(t[i], H1_C_SCHEME))
            i++;
        if (i < n && t[i] == ':') {
            p->flags |= H1_F_ABSOLUTE_FORM;
            return H1_AGAIN;
        }
    }
    return h1p_fail(p, 400, "invalid request target form", off);
}

/* The 8 bytes at v are a version: HTTP/1.x is read, another major is 505 (as nginx). */
static int on_version(struct h1_parser *p, const unsigned char *v, size_t off)
{
    if (v[5] != '1')
        return h1p_fail(p, 505, "HTTP version not supported", off);
    p->minor = v[7] - '0';
    return H1_AGAIN;
}

static int too_long(struct h1_parser *p)
{
    if (p->_resp)
        return h1p_fail(p, 502, "response head too large", p->_max);
    if (p->_phase <= PH_START_LF)
        return h1p_fail(p, 414, "request line too long", p->_max);
    return h1p_fail(p, 431, "header section too large", p->_max);
}

/* The field line from line to the CR at cr is complete: into its slot, then, for the names
 * we act on, their rules. The common case (another name) stays here. */
static int store_field(struct h1_parser *p, const unsigned char *b, size_t line, size_t mark,
                       size_t val, size_t cr, unsigned hid)
{
    size_t e = cr;
    struct h1_header *h;

    if (p->nhdr == p->_cap)
        return h1p_fail(p, 431, "too many header fields", line);
    while (e > val && (b[e - 1] == ' ' || b[e - 1] == '\t'))
        e--;
    h = &p->hdr[p->nhdr++];
    h->name = slice(b, line, mark);
    h->value = slice(b, val, e);
    h->line_len = cr + 2 - line;
    h->id = (enum h1_hid) hid;
    return hid == H1_H_OTHER ? H1_AGAIN : h1p_field(p, h, line);
}

/* The state lives in locals while the bytes last (the compiler keeps them in registers:
 * stores through p could alias the input, which is read as bytes), and in p between calls. */
int h1_parse_final(struct h1_parser *p, struct h1_header *slots, size_t nslots, size_t max_head,
                   enum h1_method req, const char *buf, size_t len, size_t *used)
{
    int rv;

    *used = 0;
    for (;;) {
        /* Whole, from its first byte: a head split over reads is parsed again. */
        h1_resp_init(p, slots, nslots, max_head, req);
        if ((rv = h1_parse(p, buf + *used, len - *used)) != H1_DONE)
            return rv;
        *used += p->head_len;
        if (p->status >= 200)
            return H1_DONE;
        if (p->status == 101)
            return h1p_fail(p, 502, "101 without an upgrade asked for", 0);
        /* 1xx: an interim answer (100 Continue); the final one follows. */
    }
}

int h1_parse(struct h1_parser *p, const char *buf, size_t len)
{
    const unsigned char *b = (const unsigned char *) buf;
    size_t end = len < p->_max ? len : p->_max, i = p->_pos;
    size_t line = p->_line, mark = p->_mark, val = p->_val;
    unsigned phase = p->_phase, hid = p->_hid;
    int rc;

#define FAIL(st, why, at) return h1p_fail(p, st, why, at)
    for (;;) {
        switch (phase) {
        case PH_DONE:
            return H1_DONE;
        case PH_ERR:
            return H1_ERROR;
        case PH_SKIP:
            if (i >= end)
                goto more;
            if (b[i] == '\n')
                FAIL(400, H1_R_BARE_LF, i);
            if (b[i] == '\r') {
                if (i + 1 >= end)
                    goto more;
                if (b[i + 1] != '\n')
                    FAIL(400, H1_R_BARE_CR, i);
                if (++p->_blank > MAX_BLANK_LINES)
                    FAIL(400, "too many empty lines before the request line", i);
                i += 2;
                continue;
            }
            line = i;
            phase = PH_METHOD;
            continue;
        case PH_METHOD:
            i = scan_token(b, i, end);
            if (i >= end)
                goto more;
            if (b[i] != ' ')
                FAIL(400,
                     b[i] == '\r' || b[i] == '\n' ? "request line without a target"
                                                  : "invalid character in method",
                     i);
            if (i == line)
                FAIL(400, "empty method", i);
            p->method_str = slice(b, line, i);
            p->method = method_of(p->method_str);
            mark = ++i;
            phase = PH_TARGET;
            continue;
        case PH_TARGET:
            while (i < end && h1_is(b[i], H1_C_TARGET))
                i++;
            if (i >= end)
                goto more;
            if (b[i] != ' ')
                FAIL(400,
                     b[i] == '\r' || b[i] == '\n' ? "missing HTTP version"
                     : b[i] == '#'                ? "fragment in request target"
                                                  : "invalid character in request target",
                     i);
            if (i == mark)
                FAIL(400, "extra space in request line", i);
            p->target = slice(b, mark, i);
            if ((rc = on_target(p, mark)) != H1_AGAIN)
                return rc;
            mark = ++i;
            phase = PH_VERSION;
            continue;
        case PH_VERSION:
        case PH_RVERSION:
            while (i < end && version_byte(i - mark, b[i]))
                i++;
            if (i >= end)
                goto more;
            if (i - mark < 8) {
                /* A response must start with its version; a request line's third word
                 * starting with SP is a second space. */
                FAIL(400,
                     i > mark       ? "malformed HTTP version"
                     : p->_resp     ? "malformed status line"
                     : b[i] == ' '  ? "extra space in request line"
                     : b[i] == '\r' ? "missing HTTP version"
                                    : "malformed HTTP version",
                     i);
            }
            if ((rc = on_version(p, b + mark, mark)) != H1_AGAIN)
                return rc;
            if (phase == PH_RVERSION) {
                if (b[i] != ' ')
                    FAIL(502, "malformed status line", i);
                mark = ++i;
                phase = PH_STATUS;
                continue;
            }
            if (b[i] == ' ')
                FAIL(400, "extra space in request line", i);
            if (b[i] == '\n')
                FAIL(400, H1_R_BARE_LF, i);
            if (b[i] != '\r')
                FAIL(400, "malformed HTTP version", i);
            phase = PH_START_LF;
            continue;
        case PH_STATUS:
            while (i < end && i - mark < 3 && b[i] >= '0' && b[i] <= '9')
                i++;
            if (i >= end)
                goto more;
            if (i - mark < 3 || b[mark] < '1' || b[mark] > '5' || (b[i] != ' ' && b[i] != '\r'))
                FAIL(502, "invalid status code", mark);
            p->status = (b[i - 3] - '0') * 100 + (b[i - 2] - '0') * 10 + (b[i - 1] - '0');
            mark = i + (b[i] == ' ');
            i = mark;
            phase = PH_REASON;
            continue;
        case PH_REASON:
            i = scan_value(b, i, end);
            if (i >= end)
                goto more;
            if (b[i] == '\n')
                FAIL(502, H1_R_BARE_LF, i);
            if (b[i] != '\r')
                FAIL(502, "control character in status line", i);
            p->reason = slice(b, mark, i);
            phase = PH_START_LF;
            continue;
        case PH_START_LF:
        case PH_END_LF:
            if (i + 1 >= end)
                goto more;
            if (b[i + 1] != '\n')
                FAIL(400, H1_R_BARE_CR, i);
            if (phase == PH_END_LF) {
                if ((rc = h1p_finish(p, i + 2)) == H1_DONE)
                    p->_phase = PH_DONE;
                return rc;
            }
            i += 2;
            line = i;
            /* fall through */
        /* A field line, straight through: the phase is noted only when the bytes run out. */
        case PH_LINE:
        field_line:
            phase = PH_LINE;
            if (i >= end)
                goto more;
            if (b[i] == '\r') {
                phase = PH_END_LF;
                continue;
            }
            if (b[i] == '\n')
                FAIL(400, H1_R_BARE_LF, i);
            /* RFC 9112 2.2 and 5.2: whitespace after the start line, and obs-fold, are
             * rejected rather than folded into the previous value. */
            if (b[i] == ' ' || b[i] == '\t')
                FAIL(400, p->nhdr == 0 ? "whitespace after the start line" : H1_R_OBS_FOLD, i);
            if (b[i] == ':')
                FAIL(400, H1_R_EMPTY_NAME, i);
            if (!h1_is(b[i], H1_C_TCHAR))
                FAIL(400, H1_R_NAME_CHAR, i);
            /* fall through */
        case PH_NAME:
            phase = PH_NAME;
            i = scan_token(b, i, end);
            if (i >= end)
                goto more;
            if (b[i] != ':')
                FAIL(400,
                     b[i] == ' ' || b[i] == '\t'    ? H1_R_WS_COLON
                     : b[i] == '\r' || b[i] == '\n' ? H1_R_NO_COLON
                                                    : H1_R_NAME_CHAR,
                     i);
            mark = i;
            hid = classify(b + line, i - line);
            i++;
            /* fall through */
        case PH_OWS:
            phase = PH_OWS;
            while (i < end && (b[i] == ' ' || b[i] == '\t'))
                i++;
            if (i >= end)
                goto more;
            val = i;
            /* fall through */
        case PH_VALUE:
            phase = PH_VALUE;
            i = scan_value(b, i, end);
            if (i >= end)
                goto more;
            if (b[i] != '\r')
                FAIL(400, b[i] == '\n' ? H1_R_BARE_LF : h1_value_problem(b[i]), i);
            /* fall through */
        case PH_VALUE_LF:
            phase = PH_VALUE_LF;
            if (i + 1 >= end)
                goto more;
            if (b[i + 1] != '\n')
                FAIL(400, H1_R_BARE_CR, i);
            if ((rc = store_field(p, b, line, mark, val, i, hid)) != H1_AGAIN)
                return rc;
            i += 2;
            line = i;
            goto field_line;
        }
    }
#undef FAIL
more:
    p->_pos = i;
    p->_line = line;
    p->_mark = mark;
    p->_val = val;
    p->_phase = (uint8_t) phase;
    p->_hid = (uint8_t) hid;
    if (len >= p->_max)
        return too_long(p);
    return H1_AGAIN;
}

const struct h1_header *h1_get(const struct h1_parser *p, enum h1_hid id)
{
    return id > H1_H_OTHER && id < H1_H_COUNT && p->first[id] != 0 ? &p->hdr[p->first[id] - 1]
                                                                   : NULL;
}

const struct h1_header *h1_find(const struct h1_parser *p, const char *name)
{
    for (size_t k = 0; k < p->nhdr; k++) {
        if (h1_ieq(p->hdr[k].name, name))
            return &p->hdr[k];
    }
    return NULL;
}

const char *h1_method_name(enum h1_method m)
{
    return m > H1_M_OTHER && m <= H1_M_CONNECT ? method_names[m] : NULL;
}
