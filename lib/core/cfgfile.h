/* cfgfile: reads admitd's YAML configuration file.
 *
 * The file is a flat mapping of setting names to single values, the same settings as the
 * command-line flags (snake_case). This module knows nothing about the settings themselves:
 * it checks the shape of the file and hands each key and value, with their positions, to a
 * callback (config.c decides which keys exist and what values mean, and applies precedence).
 * A bad configuration stops admitd, so every problem becomes one "file:line:column: message"
 * error naming the offending token and what was expected; and since the file is input, any
 * bytes must parse in linear time without crashing or leaking.
 *
 * Anchors, aliases, custom tags and multiple documents are refused: they buy nothing in a
 * flat file and make positions and values surprising. Positions are 1-based; columns count
 * characters, not bytes. */
#ifndef ADMIT_CFGFILE_H
#define ADMIT_CFGFILE_H

#include <stddef.h>

/* Largest file accepted, in bytes. */
#define CFGFILE_MAX_BYTES (1024 * 1024)
/* Most keys accepted in one file (admitd has about 30). */
#define CFGFILE_MAX_KEYS 10000

/* One setting from the file. key is as written (e.g. "engine_request_limit"); value is the
   scalar text, NUL-terminated (a YAML null `~`/`null`/empty is passed as "" with is_null=1). */
struct cfgfile_item {
    const char *key;
    const char *value;
    int is_null;
    int line, column; /* 1-based, of the value */
    int key_line, key_column;
};

/* Called once per top-level key, in file order. Return 0 to accept; or fill msg (msglen bytes)
   and return -1 to reject (e.g. unknown key, bad value): cfgfile then fails with
   "FILE:LINE:COLUMN: <msg>" at the key's position for an unknown key or the value's position
   otherwise — the callback says which via *at_key = 1 or 0. The item's strings live only
   during the call. If the file turns out bad further on, earlier items have been delivered. */
typedef int (*cfgfile_cb)(const struct cfgfile_item *it, void *arg, char *msg, size_t msglen,
                          int *at_key);

/** parses text (len bytes, need not be NUL-terminated) named `name` in messages; 0 or -1 with
    err = "name:line:col: message"; a NULL cb only checks the file */
int cfgfile_parse(const char *name, const char *text, size_t len, cfgfile_cb cb, void *arg,
                  char *err, size_t errlen);
/** reads the file at path (at most 1 MiB) then cfgfile_parse; errors include the path; a file that
    cannot be read: "path: cannot read: <strerror>" */
int cfgfile_load(const char *path, cfgfile_cb cb, void *arg, char *err, size_t errlen);

#endif
