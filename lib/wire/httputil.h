/* httputil: pure HTTP helpers shared by the proxy and the tools.
 *
 * Nothing here touches a socket: header classification, reason phrases and the
 * OpenAI-shaped error body, so each can be unit-tested on its own. */
#ifndef ADMIT_HTTPUTIL_H
#define ADMIT_HTTPUTIL_H

#include "util/buf.h"

#include <stddef.h>
#include <time.h>

/* Bytes for an HTTP date, with its NUL. */
#define HTTPU_DATE_LEN 30

/* The message every overload answer carries (Dynamo's wording, matched by routers). */
#define HTTPU_OVERLOAD_MESSAGE "Server overloaded: worker at capacity"
/* The message of a request that waited past --queue-timeout-ms. */
#define HTTPU_QUEUE_TIMEOUT_MESSAGE                                                                \
    "Server overloaded: request rejected after exceeding the admission queue delay"

/** the reason phrase for a status ("Site is overloaded" for 529, "Unknown" if none) */
const char *httpu_reason(int status);
/** true for headers a proxy must not forward (RFC 9110 7.6.1), case-insensitive */
int httpu_is_hop_by_hop(const char *name);
/** the same for a name of len bytes, not NUL-terminated (a slice of a parsed head) */
int httpu_is_hop_by_hop_n(const char *name, size_t len);
/** true when name is listed in a Connection header value ("close, X-Foo") */
int httpu_connection_lists(const char *connection_value, const char *name);
/** the same for slices: a value of vlen bytes and a name of nlen bytes */
int httpu_connection_lists_n(const char *v, size_t vlen, const char *name, size_t nlen);
/** writes t as an RFC 9110 IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") into out */
void httpu_date(time_t t, char out[HTTPU_DATE_LEN]);
/** true when authorization is "Bearer <token>"; compares in time independent of where
 *  the strings differ (no timing oracle for the token) */
int httpu_bearer_ok(const char *authorization, const char *token);
/** true when a Content-Type value's media type is application/json: the whole type, any
 *  case, blanks around it, parameters after ';' ("Application/JSON; charset=utf-8"); not
 *  NULL, application/jsonp, application/json-seq or text/json. Every JSON endpoint's rule */
int httpu_is_json(const char *content_type);
/** writes {"error":"msg"} and a newline into out: the shape of admin and /admission errors */
void httpu_error_field_json(struct buf *out, const char *msg);
/** writes v in decimal into out (no NUL); returns the length: the hot path's printf */
size_t httpu_fmt_uint(char out[24], unsigned long long v);
/** writes v in lowercase hexadecimal into out (no NUL); returns the length (chunk sizes) */
size_t httpu_fmt_hex(char out[24], unsigned long long v);
/** appends s[0..len) (UTF-8; NULs allowed) as a JSON string, escaped as jansson's compact
 *  output escapes it: the one JSON string writer of the answers built by hand */
void httpu_json_string(struct buf *out, const char *s, size_t len);
/** writes {"error":{"message":..,"type":..,"param":null,"code":status}} into out */
void httpu_error_json(struct buf *out, int status, const char *type, const char *message);

#endif
