/* cfgfile: the YAML configuration file, read with libyaml's event API.
 *
 * The events are checked by a five-state machine (root, key, value, skip, done) that fails on
 * the first event that does not fit the flat schema. Every collection below the root mapping is
 * refused at its start event, so the depth is never more than one and nothing recurses; the one
 * exception, the value of a skipped key, is walked in the skip state by counting its starts and
 * ends, up to CFGFILE_MAX_DEPTH. That bound keeps the time linear: libyaml's scanner looks at
 * every open flow level for each token it reads, so a value nested n deep would cost n squared
 * (one 100000 deep takes tens of seconds). libyaml itself keeps its state on the heap and looks
 * ahead at most 1024 characters to resolve a simple key, so a parse costs time linear in the
 * input, which is capped at 1 MiB; keys are capped at CFGFILE_MAX_KEYS and found in a hash
 * table, so duplicate detection is linear too.
 *
 * Invariants: every event is deleted right after it is checked (cfgfile_walk), and the parser
 * and the key table are released on the one exit path of each; a message is written to err
 * exactly once, by cfgfile_fail, on the first error. */
#include "config/cfgfile.h"
#include "util/xmalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

/* libyaml's resolved prefix of the `!!` tags. */
#define CFGFILE_CORE_PREFIX "tag:yaml.org,2002:"
/* Room for the callback's message. */
#define CFGFILE_MSG 256

/* A key read so far. It owns a copy of the key's text: the callback needs it when the value
 * arrives, after the key's event has been deleted. */
struct cfgfile_key {
    char *text;
    size_t len;
    uint32_t hash;
    int line, column; /* 1-based */
};

/* What the next node event must be. */
enum cfgfile_state {
    CFGFILE_ROOT,  /* the root node of a document */
    CFGFILE_KEY,   /* a key of the root mapping, or its end */
    CFGFILE_VALUE, /* the value of the last key */
    CFGFILE_SKIP,  /* inside the collection that is a skipped key's value */
    CFGFILE_DONE   /* no node: between documents, or the root is complete */
};

struct cfgfile_parse {
    const char *name;
    char *err;
    size_t errlen;
    cfgfile_cb cb;
    void *arg;
    enum cfgfile_state state;
    int documents;
    struct cfgfile_key *keys; /* in file order; in CFGFILE_VALUE the last awaits its value */
    size_t nkeys, capkeys;
    uint32_t *slots; /* hash table of keys: index + 1, 0 = free; at most half full */
    size_t nslots;   /* a power of two, or 0 before the first key */

    const char *const *skip; /* keys whose values are not delivered (cfgfile_parse_skip) */
    size_t nskip;
    int skipping; /* in CFGFILE_VALUE: the last key is one of skip */
    size_t depth; /* in CFGFILE_SKIP: collections open inside the value, >= 1 */
};

/* A 0-based libyaml mark as the 1-based line, column arguments of cfgfile_fail. */
#define CFGFILE_AT(m) cfgfile_pos((m).line), cfgfile_pos((m).column)

static int cfgfile_pos(size_t zero_based)
{
    return zero_based < INT_MAX ? (int) zero_based + 1 : INT_MAX;
}

int cfgfile_verror(char *err, size_t errlen, const char *name, int line, int column,
                   const char *fmt, va_list ap)
{
    char msg[512];

    if (err == NULL || errlen == 0)
        return -1;
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (line > 0)
        snprintf(err, errlen, "%s:%d:%d: %s", name, line, column, msg);
    else
        snprintf(err, errlen, "%s: %s", name, msg);
    return -1;
}

/* Writes the message of the parse's first error; returns -1 so that callers can `return
 * cfgfile_fail(...)`. */
__attribute__((format(printf, 4, 5))) static int cfgfile_fail(struct cfgfile_parse *p, int line,
                                                              int column, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    cfgfile_verror(p->err, p->errlen, p->name, line, column, fmt, ap);
    va_end(ap);
    return -1;
}

/* Control characters are escaped so that the message stays on one line; long text is cut
 * between characters, not inside one. */
const char *cfgfile_show(char *out, const char *s, size_t len)
{
    size_t i, o = 0;

    for (i = 0; i < len && i < CFGFILE_SHOW; i++) {
        unsigned char c = (unsigned char) s[i];

        if (c < 0x20 || c == 0x7f)
            o += (size_t) snprintf(out + o, 5, "\\x%02x", c);
        else
            out[o++] = (char) c;
    }
    if (i < len) {
        /* Bytes >= 0x80 were copied one for one: back up over a partial character. */
        while (i > 0 && ((unsigned char) s[i] & 0xc0) == 0x80) {
            i--;
            o--;
        }
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

static const char *cfgfile_kind(const yaml_event_t *ev)
{
    if (ev->type == YAML_MAPPING_START_EVENT)
        return "a mapping";
    return ev->type == YAML_SEQUENCE_START_EVENT ? "a sequence" : "a scalar";
}

/* Line and column (1-based, counting characters) of byte offset off, with libyaml's idea of
 * a line break (LF, CR, CR LF, NEL, LS, PS). The bytes before off are valid UTF-8: libyaml
 * reports the first bad one; len is at most CFGFILE_MAX_BYTES, so the counts fit an int. */
static void cfgfile_locate(const char *text, size_t len, size_t off, int *line, int *column)
{
    const unsigned char *t = (const unsigned char *) text;
    size_t i = 0, w;
    int l = 1, c = 1;

    if (off > len)
        off = len;
    while (i < off) {
        w = 0;
        if (t[i] == '\n')
            w = 1;
        else if (t[i] == '\r')
            w = i + 1 < len && t[i + 1] == '\n' ? 2 : 1;
        else if (t[i] == 0xc2 && i + 1 < len && t[i + 1] == 0x85)
            w = 2;
        else if (t[i] == 0xe2 && i + 2 < len && t[i + 1] == 0x80 && (t[i + 2] & 0xfe) == 0xa8)
            w = 3;
        if (w > 0) {
            l++;
            c = 1;
            i += w;
        } else {
            c += (t[i++] & 0xc0) != 0x80;
        }
    }
    *line = l;
    *column = c;
}

/* Turns libyaml's error into a message at the problem's position. */
static int cfgfile_yaml_error(struct cfgfile_parse *p, const yaml_parser_t *yp, const char *text,
                              size_t len)
{
    const char *problem = yp->problem ? yp->problem : "invalid YAML";
    int line, column;

    switch (yp->error) {
    case YAML_READER_ERROR:
        /* The reader only knows a byte offset (its marks are not set). */
        cfgfile_locate(text, len, yp->problem_offset, &line, &column);
        if (strstr(problem, "UTF-8") || strstr(problem, "Unicode"))
            return cfgfile_fail(p, line, column, "invalid UTF-8");
        if (strstr(problem, "control") && yp->problem_value == 0)
            return cfgfile_fail(p, line, column, "NUL byte is not allowed");
        if (strstr(problem, "control"))
            return cfgfile_fail(p, line, column, "character U+%04X is not allowed",
                                (unsigned) yp->problem_value);
        return cfgfile_fail(p, line, column, "%s", problem);
    case YAML_SCANNER_ERROR:
    case YAML_PARSER_ERROR:
        if (yp->context)
            return cfgfile_fail(p, CFGFILE_AT(yp->problem_mark), "%s (%s at %d:%d)", problem,
                                yp->context, CFGFILE_AT(yp->context_mark));
        return cfgfile_fail(p, CFGFILE_AT(yp->problem_mark), "%s", problem);
    default: /* YAML_MEMORY_ERROR: the event parser reports nothing else */
        return cfgfile_fail(p, 0, 0, "out of memory");
    }
}

/* Refuses anchors and tags other than the core scalar ones on a node event. */
static int cfgfile_properties(struct cfgfile_parse *p, const yaml_event_t *ev)
{
    static const char *const core[] = {"str", "int", "bool", "null", "float"};
    const size_t plen = strlen(CFGFILE_CORE_PREFIX);
    /* The scalar, sequence_start and mapping_start members of the event's union all begin
     * with anchor and tag: a common initial sequence, readable through any of them. */
    const char *t = (const char *) ev->data.scalar.tag;
    char shown[CFGFILE_SHOW_BUF], name[CFGFILE_SHOW_BUF];

    if (ev->data.scalar.anchor)
        return cfgfile_fail(p, CFGFILE_AT(ev->start_mark), "anchors and aliases are not allowed");
    if (t == NULL)
        return 0;
    if (strncmp(t, CFGFILE_CORE_PREFIX, plen) == 0) {
        for (size_t i = 0; i < sizeof core / sizeof core[0]; i++)
            if (ev->type == YAML_SCALAR_EVENT && strcmp(t + plen, core[i]) == 0)
                return 0;
        snprintf(name, sizeof name, "!!%s", cfgfile_show(shown, t + plen, strlen(t + plen)));
    } else {
        cfgfile_show(name, t, strlen(t));
    }
    return cfgfile_fail(p, CFGFILE_AT(ev->start_mark),
                        "tag '%s' is not allowed (only !!str, !!int, !!bool, !!null and !!float)",
                        name);
}

int cfgfile_is_null(const char *s, const char *tag, int plain)
{
    int nullish = !strcmp(s, "") || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
                  !strcmp(s, "NULL");

    if (tag && strcmp(tag, CFGFILE_CORE_PREFIX "null") == 0)
        return nullish ? 1 : -1;
    return nullish && tag == NULL && plain;
}

static int cfgfile_null(const yaml_event_t *ev)
{
    return cfgfile_is_null((const char *) ev->data.scalar.value, (const char *) ev->data.scalar.tag,
                           ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE);
}

/* Makes room for one more key: the array grows by doubling, the table is rebuilt at twice
 * its size once it would be more than half full (so probing always ends). */
static void cfgfile_reserve(struct cfgfile_parse *p)
{
    if (p->nkeys == p->capkeys) {
        p->capkeys = p->capkeys ? p->capkeys * 2 : 32;
        p->keys = xrealloc(p->keys, p->capkeys * sizeof *p->keys);
    }
    if (2 * (p->nkeys + 1) > p->nslots) {
        size_t n = p->nslots ? p->nslots * 2 : 64, j;

        free(p->slots);
        p->slots = xcalloc(n, sizeof *p->slots);
        p->nslots = n;
        for (size_t i = 0; i < p->nkeys; i++) {
            for (j = p->keys[i].hash & (n - 1); p->slots[j]; j = (j + 1) & (n - 1))
                continue;
            p->slots[j] = (uint32_t) i + 1;
        }
    }
}

/* The key equal to s, or NULL with *slot set to where it goes. */
static const struct cfgfile_key *cfgfile_find(const struct cfgfile_parse *p, const char *s,
                                              size_t len, uint32_t h, size_t *slot)
{
    size_t mask = p->nslots - 1, i;

    for (i = h & mask; p->slots[i]; i = (i + 1) & mask) {
        const struct cfgfile_key *k = &p->keys[p->slots[i] - 1];

        if (k->hash == h && k->len == len && memcmp(k->text, s, len) == 0)
            return k;
    }
    *slot = i;
    return NULL;
}

static int cfgfile_key(struct cfgfile_parse *p, const yaml_event_t *ev)
{
    const char *s = (const char *) ev->data.scalar.value;
    size_t len = ev->data.scalar.length, slot = 0;
    uint32_t h = 2166136261u; /* FNV-1a */
    const struct cfgfile_key *dup;
    struct cfgfile_key *k;
    char shown[CFGFILE_SHOW_BUF];

    if (len == 0)
        return cfgfile_fail(p, CFGFILE_AT(ev->start_mark),
                            "expected a setting name, found an empty key");
    if (memchr(s, '\0', len))
        return cfgfile_fail(p, CFGFILE_AT(ev->start_mark), "key '%s' contains a NUL character",
                            cfgfile_show(shown, s, len));
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char) s[i]) * 16777619u;
    cfgfile_reserve(p);
    dup = cfgfile_find(p, s, len, h, &slot);
    if (dup)
        return cfgfile_fail(p, CFGFILE_AT(ev->start_mark), "duplicate key '%s' (first at %d:%d)",
                            cfgfile_show(shown, dup->text, dup->len), dup->line, dup->column);
    if (p->nkeys == CFGFILE_MAX_KEYS)
        return cfgfile_fail(p, CFGFILE_AT(ev->start_mark), "too many keys (the limit is %d)",
                            CFGFILE_MAX_KEYS);
    k = &p->keys[p->nkeys];
    k->text = xstrndup(s, len);
    k->len = len;
    k->hash = h;
    k->line = cfgfile_pos(ev->start_mark.line);
    k->column = cfgfile_pos(ev->start_mark.column);
    p->slots[slot] = (uint32_t) ++p->nkeys;
    p->state = CFGFILE_VALUE;
    p->skipping = 0;
    for (size_t i = 0; i < p->nskip && !p->skipping; i++)
        p->skipping = strlen(p->skip[i]) == len && memcmp(p->skip[i], s, len) == 0;
    return 0;
}

/* A node of a skipped key's value: a scalar is the whole value, a collection is entered and
 * left when its end balances it (cfgfile_event counts the depth). */
static int cfgfile_skip(struct cfgfile_parse *p, const yaml_event_t *ev)
{
    if (ev->type == YAML_SCALAR_EVENT) {
        if (p->state == CFGFILE_VALUE)
            p->state = CFGFILE_KEY;
        return 0;
    }
    if (p->state == CFGFILE_VALUE) {
        p->state = CFGFILE_SKIP;
        p->depth = 0;
    }
    if (p->depth == CFGFILE_MAX_DEPTH)
        return cfgfile_fail(p, CFGFILE_AT(ev->start_mark),
                            "nesting deeper than %d levels is not allowed", CFGFILE_MAX_DEPTH);
    p->depth++;
    return 0;
}

/* Hands the last key and this scalar to the callback. */
static int cfgfile_value(struct cfgfile_parse *p, const yaml_event_t *ev)
{
    const struct cfgfile_key *k = &p->keys[p->nkeys - 1];
    const char *s = (const char *) ev->data.scalar.value;
    char msg[CFGFILE_MSG] = "", shown[CFGFILE_SHOW_BUF];
    struct cfgfile_item it = {k->text,
                              s,
                              cfgfile_null(ev),
                              cfgfile_pos(ev->start_mark.line),
                              cfgfile_pos(ev->start_mark.column),
                              k->line,
                              k->column};
    int at_key = 0;

    if (memchr(s, '\0', ev->data.scalar.length))
        return cfgfile_fail(p, CFGFILE_AT(ev->start_mark), "value of '%s' contains a NUL character",
                            cfgfile_show(shown, k->text, k->len));
    if (it.is_null < 0)
        return cfgfile_fail(p, CFGFILE_AT(ev->start_mark),
                            "a !!null value must be empty, '~' or 'null'");
    if (it.is_null)
        it.value = "";
    p->state = CFGFILE_KEY;
    if (p->cb == NULL || p->cb(&it, p->arg, msg, sizeof msg, &at_key) == 0)
        return 0;
    msg[sizeof msg - 1] = '\0';
    if (msg[0] == '\0')
        snprintf(msg, sizeof msg, at_key ? "unknown key '%s'" : "invalid value for '%s'",
                 cfgfile_show(shown, k->text, k->len));
    if (at_key)
        return cfgfile_fail(p, k->line, k->column, "%s", msg);
    return cfgfile_fail(p, it.line, it.column, "%s", msg);
}

/* Checks one event against the schema and delivers complete items (a cfgfile_event_fn). */
static int cfgfile_event(void *arg, const yaml_event_t *ev)
{
    struct cfgfile_parse *p = arg;
    const struct cfgfile_key *k = p->nkeys ? &p->keys[p->nkeys - 1] : NULL;
    char shown[CFGFILE_SHOW_BUF];

    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (p->documents++ > 0)
            return cfgfile_fail(p, CFGFILE_AT(ev->start_mark), "only one document is allowed");
        p->state = CFGFILE_ROOT;
        return 0;
    case YAML_ALIAS_EVENT:
        return cfgfile_fail(p, CFGFILE_AT(ev->start_mark), "anchors and aliases are not allowed");
    case YAML_MAPPING_END_EVENT:
    case YAML_SEQUENCE_END_EVENT:
        /* Outside a skipped value only the root mapping can end: deeper collections are
         * refused at their start. */
        if (p->state != CFGFILE_SKIP)
            p->state = CFGFILE_DONE;
        else if (--p->depth == 0)
            p->state = CFGFILE_KEY;
        return 0;
    case YAML_SCALAR_EVENT:
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        break;
    default: /* stream start and end, document end */
        return 0;
    }
    if (cfgfile_properties(p, ev) < 0)
        return -1;
    switch (p->state) {
    case CFGFILE_ROOT:
        p->state = CFGFILE_DONE;
        if (ev->type == YAML_MAPPING_START_EVENT)
            p->state = CFGFILE_KEY;
        else if (ev->type != YAML_SCALAR_EVENT || cfgfile_null(ev) != 1) /* `---` alone: empty */
            return cfgfile_fail(p, CFGFILE_AT(ev->start_mark),
                                "expected a mapping of settings at the top level, found %s",
                                cfgfile_kind(ev));
        return 0;
    case CFGFILE_KEY:
        if (ev->type == YAML_SCALAR_EVENT)
            return cfgfile_key(p, ev);
        return cfgfile_fail(p, CFGFILE_AT(ev->start_mark), "expected a setting name, found %s",
                            cfgfile_kind(ev));
    case CFGFILE_SKIP:
        return cfgfile_skip(p, ev);
    case CFGFILE_VALUE:
        if (p->skipping)
            return cfgfile_skip(p, ev);
        if (ev->type == YAML_SCALAR_EVENT)
            return cfgfile_value(p, ev);
        return cfgfile_fail(p, CFGFILE_AT(ev->start_mark),
                            "expected a single value for '%s', found %s",
                            cfgfile_show(shown, k->text, k->len), cfgfile_kind(ev));
    default: /* CFGFILE_DONE: libyaml gives a document one root node */
        return cfgfile_fail(p, CFGFILE_AT(ev->start_mark), "unexpected %s", cfgfile_kind(ev));
    }
}

int cfgfile_parse(const char *name, const char *text, size_t len, cfgfile_cb cb, void *arg,
                  char *err, size_t errlen)
{
    return cfgfile_parse_skip(name, text, len, NULL, 0, cb, arg, err, errlen);
}

int cfgfile_walk(const char *name, const char *text, size_t len, cfgfile_event_fn fn, void *arg,
                 char *err, size_t errlen)
{
    struct cfgfile_parse p = {.name = name, .err = err, .errlen = errlen};
    yaml_parser_t yp;
    yaml_event_t ev;
    int rc = -1, end = 0, r;

    memset(&yp, 0, sizeof yp); /* yaml_parser_delete accepts a zeroed parser */
    if (err && errlen)
        err[0] = '\0';
    if (len > CFGFILE_MAX_BYTES) {
        cfgfile_fail(&p, 0, 0, "file is larger than 1 MiB");
        goto out;
    }
    if (len == 0)
        text = "";
    /* Told the encoding, libyaml skips a BOM but counts it as a column; and files are UTF-8
     * (a UTF-16 one fails as invalid UTF-8 at 1:1), so drop the BOM here. */
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) {
        text += 3;
        len -= 3;
    }
    if (!yaml_parser_initialize(&yp)) {
        cfgfile_fail(&p, 0, 0, "out of memory");
        goto out;
    }
    yaml_parser_set_encoding(&yp, YAML_UTF8_ENCODING);
    yaml_parser_set_input_string(&yp, (const unsigned char *) text, len);
    while (!end) {
        if (!yaml_parser_parse(&yp, &ev)) {
            cfgfile_yaml_error(&p, &yp, text, len);
            goto out;
        }
        end = ev.type == YAML_STREAM_END_EVENT;
        r = fn(arg, &ev);
        yaml_event_delete(&ev);
        if (r < 0)
            goto out;
    }
    rc = 0;
out:
    yaml_parser_delete(&yp);
    return rc;
}

int cfgfile_parse_skip(const char *name, const char *text, size_t len, const char *const *skip,
                       size_t nskip, cfgfile_cb cb, void *arg, char *err, size_t errlen)
{
    struct cfgfile_parse p = {
        .name = name, .err = err, .errlen = errlen, .cb = cb, .arg = arg, .state = CFGFILE_DONE};
    int rc;

    p.skip = skip;
    p.nskip = nskip;
    rc = cfgfile_walk(name, text, len, cfgfile_event, &p, err, errlen);

    for (size_t i = 0; i < p.nkeys; i++)
        free(p.keys[i].text);
    free(p.keys);
    free(p.slots);
    return rc;
}

int cfgfile_read(const char *path, char **text, size_t *len, char *err, size_t errlen)
{
    struct cfgfile_parse p = {.name = path, .err = err, .errlen = errlen};
    char *buf = xmalloc(CFGFILE_MAX_BYTES + 2);
    size_t n = 0;
    ssize_t r = 1;
    int fd = open(path, O_RDONLY | O_CLOEXEC), e = fd < 0 ? errno : 0;

    if (err && errlen)
        err[0] = '\0';
    /* Up to one byte more than allowed, to tell a file that is too large. */
    while (e == 0 && r != 0 && n <= CFGFILE_MAX_BYTES) {
        r = read(fd, buf + n, CFGFILE_MAX_BYTES + 1 - n);
        if (r > 0)
            n += (size_t) r;
        else if (r < 0 && errno != EINTR)
            e = errno;
    }
    if (fd >= 0)
        close(fd);
    if (e || n > CFGFILE_MAX_BYTES) {
        if (e)
            cfgfile_fail(&p, 0, 0, "cannot read: %s", strerror(e));
        else
            cfgfile_fail(&p, 0, 0, "file is larger than 1 MiB");
        free(buf);
        *text = NULL;
        *len = 0;
        return -1;
    }
    buf = xrealloc(buf, n + 1); /* the text may be kept while others read it too */
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

int cfgfile_load(const char *path, cfgfile_cb cb, void *arg, char *err, size_t errlen)
{
    char *text;
    size_t len;
    int rc = cfgfile_read(path, &text, &len, err, errlen);

    if (rc == 0)
        rc = cfgfile_parse(path, text, len, cb, arg, err, errlen);
    free(text);
    return rc;
}
