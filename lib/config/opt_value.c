/* opt_value: each kind of option value, parsed strictly into its field (see opt_impl.h).
 * A bad value's message says where it came from and what was expected, the option's own
 * wording first. */
#include "config/opt_impl.h"
#include "admit/load.h"
#include "util/log.h"
#include "util/netaddr.h"
#include "util/xmalloc.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

size_t opt_kind_size(enum opt_kind k)
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

void opt_list_clear(struct opt_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

int opt_list_add(const struct opt_def *d, void *obj, struct opt_list *l, const char *raw,
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

int opt_apply(const struct opt_def *d, void *obj, const char *raw, const char *src, char *err,
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
        opt_list_clear(field);
        return opt_list_add(d, obj, field, raw, src, err, errlen);
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
