/* classes: the policy classes and the rules that give a request its class (see classes.h);
 * reading them from the config file is classes_yaml.c's. */
#include "classes.h"

#include <stdlib.h>
#include <string.h>

#define RC_N(a) (sizeof(a) / sizeof((a)[0]))

void router_classes_free(struct router_classes *c)
{
    for (size_t i = 0; i < c->nrules; i++)
        free(c->rules[i].buckets);
    free(c->rules);
    free(c->c);
    memset(c, 0, sizeof *c);
    c->default_cls = -1;
}

int router_classes_find(const struct router_classes *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->c[i].name, name) == 0)
            return (int) i;
    return -1;
}

/* The value of the first class header present with a value (blanks around it dropped). */
static int rc_header(const char *(*header)(void *arg, const char *name), void *arg, const char **v,
                     size_t *len)
{
    static const char *const names[] = {ROUTER_CLASS_HEADER, ROUTER_CLASS_HEADER_ALIAS};

    for (size_t i = 0; header != NULL && i < RC_N(names); i++) {
        const char *s = header(arg, names[i]);
        size_t n;

        if (s == NULL)
            continue;
        s += strspn(s, " \t");
        for (n = strlen(s); n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'); n--)
            continue;
        if (n > 0) {
            *v = s;
            *len = n;
            return 1;
        }
    }
    return 0;
}

/* The class of the highest floor at or below tokens (>= 0), or -1 when it is below them all. */
static int rc_bucket_of(const struct rrule *r, int64_t tokens)
{
    size_t lo = 0, hi = r->nbuckets; /* the answer is below hi, and lo - 1 is at or below */

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (r->buckets[mid].min_tokens <= tokens)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? -1 : r->buckets[lo - 1].cls;
}

int router_classes_classify(const struct router_classes *c,
                            const char *(*header)(void *arg, const char *name), void *arg,
                            const char *model, int64_t prompt_tokens)
{
    if (c == NULL || c->n == 0)
        return -1;
    for (size_t i = 0; i < c->nrules; i++) {
        const struct rrule *r = &c->rules[i];
        const char *v;
        size_t len;
        int k;

        switch (r->kind) {
        case RRULE_HEADER:
            if (!rc_header(header, arg, &v, &len))
                break;
            /* Named but unknown: the default class, as Dynamo's fallback, not the next rule. */
            for (k = 0; k < (int) c->n; k++)
                if (strlen(c->c[k].name) == len && memcmp(c->c[k].name, v, len) == 0)
                    return k;
            return c->default_cls;
        case RRULE_MODEL:
            if (model != NULL && strcmp(model, r->model) == 0)
                return r->cls;
            break;
        case RRULE_TOKENS:
            k = prompt_tokens >= 0 ? rc_bucket_of(r, prompt_tokens) : -1;
            if (k >= 0)
                return k;
            break;
        }
    }
    return c->default_cls;
}
