/* config: admitd's settings from flags, environment, a YAML file and defaults.
 *
 * Every option has a long flag, an environment variable and a key of the config file; the
 * flag wins over the environment, which wins over the file, which wins over the default.
 * The table of admitd's options lives in config.c; the engine that reads it is config/opt.h.
 * Parsing is pure: the environment comes in through a lookup function so tests can feed a
 * table. Errors name where the bad value came from ("--engine-request-limit",
 * "DYN_ENGINE_REQUEST_LIMIT" or the file's file:line:column) and what was expected. */
#ifndef ADMIT_CONFIG_H
#define ADMIT_CONFIG_H

#include "admit/load.h"
#include "util/log.h"
#include "util/netaddr.h"
#include "config/opt.h"
#include "config/optdefs.h"

#include <stddef.h>
#include <stdio.h>

struct cfg {
    struct hostport listen;            /* client listener */
    struct hostport metrics_listen;    /* /metrics, /health, /ready */
    struct http_url upstream;          /* the engine */
    unsigned engine_request_limit;     /* N; 0 = no cap, requests pass straight through */
    unsigned request_queue_limit;      /* Q >= 2 (meaningful only when N is set) */
    int overload_status;               /* 200..999 */
    unsigned retry_after_s;            /* Retry-After on overload answers; 0 = estimate it */
    unsigned upstream_timeout_ms;      /* engine silent this long: 504 (or a broken stream) */
    unsigned client_timeout_ms;        /* client idle (headers, body, writes) this long: closed */
    unsigned client_header_timeout_ms; /* a request head not whole this long: 408 */
    unsigned max_client_connections;   /* open at once; 0 = from the open-file limit */
    unsigned max_header_bytes;         /* request headers larger than this: 400 */
    unsigned max_body_bytes;           /* request bodies larger than this: 413 */
    unsigned upstream_keepalive;       /* idle engine connections kept for reuse */
    unsigned stream_buffer_bytes;      /* pause reading the engine above this much unsent */
    char health_path[256];             /* engine path probed for /ready */
    unsigned health_interval_ms;       /* how often it is probed */
    enum log_level log_level;
    int mock_engine; /* run the built-in mock engine as the upstream */
    /* Load publishing (see include/admit/load.h). */
    char publish[256];              /* nng PUB URL to listen on; "" = do not publish */
    int publisher_nng;              /* --publisher=nng: nng's PUB (else our own, sppub) */
    char worker_id[128];            /* "" = host:port of the client listener */
    enum admit_load_role role;      /* what part of a request the engine serves (--role) */
    unsigned heartbeat_ms;          /* republish unchanged load this often */
    struct http_url engine_metrics; /* where the engine's /metrics is */
    char engine_metrics_path[256];  /* its path */
    int engine_metrics_set;         /* given explicitly (else: upstream + /metrics) */
    unsigned engine_metrics_interval_ms;
    unsigned engine_models_interval_ms; /* GET /v1/models this often; 0 = never (unknown) */
    unsigned block_size;                /* KV block size when the engine does not report it */
    unsigned max_num_batched_tokens;    /* when the engine does not report it; 0 = unknown */
    unsigned data_parallel_size;        /* ranks; 0 = as the engine reports, else 1 */
    char engine_kv_events[256];         /* the engine's KV events PUB; "" = not read */
    char engine_kv_events_topic[256];   /* their topic ("" = all, vLLM's default) */
    char engine_kv_events_replay[256];  /* the engine's replay ROUTER; "" = none */
    double chars_per_token;             /* prompt text estimate when no token ids are sent */
    /* Operations. */
    unsigned queue_timeout_ms; /* a request waiting longer leaves the queue; 0 = never */
    unsigned drain_timeout_ms; /* on SIGTERM, wait this long for in-flight work */
    char admin_token[128];     /* "" = mutations only from loopback peers */
    int log_json;              /* log lines as JSON objects */
    int access_log;            /* one line per finished request */
    char config_path[512];     /* --config: the YAML file read ("" = none) */
};

/* What cfg_parse asks the caller to do (the engine's results, under admitd's names). */
enum cfg_result {
    CFG_RUN = OPT_RUN,
    CFG_HELP = OPT_HELP,
    CFG_VERSION = OPT_VERSION,
    CFG_CHECK = OPT_CHECK,
    CFG_ERROR = OPT_ERROR
};

/* Looks up an environment variable; NULL when unset. */
typedef opt_env_fn cfg_env_fn;

/** fills c from defaults, then the --config file, then env, then argv (each wins over the
 *  ones before); CFG_CHECK for --check-config; on CFG_ERROR err holds the reason, with
 *  file:line:column for the file */
enum cfg_result cfg_parse(struct cfg *c, int argc, char **argv, cfg_env_fn env, char *err,
                          size_t errlen);
/** Dynamo's overload status rule: 200..999 kept; empty, non-numeric or out of range -> 529 */
int cfg_parse_overload_status(const char *s);
/** prints the --help text */
void cfg_usage(FILE *out, const char *prog);

#endif
