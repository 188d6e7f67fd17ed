/* usage: what an OpenAI-style answer's usage says the engine found cached, read from the
 * answer's last bytes.
 *
 * admit-router corrects its prefix index by the `usage.prompt_tokens_details.cached_tokens`
 * of each answer (vLLM with --enable-prompt-tokens-details, SGLang with --enable-cache-report).
 * A JSON answer ends with its usage and a field or two; a stream's final usage chunk comes
 * just before `data: [DONE]`. So only the last USAGE_TAIL bytes are kept, as they pass, and
 * read once at the end: no buffering of the answer and no JSON parse. The engine's bytes are
 * untrusted: any bytes, split anywhere, give one of the three answers below. */
#ifndef ADMIT_USAGE_H
#define ADMIT_USAGE_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of the answer's end that are kept. */
#define USAGE_TAIL 256

/* usage_cached_tokens(): no usage in the tail (a stream without include_usage), or a
 * cached_tokens that is not a number. */
#define USAGE_CACHED_NONE (-1)
/* usage_cached_tokens(): a usage ("prompt_tokens") without cached_tokens: absent, or
 * "prompt_tokens_details": null, as vLLM and SGLang answer when nothing was cached. */
#define USAGE_CACHED_UNSAID (-2)

/* The last bytes of an answer; zero it (or usage_tail_reset) before the first. */
struct usage_tail {
    uint32_t len;
    char b[USAGE_TAIL];
};

/** forgets what the tail held */
void usage_tail_reset(struct usage_tail *t);
/** the answer's next n bytes: the tail keeps the last USAGE_TAIL of all it was given */
void usage_tail_add(struct usage_tail *t, const char *data, size_t n);
/** the last `"cached_tokens": N` of s[0 .. n) (N >= 0, saturating below INT64_MAX), or
 *  USAGE_CACHED_UNSAID, or USAGE_CACHED_NONE; one pass from the end */
int64_t usage_cached_tokens(const char *s, size_t n);

#endif
