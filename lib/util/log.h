/* log: one line per event on stderr, filtered by level.
 *
 * Lines look like `2026-11-29T17:20:01.123Z admitd warn: message`. Logging is synchronous
 * and unbuffered on purpose: stderr is what systemd and Kubernetes collect, and a daemon
 * that dies should not take its last words with it. */
#ifndef ADMIT_LOG_H
#define ADMIT_LOG_H

#include <stddef.h>

enum log_level { LOG_NOTICE = -1, LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

/** sets the program name printed on each line (the pointer is kept) */
void log_set_ident(const char *ident);
/** 1: print each line as a JSON object {"ts","level","prog","msg"}; 0: plain text */
void log_set_json(int json);
/** sets the most verbose level printed */
void log_set_level(enum log_level level);
/** parses "error", "warn", "info" or "debug"; returns 0 or -1 */
int log_level_parse(const char *s, enum log_level *out);
/** the name of a level ("info") */
const char *log_level_name(enum log_level level);
/** true when a message at this level would be printed */
int log_enabled(enum log_level level);
/** s made fit for a log line, into out (cap bytes): every byte outside printable ASCII as
 *  \xNN and the backslash doubled, so that text from the network (a worker id, a model name)
 *  can neither break a line nor forge one; what would go past cap - 4 bytes is cut and
 *  "..." ends it. Returns out */
const char *log_esc(const char *s, char *out, size_t cap);
/** prints one line at the given level */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Room for one escaped piece of untrusted text in a log line, and log_esc() into a buffer
 * that lives as long as the statement: log_warn("worker %s ...", LOG_ESC(id)). */
#define LOG_ESC_MAX 200
#define LOG_ESC(s)  log_esc((s), (char[LOG_ESC_MAX]){0}, LOG_ESC_MAX)

/* Always printed, whatever the level: the startup line scripts wait for. */
#define log_notice(...) log_msg(LOG_NOTICE, __VA_ARGS__)
#define log_error(...)  log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)   log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)   log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                                                             \
    do {                                                                                           \
        if (log_enabled(LOG_DEBUG))                                                                \
            log_msg(LOG_DEBUG, __VA_ARGS__);                                                       \
    } while (0)

#endif
