/* Differential test: admitd's HTTP/1.1 parser (h1parse, h1chunk) against llhttp, an
 * independent parser, built here from the C sources Debian's node-llhttp ships, in strict
 * mode (LLHTTP_STRICT_MODE=1, no lenient flag set).
 *
 * Every input (the fuzz corpora, then generated requests, responses and chunked bodies) goes
 * through both. Each verdict is one of: accepted (a whole message), refused, or incomplete.
 * When both accept, they must agree on everything a proxy acts on: method, target, version,
 * every field's name and value, the framing and its length, persistence, the body's bytes
 * and where the message ends. When they disagree, the difference must be one of the known,
 * intended ones listed in `known` below, each with the rule it follows; any other is a
 * failure. The test prints how often each difference was seen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/h1chunk.h"
#include "wire/h1parse.h"

#include <dirent.h>
#include <llhttp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS    64
#define MAX_HEAD 65536
#define ARENA    (1 << 17)

enum { V_ACCEPT, V_REJECT, V_INCOMPLETE };
enum { K_REQ, K_RESP, K_RESP_HEAD };
enum { FR_NONE, FR_LENGTH, FR_CHUNKED, FR_EOF };

/* One parser's reading of an input. Strings live in the arena, as (offset, length). */
struct msg {
    int verdict;
    const char *why; /* a refusal's reason (ours) or errno name (llhttp's) */
    int llerr;       /* llhttp's errno */
    size_t errpos;   /* llhttp's error position */
    size_t method[2], target[2];
    int minor, status;
    size_t nh, name[SLOTS][2], value[SLOTS][2];
    int framing, ka, close;
    uint64_t cl;
    size_t body[2];
    size_t consumed;
    int head_done, upgrade;
    size_t alen;
    char arena[ARENA];
};

static void m_reset(struct msg *m)
{
    memset(m, 0, offsetof(struct msg, arena));
}

/* Appends to the string at s, which must be the arena's last. */
static void m_add(struct msg *m, size_t s[2], const char *p, size_t n)
{
    if (n == 0)
        return;
    if (s[1] == 0)
        s[0] = m->alen;
    assert_true(s[0] + s[1] == m->alen && m->alen + n <= ARENA);
    memcpy(m->arena + m->alen, p, n);
    m->alen += n;
    s[1] += n;
}

static int m_eq(const struct msg *a, const size_t x[2], const struct msg *b, const size_t y[2])
{
    return x[1] == y[1] && memcmp(a->arena + x[0], b->arena + y[0], x[1]) == 0;
}

/* ---- llhttp ------------------------------------------------------------------------ */

struct ll {
    llhttp_t p;
    struct msg *m;
    int kind, field; /* the callback that ran last: 1 name, 2 value */
    int done;
};

static int ll_url(llhttp_t *p, const char *at, size_t n)
{
    struct ll *l = (struct ll *) p;
    m_add(l->m, l->m->target, at, n);
    return 0;
}

/* Fields after the head are trailers, which llhttp reports the same way: not compared (ours
 * are checked and dropped, h1chunk.h). */
static int ll_name(llhttp_t *p, const char *at, size_t n)
{
    struct ll *l = (struct ll *) p;
    if (l->m->head_done)
        return 0;
    if (l->field != 1) {
        assert_true(l->m->nh < SLOTS);
        l->m->nh++;
    }
    l->field = 1;
    m_add(l->m, l->m->name[l->m->nh - 1], at, n);
    return 0;
}

static int ll_value(llhttp_t *p, const char *at, size_t n)
{
    struct ll *l = (struct ll *) p;
    if (l->m->head_done)
        return 0;
    l->field = 2;
    m_add(l->m, l->m->value[l->m->nh - 1], at, n);
    return 0;
}

static int ll_headers(llhttp_t *p)
{
    struct ll *l = (struct ll *) p;
    struct msg *m = l->m;
    const char *name = llhttp_method_name((llhttp_method_t) p->method);

    /* llhttp keeps a value's trailing whitespace; RFC 9110 5.5 says it is not part of it. */
    for (size_t i = 0; i < m->nh; i++)
        while (m->value[i][1] > 0 && (m->arena[m->value[i][0] + m->value[i][1] - 1] == ' ' ||
                                      m->arena[m->value[i][0] + m->value[i][1] - 1] == '\t'))
            m->value[i][1]--;
    m->head_done = 1;
    l->field = 0;
    if (l->kind == K_REQ)
        m_add(m, m->method, name, strlen(name));
    m->minor = p->http_major == 1 ? p->http_minor : -1;
    m->status = p->status_code;
    m->framing = p->flags & F_CHUNKED          ? FR_CHUNKED
                 : p->flags & F_CONTENT_LENGTH ? FR_LENGTH
                 : llhttp_message_needs_eof(p) ? FR_EOF
                                               : FR_NONE;
    m->cl = m->framing == FR_LENGTH ? p->content_length : 0;
    m->upgrade = p->upgrade;
    /* The answer to a HEAD has no body: llhttp is told so, as its API asks. */
    if (l->kind == K_RESP_HEAD) {
        m->framing = FR_NONE;
        m->cl = 0;
        return 1;
    }
    return 0;
}

static int ll_body(llhttp_t *p, const char *at, size_t n)
{
    struct ll *l = (struct ll *) p;
    m_add(l->m, l->m->body, at, n);
    return 0;
}

static int ll_done(llhttp_t *p)
{
    ((struct ll *) p)->done = 1;
    /* Asked at the end, when llhttp knows whether the body was skipped. */
    ((struct ll *) p)->m->ka = llhttp_should_keep_alive(p);
    return HPE_PAUSED;
}

static void theirs(const char *in, size_t n, int kind, struct msg *m)
{
    static llhttp_settings_t s;
    struct ll l;
    int err;

    llhttp_settings_init(&s);
    s.on_url = ll_url;
    s.on_header_field = ll_name;
    s.on_header_value = ll_value;
    s.on_headers_complete = ll_headers;
    s.on_body = ll_body;
    s.on_message_complete = ll_done;
    memset(&l, 0, sizeof l);
    m_reset(m);
    l.m = m;
    l.kind = kind;
    llhttp_init(&l.p, kind == K_REQ ? HTTP_REQUEST : HTTP_RESPONSE, &s);
    err = llhttp_execute(&l.p, in, n);
    if (err == HPE_OK && m->head_done && m->framing == FR_EOF && !l.done) {
        err = llhttp_finish(&l.p); /* the server closed: the body ends here */
        if (l.done) {
            m->verdict = V_ACCEPT;
            m->consumed = n;
            return;
        }
    }
    if ((err == HPE_PAUSED || err == HPE_OK) && l.done) {
        m->verdict = V_ACCEPT;
        m->consumed = err == HPE_OK ? n : (size_t) (llhttp_get_error_pos(&l.p) - in);
    } else if (err == HPE_PAUSED_UPGRADE) {
        m->verdict = V_ACCEPT;
        m->consumed = (size_t) (llhttp_get_error_pos(&l.p) - in);
    } else if (err == HPE_OK) {
        m->verdict = V_INCOMPLETE;
    } else {
        m->verdict = V_REJECT;
        m->llerr = err;
        m->why = llhttp_errno_name((llhttp_errno_t) err);
        m->errpos = llhttp_get_error_pos(&l.p) ? (size_t) (llhttp_get_error_pos(&l.p) - in) : n;
    }
}

/* ---- ours ---------------------------------------------------------------------------- */

static void ours(const char *in, size_t n, int kind, struct msg *m)
{
    static struct h1_header hdr[SLOTS];
    struct h1_parser p;
    int rc;

    m_reset(m);
    if (kind == K_REQ)
        h1_req_init(&p, hdr, SLOTS, MAX_HEAD);
    else
        h1_resp_init(&p, hdr, SLOTS, MAX_HEAD, kind == K_RESP_HEAD ? H1_M_HEAD : H1_M_GET);
    rc = h1_parse(&p, in, n);
    if (rc != H1_DONE) {
        m->verdict = rc == H1_AGAIN ? V_INCOMPLETE : V_REJECT;
        m->why = p.err_reason;
        return;
    }
    m->head_done = 1;
    if (kind == K_REQ)
        m_add(m, m->method, p.method_str.p, p.method_str.len);
    m_add(m, m->target, p.target.p, p.target.len);
    m->minor = p.minor;
    m->status = p.status;
    m->nh = p.nhdr;
    for (size_t i = 0; i < p.nhdr; i++) {
        m_add(m, m->name[i], hdr[i].name.p, hdr[i].name.len);
        m_add(m, m->value[i], hdr[i].value.p, hdr[i].value.len);
    }
    m->framing = (int[]){FR_NONE, FR_LENGTH, FR_CHUNKED, FR_EOF}[p.framing];
    m->cl = p.content_length;
    m->ka = p.keep_alive;
    m->close = (p.flags & H1_F_CONN_CLOSE) != 0;
    m->upgrade = (p.flags & H1_F_UPGRADE) != 0;
    m->verdict = V_ACCEPT;
    m->consumed = p.head_len;
    if (p.framing == H1_BODY_LENGTH) {
        if (n - p.head_len < p.content_length) {
            m->verdict = V_INCOMPLETE;
            return;
        }
        m_add(m, m->body, in + p.head_len, (size_t) p.content_length);
        m->consumed += (size_t) p.content_length;
    } else if (p.framing == H1_BODY_UNTIL_CLOSE) {
        m_add(m, m->body, in + p.head_len, n - p.head_len);
        m->consumed = n;
    } else if (p.framing == H1_BODY_CHUNKED) {
        struct h1_chunked c;
        size_t at = p.head_len, used;
        struct h1_str d;
        h1c_init(&c, UINT64_MAX);
        while ((rc = h1c_feed(&c, in + at, n - at, &used, &d)) == H1_DATA) {
            m_add(m, m->body, d.p, d.len);
            at += used;
        }
        m->verdict = rc == H1_DONE ? V_ACCEPT : rc == H1_AGAIN ? V_INCOMPLETE : V_REJECT;
        m->why = c.err_reason;
        m->consumed = at + used;
    }
}

/* ---- comparing ----------------------------------------------------------------------- */

/* What differs between the two readings, or NULL when they agree. */
static const char *differ(const struct msg *o, const struct msg *t, int kind)
{
    if (o->verdict != t->verdict)
        return "verdict";
    if (o->verdict != V_ACCEPT)
        return NULL;
    if (kind == K_REQ && (!m_eq(o, o->method, t, t->method) || !m_eq(o, o->target, t, t->target)))
        return "request line";
    if (o->minor != t->minor || (kind != K_REQ && o->status != t->status))
        return "version or status";
    if (o->nh != t->nh)
        return "field count";
    for (size_t i = 0; i < o->nh; i++)
        if (!m_eq(o, o->name[i], t, t->name[i]) || !m_eq(o, o->value[i], t, t->value[i]))
            return "field";
    if (o->framing != t->framing || o->cl != t->cl)
        return "framing";
    if (o->ka != t->ka)
        return "keep-alive";
    if (!m_eq(o, o->body, t, t->body) || o->consumed != t->consumed)
        return "body";
    return NULL;
}

struct ctx {
    const char *in;
    size_t n;
    int kind;
    const struct msg *o, *t;
    const char *what;
};

static int we_refuse(const struct ctx *c, const char *reason)
{
    return c->o->verdict == V_REJECT && c->t->verdict != V_REJECT && c->o->why != NULL &&
           strcmp(c->o->why, reason) == 0;
}

/* llhttp refuses, with err, what ours reads (or waits on, its head read when an input ends
 * in the body). */
static int they_refuse(const struct ctx *c, int err)
{
    return c->t->verdict == V_REJECT && c->o->verdict != V_REJECT && c->t->llerr == err;
}

/* The raw field lines called name in the input (a head not yet complete included): how
 * many there are, and whether one of their values holds the byte ch. */
static int raw_fields(const struct ctx *c, const char *name, int ch, int *has)
{
    size_t len = strlen(name);
    int k = 0;

    *has = 0;
    for (size_t i = 0; i + len + 1 < c->n; i++) {
        if ((i == 0 || c->in[i - 1] == '\n') && strncasecmp(c->in + i, name, len) == 0 &&
            c->in[i + len] == ':') {
            const char *e = memchr(c->in + i, '\n', c->n - i);
            k++;
            *has |= memchr(c->in + i, ch, (size_t) ((e ? e : c->in + c->n) - (c->in + i))) != NULL;
        }
    }
    return k;
}

/* ---- the known differences ----------------------------------------------------------- */

struct known {
    const char *name;
    const char *rule; /* why admitd's reading is the intended one */
    int (*match)(const struct ctx *c);
    unsigned seen;
};

/* Ours refuses, with this reason, what llhttp reads (or waits on). */
#define STRICTER(fn, reason)                                                                       \
    static int fn(const struct ctx *c)                                                             \
    {                                                                                              \
        return we_refuse(c, reason);                                                               \
    }
STRICTER(host_missing, "missing Host")
STRICTER(host_twice, "more than one Host")
STRICTER(host_invalid, "invalid Host")
STRICTER(coding_501, "unsupported transfer coding")
STRICTER(te_on_10, "Transfer-Encoding on HTTP/1.0")
STRICTER(fragment, "fragment in request target")
STRICTER(version_505, "HTTP version not supported")
STRICTER(obs_fold, H1_R_OBS_FOLD)
STRICTER(connect_501, "CONNECT is not supported")
STRICTER(extra_space, "extra space in request line")
STRICTER(status_range, "invalid status code")
STRICTER(bare_lf, H1_R_BARE_LF)
STRICTER(empty_name, H1_R_EMPTY_NAME)
STRICTER(target_form, "invalid request target form")
STRICTER(cl_over_int64, "Content-Length overflows")
STRICTER(size_digits, "chunk size over 16 hex digits")
STRICTER(http09, "missing HTTP version")
STRICTER(te_lines, "more than one Transfer-Encoding")
STRICTER(reason_ctl, "control character in status line")
STRICTER(te_malformed, "malformed Transfer-Encoding")
STRICTER(chunked_twice, "chunked applied more than once")
STRICTER(blank_lines, "too many empty lines before the request line")
STRICTER(status_line, "malformed status line")
STRICTER(bare_cr, H1_R_BARE_CR)
STRICTER(ext_grammar, "malformed chunk extension")

/* Connection lists close (and keep-alive too): close wins. */
static int close_wins(const struct ctx *c)
{
    return strcmp(c->what, "keep-alive") == 0 && c->o->close && !c->o->ka;
}

/* Ours reads a list of one repeated Content-Length, which llhttp refuses. */
static int cl_list(const struct ctx *c)
{
    int comma, lines = raw_fields(c, "content-length", ',', &comma);
    return (they_refuse(c, HPE_INVALID_CONTENT_LENGTH) ||
            they_refuse(c, HPE_UNEXPECTED_CONTENT_LENGTH)) &&
           (comma || lines > 1);
}

/* A Content-Length with an HTAB around its digits: OWS, which llhttp 8.1 refuses. */
static int cl_tab(const struct ctx *c)
{
    int tab;
    raw_fields(c, "content-length", '\t', &tab);
    return they_refuse(c, HPE_INVALID_CONTENT_LENGTH) && tab;
}

/* HTTP/1.2 to 1.9, read as 1.1. */
static int minor_above_1(const struct ctx *c)
{
    const char *v = memmem(c->in, c->n, "HTTP/1.", 7);
    return they_refuse(c, HPE_INVALID_VERSION) && v != NULL && v + 7 < c->in + c->n &&
           v[7] >= '2' && v[7] <= '9';
}

/* A method token llhttp does not list (it refuses at the first byte that leaves its list). */
static int other_method(const struct ctx *c)
{
    return c->kind == K_REQ &&
           (they_refuse(c, HPE_INVALID_METHOD) || they_refuse(c, HPE_INVALID_CONSTANT));
}

/* Chunk extensions the grammar allows and llhttp 8.1 refuses: BWS around ';' and '=', a
 * quoted-pair in a quoted value, and a second extension after one with a value (llhttp
 * takes its ';' for a chunk size byte). Its error is at that byte or the next. */
static int chunk_ext(const struct ctx *c)
{
    size_t e = c->t->errpos < c->n ? c->t->errpos : c->n - 1;
    const char *at = c->in + e;
    return (they_refuse(c, HPE_STRICT) || they_refuse(c, HPE_INVALID_CHUNK_SIZE)) &&
           (strchr(" \t\\", *at) != NULL || (e > 0 && strchr(" \t\\;", at[-1]) != NULL));
}

/* A 1xx, 204 or 304 answer, which ends at its blank line whatever its fields say. */
static int bodiless_status(const struct ctx *c)
{
    int st = c->o->status;
    return c->kind == K_RESP && c->o->verdict == V_ACCEPT && c->o->framing == FR_NONE &&
           (st < 200 || st == 204 || st == 304);
}

static struct known known[] = {
    {"Host missing on HTTP/1.1",
     "RFC 9112 3.2: a server MUST answer 400; llhttp leaves Host to "
     "its caller",
     host_missing, 0},
    {"Host twice", "RFC 9112 3.2: MUST answer 400 to more than one Host line", host_twice, 0},
    {"Host not uri-host[:port]", "RFC 9112 3.2: MUST answer 400 to an invalid Host value",
     host_invalid, 0},
    {"a coding before chunked (501)",
     "RFC 9112 6.1: SHOULD answer 501 to a coding not "
     "understood; admitd decodes none but chunked",
     coding_501, 0},
    {"Transfer-Encoding on HTTP/1.0", "RFC 9112 6.1: faulty framing; refused rather than read",
     te_on_10, 0},
    {"fragment in the target",
     "RFC 9112 3.2: a target has no fragment; '#' read two ways is "
     "HAProxy's CVE-2023-45539",
     fragment, 0},
    {"HTTP/0.x or 2+ on the HTTP/1 syntax (505)", "RFC 9110 15.6.6, as nginx does", version_505, 0},
    {"obs-fold",
     "RFC 9112 5.2: reject or replace; llhttp 8.1 folds (CVE-2024-27982, fixed in "
     "8.1.2)",
     obs_fold, 0},
    {"CONNECT (501)", "RFC 9110 9.3.6: admitd tunnels nothing", connect_501, 0},
    {"two spaces in the request line",
     "RFC 9112 3: one SP; word-splitting is allowed but is a "
     "smuggling vector",
     extra_space, 0},
    {"status outside 100-599", "RFC 9110 15", status_range, 0},
    {"bare LF", "RFC 9112 2.2: MAY accept; refused so that heads forward verbatim", bare_lf, 0},
    {"empty field name", "RFC 9110 5.1: a name is a token, 1*tchar", empty_name, 0},
    {"target not origin, absolute or * with OPTIONS", "RFC 9112 3.2", target_form, 0},
    {"Content-Length over 2^63-1", "admitd's bound (an off_t); RFC 9110 8.6 allows one",
     cl_over_int64, 0},
    {"chunk size over 16 digits",
     "RFC 9112 7.1: anticipate large sizes and prevent overflow; "
     "admitd counts leading zeros too",
     size_digits, 0},
    {"Content-Length list of one value",
     "RFC 9110 8.6: MAY take identical values as one, as "
     "HAProxy does; llhttp refuses",
     cl_list, 0},
    {"HTAB around Content-Length's digits",
     "RFC 9110 5.5: OWS is SP or HTAB, not part of the "
     "value",
     cl_tab, 0},
    {"a bare CR before the request line", "RFC 9112 2.2: a bare CR is invalid; llhttp skips it",
     bare_cr, 0},
    {"HTTP/1.2-1.9 read as 1.1", "RFC 9110 2.5: SHOULD process as the highest minor known",
     minor_above_1, 0},
    {"a method llhttp does not list", "RFC 9110 9.1: methods are tokens, extensible", other_method,
     0},
    {"BWS, quoted-pairs, several valued chunk extensions",
     "RFC 9112 7.1.1, RFC 9110 5.6.4; llhttp 8.1 refuses them", chunk_ext, 0},
    {"HTTP/0.9 (no version)",
     "RFC 9112 2.3: HTTP/1 messages carry a version; 0.9 is not "
     "served",
     http09, 0},
    {"Transfer-Encoding on two lines",
     "RFC 9112 6.3: a request whose framing is unclear is "
     "refused; llhttp joins the lines",
     te_lines, 0},
    {"a control byte in the reason phrase", "RFC 9112 4: HTAB, SP, VCHAR and obs-text only",
     reason_ctl, 0},
    {"a Transfer-Encoding off the grammar",
     "RFC 9112 6.1: codings are tokens; llhttp reads a "
     "response with any value until close",
     te_malformed, 0},
    {"chunked twice in a response", "RFC 9112 6.1: chunked is applied once at most", chunked_twice,
     0},
    {"five empty lines before a request",
     "RFC 9112 2.2 asks for at least one; admitd's bound "
     "is 4",
     blank_lines, 0},
    {"a response not starting with its status line",
     "RFC 9112 2.2 allows empty lines before "
     "a request only",
     status_line, 0},
    {"a chunk extension with an empty name or value",
     "RFC 9112 7.1.1: ext-name is a token, "
     "ext-val a token or quoted-string",
     ext_grammar, 0},
    {"close and keep-alive listed", "RFC 9112 9.3: close wins", close_wins, 0},
    {"1xx, 204 or 304 with a length", "RFC 9112 6.3 rule 1: no body, whatever the fields",
     bodiless_status, 0},
    {NULL, NULL, NULL, 0},
};

#define NKNOWN (sizeof known / sizeof known[0] - 1)

/* ---- running ------------------------------------------------------------------------- */

static struct {
    unsigned inputs, accepted, refused, incomplete, agreed, differences, unexplained;
} stats;

static struct msg mo, mt;

static void dump(const char *in, size_t n)
{
    for (size_t i = 0; i < n && i < 400; i++) {
        unsigned char ch = (unsigned char) in[i];
        if (ch == '\r')
            fputs("\\r", stderr);
        else if (ch == '\n')
            fputs("\\n", stderr);
        else if (ch < 0x20 || ch >= 0x7f)
            fprintf(stderr, "\\x%02x", ch);
        else
            fputc(ch, stderr);
    }
    fputc('\n', stderr);
}

static void check_input(const char *in, size_t n, int kind)
{
    static const char *const verdicts[] = {"accept", "refuse", "incomplete"};
    struct ctx c = {in, n, kind, &mo, &mt, NULL};

    ours(in, n, kind, &mo);
    theirs(in, n, kind, &mt);
    stats.inputs++;
    stats.accepted += mo.verdict == V_ACCEPT;
    stats.refused += mo.verdict == V_REJECT;
    stats.incomplete += mo.verdict == V_INCOMPLETE;
    if ((c.what = differ(&mo, &mt, kind)) == NULL) {
        stats.agreed += mo.verdict == V_ACCEPT;
        return;
    }
    stats.differences++;
    for (size_t k = 0; k < NKNOWN; k++) {
        if (known[k].match(&c)) {
            known[k].seen++;
            return;
        }
    }
    if (stats.unexplained++ < 20) {
        fprintf(stderr, "unexplained (%s): ours %s%s%s, llhttp %s%s%s, on:\n  ", c.what,
                verdicts[mo.verdict], mo.why ? " " : "", mo.why ? mo.why : "", verdicts[mt.verdict],
                mt.why ? " " : "", mt.why ? mt.why : "");
        dump(in, n);
    }
}

static void report(const char *what)
{
    printf("# %s: %u inputs, ours accepted %u (llhttp too, identically: %u), refused %u, "
           "incomplete %u; %u differences, all known but %u\n",
           what, stats.inputs, stats.accepted, stats.agreed, stats.refused, stats.incomplete,
           stats.differences, stats.unexplained);
    for (size_t k = 0; k < NKNOWN; k++)
        if (known[k].seen)
            printf("#   %5u  %s\n", known[k].seen, known[k].name);
    assert_int_equal(stats.unexplained, 0);
    memset(&stats, 0, sizeof stats);
    for (size_t k = 0; k < NKNOWN; k++)
        known[k].seen = 0;
}

/* ---- inputs -------------------------------------------------------------------------- */

static void replay_dir(const char *dir, void (*each)(const char *in, size_t n))
{
    DIR *d = opendir(dir);
    struct dirent *e;
    static char buf[MAX_HEAD];
    unsigned files = 0;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        char path[4096];
        FILE *f;
        size_t n;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        assert_non_null(f = fopen(path, "rb"));
        n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        each(buf, n);
        files++;
    }
    closedir(d);
    assert_true(files > 0);
}

static void as_every_kind(const char *in, size_t n)
{
    check_input(in, n, K_REQ);
    check_input(in, n, K_RESP);
    check_input(in, n, K_RESP_HEAD);
}

static void as_chunked_body(const char *in, size_t n)
{
    static const char head[] = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    static char buf[sizeof head + MAX_HEAD];

    memcpy(buf, head, sizeof head - 1);
    memcpy(buf + sizeof head - 1, in, n);
    check_input(buf, sizeof head - 1 + n, K_REQ);
}

static void test_corpora(void **state)
{
    (void) state;
    replay_dir(ADMIT_SOURCE_ROOT "/fuzz/corpus/h1parse", as_every_kind);
    report("fuzz/corpus/h1parse, as requests and responses");
    replay_dir(ADMIT_SOURCE_ROOT "/fuzz/corpus/h1chunk", as_chunked_body);
    report("fuzz/corpus/h1chunk, as chunked request bodies");
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static unsigned pick(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned) (rng % n);
}

#define PICK(a) (a[pick(sizeof a / sizeof a[0])])

/* The pieces of generated messages: good ones, and bad ones taken one time in eight. */
static const char *const good_request_lines[] = {
    "GET / HTTP/1.1",        "POST /v1/chat/completions HTTP/1.1",
    "HEAD /health HTTP/1.1", "PUT /a?b=c HTTP/1.1",
    "DELETE /x HTTP/1.1",    "OPTIONS * HTTP/1.1",
    "PATCH /p HTTP/1.1",     "GET http://h/p HTTP/1.1",
    "GET / HTTP/1.0",        "POST / HTTP/1.0",
    "PROPFIND / HTTP/1.1",   "GET /%41~!$&'()*+,;=:@ HTTP/1.1",
};
static const char *const bad_request_lines[] = {
    "GET  / HTTP/1.1", "GET / HTTP/1.1 ",        "GET / http/1.1",         "GET / HTTP/1.2",
    "GET / HTTP/2.0",  "GET / HTTP/0.9",         "GET /#f HTTP/1.1",       "GET\t/ HTTP/1.1",
    "GET * HTTP/1.1",  "GET foo HTTP/1.1",       "CONNECT h:443 HTTP/1.1", "GET /",
    "get / HTTP/1.1",  "GET /\x7f HTTP/1.1",     " GET / HTTP/1.1",        "GET / HTTP/1.10",
    "BREW / HTTP/1.1", "GET /\xc3\xa9 HTTP/1.1", "GET /a\"b HTTP/1.1",     "GET /a{b} HTTP/1.1",
};
static const char *const good_status_lines[] = {
    "HTTP/1.1 200 OK",       "HTTP/1.1 204 No Content", "HTTP/1.1 304 Not Modified",
    "HTTP/1.1 100 Continue", "HTTP/1.1 404 Not Found",  "HTTP/1.0 200 OK",
    "HTTP/1.1 200",          "HTTP/1.1 200 ",           "HTTP/1.1 201 Cr\xc3\xa9",
    "HTTP/1.1 429 Too Many",
};
static const char *const bad_status_lines[] = {
    "HTTP/1.1 600 X",     "HTTP/1.1 099 X",   "HTTP/1.1 20 X",   "HTTP/2.0 200 OK",
    "HTTP/1.1 500 I\x01", "HTTP/1.1  200 OK", "HTTP/1.2 200 OK", "http/1.1 200 OK",
};
/* %d: the body's length. */
static const char *const good_fields[] = {
    "Connection: close",
    "Connection: keep-alive",
    "Connection: Upgrade",
    "Upgrade: websocket",
    "Expect: 100-continue",
    "Content-Type: application/json",
    "Accept: */*",
    "X-Request-Id: 1",
    "X: caf\xc3\xa9",
    "X: a\tb",
    "X:  both  ",
    "X:",
    "Keep-Alive: timeout=5",
    "TE: trailers",
    "X-Long: 0123456789abcdef0123456789",
    "Transfer-Encoding: chunked",
    "Transfer-Encoding: Chunked",
    "Content-Length: %d",
    "Content-Length: %d",
    "Content-Length: 0",
    "Authorization: Bearer x",
};
static const char *const bad_fields[] = {
    "host: b:80",
    "Host: a b",
    "Host:",
    "X: a\x01z",
    "X: a\x7f",
    "X : b",
    ": b",
    "X@: b",
    "Transfer-Encoding: gzip, chunked",
    "Transfer-Encoding: chunked, gzip",
    "Transfer-Encoding: gzip",
    "Transfer-Encoding: , chunked",
    "Transfer-Encoding : chunked",
    "Content-Length: %d, %d",
    "Content-Length: +%d",
    "Content-Length: %dx",
    "Content-Length: 99999999999999999999",
    "Content-Length: 18446744073709551615",
    " folded",
    "\tfolded",
    "X: a\x00z",
};
static const char *const bad_eols[] = {"\n", "\r", "\r\r\n", " \r\n"};

static const char *const good_chunked[] = {
    "5\r\nhello\r\n0\r\n\r\n",       "0\r\n\r\n",
    "5;a=b\r\nhello\r\n0\r\n\r\n",   "5;a=\"x\"\r\nhello\r\n0\r\n\r\n",
    "5;a\r\nhello\r\n0;b=c\r\n\r\n", "5\r\nhello\r\n0\r\nT: 1\r\n\r\n",
    "a\r\n0123456789\r\n0\r\n\r\n",  "A\r\n0123456789\r\n3\r\nabc\r\n0\r\n\r\n",
};
static const char *const bad_chunked[] = {
    "5 ;a\r\nhello\r\n0\r\n\r\n",
    "5;a=\"q\\\"s\"\r\nhello\r\n0\r\n\r\n",
    "0x5\r\nhello\r\n0\r\n\r\n",
    "5\nhello\r\n0\r\n\r\n",
    "5\r\nhelloX\r\n0\r\n\r\n",
    "5\r\nhello\r\n0\r\nT : 1\r\n\r\n",
    "00000000000000005\r\nhello\r\n0\r\n\r\n",
    "5 \r\nhello\r\n0\r\n\r\n",
    "5\r\nhello\r\n0\r\n\n",
    "-5\r\nhello\r\n0\r\n\r\n",
    "5\r\nhel",
    "5;a=@\r\nhello\r\n0\r\n\r\n",
};

#define GOOD_OR_BAD(good, bad) (pick(8) ? PICK(good) : PICK(bad))

/* A generated message in buf; returns its length. */
static size_t generate(char *buf, size_t cap, int kind)
{
    size_t n = 0;
    int blen = (int) pick(12), chunked = 0, lengths = 0;
    unsigned nf = pick(6);

#define EOL (pick(16) ? "\r\n" : PICK(bad_eols))
    n += (size_t) snprintf(buf, cap, "%s%s",
                           kind == K_REQ ? GOOD_OR_BAD(good_request_lines, bad_request_lines)
                                         : GOOD_OR_BAD(good_status_lines, bad_status_lines),
                           EOL);
    if (kind == K_REQ && pick(16))
        n += (size_t) snprintf(buf + n, cap - n, "Host: a\r\n");
    for (unsigned i = 0; i < nf; i++) {
        const char *f = GOOD_OR_BAD(good_fields, bad_fields);
        chunked |= strcasestr(f, "chunked") != NULL;
        lengths |= strstr(f, "%d") != NULL;
        n += (size_t) snprintf(buf + n, cap - n, f, blen, blen);
        n += (size_t) snprintf(buf + n, cap - n, "%s", EOL);
    }
#undef EOL
    n += (size_t) snprintf(buf + n, cap - n, "%s", pick(32) ? "\r\n" : "\n");
    if (chunked)
        n += (size_t) snprintf(buf + n, cap - n, "%s", GOOD_OR_BAD(good_chunked, bad_chunked));
    else if (lengths || kind != K_REQ)
        for (int i = 0; i < blen; i++)
            buf[n++] = (char) ('a' + i);
    if (pick(5) == 0)
        n += (size_t) snprintf(buf + n, cap - n, "GET / HTTP/1.1\r\n");
    return n;
}

static void test_generated(void **state)
{
    static char buf[4096];
    static const char *const what[] = {"generated requests", "generated responses",
                                       "generated answers to HEAD"};

    (void) state;
    for (int kind = K_REQ; kind <= K_RESP_HEAD; kind++) {
        for (int i = 0; i < (kind == K_REQ ? 40000 : 10000); i++)
            check_input(buf, generate(buf, sizeof buf, kind), kind);
        report(what[kind]);
    }
}

/* Chunked bodies: chunks of random sizes, one extension of each kind llhttp 8.1 reads, a
 * trailer now and then, and one time in four a byte changed to one that matters. */
static size_t generate_chunked(char *buf, size_t cap)
{
    static const char *const exts[] = {"", "", "", ";a", ";a=b", ";a=\"x y\"", ";name=v1"};
    static const char bytes[] = "\r\n ;=\"\\0xF\t:";
    size_t n = 0;
    unsigned chunks = pick(5);

    for (unsigned k = 0; k < chunks; k++) {
        unsigned size = 1 + pick(40);
        n += (size_t) snprintf(buf + n, cap - n, pick(2) ? "%x%s\r\n" : "%X%s\r\n", size,
                               PICK(exts));
        for (unsigned j = 0; j < size; j++)
            buf[n++] = (char) ('0' + pick(75));
        n += (size_t) snprintf(buf + n, cap - n, "\r\n");
    }
    n += (size_t) snprintf(buf + n, cap - n, "0%s\r\n%s\r\n", PICK(exts),
                           pick(4) ? "" : "X-Sum: 1\r\n");
    if (pick(4) == 0)
        buf[pick((unsigned) n)] = bytes[pick(sizeof bytes - 1)];
    return n;
}

static void test_generated_chunked(void **state)
{
    static char buf[4096];

    (void) state;
    for (int i = 0; i < 20000; i++)
        as_chunked_body(buf, generate_chunked(buf, sizeof buf));
    report("generated chunked request bodies");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpora),
        cmocka_unit_test(test_generated),
        cmocka_unit_test(test_generated_chunked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
