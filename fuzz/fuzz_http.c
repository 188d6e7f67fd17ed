/* libFuzzer harness for admitd's own HTTP rules outside the parser (fuzz_h1parse has the
 * parser's): header lines ("Name: value") from the input go through hop-by-hop
 * classification, Connection lists and the bearer-token check; none may crash, a name is
 * found in a Connection list exactly when a plain split-and-trim finds it there, and a token
 * is accepted exactly when it matches. The first 8 bytes also make a date. */
#include "wire/httputil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define TOKEN "fuzz-token-0123456789"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Any second from year 0 to 9999 renders as the fixed 29-character IMF-fixdate shape. */
static void check_date(const uint8_t *data, size_t size)
{
    int64_t t = 0;
    char d[HTTPU_DATE_LEN];

    if (size < 8)
        return;
    memcpy(&t, data, 8);
    t %= 253402300800LL; /* 10000-01-01 */
    if (t < -62167219200LL)
        t = -t % 253402300800LL;
    httpu_date((time_t) t, d);
    if (strlen(d) != 29 || d[3] != ',' || strcmp(d + 25, " GMT") != 0)
        abort();
}

/* The oracle for httpu_connection_lists, written the obvious way: split at commas, trim
 * spaces and tabs, skip empty members, compare without case. */
static int lists_by_split(const char *connection, const char *name)
{
    char *copy = strdup(connection), *tok, *save = NULL;
    int found = 0;

    if (copy == NULL)
        abort();
    for (tok = strtok_r(copy, ",", &save); tok != NULL && !found;
         tok = strtok_r(NULL, ",", &save)) {
        size_t n;

        tok += strspn(tok, " \t");
        n = strlen(tok);
        while (n > 0 && (tok[n - 1] == ' ' || tok[n - 1] == '\t'))
            n--;
        tok[n] = '\0';
        found = n > 0 && strcasecmp(tok, name) == 0;
    }
    free(copy);
    return found;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    char *line, *save = NULL;
    const char *conn = NULL;

    if (text == NULL)
        return 0;
    check_date(data, size);
    memcpy(text, data, size);
    text[size] = '\0';
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char *colon = strchr(line, ':');
        if (colon == NULL)
            continue;
        *colon = '\0';
        const char *value = colon + 1 + strspn(colon + 1, " \t");
        if (strcasecmp(line, "Connection") == 0)
            conn = value;
        else if (strcasecmp(line, "Authorization") == 0 &&
                 httpu_bearer_ok(value, TOKEN) != (strcmp(value, "Bearer " TOKEN) == 0))
            abort();
        (void) httpu_is_hop_by_hop(line);
        if (conn != NULL && httpu_connection_lists(conn, line) != lists_by_split(conn, line))
            abort();
    }
    free(text);
    return 0;
}
