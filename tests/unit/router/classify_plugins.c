/* Plugins the classifier loader must refuse (test_classify.c), one per -D: each is what a
 * real mistake builds, so that the test sees the loader's answer to it, not to a fake. */
#include "admit/classify.h"

#if defined(PLUGIN_NO_CLASSIFIER)
/* A library that is not a classifier, or one whose function was misspelt. */
const int admit_classifier_abi = ADMIT_CLASSIFY_ABI;

#elif defined(PLUGIN_NO_ABI)
/* A classifier written without reading the header's last lines. */
int admit_classifier(struct admit_classify *c, void *arg)
{
    return -1;
}

#elif defined(PLUGIN_OTHER_ABI)
/* A classifier built against another version of admit/classify.h. */
const int admit_classifier_abi = ADMIT_CLASSIFY_ABI + 1;

int admit_classifier(struct admit_classify *c, void *arg)
{
    return -1;
}

#elif defined(PLUGIN_INTERNAL)
/* A classifier that calls into the router past its public API (the core's own room rule):
 * the router does not export it, so the plugin must fail to load, not at its first call. */
struct busy_thresholds;
void busy_thresholds_unset(struct busy_thresholds *t);

const int admit_classifier_abi = ADMIT_CLASSIFY_ABI;

int admit_classifier(struct admit_classify *c, void *arg)
{
    busy_thresholds_unset(arg);
    return -1;
}

#else
#error "build with one of PLUGIN_NO_CLASSIFIER, PLUGIN_NO_ABI, PLUGIN_OTHER_ABI, PLUGIN_INTERNAL"
#endif
