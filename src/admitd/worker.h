/* worker: one admitd, wired together.
 *
 * Owns the proxy, the metrics listener, the engine pollers (readiness and metrics scrape),
 * the load publisher and, with --mock-engine, the built-in engine; and keeps the last
 * engine scrape from which load messages are composed. main() only parses options, runs
 * the event loop and frees the worker. */
#ifndef ADMIT_WORKER_H
#define ADMIT_WORKER_H

#include "config.h"

#include <stddef.h>

struct event_base;
struct worker;

/** builds and binds everything; on failure returns NULL with err set (cfg may be adjusted:
 *  the upstream of --mock-engine, the derived worker id) */
struct worker *worker_start(struct event_base *base, struct cfg *cfg, char *err, size_t errlen);
/** writes the one-line "ready ..." summary scripts wait for */
void worker_describe(const struct worker *w, char *out, size_t outlen);
/** starts a graceful drain (SIGTERM); returns 1 if one was already under way (a second
 *  signal: the caller exits at once) */
int worker_drain(struct worker *w);
/** re-reads the configuration (SIGHUP) and applies what can change live; a bad file keeps
 *  the running configuration; returns 0 or -1 */
int worker_reload(struct worker *w, int argc, char **argv, cfg_env_fn env);
/** stops and frees everything; NULL is a no-op */
void worker_free(struct worker *w);

#endif
