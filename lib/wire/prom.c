/* prom: text exposition helpers. */
#include "wire/prom.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* HELP text escapes only backslash and newline; label values also escape the quote. */
static void put_escaped(struct buf *b, const char *s, int quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            buf_puts(b, "\\\\");
        else if (*s == '\n')
            buf_puts(b, "\\n");
        else if (quote && *s == '"')
            buf_puts(b, "\\\"");
        else
            buf_append(b, s, 1);
    }
}

void prom_family(struct buf *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s ", name);
    put_escaped(b, help, 0);
    buf_printf(b, "\n# TYPE %s %s\n", name, type);
}

static void put_value(struct buf *b, double v)
{
    if (isnan(v))
        buf_puts(b, "NaN");
    else if (isinf(v))
        buf_puts(b, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15)
        buf_printf(b, "%.0f", v);
    else
        buf_printf(b, "%.17g", v);
}

void prom_sample(struct buf *b, const char *name, const char *labels, double value)
{
    buf_puts(b, name);
    if (labels != NULL && labels[0] != '\0')
        buf_printf(b, "{%s}", labels);
    buf_append(b, " ", 1);
    put_value(b, value);
    buf_append(b, "\n", 1);
}

void prom_sample1(struct buf *b, const char *name, const char *key, const char *value, double v)
{
    buf_printf(b, "%s{%s=\"", name, key);
    put_escaped(b, value, 1);
    buf_puts(b, "\"} ");
    put_value(b, v);
    buf_append(b, "\n", 1);
}

void prom_single(struct buf *b, const char *name, const char *type, const char *help, double v)
{
    prom_family(b, name, type, help);
    prom_sample(b, name, NULL, v);
}

void prom_counter(struct buf *b, const char *name, const char *help, uint64_t v)
{
    prom_single(b, name, "counter", help, (double) v);
}

void prom_gauge(struct buf *b, const char *name, const char *help, double v)
{
    prom_single(b, name, "gauge", help, v);
}

void prom_labelled(struct buf *b, const char *name, const char *type, const char *help,
                   const char *key, const char *const *names, const uint64_t *vals, size_t n)
{
    prom_family(b, name, type, help);
    for (size_t i = 0; i < n; i++)
        prom_sample1(b, name, key, names[i], (double) vals[i]);
}

void prom_label(struct buf *labels, const char *key, const char *value)
{
    if (labels->len > 0)
        buf_append(labels, ",", 1);
    buf_printf(labels, "%s=\"", key);
    put_escaped(labels, value, 1);
    buf_append(labels, "\"", 1);
}

void prom_hist_init(struct prom_hist *h, const double *bounds, size_t nbounds)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->nbounds = nbounds > PROM_HIST_MAX_BUCKETS ? PROM_HIST_MAX_BUCKETS : nbounds;
}

void prom_hist_observe(struct prom_hist *h, double v)
{
    size_t i = 0;

    while (i < h->nbounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

void prom_hist_samples(struct buf *b, const char *name, const char *labels,
                       const struct prom_hist *h)
{
    char sample[128];
    uint64_t cum = 0;

    snprintf(sample, sizeof sample, "%s_bucket", name);
    for (size_t i = 0; i <= h->nbounds; i++) {
        struct buf le;
        char bound[64];

        cum += h->counts[i];
        if (i < h->nbounds)
            snprintf(bound, sizeof bound, "%g", h->bounds[i]);
        else
            strcpy(bound, "+Inf");
        buf_init(&le);
        if (labels != NULL && labels[0] != '\0')
            buf_printf(&le, "%s", labels);
        prom_label(&le, "le", bound);
        prom_sample(b, sample, le.data, (double) cum);
        buf_free(&le);
    }
    snprintf(sample, sizeof sample, "%s_sum", name);
    prom_sample(b, sample, labels, h->sum);
    snprintf(sample, sizeof sample, "%s_count", name);
    prom_sample(b, sample, labels, (double) h->count);
}

void prom_hist_write(struct buf *b, const char *name, const char *help, const struct prom_hist *h)
{
    prom_family(b, name, "histogram", help);
    prom_hist_samples(b, name, NULL, h);
}
