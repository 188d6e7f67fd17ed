/* libFuzzer harness for the load message decoder, held against the decoder it replaced.
 *
 * Every input goes through both admit_load_decode() and the jansson-based oracle
 * (fuzz/load_jansson.c): the verdicts must agree, a message both accept must decode to the
 * same struct byte for byte, and a message both refuse must get the same error text, except
 * that where the text is not JSON only the kind of error ("invalid JSON at byte ...") must agree
 * (positions and wordings of JSON errors are the scanner's own). The one input where they may
 * differ: a NUL byte outside a string, which jansson drops after a number or a literal (a bug of
 * its reader) and JSON does not allow; the new decoder must refuse every input with a NUL.
 *
 * Then, as before: whatever decodes re-encodes, within ADMIT_LOAD_MSG_MAX, to a message that
 * decodes to the same value. kv_block_size (optional in v1) decodes to unknown or to a size
 * from 1 to 2^53-1; models (optional too) to unknown or to a list within its bounds, every name
 * valid and listed once, which the list itself agrees with (walking it finds n names in len
 * bytes); role (optional too) to one of the three roles. */
#include "admit/load.h"
#include "load_jansson.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char json_err[] = "invalid JSON at byte ";

/* Aborts, saying why (libFuzzer keeps the input). */
static void differ(const char *what, const char *got, const char *want)
{
    fprintf(stderr, "fuzz_load: %s\n  new: %s\n  old: %s\n", what, got, want);
    abort();
}

/* The new decoder against the oracle; 0 when the new one accepted the input. */
static int against_oracle(const uint8_t *data, size_t size, struct admit_load *m)
{
    struct admit_load o;
    char err[256], oerr[256];
    int rn, ro, jn, jo;

    memset(m, 0x5a, sizeof *m);
    memset(&o, 0xa5, sizeof o);
    strcpy(err, "(none)");
    strcpy(oerr, "(none)");
    rn = admit_load_decode(data, size, m, err, sizeof err);
    if (size > 0 && memchr(data, '\0', size) != NULL) {
        if (rn == 0)
            differ("a NUL byte accepted", "accepted", "-");
        return -1;
    }
    ro = load_jansson_decode(data, size, &o, oerr, sizeof oerr);
    if (rn != ro)
        differ("the verdicts differ", rn == 0 ? "accepted" : err, ro == 0 ? "accepted" : oerr);
    if (rn == 0) {
        if (memcmp(m, &o, sizeof o) != 0)
            differ("the decoded messages differ", "", "");
        return 0;
    }
    jn = strncmp(err, json_err, sizeof json_err - 1) == 0;
    jo = strncmp(oerr, json_err, sizeof json_err - 1) == 0;
    if (jn != jo || (!jn && strcmp(err, oerr) != 0))
        differ("the errors differ", err, oerr);
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct admit_load m, again;
    char err[256], buf[ADMIT_LOAD_MSG_MAX * 2];
    int n;

    if (against_oracle(data, size, &m) != 0)
        return 0;
    if (m.kv_block_size != ADMIT_LOAD_UNKNOWN &&
        (m.kv_block_size < 1 || m.kv_block_size > ADMIT_LOAD_INT_MAX))
        abort();
    if (m.models.n != ADMIT_LOAD_UNKNOWN) {
        const struct admit_load_models *l = &m.models;
        unsigned seen = 0;
        size_t bytes = 0;

        if (l->n < 0 || l->n > ADMIT_LOAD_MODELS_MAX || l->json > ADMIT_LOAD_MODELS_JSON_MAX ||
            l->len > sizeof l->names)
            abort();
        for (const char *p = admit_load_models_next(l, NULL); p != NULL;
             p = admit_load_models_next(l, p)) {
            size_t len = strlen(p);
            if (len == 0 || len > ADMIT_LOAD_MODEL_NAME_MAX)
                abort();
            for (size_t i = 0; i < len; i++)
                if ((unsigned char) p[i] < 0x20)
                    abort();
            bytes += len + 1;
            seen++;
        }
        if (seen != (unsigned) l->n || bytes != l->len)
            abort();
    }
    if (m.role != ADMIT_LOAD_ROLE_BOTH && m.role != ADMIT_LOAD_ROLE_PREFILL &&
        m.role != ADMIT_LOAD_ROLE_DECODE)
        abort();
    n = admit_load_encode(&m, buf, sizeof buf);
    if (n < 0 || n > ADMIT_LOAD_MSG_MAX ||
        admit_load_decode(buf, (size_t) n, &again, err, sizeof err) != 0 ||
        memcmp(&m, &again, sizeof m) != 0)
        abort();
    return 0;
}
