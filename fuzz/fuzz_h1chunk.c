/* libFuzzer harness for the chunked decoder. The input is decoded whole, then in three
 * pieces cut at offsets taken from the input, each piece in a buffer of its own: both runs
 * must give the same data, the same end and the same verdict, every data slice must lie in
 * the piece it came from, and a finished body's data must add up to its chunk sizes. */
#include "wire/h1chunk.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
    int rc;
    const char *reason;
    size_t at;   /* the end, or the bad byte */
    size_t hash; /* of the data, in order */
    uint64_t ndata, total;
};

static void decode(const uint8_t *in, size_t size, const size_t *cuts, size_t ncuts, struct run *r)
{
    struct h1_chunked c;
    size_t from = 0;

    memset(r, 0, sizeof *r);
    /* A budget the input can reach, so that 413 is exercised too. */
    h1c_init(&c, size > 0 && in[0] == '1' ? 64 : UINT64_MAX);
    r->rc = H1_AGAIN;
    for (size_t k = 0; k < ncuts && r->rc == H1_AGAIN; from = cuts[k++]) {
        size_t len = cuts[k] - from, pos = 0;
        char *buf = malloc(len ? len : 1);
        if (buf == NULL)
            abort();
        memcpy(buf, in + from, len);
        while (r->rc == H1_AGAIN) {
            struct h1_str d = {NULL, 0};
            size_t used = 0;
            int rc = h1c_feed(&c, buf + pos, len - pos, &used, &d);
            if (used > len - pos)
                abort();
            if (rc == H1_DATA) {
                if (d.len == 0 || d.p < buf + pos || d.p + d.len != buf + pos + used)
                    abort();
                for (size_t i = 0; i < d.len; i++)
                    r->hash = r->hash * 131 + (unsigned char) d.p[i];
                r->ndata += d.len;
                pos += used;
                continue;
            }
            if (rc == H1_AGAIN) {
                if (used != len - pos)
                    abort();
                break;
            }
            r->rc = rc;
            r->at = from + pos + used;
            r->reason = c.err_reason;
            if (rc == H1_ERROR && (c.err_reason == NULL || c.err_status < 400))
                abort();
        }
        free(buf);
    }
    r->total = c.total;
    if (r->rc == H1_DONE && r->ndata != c.total)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct run whole, split;
    size_t cuts[3], h = 0;

    for (size_t i = 0; i < size; i++)
        h = h * 31 + data[i];
    cuts[0] = size ? h % (size + 1) : 0;
    cuts[1] = cuts[0] + (size - cuts[0]) / 2;
    cuts[2] = size;
    decode(data, size, &size, 1, &whole);
    decode(data, size, cuts, 3, &split);
    if (whole.rc != split.rc || whole.at != split.at || whole.reason != split.reason ||
        whole.hash != split.hash || whole.ndata != split.ndata || whole.total != split.total)
        abort();
    return 0;
}
