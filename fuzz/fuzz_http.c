/* libFuzzer harness for admitd's own HTTP rules: header lines ("Name: value") from the
 * input go through the token check, hop-by-hop classification, Connection lists, the
 * framing check and the bearer-token check; none may crash, refusals must be consistent,
 * and a token is accepted exactly when it matches. The first 8 bytes also make a date. */
#include "core/httputil.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    const char *cl[16], *te[16];
    size_t ncl = 0, nte = 0;
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
        if (!httpu_is_token(line))
            continue;
        if (strcasecmp(line, "Content-Length") == 0 && ncl < 16)
            cl[ncl++] = value;
        else if (strcasecmp(line, "Transfer-Encoding") == 0 && nte < 16)
            te[nte++] = value;
        else if (strcasecmp(line, "Connection") == 0)
            conn = value;
        else if (strcasecmp(line, "Authorization") == 0 &&
                 httpu_bearer_ok(value, TOKEN) != (strcmp(value, "Bearer " TOKEN) == 0))
            abort();
        (void) httpu_is_hop_by_hop(line);
        if (conn != NULL)
            (void) httpu_connection_lists(conn, line);
    }
    /* Both framing headers at once must always be refused. */
    if (ncl > 0 && nte > 0 && httpu_framing_problem(cl, ncl, te, nte) == NULL)
        abort();
    free(text);
    return 0;
}
