/* httpreq: the seam's request type (hconn.c fills it from the parsed head). */
#include "http/httpreq.h"

#include <stdint.h>
#include <string.h>

static const char *const method_names[] = {"GET",    "HEAD",    "POST",  "PUT",
                                           "DELETE", "OPTIONS", "PATCH", "OTHER"};

const char *http_req_header(const struct http_req *r, const char *name)
{
    return r->_header != NULL ? r->_header(r, name) : NULL;
}

int http_req_path_is(const struct http_req *r, const char *path)
{
    size_t n = strlen(path);

    return strncmp(r->target, path, n) == 0 && (r->target[n] == '\0' || r->target[n] == '?');
}

const char *http_method_name(enum http_method m)
{
    return (m >= HTTP_GET && m <= HTTP_OTHER) ? method_names[m] : "OTHER";
}

int http_method_is_safe(enum http_method m)
{
    return m == HTTP_GET || m == HTTP_HEAD || m == HTTP_OPTIONS;
}

/* vLLM answers its tokenizer pair from its API process, beside the running batch, and
 * admit-router --tokenize asks /tokenize on the way of every text request it routes by
 * prefix: held behind the streams it routes, or refused for them, it would add their wait to
 * each. */
int http_req_is_tokenizer(const struct http_req *r)
{
    return r->method == HTTP_POST &&
           (http_req_path_is(r, "/tokenize") || http_req_path_is(r, "/detokenize"));
}
