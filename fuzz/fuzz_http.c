/* libFuzzer harness for admitd's own HTTP rules: header lines ("Name: value") from the
 * input go through the token check, hop-by-hop classification, Connection lists and the
 * framing check; none may crash, and refusals must be consistent. */
#include "httputil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    const char *cl[16], *te[16];
    size_t ncl = 0, nte = 0;
    char *line, *save = NULL;
    const char *conn = NULL;

    if (text == NULL)
        return 0;
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
