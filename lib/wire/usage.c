/* usage: cached_tokens from an answer's last bytes (see usage.h). */
#include "wire/usage.h"

#include <string.h>

void usage_tail_reset(struct usage_tail *t)
{
    t->len = 0;
}

void usage_tail_add(struct usage_tail *t, const char *data, size_t n)
{
    if (n >= USAGE_TAIL) {
        memcpy(t->b, data + n - USAGE_TAIL, USAGE_TAIL);
        t->len = USAGE_TAIL;
        return;
    }
    if (t->len + n > USAGE_TAIL) {
        size_t drop = t->len + n - USAGE_TAIL;

        memmove(t->b, t->b + drop, t->len - drop);
        t->len -= (uint32_t) drop;
    }
    memcpy(t->b + t->len, data, n);
    t->len += (uint32_t) n;
}

/* A byte compare per position and a key compare per quote. A key inside a string cannot be
 * forged: in JSON a quote within a string is escaped, so `"cached_tokens"` never closes
 * there. */
int64_t usage_cached_tokens(const char *s, size_t n)
{
    static const char ckey[] = "\"cached_tokens\"", pkey[] = "\"prompt_tokens\"";
    const size_t clen = sizeof ckey - 1, plen = sizeof pkey - 1;
    int usage = 0;

    for (size_t i = n; i-- > 0;) {
        size_t j = i + clen;
        int64_t v;

        if (s[i] != '"')
            continue;
        if (n - i >= plen && memcmp(s + i, pkey, plen) == 0)
            usage = 1;
        if (n - i < clen || memcmp(s + i, ckey, clen) != 0)
            continue;
        while (j < n && (s[j] == ' ' || s[j] == ':'))
            j++;
        if (j == n || s[j] < '0' || s[j] > '9')
            return USAGE_CACHED_NONE;
        for (v = 0; j < n && s[j] >= '0' && s[j] <= '9' && v < INT64_MAX / 10 - 9; j++)
            v = v * 10 + (s[j] - '0');
        return v;
    }
    return usage ? USAGE_CACHED_UNSAID : USAGE_CACHED_NONE;
}
