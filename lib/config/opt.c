/* opt: the table-driven option engine (see opt.h); each value is parsed by opt_value.c.
 *
 * A parse runs in one order so that the later source wins: every default is applied, the
 * environment and the flags are collected (not yet applied: --config must be known before
 * the file is read), the file is applied as it is read, then the collected values are
 * applied on top, the flag's in place of the environment's. A value is checked where it is
 * applied, so a bad value that a higher source overrides is never reported. The file's
 * file-only keys (opt_file_key) go to the spec's hook, from the same text, right after its
 * settings: the file is read once, so the two can never come from different versions of it. */
#include "config/opt.h"
#include "config/opt_impl.h"
#include "config/cfgfile.h"
#include "util/xmalloc.h"

#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

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
        if (opt_apply(&r->s->defs[i], r->obj, it->value, it->key, msg, msglen) != 0)
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
            if (d->def != NULL && opt_apply(d, r->obj, d->def, "default", err, errlen) != 0)
                return -1;
            continue;
        }
        if (d->kind == OPT_LIST && sn->nflags > 0) {
            struct opt_list *l = (void *) ((char *) r->obj + d->off);

            opt_list_clear(l);
            for (size_t k = 0; k < sn->nflags; k++)
                if (opt_list_add(d, r->obj, l, sn->flags[k], sn->src, err, errlen) != 0)
                    return -1;
        } else if (sn->raw != NULL && opt_apply(d, r->obj, sn->raw, sn->src, err, errlen) != 0) {
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
        size_t want = opt_kind_size(d->kind);

        lo[i] =
            (struct option){d->flag, d->kind == OPT_BOOL ? optional_argument : required_argument,
                            NULL, 1000 + (int) i};
        if (want != 0 ? d->size != want : d->kind == OPT_CUSTOM ? !d->hook : d->size < 2) {
            snprintf(err, errlen, "--%s: the table's field does not fit its kind", d->flag);
            free(lo);
            return NULL;
        }
        if (d->def != NULL && opt_apply(d, r->obj, d->def, "default", err, errlen) != 0) {
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
            opt_list_clear((void *) ((char *) obj + s->defs[i].off));
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
