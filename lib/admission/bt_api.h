/* bt_api: the /busy_threshold endpoint of admit-router, as a pure function.
 *
 * Operators tune busy thresholds per model while the router runs, with the same request and
 * response bodies and status codes as NVIDIA Dynamo's busy_threshold.rs, so their scripts work
 * against either. Keeping the HTTP semantics here, without sockets, lets the tests and the
 * fuzzer drive every status code; the router's I/O only copies method, header and body in and
 * the response out.
 *
 *   GET  -> 200 {"thresholds":[{"model":m, <three fields, null when unset>}, ...]}
 *   POST {"model":m}                -> 200 the model's thresholds (all null if unknown)
 *   POST {"model":m, <any field>}   -> 200 set those fields only (null = not given), echoed
 * Errors, all {"error":"..."}: 400 invalid JSON or a threshold out of range, 404 a set for a
 * model that is not registered, 405 other methods, 413 body over BT_API_BODY_MAX, 415 content
 * type not application/json, 422 a valid JSON document of the wrong shape or types. */
#ifndef ADMIT_BT_API_H
#define ADMIT_BT_API_H

#include "util/buf.h"
#include "admission/busy.h"

#include <stddef.h>

/* Largest request body accepted, in bytes. */
#define BT_API_BODY_MAX (64 * 1024)
/* Most models a registry holds; further registrations are ignored. Those learned from the
 * workers' lists are forgotten when no worker lists them (bt_registry_forget), so a worker
 * holds at most the ADMIT_LOAD_MODELS_MAX names of its newest list. */
#define BT_API_MODELS_MAX 1024

/* A registry of thresholds per model name (small: searched linearly). */
struct bt_registry;

/** creates a registry; defaults are the thresholds a newly registered model starts with */
struct bt_registry *bt_registry_new(const struct busy_thresholds *defaults);
/** frees the registry (NULL is fine) */
void bt_registry_free(struct bt_registry *r);
/** registers a model the router knows (from its config), for good; twice is once */
void bt_registry_add_model(struct bt_registry *r, const char *model);
/** registers a model a worker serves (bt_registry_forget may take it back); one registered
 *  already stays as it is. 0, or -1 when the registry is full or the name is not UTF-8 */
int bt_registry_learn(struct bt_registry *r, const char *model);
/** no worker serves model any more: a learned one goes, unless a POST set one of its
 *  thresholds (an operator's word, kept as the config's models are) */
void bt_registry_forget(struct bt_registry *r, const char *model);
/** replaces the defaults (a reload of the config): every model's thresholds follow them, but
 *  for the fields a POST set for that model, which keep the value it set */
void bt_registry_set_defaults(struct bt_registry *r, const struct busy_thresholds *defaults);
/** the thresholds in force for a model (the defaults for an unknown one) */
void bt_registry_get(const struct bt_registry *r, const char *model, struct busy_thresholds *out);
/** handles one request (method, Content-Type or NULL, body); JSON into out; returns the status */
int bt_api_handle(struct bt_registry *r, const char *method, const char *content_type,
                  const char *body, size_t len, struct buf *out);

#endif
