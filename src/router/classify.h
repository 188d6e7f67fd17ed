/* classify: admit-router's side of the classifier interface (admit/classify.h): the request
 * being classified as the router fills it in, running a classifier on it, and loading one
 * from a plugin.
 *
 * The router knows the request, its classes and its selection view; a classifier should see
 * them through the public accessors only, so that the router can change underneath without
 * breaking plugins. struct admit_classify is therefore defined here, where the router can put
 * one on its stack per request (no allocation), and nowhere in the public header.
 *
 * The classes are given as a plain array of names and thresholds: the class configuration
 * and queue are the router's business, not this module's. The router-wide reject thresholds
 * are copied when classification starts, so a classifier judges one consistent set even if
 * /busy_threshold changes them meanwhile. Room is judged through select.h (sel_room()), so a
 * classifier's "has room anywhere" is exactly what selection would find. */
#ifndef ADMIT_ROUTER_CLASSIFY_H
#define ADMIT_ROUTER_CLASSIFY_H

#include "admit/classify.h"
#include "admission/busy.h"
#include "select.h"

#include <stddef.h>
#include <stdint.h>

/* One policy class, as the classifier sees it: its name and its queue thresholds. */
struct classify_class {
    const char *name;
    struct busy_thresholds t;
};

/* What the router lives with, the same for every request: every pointer must stay valid
 * while a request is being classified. */
struct classify_view {
    const struct classify_class *classes; /* nclasses of them, names unique */
    size_t nclasses;
    struct sel *sel; /* the router's workers, their booked load and selection */
};

/* One request's facts; the strings and header_arg must stay valid while it is classified. */
struct classify_request {
    const char *model;     /* NULL or "" when it names none */
    int64_t prompt_tokens; /* as counted for booking */
    /* the value of the first header called name, case-insensitively, or NULL (the router's
     * is http_req_header()); header NULL: the request has no headers */
    const char *(*header)(const void *arg, const char *name);
    const void *header_arg;
};

/* One request being classified. Private: only classify.c reads or writes its members. */
struct admit_classify {
    struct classify_request req;
    struct classify_view view;
    size_t builtin;                /* the built-in rules' class; view.nclasses: none */
    size_t cls;                    /* the class now */
    struct busy_thresholds reject; /* copied at classify_init() */
    int64_t now_ms;
};

/** starts classifying request req in class builtin (its index in view, or -1 for none),
 *  under the reject thresholds reject (copied; NULL: none set), at now_ms */
void classify_init(struct admit_classify *c, const struct classify_view *view,
                   const struct classify_request *req, int builtin,
                   const struct busy_thresholds *reject, int64_t now_ms);
/** runs fn(c, arg) (NULL: no classifier) and returns the class index the request ends in,
 *  or -1 for none: the built-in choice when fn returns other than 0 */
int classify_run(struct admit_classify *c, admit_classifier_fn fn, void *arg);
/** loads the plugin at path (dlopen(3): a name without '/' is searched for like a library)
 *  and fills fn with its classifier, to be called with arg NULL; the plugin stays loaded for
 *  the life of the process. 0, or -1 with a reason in err (no such file, not a plugin, built
 *  for another ABI) */
int classify_plugin_open(const char *path, admit_classifier_fn *fn, char *err, size_t errlen);

#endif
