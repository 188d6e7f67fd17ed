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
