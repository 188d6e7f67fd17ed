/* libFuzzer harness for the configuration file reader: any bytes end in success or in one
 * "name:line:column: message" error, every item delivered is well formed, and nothing leaks,
 * crashes or takes more than linear time; with structured keys (whose values are skipped) as
 * without. */
#include "config/cfgfile.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Accepts everything but aborts on a malformed item. */
static int check_item(const struct cfgfile_item *it, void *arg, char *msg, size_t msglen,
                      int *at_key)
{
    (void) msg;
    (void) msglen;
    (void) at_key;
    if (it->key == NULL || it->value == NULL || it->key[0] == '\0')
        abort();
    if (it->line < 1 || it->column < 1 || it->key_line < 1 || it->key_column < 1)
        abort();
    if (it->key_line > it->line || (it->is_null && it->value[0] != '\0'))
        abort();
    /* Reading to the terminating NUL shows it is there (ASan checks the bounds). */
    (void) strlen(it->key);
    (void) strlen(it->value);
    ++*(unsigned *) arg;
    return 0;
}

/* The invariants of one parse, with or without structured keys. */
static void run(const uint8_t *data, size_t size, const char *const *skip, size_t nskip)
{
    char err[256];
    unsigned items = 0;
    int rc, line, column;

    memset(err, 'x', sizeof err);
    rc = cfgfile_parse_skip("f.yaml", (const char *) data, size, skip, nskip, check_item, &items,
                            err, sizeof err);
    if (memchr(err, '\0', sizeof err) == NULL)
        abort();
    if (rc == 0) {
        if (err[0] != '\0' || items > CFGFILE_MAX_KEYS)
            abort();
        return;
    }
    if (rc != -1)
        abort();
    /* Every error has a position, except an oversized input (which the fuzzer never makes). */
    if (sscanf(err, "f.yaml:%d:%d: ", &line, &column) != 2 || line < 1 || column < 1 ||
        (size_t) line > size + 1 || (size_t) column > size + 1)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The router's structured keys: their values may be anything YAML, nested. */
    static const char *const skip[] = {"policy_classes", "default_policy_class",
                                       "policy_class_rules"};

    run(data, size, NULL, 0);
    run(data, size, skip, sizeof skip / sizeof skip[0]);
    return 0;
}
