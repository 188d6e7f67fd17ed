/* h1parse's private parts: the scanner (h1parse.c) calls the field and head rules
 * (h1parse_rules.c) as lines complete. */
#ifndef ADMIT_H1PARSE_IMPL_H
#define ADMIT_H1PARSE_IMPL_H

#include "wire/h1parse.h"

/** records a refusal (502 for any response) and returns H1_ERROR */
int h1p_fail(struct h1_parser *p, int status, const char *reason, size_t off);
/** applies the rules of the classified field line h, just stored, at offset off; H1_AGAIN
 *  to go on, or H1_ERROR */
int h1p_field(struct h1_parser *p, const struct h1_header *h, size_t off);
/** the head ended at end (past its blank line): the rules of the whole head, framing and
 *  persistence; H1_DONE or H1_ERROR */
int h1p_finish(struct h1_parser *p, size_t end);

#endif
