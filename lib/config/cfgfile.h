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
 * characters, not bytes.
 *
 * A program may also have a few structured keys, whose values are lists or mappings rather
 * than settings (admit-router's policy classes). cfgfile_parse_skip is told their names: it
 * checks them as YAML and as keys like any other, but neither delivers nor judges their
 * values, which the module that owns them reads from the same text with cfgfile_walk (the file
 * read once, with cfgfile_read). The flat schema stays the whole of what the callback
 * sees, and this module stays ignorant of every schema but its own. */
#ifndef ADMIT_CFGFILE_H
#define ADMIT_CFGFILE_H

#include <stdarg.h>
#include <stddef.h>

/* Largest file accepted, in bytes. */
#define CFGFILE_MAX_BYTES (1024 * 1024)
/* Most keys accepted in one file (admitd has about 30). */
#define CFGFILE_MAX_KEYS 10000
/* Deepest nesting within a skipped value (cfgfile_parse_skip): collections in collections. */
#define CFGFILE_MAX_DEPTH 16
/* Bytes of a key or value quoted in a message; longer ones are cut with "...". */
#define CFGFILE_SHOW 60
/* Room cfgfile_show needs: every byte may become a 4-character escape. */
#define CFGFILE_SHOW_BUF (CFGFILE_SHOW * 4 + 4)

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
/** as cfgfile_parse, but the value of each of the nskip keys in skip may be any YAML node (a
    scalar, or a sequence or mapping nested up to CFGFILE_MAX_DEPTH deep): it is checked as YAML
    (anchors, aliases and other than the core scalar tags refused, as everywhere) and not
    delivered to cb. Each such key is still a key: given twice, it is a duplicate */
int cfgfile_parse_skip(const char *name, const char *text, size_t len, const char *const *skip,
                       size_t nskip, cfgfile_cb cb, void *arg, char *err, size_t errlen);
/** reads the file at path into *text (malloc'd, NUL-terminated, *len bytes without the NUL; the
    caller frees it); 0, or -1 with *text NULL and "path: cannot read: <strerror>" or "path:
    file is larger than 1 MiB" in err */
int cfgfile_read(const char *path, char **text, size_t *len, char *err, size_t errlen);
/** cfgfile_read then cfgfile_parse; errors include the path */
int cfgfile_load(const char *path, cfgfile_cb cb, void *arg, char *err, size_t errlen);

/* libyaml's event (yaml_event_t), for the readers of structured keys; <yaml.h> defines it. */
struct yaml_event_s;
/* Handles one event; 0 to go on, or -1 with the message written to the walk's err. */
typedef int (*cfgfile_event_fn)(void *arg, const struct yaml_event_s *ev);

/** libyaml's events of text, read as cfgfile_parse reads it (at most 1 MiB, a BOM dropped so
    that positions are the same, libyaml's own errors as "name:line:column: message"): fn sees
    every event, deleted once it returns; 0 at the end of the stream, -1 at the first error,
    libyaml's or fn's. For a module that reads structured keys from text cfgfile_parse_skip
    has checked */
int cfgfile_walk(const char *name, const char *text, size_t len, cfgfile_event_fn fn, void *arg,
                 char *err, size_t errlen);
/** writes "name:line:column: message" (or "name: message" when line is 0) to err (errlen
    bytes; nothing when err is NULL or errlen 0), the message from fmt and ap; returns -1. The
    readers of structured keys use it, so that their errors read as cfgfile's */
int cfgfile_verror(char *err, size_t errlen, const char *name, int line, int column,
                   const char *fmt, va_list ap) __attribute__((format(printf, 6, 0)));
/** whether a scalar is a YAML null, given its text, its tag as libyaml resolves it (NULL when
    untagged) and whether it is plain: 1 if it is one ("", "~", "null", "Null" or "NULL",
    plain and untagged, or tagged !!null), -1 if it is tagged !!null but is not one, else 0 */
int cfgfile_is_null(const char *value, const char *tag, int plain);
/** s (len bytes) made fit to quote in a one-line message, in out (CFGFILE_SHOW_BUF bytes):
    control characters escaped as \xHH, text beyond CFGFILE_SHOW bytes cut with "..."; out */
const char *cfgfile_show(char *out, const char *s, size_t len);

#endif
