/* log: level-filtered stderr lines with a UTC timestamp. */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

static const char *log_ident = "admitd";
static enum log_level log_max = LOG_INFO;
static int log_json;
static const char *const log_names[] = {"notice", "error", "warn", "info", "debug"};

void log_set_ident(const char *ident)
{
    log_ident = ident;
}

void log_set_json(int json)
{
    log_json = json;
}

/* Copies s into out as the inside of a JSON string; always NUL-terminates. */
static void json_escape(char *out, size_t cap, const char *s)
{
    size_t n = 0;

    for (; *s && n + 7 < cap; s++) {
        unsigned char c = (unsigned char) *s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char) c;
        } else if (c < 0x20) {
            n += (size_t) snprintf(out + n, cap - n, "\\u%04x", c);
        } else {
            out[n++] = (char) c;
        }
    }
    out[n] = '\0';
}

const char *log_esc(const char *s, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;

    if (cap < 4) {
        if (cap > 0)
            out[0] = '\0';
        return out;
    }
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char) *s;
        size_t w = c == '\\' ? 2 : c < 0x20 || c > 0x7e ? 4 : 1;

        if (n + w > cap - 4) {
            memcpy(out + n, "...", 3);
            n += 3;
            break;
        }
        if (w == 1) {
            out[n++] = (char) c;
        } else if (w == 2) {
            out[n++] = '\\';
            out[n++] = '\\';
        } else {
            out[n++] = '\\';
            out[n++] = 'x';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    out[n] = '\0';
    return out;
}

void log_set_level(enum log_level level)
{
    log_max = level;
}

int log_level_parse(const char *s, enum log_level *out)
{
    for (int i = 0; i <= LOG_DEBUG; i++) {
        if (strcasecmp(s, log_names[i + 1]) == 0) {
            *out = (enum log_level) i;
            return 0;
        }
    }
    if (strcasecmp(s, "warning") == 0) {
        *out = LOG_WARN;
        return 0;
    }
    return -1;
}

const char *log_level_name(enum log_level level)
{
    return (level >= LOG_NOTICE && level <= LOG_DEBUG) ? log_names[level + 1] : "?";
}

int log_enabled(enum log_level level)
{
    return level <= log_max;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    char line[2048];
    struct timeval tv;
    struct tm tm;
    size_t n;
    va_list ap;

    if (!log_enabled(level))
        return;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    if (log_json) {
        char msg[2048], esc[4096], ts[32];

        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        json_escape(esc, sizeof esc, msg);
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
        fprintf(stderr, "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"prog\":\"%s\",\"msg\":\"%s\"}\n",
                ts, (long) tv.tv_usec / 1000, log_names[level + 1], log_ident, esc);
        return;
    }
    n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t) snprintf(line + n, sizeof line - n, ".%03ldZ %s %s: ", (long) tv.tv_usec / 1000,
                           log_ident, log_names[level + 1]);
    va_start(ap, fmt);
    if (n < sizeof line)
        vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    /* One fputs of a whole line keeps lines from interleaving with a sibling process. */
    n = strnlen(line, sizeof line - 2);
    line[n] = '\n';
    line[n + 1] = '\0';
    fputs(line, stderr);
}
