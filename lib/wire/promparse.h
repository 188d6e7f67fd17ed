/* promparse: a parser for the Prometheus text exposition format (version 0.0.4).
 *
 * admitd scrapes the inference engine's /metrics to learn how loaded each rank is. That text
 * comes from another process over the network, so the parser is pure (no I/O, no globals),
 * never recurses, allocates at most one line's worth of scratch per call and treats every
 * byte sequence as possible input: a bad line is counted and skipped, never fatal. It is
 * streaming: each sample is handed to a callback and nothing is kept after it returns.
 *
 * Accepted as Prometheus accepts them: comments and blank lines (skipped), CRLF line ends,
 * blanks between tokens, a trailing comma in the label list, NaN/+Inf/-Inf/Inf values and an
 * optional int64 timestamp (ignored). Malformed, and counted: bad names, bad escapes,
 * unterminated quotes, duplicate label names, values that are not a whole decimal number,
 * NUL bytes, lines over PROMPARSE_MAX_LINE bytes or with over PROMPARSE_MAX_LABELS labels. */
#ifndef ADMIT_PROMPARSE_H
#define ADMIT_PROMPARSE_H

#include <stddef.h>

/* Longest line accepted, in bytes without its line end; longer lines are malformed. */
#define PROMPARSE_MAX_LINE (64 * 1024)
/* Most labels a sample may have; more make the line malformed. */
#define PROMPARSE_MAX_LABELS 64

/* One label of a sample; value is unescaped (\\ \" \n), NUL-terminated. */
struct promparse_label {
    const char *name;
    const char *value;
};

/* One sample line. Pointers are valid only during the callback. */
struct promparse_sample {
    const char *name; /* metric name, e.g. "vllm:num_requests_running" */
    const struct promparse_label *labels;
    size_t nlabels;
    double value; /* NaN, +Inf, -Inf accepted */
};

/* Called for each well-formed sample line; return 0 to go on, non-zero to stop. */
typedef int (*promparse_cb)(const struct promparse_sample *s, void *arg);

/** parses len bytes of text (NUL bytes allowed) and returns how many lines were malformed */
int promparse(const char *text, size_t len, promparse_cb cb, void *arg);

#endif
