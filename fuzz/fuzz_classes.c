/* libFuzzer harness for the router's policy classes: any bytes end in classes that keep every
 * invariant the router will rely on, or in one "name:line:column: message" error with nothing
 * kept; classify() of any request stays in range; nothing leaks, crashes or takes more than
 * linear time. */
#include "router/classes.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The request's headers: the input's first bytes, as both names' value. */
static const char *header(void *arg, const char *name)
{
    (void) name;
    return arg;
}

/* Aborts unless c is what a successful parse promises. */
static void check(const struct router_classes *c)
{
    if (c->n == 0) {
        if (c->nrules != 0 || c->default_cls != -1)
            abort();
        return;
    }
    if (c->n > ROUTER_CLASSES_MAX || c->nrules > ROUTER_RULES_MAX || c->default_cls < 0 ||
        (size_t) c->default_cls >= c->n)
        abort();
    for (size_t i = 0; i < c->n; i++) {
        const struct rclass *k = &c->c[i];

        if (k->name[0] == '\0' || strlen(k->name) > ROUTER_CLASS_NAME_MAX ||
            router_classes_find(c, k->name) != (int) i || k->quantum < 1 ||
            k->quantum > ROUTER_CLASS_QUANTUM_MAX || busy_thresholds_validate(&k->t, NULL, 0) != 0)
            abort();
    }
    for (size_t i = 0; i < c->nrules; i++) {
        const struct rrule *r = &c->rules[i];

        if ((r->kind == RRULE_MODEL) != (r->cls >= 0) || (r->cls >= 0 && (size_t) r->cls >= c->n) ||
            (r->kind == RRULE_TOKENS) != (r->nbuckets > 0) || r->nbuckets > ROUTER_BUCKETS_MAX)
            abort();
        for (size_t b = 0; b < r->nbuckets; b++)
            if (r->buckets[b].cls < 0 || (size_t) r->buckets[b].cls >= c->n ||
                (b == 0 ? r->buckets[b].min_tokens != 0
                        : r->buckets[b].min_tokens <= r->buckets[b - 1].min_tokens))
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int64_t tokens[] = {-1, 0, 1, 4095, 4096, 1 << 20, INT64_MAX};
    struct router_classes c;
    char err[512], value[16] = "";
    int rc, line, column, k;

    memset(err, 'x', sizeof err);
    rc = router_classes_parse("f.yaml", (const char *) data, size, &c, err, sizeof err);
    if (memchr(err, '\0', sizeof err) == NULL)
        abort();
    if (rc == 0) {
        if (err[0] != '\0')
            abort();
        check(&c);
        memcpy(value, data, size < sizeof value - 1 ? size : sizeof value - 1);
        for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) {
            k = router_classes_classify(&c, header, value, value, tokens[i]);
            if (c.n == 0 ? k != -1 : k < 0 || (size_t) k >= c.n)
                abort();
        }
        router_classes_free(&c);
        return 0;
    }
    if (rc != -1 || c.n != 0 || c.c != NULL || c.rules != NULL || c.nrules != 0)
        abort();
    if (sscanf(err, "f.yaml:%d:%d: ", &line, &column) != 2 || line < 1 || column < 1 ||
        (size_t) line > size + 1 || (size_t) column > size + 1)
        abort();
    return 0;
}
