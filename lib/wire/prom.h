/* prom: Prometheus text exposition format (version 0.0.4), written into a buf.
 *
 * Pure: no sockets, so the output can be unit-tested byte for byte and checked with
 * promtool. Each family gets HELP and TYPE lines; label values are escaped. */
#ifndef ADMIT_PROM_H
#define ADMIT_PROM_H

#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>

/* The content type scrapers expect for this format. */
#define PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Most buckets a histogram may have (+Inf not counted). */
#define PROM_HIST_MAX_BUCKETS 24

/* A cumulative histogram; bounds are upper limits in ascending order. */
struct prom_hist {
    const double *bounds;
    size_t nbounds;
    uint64_t counts[PROM_HIST_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last = +Inf */
    uint64_t count;
    double sum;
};

/** writes the HELP and TYPE lines of a family; type is "counter", "gauge" or "histogram" */
void prom_family(struct buf *b, const char *name, const char *type, const char *help);
/** writes one sample; labels is NULL or a pre-rendered `k="v",k2="v2"` list */
void prom_sample(struct buf *b, const char *name, const char *labels, double value);
/** writes one sample with a single label, `name{key="value"} v` (the value escaped) */
void prom_sample1(struct buf *b, const char *name, const char *key, const char *value, double v);
/** writes a family of one unlabelled sample */
void prom_single(struct buf *b, const char *name, const char *type, const char *help, double v);
/** writes a counter family of one unlabelled sample */
void prom_counter(struct buf *b, const char *name, const char *help, uint64_t v);
/** writes a gauge family of one unlabelled sample */
void prom_gauge(struct buf *b, const char *name, const char *help, double v);
/** writes a family whose n samples differ by one label: key=names[i], value vals[i] */
void prom_labelled(struct buf *b, const char *name, const char *type, const char *help,
                   const char *key, const char *const *names, const uint64_t *vals, size_t n);
/** appends `key="value"` (escaped) to a label list, with a comma if it is not empty */
void prom_label(struct buf *labels, const char *key, const char *value);
/** initialises a histogram with the given bucket bounds (at most PROM_HIST_MAX_BUCKETS) */
void prom_hist_init(struct prom_hist *h, const double *bounds, size_t nbounds);
/** records one observation */
void prom_hist_observe(struct prom_hist *h, double v);
/** writes one histogram's _bucket, _sum and _count samples, with labels (NULL or a
 *  pre-rendered list) on each; the family's HELP and TYPE are the caller's */
void prom_hist_samples(struct buf *b, const char *name, const char *labels,
                       const struct prom_hist *h);
/** writes a histogram family (HELP, TYPE, _bucket, _sum, _count) */
void prom_hist_write(struct buf *b, const char *name, const char *help, const struct prom_hist *h);

#endif
