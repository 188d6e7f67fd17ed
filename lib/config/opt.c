/* opt: the table-driven option engine (see opt.h).
 *
 * A parse runs in one order so that the later source wins: every default is applied, the
 * environment and the flags are collected (not yet applied: --config must be known before
 * the file is read), the file is applied as it is read, then the collected values are
 * applied on top, the flag's in place of the environment's. A value is checked where it is
 * applied, so a bad value that a higher source overrides is never reported. The file's
 * file-only keys (opt_file_key) go to the spec's hook, from the same text, right after its
 * settings: the file is read once, so the two can never come from different versions of it. */
#include "config/opt.h"
#include "admit/load.h"
#include "config/cfgfile.h"
#include "util/log.h"
#include "util/netaddr.h"
#include "util/xmalloc.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What the command line and the environment said about one option. */
struct opt_seen {
    const char *raw;    /* the last flag's value, else the environment's; NULL = neither */
    char src[80];       /* where raw came from: "--flag" or the variable's name */
    const char **flags; /* OPT_LIST: every flag's value, in order */
    size_t nflags;
    int in_file; /* the file gave a value (not null) */
};

/* Width of the flag column in --help. */
#define OPT_HELP_COLUMN 28

/* One parse: the spec, the caller's struct and what was seen per option. */
struct opt_run {
    const struct opt_spec *s;
    void *obj;
    struct opt_seen *seen;
};

int opt_lenient_int(const char *s, long min, long max, int fallback)
{
    char *end;
    long v;

    if (s == NULL)
        return fallback;
    while (isspace((unsigned char) *s))
        s++;
    if (!isdigit((unsigned char) *s))
        return fallback;
    errno = 0;
    v = strtol(s, &end, 10);
    while (isspace((unsigned char) *end))
        end++;
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return fallback;
    return (int) v;
}

int opt_nng_url_ok(const char *s, size_t size)
{
    return (strncmp(s, "tcp://", 6) == 0 || strncmp(s, "ipc://", 6) == 0) && strlen(s) < size &&
           strlen(s) >= 7 && strpbrk(s, " \r\n") == NULL;
}

int opt_auto_or_nng(const char *raw, int *nng, char *msg, size_t msglen)
{
    if (strcmp(raw, "auto") != 0 && strcmp(raw, "nng") != 0) {
        snprintf(msg, msglen, "'%.120s' must be auto or nng", raw);
        return -1;
    }
    *nng = strcmp(raw, "nng") == 0;
    return 0;
}

/* Strict unsigned decimal: digits only (surrounding blanks allowed), no sign, no overflow. */
static int parse_uint(const char *s, unsigned long long *out)
{
    unsigned long long v = 0;
    int digits = 0;

    while (isspace((unsigned char) *s))
        s++;
    for (; isdigit((unsigned char) *s); s++, digits++) {
        if (v > (ULLONG_MAX - 9) / 10)
            return -1;
        v = v * 10 + (unsigned long long) (*s - '0');
    }
    while (isspace((unsigned char) *s))
        s++;
    if (digits == 0 || *s != '\0')
        return -1;
    *out = v;
    return 0;
}

/* A finite number, the whole of s. */
static int parse_double(const char *s, double *out)
{
    char *end;

    *out = strtod(s, &end);
    return end == s || *end != '\0' || !isfinite(*out) ? -1 : 0;
}

static int is_none(const char *s)
{
    return strcmp(s, "None") == 0 || strcmp(s, "none") == 0;
}

static int parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off", ""};

    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (strcasecmp(s, yes[i]) == 0)
            return *out = 1, 0;
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (strcasecmp(s, no[i]) == 0)
            return *out = 0, 0;
    return -1;
}

/* "src: 'raw' must be ...", the option's own wording first; returns -1. */
static int bad(const struct opt_def *d, const char *raw, const char *src, const char *what,
               char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: '%s' %s", src, raw, d->expect ? d->expect : what);
    return -1;
}

/* The field size a kind needs, or 0 when any size works (text, custom). */
static size_t kind_size(enum opt_kind k)
{
    switch (k) {
    case OPT_UINT:
    case OPT_RETRY:
        return sizeof(unsigned);
    case OPT_STATUS:
    case OPT_BOOL:
    case OPT_LOGFMT:
        return sizeof(int);
    case OPT_LOGLEVEL:
        return sizeof(enum log_level);
    case OPT_HOSTPORT:
        return sizeof(struct hostport);
    case OPT_URL:
        return sizeof(struct http_url);
    case OPT_DOUBLE:
    case OPT_FRACTION:
    case OPT_SCALE:
        return sizeof(double);
    case OPT_COUNT:
        return sizeof(int64_t);
    case OPT_LIST:
        return sizeof(struct opt_list);
    default:
        return 0;
    }
}

static void list_clear(struct opt_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

/* Appends the comma-separated items of raw to l, each checked by the option's hook. */
static int list_add(const struct opt_def *d, void *obj, struct opt_list *l, const char *raw,
                    const char *src, char *err, size_t errlen)
{
    char msg[256];

    for (const char *p = raw; *p != '\0';) {
        size_t len = strcspn(p, ",");
        char *item = xstrndup(p, len);

        p += len + (p[len] == ',');
        if (len == 0) {
            free(item);
            continue;
        }
        if (l->n == OPT_LIST_MAX) {
            free(item);
            snprintf(err, errlen, "%s: more than %d items", src, OPT_LIST_MAX);
            return -1;
        }
        if (d->hook != NULL && d->hook(obj, item, msg, sizeof msg) != 0) {
            free(item);
            snprintf(err, errlen, "%s: %s", src, msg);
            return -1;
        }
        l->items = xrealloc(l->items, (l->n + 1) * sizeof *l->items);
        l->items[l->n++] = item;
    }
    return 0;
}

/* The numeric kinds. */
static int apply_number(const struct opt_def *d, void *field, const char *raw, const char *src,
                        char *err, size_t errlen)
{
    unsigned long long v;
    double x;
    char what[128];

    switch (d->kind) {
    case OPT_UINT:
    case OPT_RETRY:
        if (d->kind == OPT_RETRY && strcmp(raw, "auto") == 0) {
            *(unsigned *) field = 0;
            return 0;
        }
        snprintf(what, sizeof what, "must be %s from %.0f to %.0f",
                 d->kind == OPT_RETRY ? "auto or seconds" : "an integer", d->min, d->max);
        if (parse_uint(raw, &v) != 0 || (double) v < d->min || (double) v > d->max)
            return bad(d, raw, src, what, err, errlen);
        *(unsigned *) field = (unsigned) v;
        return 0;
    case OPT_COUNT:
        snprintf(what, sizeof what, "must be an integer from %.0f to %.0f, or None", d->min,
                 d->max);
        if (is_none(raw)) {
            *(int64_t *) field = -1;
            return 0;
        }
        if (parse_uint(raw, &v) != 0 || v > INT64_MAX || (double) v < d->min || (double) v > d->max)
            return bad(d, raw, src, what, err, errlen);
        *(int64_t *) field = (int64_t) v;
        return 0;
    case OPT_DOUBLE:
        snprintf(what, sizeof what, "must be a number from %g to %g", d->min, d->max);
        if (parse_double(raw, &x) != 0 || x < d->min || x > d->max)
            return bad(d, raw, src, what, err, errlen);
        *(double *) field = x;
        return 0;
    default: /* OPT_FRACTION, OPT_SCALE */
        if (is_none(raw)) {
            *(double *) field = NAN;
            return 0;
        }
        if (parse_double(raw, &x) != 0 || x < 0 || (d->kind == OPT_FRACTION && x > 1))
            return bad(d, raw, src,
                       d->kind == OPT_FRACTION ? "must be a number between 0 and 1, or None"
                                               : "must be a number >= 0, or None",
                       err, errlen);
        *(double *) field = x;
        return 0;
    }
}

/* Converts one raw value into its field; src names where it came from for the message. */
static int apply(const struct opt_def *d, void *obj, const char *raw, const char *src, char *err,
                 size_t errlen)
{
    void *field = (char *) obj + d->off;
    char *text = field, sub[192];

    switch (d->kind) {
    case OPT_HOSTPORT:
    case OPT_URL:
        if ((d->kind == OPT_HOSTPORT ? hostport_parse(raw, field, sub, sizeof sub)
                                     : http_url_parse(raw, field, sub, sizeof sub)) != 0) {
            snprintf(err, errlen, "%s: %s", src, sub);
            return -1;
        }
        return 0;
    case OPT_STATUS:
        *(int *) field = opt_lenient_int(raw, (long) d->min, (long) d->max,
                                         opt_lenient_int(d->def, 0, INT_MAX, 0));
        return 0;
    case OPT_LOGLEVEL:
        if (log_level_parse(raw, field) != 0)
            return bad(d, raw, src, "must be error, warn, info or debug", err, errlen);
        return 0;
    case OPT_PATH:
        if (raw[0] != '/' || strlen(raw) >= d->size || strpbrk(raw, " \r\n")) {
            snprintf(sub, sizeof sub, "must be a path starting with / (at most %zu bytes)",
                     d->size - 1);
            return bad(d, raw, src, sub, err, errlen);
        }
        strcpy(text, raw);
        return 0;
    case OPT_PUBURL:
        if (strcmp(raw, "none") == 0 || raw[0] == '\0') {
            text[0] = '\0';
            return 0;
        }
        if (!opt_nng_url_ok(raw, d->size))
            return bad(d, raw, src, "must be tcp://HOST:PORT, ipc:///PATH or none", err, errlen);
        strcpy(text, raw);
        return 0;
    case OPT_ID:
        /* A worker id's rule (admit/load.h), the one admit-router holds load messages to. */
        if (raw[0] == '\0' || strlen(raw) >= d->size) {
            snprintf(err, errlen, "%s: must be 1 to %zu characters", src, d->size - 1);
            return -1;
        }
        if (!admit_load_worker_id_ok(raw))
            return bad(d, raw, src, "must be printable ASCII without spaces, quotes or backslashes",
                       err, errlen);
        strcpy(text, raw);
        return 0;
    case OPT_TOKEN:
        /* The value is a secret: the message does not repeat it. */
        if (strlen(raw) < 16 || strlen(raw) >= d->size || strpbrk(raw, " \t\r\n")) {
            snprintf(err, errlen, "%s must be 16 to %zu characters without blanks", src,
                     d->size - 1);
            return -1;
        }
        strcpy(text, raw);
        return 0;
    case OPT_LOGFMT:
        if (strcmp(raw, "text") != 0 && strcmp(raw, "json") != 0)
            return bad(d, raw, src, "must be text or json", err, errlen);
        *(int *) field = strcmp(raw, "json") == 0;
        return 0;
    case OPT_BOOL:
        if (parse_bool(raw, field) != 0)
            return bad(d, raw, src, "must be true or false", err, errlen);
        return 0;
    case OPT_LIST:
        list_clear(field);
        return list_add(d, obj, field, raw, src, err, errlen);
    case OPT_CUSTOM:
        if (d->hook(obj, raw, sub, sizeof sub) != 0) {
            snprintf(err, errlen, "%s: %s", src, sub);
            return -1;
        }
        return 0;
    default:
        return apply_number(d, field, raw, src, err, errlen);
    }
}

/* 1 if a file key names the flag: the same text, '_' standing for '-'. */
static int key_is(const char *flag, const char *key)
{
    while (*flag && *key && (*flag == *key || (*flag == '-' && *key == '_'))) {
        flag++;
        key++;
    }
    return *flag == '\0' && *key == '\0';
}

static int on_file_item(const struct cfgfile_item *it, void *arg, char *msg, size_t msglen,
                        int *at_key)
{
    struct opt_run *r = arg;

    for (size_t i = 0; i < r->s->ndefs; i++) {
        if (!key_is(r->s->defs[i].flag, it->key))
            continue;
        *at_key = 0;
        if (it->is_null)
            return 0; /* null: keep the default */
        if (apply(&r->s->defs[i], r->obj, it->value, it->key, msg, msglen) != 0)
            return -1;
        r->seen[i].in_file = 1;
        return 0;
    }
    *at_key = 1;
    snprintf(msg, msglen, "unknown setting '%.64s' (%s lists them all)", it->key, r->s->example);
    return -1;
}

/* The file-only key whose flag arg is ("--policy-classes" or "--policy-classes=..."), or NULL;
 * *len is the length of the flag's name, dashes included. */
static const struct opt_file_key *file_key_flag(const struct opt_spec *s, const char *arg, int *len)
{
    size_t n = strcspn(arg, "="), j;

    *len = n < INT_MAX ? (int) n : INT_MAX;
    for (size_t i = 0; n > 2 && strncmp(arg, "--", 2) == 0 && i < s->nfile_keys; i++) {
        const char *k = s->file_keys[i].key;

        for (j = 2; j < n && (arg[j] == k[j - 2] || (arg[j] == '-' && k[j - 2] == '_')); j++)
            continue;
        if (j == n && k[n - 2] == '\0')
            return &s->file_keys[i];
    }
    return NULL;
}

/* "SRC: KEY can be set only in the config file"; returns -1. */
static int file_only(const struct opt_spec *s, const char *src, const char *key, char *err,
                     size_t errlen)
{
    snprintf(err, errlen, "%s: %s can be set only in the config file (--config FILE or %s)", src,
             key, s->config_env);
    return -1;
}

/* Refuses the variable of a file-only key: set, it would otherwise be silently ignored. */
static int file_keys_env(const struct opt_spec *s, opt_env_fn env, char *err, size_t errlen)
{
    for (size_t i = 0; env != NULL && i < s->nfile_keys; i++) {
        const char *e = s->file_keys[i].env;

        if (e != NULL && env(e) != NULL)
            return file_only(s, e, s->file_keys[i].key, err, errlen);
    }
    return 0;
}

/* Reads the config file once: its settings through cfgfile, then its file-only keys through the
 * spec's hook, from the same text. */
static int read_file(struct opt_run *r, const char *path, char *err, size_t errlen)
{
    const struct opt_spec *s = r->s;
    const char **keys = xcalloc(s->nfile_keys + 1, sizeof *keys);
    char *text;
    size_t len;
    int rc = cfgfile_read(path, &text, &len, err, errlen);

    for (size_t i = 0; i < s->nfile_keys; i++)
        keys[i] = s->file_keys[i].key;
    if (rc == 0)
        rc = cfgfile_parse_skip(path, text, len, keys, s->nfile_keys, on_file_item, r, err, errlen);
    if (rc == 0 && s->file_hook != NULL)
        rc = s->file_hook(r->obj, path, text, len, err, errlen);
    free(keys);
    free(text);
    return rc;
}

/* Whether the option a definition requires was given by any source; -1 if it is unknown. */
static int required_given(const struct opt_run *r, const struct opt_def *d)
{
    for (size_t j = 0; j < r->s->ndefs; j++)
        if (strcmp(r->s->defs[j].flag, d->requires) == 0)
            return r->seen[j].raw != NULL || r->seen[j].in_file;
    return -1;
}

/* Applies what the environment and the flags said, on top of the defaults and the file. */
static int apply_seen(struct opt_run *r, char *err, size_t errlen)
{
    for (size_t i = 0; i < r->s->ndefs; i++) {
        const struct opt_def *d = &r->s->defs[i];
        struct opt_seen *sn = &r->seen[i];
        int given = d->requires ? required_given(r, d) : 1;

        if (given < 0) {
            snprintf(err, errlen, "--%s: requires the unknown option --%s", d->flag, d->requires);
            return -1;
        }
        if (!given) {
            /* Not read at all: back to the default, whatever the file said. */
            memset((char *) r->obj + d->off, 0, d->size);
            if (d->def != NULL && apply(d, r->obj, d->def, "default", err, errlen) != 0)
                return -1;
            continue;
        }
        if (d->kind == OPT_LIST && sn->nflags > 0) {
            struct opt_list *l = (void *) ((char *) r->obj + d->off);

            list_clear(l);
            for (size_t k = 0; k < sn->nflags; k++)
                if (list_add(d, r->obj, l, sn->flags[k], sn->src, err, errlen) != 0)
                    return -1;
        } else if (sn->raw != NULL && apply(d, r->obj, sn->raw, sn->src, err, errlen) != 0) {
            return -1;
        }
    }
    return 0;
}

/* Builds getopt's table, applies the defaults and collects the environment. */
static struct option *opt_start(struct opt_run *r, opt_env_fn env, char *err, size_t errlen)
{
    const struct opt_spec *s = r->s;
    struct option *lo = xcalloc(s->ndefs + 5, sizeof *lo);

    for (size_t i = 0; i < s->ndefs; i++) {
        const struct opt_def *d = &s->defs[i];
        const char *e = env ? env(d->env) : NULL;
        size_t want = kind_size(d->kind);

        lo[i] =
            (struct option){d->flag, d->kind == OPT_BOOL ? optional_argument : required_argument,
                            NULL, 1000 + (int) i};
        if (want != 0 ? d->size != want : d->kind == OPT_CUSTOM ? !d->hook : d->size < 2) {
            snprintf(err, errlen, "--%s: the table's field does not fit its kind", d->flag);
            free(lo);
            return NULL;
        }
        if (d->def != NULL && apply(d, r->obj, d->def, "default", err, errlen) != 0) {
            free(lo);
            return NULL;
        }
        if (e != NULL) {
            r->seen[i].raw = e;
            snprintf(r->seen[i].src, sizeof r->seen[i].src, "%s", d->env);
        }
    }
    lo[s->ndefs] = (struct option){"help", no_argument, NULL, 'h'};
    lo[s->ndefs + 1] = (struct option){"version", no_argument, NULL, 'V'};
    lo[s->ndefs + 2] = (struct option){"config", required_argument, NULL, 'c'};
    lo[s->ndefs + 3] = (struct option){"check-config", no_argument, NULL, 'C'};
    return lo;
}

/* Reads the flags into r->seen; OPT_RUN, or what the flags ask for, or OPT_ERROR. */
static enum opt_result opt_flags(struct opt_run *r, const struct option *lo, int argc, char **argv,
                                 const char **config, int *check, char *err, size_t errlen)
{
    const struct opt_file_key *k;
    char flag[96];
    int ch, idx, len;

    optind = 0; /* glibc: full re-initialisation, so a parse can run more than once */
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":hV", lo, &idx)) != -1) {
        const struct opt_def *d;
        struct opt_seen *sn;

        if (ch == 'h' || ch == 'V')
            return ch == 'h' ? OPT_HELP : OPT_VERSION;
        if (ch == 'c' || ch == 'C') {
            if (ch == 'c')
                *config = optarg;
            else
                *check = 1;
            continue;
        }
        if (ch == '?' && (k = file_key_flag(r->s, argv[optind - 1], &len)) != NULL) {
            snprintf(flag, sizeof flag, "%.*s", len, argv[optind - 1]);
            file_only(r->s, flag, k->key, err, errlen);
            return OPT_ERROR;
        }
        if (ch == '?' || ch == ':') {
            snprintf(err, errlen,
                     ch == '?' ? "unknown option '%s' (see --help)" : "option '%s' needs a value",
                     argv[optind - 1]);
            return OPT_ERROR;
        }
        d = &r->s->defs[ch - 1000];
        sn = &r->seen[ch - 1000];
        sn->raw = optarg ? optarg : "true";
        snprintf(sn->src, sizeof sn->src, "--%s", d->flag);
        if (d->kind == OPT_LIST) {
            sn->flags = xrealloc(sn->flags, (sn->nflags + 1) * sizeof *sn->flags);
            sn->flags[sn->nflags++] = sn->raw;
        }
    }
    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument '%s' (options are --name=value)", argv[optind]);
        return OPT_ERROR;
    }
    return OPT_RUN;
}

enum opt_result opt_parse(const struct opt_spec *s, void *obj, int argc, char **argv,
                          opt_env_fn env, char *err, size_t errlen)
{
    struct opt_run r = {s, obj, xcalloc(s->ndefs ? s->ndefs : 1, sizeof *r.seen)};
    const char *config = env && s->config_env ? env(s->config_env) : NULL;
    char *path = (char *) obj + s->config_off;
    int check = 0;
    struct option *lo;
    enum opt_result rc = OPT_ERROR;

    err[0] = '\0';
    lo = opt_start(&r, env, err, errlen);
    if (lo == NULL)
        goto out;
    rc = opt_flags(&r, lo, argc, argv, &config, &check, err, errlen);
    if (rc != OPT_RUN)
        goto out;
    rc = OPT_ERROR;
    if (file_keys_env(s, env, err, errlen) != 0)
        goto out;
    if (config != NULL && config[0] != '\0') {
        if (strlen(config) >= s->config_size) {
            snprintf(err, errlen, "--config: the path is too long");
            goto out;
        }
        strcpy(path, config);
        if (read_file(&r, config, err, errlen) != 0)
            goto out;
    }
    if (apply_seen(&r, err, errlen) == 0)
        rc = check ? OPT_CHECK : OPT_RUN;
out:
    for (size_t i = 0; i < s->ndefs; i++)
        free(r.seen[i].flags);
    free(r.seen);
    free(lo);
    if (rc != OPT_RUN && rc != OPT_CHECK)
        opt_free(s, obj);
    return rc;
}

void opt_free(const struct opt_spec *s, void *obj)
{
    for (size_t i = 0; i < s->ndefs; i++)
        if (s->defs[i].kind == OPT_LIST)
            list_clear((void *) ((char *) obj + s->defs[i].off));
}

void opt_usage(const struct opt_spec *s, FILE *out)
{
    const int w = OPT_HELP_COLUMN;

    fprintf(out, "usage: %s %s\n\n%s\n", s->prog, s->usage, s->intro);
    for (size_t i = 0; i < s->ndefs; i++) {
        const struct opt_def *d = &s->defs[i];
        char name[96];

        snprintf(name, sizeof name, "--%s%s", d->flag, d->kind == OPT_BOOL ? "" : "=V");
        /* A name too long for the column gets a line of its own. */
        if (strlen(name) > (size_t) w)
            fprintf(out, "  %s\n  %-*s %s\n", name, w, "", d->help);
        else
            fprintf(out, "  %-*s %s\n", w, name, d->help);
        fprintf(out, "  %-*s env %s%s; default %s\n", w, "", d->env,
                d->kind == OPT_LIST ? ", comma-separated" : "", d->def ? d->def : "unset");
    }
    fprintf(out, "  %-*s read settings from a YAML file (see %s)\n  %-*s env %s\n", w,
            "--config=FILE", s->example, w, "", s->config_env);
    fprintf(out, "  %-*s %s\n", w, "--check-config",
            "validate the settings and exit (0 good, 2 bad)");
    fprintf(out, "  %-*s %s\n  %-*s %s\n", w, "--help", "print this help and exit", w, "--version",
            "print the version and exit");
}
