/* demote_large: an example classifier plugin for admit-router (README.md beside it says how to
 * build and load it).
 *
 * A long prompt in a class that has no room anywhere waits in that class's queue, and when it
 * goes it holds up the short requests behind it. If another class (the one
 * ADMIT_DEMOTE_CLASS names, "batch" by default) has room now, it goes there instead: it starts
 * at once under that class's looser thresholds, and its own class's queue keeps moving. It is
 * left where the built-in rules put it when:
 *  - its prompt is shorter than ADMIT_DEMOTE_MIN_TOKENS (4096 by default): short requests are
 *    what an interactive class is for;
 *  - it is in the target class already, or in no class at all;
 *  - its class has room somewhere: moving it gains nothing;
 *  - the target class does not exist, or has no room either;
 *  - even the router-wide reject thresholds leave it no room: sent at once, it would be turned
 *    away with the overload status, where in its own class it waits for room instead.
 *
 * Like any plugin it uses nothing but admit/classify.h and libc: the router provides the
 * admit_* calls when it loads the plugin. */
#include "admit/classify.h"

#include <stdlib.h>
#include <string.h>

#define DEMOTE_DEFAULT_CLASS      "batch"
#define DEMOTE_DEFAULT_MIN_TOKENS 4096

/* The ABI this plugin was built for: admit-router refuses a plugin whose structs it would
 * read differently. */
const int admit_classifier_abi = ADMIT_CLASSIFY_ABI;

/* The settings are read at every call, not kept: a getenv is a short scan of the
 * environment, and a plugin with no state needs no initialisation hook. A value that is not
 * a number falls back to the default, since a classifier has no channel to report it. */
static int64_t min_tokens(void)
{
    const char *v = getenv("ADMIT_DEMOTE_MIN_TOKENS");
    char *end;
    long long n;

    if (v == NULL || *v == '\0')
        return DEMOTE_DEFAULT_MIN_TOKENS;
    n = strtoll(v, &end, 10);
    return *end == '\0' && n >= 0 ? (int64_t) n : DEMOTE_DEFAULT_MIN_TOKENS;
}

static const char *target_class(void)
{
    const char *v = getenv("ADMIT_DEMOTE_CLASS");

    return v != NULL && *v != '\0' ? v : DEMOTE_DEFAULT_CLASS;
}

int admit_classifier(struct admit_classify *c, void *arg)
{
    const char *target = target_class();
    struct admit_thresholds own, to, reject;

    (void) arg;
    /* The cheap tests first: most requests are short, and each room test is a selection
     * pass over the workers. */
    if (admit_classify_prompt_tokens(c) < min_tokens() ||
        strcmp(admit_classify_class(c), target) == 0)
        return -1;
    if (admit_queue_thresholds(c, &own) != 0 || admit_classify_room_anywhere(c, &own))
        return -1;
    if (admit_queue_thresholds_for(c, target, &to) != 0 || !admit_classify_room_anywhere(c, &to))
        return -1;
    admit_reject_thresholds(c, &reject);
    if (!admit_classify_room_anywhere(c, &reject))
        return -1;
    return admit_classify_set_class(c, target);
}
