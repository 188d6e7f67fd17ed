/* opt: a daemon's options from one table: defaults, a YAML file, the environment and flags.
 *
 * Each option is a long flag, an environment variable and a key of the config file (the flag
 * with '_' for '-'), described once in a table of struct opt_def. opt_parse applies them in
 * the order default < file < environment < flag, so the later source wins; it also knows
 * --config FILE, --check-config, --help and --version, and opt_usage prints --help from the
 * same table, so the help cannot drift from what is parsed.
 *
 * Values are strict and every error says where the bad value came from ("--listen",
 * "ADMITD_LISTEN", or "file:line:column: listen") and what was expected, so a daemon can
 * print it and exit 2. Pure: the environment comes in through a lookup function, so tests
 * can feed a table, and nothing here touches sockets or an event loop. */
#ifndef ADMIT_OPT_H
#define ADMIT_OPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The kinds of value, and the field each one fills. */
enum opt_kind {
    OPT_UINT,     /* unsigned in [min, max] */
    OPT_HOSTPORT, /* struct hostport: HOST:PORT, [V6]:PORT or :PORT */
    OPT_URL,      /* struct http_url: http://HOST[:PORT] */
    OPT_STATUS,   /* int: a status in [min, max]; anything else means the default (Dynamo) */
    OPT_LOGLEVEL, /* enum log_level */
    OPT_PATH,     /* char[size]: a path starting with '/' */
    OPT_BOOL,     /* int 0 or 1; the flag alone means true */
    OPT_PUBURL,   /* char[size]: tcp://HOST:PORT or ipc:///PATH; "none" or "" gives "" */
    OPT_ID,       /* char[size]: a worker id by admit_load_worker_id_ok (size <= 128) */
    OPT_DOUBLE,   /* double in [min, max] */
    OPT_RETRY,    /* unsigned: "auto" is 0, else seconds in [min, max] */
    OPT_TOKEN,    /* char[size]: a secret of 16 or more characters without blanks */
    OPT_LOGFMT,   /* int: "text" is 0, "json" is 1 */
    OPT_FRACTION, /* double in 0..1, or None (NAN) */
    OPT_SCALE,    /* double >= 0, or None (NAN) */
    OPT_COUNT,    /* int64_t in [min, max], or None (-1) */
    OPT_LIST,     /* struct opt_list of strings: repeated flags, or comma-separated values */
    OPT_CUSTOM    /* the hook parses the value into the caller's struct itself */
};

/* OPT_LIST's field. The highest-precedence source that gives the list replaces the lower
 * ones entirely; repeated flags append among themselves. Empty items are dropped. */
struct opt_list {
    char **items;
    size_t n;
};

/* Most items one list may hold. */
#define OPT_LIST_MAX 1024

/* For OPT_CUSTOM: parses raw into obj (the caller's whole struct). For OPT_LIST: checks one
 * item (obj is the struct too). 0, or -1 with what was wrong in msg; the engine prefixes
 * where the value came from. */
typedef int (*opt_hook)(void *obj, const char *raw, char *msg, size_t msglen);

/* One option; write table rows with OPT(...). */
struct opt_def {
    const char *flag;     /* long flag without the dashes, e.g. "metrics-listen" */
    const char *env;      /* environment variable, e.g. "ADMITD_METRICS_LISTEN" */
    enum opt_kind kind;   /* what the value is */
    size_t off, size;     /* the field in the caller's struct: OPT_AT(type, member) */
    double min, max;      /* range of OPT_UINT, OPT_STATUS, OPT_DOUBLE, OPT_RETRY, OPT_COUNT */
    const char *def;      /* the default as text, parsed like any value; NULL = zero/empty */
    const char *help;     /* one line for --help */
    const char *expect;   /* replaces the "must be ..." of a bad value's message */
    const char *requires; /* flag of an option that must be given for this one to be read:
                             without it, env and flags are ignored and a file value is
                             checked but the default stays (Dynamo reads Q only with N) */
    opt_hook hook;        /* OPT_CUSTOM: the parser; OPT_LIST: the check of each item */
};

/* A row of a table: the members of struct opt_def in order, the trailing ones optional (the
 * designator lets them be left out, zero, without a missing-initializer warning). */
#define OPT(...)                                                                                   \
    {                                                                                              \
        .flag = __VA_ARGS__                                                                        \
    }

/* The offset and size of member in type, for struct opt_def's off and size. */
#define OPT_AT(type, member) offsetof(type, member), sizeof(((type *) 0)->member)

/* A key only the config file has: its value is a structure (a list, a mapping), not one value,
 * so it has no row in the table and no flag or variable. The spec's file hook reads it; the
 * engine only lets it through the file, and refuses its flag (the key with '-' for '_') and
 * its variable with a message that says where it belongs, rather than as unknown or not at
 * all (a variable nobody reads would be silently ignored). */
struct opt_file_key {
    const char *key; /* e.g. "policy_classes" */
    const char *env; /* the variable refused, e.g. "ADMIT_ROUTER_POLICY_CLASSES"; NULL = none */
};

/* Reads the file-only keys from the config file's text (len bytes, NUL-terminated; the same
 * text the settings came from, read once), called after the settings of the file have been
 * applied. 0, or -1 with the whole message ("path:line:column: ...") in err. */
typedef int (*opt_file_hook)(void *obj, const char *path, const char *text, size_t len, char *err,
                             size_t errlen);

/* A program's options. */
struct opt_spec {
    const char *prog;           /* "admitd", in --help's usage line */
    const char *usage;          /* what follows the name there, e.g. "[--option=value ...]" */
    const char *intro;          /* the text between the usage line and the options */
    const char *config_env;     /* the variable naming the config file, e.g. "ADMITD_CONFIG" */
    const char *example;        /* the commented example file, named in "unknown setting" */
    const struct opt_def *defs; /* the table, in --help order */
    size_t ndefs;
    size_t config_off, config_size;       /* char[] the config file's path is kept in: OPT_AT */
    const struct opt_file_key *file_keys; /* none: NULL, 0 */
    size_t nfile_keys;
    opt_file_hook file_hook; /* reads file_keys; NULL when there are none */
};

/* What the caller is asked to do. */
enum opt_result { OPT_RUN = 0, OPT_HELP, OPT_VERSION, OPT_CHECK, OPT_ERROR };

/** looks up an environment variable; NULL when unset */
typedef const char *(*opt_env_fn)(const char *name);

/** fills the zeroed obj: defaults < file < env < argv; on OPT_ERROR err says what and where */
enum opt_result opt_parse(const struct opt_spec *s, void *obj, int argc, char **argv,
                          opt_env_fn env, char *err, size_t errlen);
/** frees obj's lists (kept only after OPT_RUN or OPT_CHECK); safe to call twice */
void opt_free(const struct opt_spec *s, void *obj);
/** prints --help: the usage line, the intro, then every option with its env var and default */
void opt_usage(const struct opt_spec *s, FILE *out);
/** s as a decimal in [min, max], blanks around it allowed, else fallback (Dynamo's status) */
int opt_lenient_int(const char *s, long min, long max, int fallback);
/** 1 if s is tcp://HOST:PORT or ipc:///PATH, shorter than size and without blanks */
int opt_nng_url_ok(const char *s, size_t size);
/** which implementation of nng's pub/sub protocol: "auto" (ours where it can) sets *nng to
 *  0, "nng" (nng's everywhere) to 1; 0, or -1 with msg for anything else */
int opt_auto_or_nng(const char *raw, int *nng, char *msg, size_t msglen);

#endif
