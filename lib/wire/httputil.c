/* httputil: header rules, reason phrases and error bodies. */
#include "wire/httputil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct phrase {
    int status;
    const char *text;
};

static const struct phrase phrases[] = {
    {200, "OK"},
    {201, "Created"},
    {202, "Accepted"},
    {204, "No Content"},
    {206, "Partial Content"},
    {301, "Moved Permanently"},
    {302, "Found"},
    {304, "Not Modified"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {413, "Content Too Large"},
    {414, "URI Too Long"},
    {415, "Unsupported Media Type"},
    {417, "Expectation Failed"},
    {422, "Unprocessable Content"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {499, "Client Closed Request"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
    {504, "Gateway Timeout"},
    {505, "HTTP Version Not Supported"},
    {529, "Site is overloaded"},
};

const char *httpu_reason(int status)
{
    for (size_t i = 0; i < sizeof phrases / sizeof phrases[0]; i++)
        if (phrases[i].status == status)
            return phrases[i].text;
    return "Unknown";
}

int httpu_is_hop_by_hop_n(const char *name, size_t len)
{
    /* Runs for every header of every request and response: compare lengths first, so
     * most names cost no string comparison. */
    switch (len) {
    case 2:
        return strncasecmp(name, "te", 2) == 0;
    case 7:
        return strncasecmp(name, "trailer", 7) == 0 || strncasecmp(name, "upgrade", 7) == 0;
    case 10:
        return strncasecmp(name, "connection", 10) == 0 || strncasecmp(name, "keep-alive", 10) == 0;
    case 16:
        return strncasecmp(name, "proxy-connection", 16) == 0;
    case 17:
        return strncasecmp(name, "transfer-encoding", 17) == 0;
    case 18:
        return strncasecmp(name, "proxy-authenticate", 18) == 0;
    case 19:
        return strncasecmp(name, "proxy-authorization", 19) == 0;
    default:
        return 0;
    }
}

int httpu_is_hop_by_hop(const char *name)
{
    return httpu_is_hop_by_hop_n(name, strlen(name));
}

int httpu_connection_lists_n(const char *v, size_t vlen, const char *name, size_t nlen)
{
    const char *stop = v + vlen;

    while (v < stop) {
        const char *end, *t;

        while (v < stop && (*v == ' ' || *v == '\t' || *v == ','))
            v++;
        if (v == stop) /* only separators were left: no member, not an empty one */
            break;
        end = v;
        while (end < stop && *end != ',')
            end++;
        t = end;
        while (t > v && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t) (t - v) == nlen && strncasecmp(v, name, nlen) == 0)
            return 1;
        v = end;
    }
    return 0;
}

int httpu_connection_lists(const char *v, const char *name)
{
    return v != NULL && httpu_connection_lists_n(v, strlen(v), name, strlen(name));
}

void httpu_error_field_json(struct buf *out, const char *msg)
{
    json_t *j = json_pack("{s:s}", "error", msg);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

    buf_puts(out, s ? s : "{\"error\":\"internal error\"}");
    buf_puts(out, "\n");
    free(s);
    json_decref(j);
}

/* Length of the valid UTF-8 string s, or 0 if it is not valid UTF-8 (as jansson would
 * refuse it): overlong forms, surrogates and code points past U+10FFFF included. */
static int utf8_valid(const unsigned char *s)
{
    while (*s) {
        unsigned c = *s, n, cp, min;

        if (c < 0x80) {
            s++;
            continue;
        }
        if ((c & 0xe0) == 0xc0)
            n = 1, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0)
            n = 2, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0)
            n = 3, cp = c & 0x07, min = 0x10000;
        else
            return 0;
        for (unsigned i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        s += n + 1;
    }
    return 1;
}

void httpu_json_string(struct buf *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    const char *run = s, *end = s + len;

    buf_append(out, "\"", 1);
    for (; s < end; s++) {
        unsigned char c = (unsigned char) *s;
        char esc[6] = {'\\', 0, '0', '0', 0, 0};
        size_t n = 2;

        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        buf_append(out, run, (size_t) (s - run));
        run = s + 1;
        switch (c) {
        case '"':
        case '\\':
            esc[1] = (char) c;
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        default:
            esc[1] = 'u';
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            n = 6;
            break;
        }
        buf_append(out, esc, n);
    }
    buf_append(out, run, (size_t) (s - run));
    buf_append(out, "\"", 1);
}

/* By hand, not with jansson: this is every error answer's body (the router's "every worker
 * busy" 529 among them, hot under overload), and jansson would allocate a few objects and a
 * string for each. The bytes are those json_dumps(JSON_COMPACT) would write. */
void httpu_error_json(struct buf *out, int status, const char *type, const char *message)
{
    char code[24];

    if (!utf8_valid((const unsigned char *) message) || !utf8_valid((const unsigned char *) type)) {
        buf_puts(out, "{\"error\":{\"message\":\"internal error\"}}");
        return;
    }
    buf_puts(out, "{\"error\":{\"message\":");
    httpu_json_string(out, message, strlen(message));
    buf_puts(out, ",\"type\":");
    httpu_json_string(out, type, strlen(type));
    buf_puts(out, ",\"param\":null,\"code\":");
    buf_append(out, code, httpu_fmt_uint(code, (unsigned) status)); /* an HTTP status */
    buf_puts(out, "}}");
}

/* By hand rather than strftime: locale-free, and every field has a fixed width. */
void httpu_date(time_t t, char out[HTTPU_DATE_LEN])
{
    static const char days[] = "SunMonTueWedThuFriSat";
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    struct tm tm;
    int year;
    char *p = out;

    if (gmtime_r(&t, &tm) == NULL) {
        memcpy(out, "Thu, 01 Jan 1970 00:00:00 GMT", HTTPU_DATE_LEN);
        return;
    }
    year = (tm.tm_year + 1900) % 10000;
    memcpy(p, days + 3 * tm.tm_wday, 3);
    p += 3;
    *p++ = ',';
    *p++ = ' ';
    *p++ = (char) ('0' + tm.tm_mday / 10);
    *p++ = (char) ('0' + tm.tm_mday % 10);
    *p++ = ' ';
    memcpy(p, months + 3 * tm.tm_mon, 3);
    p += 3;
    *p++ = ' ';
    *p++ = (char) ('0' + year / 1000);
    *p++ = (char) ('0' + year / 100 % 10);
    *p++ = (char) ('0' + year / 10 % 10);
    *p++ = (char) ('0' + year % 10);
    *p++ = ' ';
    *p++ = (char) ('0' + tm.tm_hour / 10);
    *p++ = (char) ('0' + tm.tm_hour % 10);
    *p++ = ':';
    *p++ = (char) ('0' + tm.tm_min / 10);
    *p++ = (char) ('0' + tm.tm_min % 10);
    *p++ = ':';
    *p++ = (char) ('0' + tm.tm_sec / 10);
    *p++ = (char) ('0' + tm.tm_sec % 10);
    memcpy(p, " GMT", 5);
}

/* RFC 9110 8.3.1: media-type = type "/" subtype parameters, with parameters introduced by
 * OWS ";". The whole type is compared, not a prefix: application/jsonp (JavaScript) and
 * application/json-seq (RFC 7464, a stream of documents) are other types. */
int httpu_is_json(const char *content_type)
{
    static const char want[] = "application/json";
    const size_t n = sizeof want - 1;
    const char *p = content_type;

    if (p == NULL)
        return 0;
    p += strspn(p, " \t");
    if (strncasecmp(p, want, n) != 0)
        return 0;
    p += n;
    p += strspn(p, " \t");
    return *p == '\0' || *p == ';';
}

int httpu_bearer_ok(const char *authorization, const char *token)
{
    const char *got;
    size_t gl, wl = strlen(token);
    unsigned char diff;

    if (authorization == NULL || strncmp(authorization, "Bearer ", 7) != 0)
        return 0;
    got = authorization + 7;
    gl = strlen(got);
    diff = (unsigned char) (gl != wl);
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned char) (token[i] ^ (i < gl ? got[i] : 0));
    return diff == 0;
}

size_t httpu_fmt_uint(char out[24], unsigned long long v)
{
    char d[24];
    size_t n = 0;

    do
        d[n++] = (char) ('0' + v % 10);
    while ((v /= 10) != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = d[n - 1 - i];
    return n;
}

size_t httpu_fmt_hex(char out[24], unsigned long long v)
{
    static const char hex[] = "0123456789abcdef";
    char d[24];
    size_t n = 0;

    do
        d[n++] = hex[v & 15];
    while ((v >>= 4) != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = d[n - 1 - i];
    return n;
}
