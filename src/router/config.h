/* config: admit-router's settings, from the same option engine as admitd's (config/opt.h).
 *
 * Every option is a flag, an environment variable (ADMIT_ROUTER_<FLAG>, or Dynamo's name
 * where there is one) and a key of the YAML file (--config or ADMIT_ROUTER_CONFIG); flag >
 * environment > file > default. Lists (worker, model) come from repeated flags or from
 * comma-separated values, and the highest source that gives one replaces the others. All
 * of it is checked at parse time, workers included (and the workers file read), so
 * --check-config catches what a start would refuse; at least one of --worker, --workers-file
 * and --worker-dns (or their --prefill-... and --decode-... forms, which give their workers a
 * role) is required, and a worker or a name given two roles by these options is refused. The policy
 * classes (classes.h) are structures, not single values: they are read only from the file, from the
 * same text as its settings, and have no flag or variable (both are refused, naming the file as the
 * place for them). Pure: nothing here binds or dials. */
#ifndef ADMIT_ROUTER_CONFIG_H
#define ADMIT_ROUTER_CONFIG_H

#include "classes.h"
#include "admission/busy.h"
#include "util/log.h"
#include "util/netaddr.h"
#include "config/opt.h"
#include "config/optdefs.h"
#include "wlist.h"

#include <stddef.h>
#include <stdio.h>

/* --dns-family: A records, AAAA records, or one and then the other when the first has none
 * (a dual-stack pod's two addresses are one worker, so never both at once). */
enum rc_dns_family { RC_DNS_V4, RC_DNS_V6, RC_DNS_V4_PREFERRED, RC_DNS_V6_PREFERRED };

struct router_cfg {
    struct opt_list workers;            /* "PROXY_URL=PUB_URL", each checked: role as published */
    struct opt_list prefill_workers;    /* the same, workers of the prefill role (issue 27) */
    struct opt_list decode_workers;     /* the same, workers of the decode role */
    char workers_file[512];             /* a file of workers, re-read on SIGHUP ("" = none) */
    struct wlist file_workers;          /* what it held when the config was read (canonical) */
    struct opt_list worker_dns;         /* "NAME:HTTP_PORT:PUB_PORT", each checked */
    struct opt_list prefill_worker_dns; /* the same, their workers of the prefill role */
    struct opt_list decode_worker_dns;  /* the same, their workers of the decode role */
    unsigned dns_interval_ms;           /* the names are resolved again this often */
    char dns_nameserver[NETADDR_HOST_MAX + 8]; /* "IP:PORT" for evdns; "" = resolv.conf */
    enum rc_dns_family dns_family;             /* which records a name's workers come from */
    int subscriber_nng;             /* --subscriber=nng: nng's SUB for every worker (else auto) */
    unsigned load_batch_ms;         /* auto's reader: passes this often (0: on each message) */
    struct opt_list models;         /* models whose thresholds /busy_threshold may change */
    struct hostport listen;         /* client listener */
    struct hostport metrics_listen; /* /metrics, /load, /health, /ready */
    struct busy_thresholds t;       /* the defaults of every model; unset = never busy */
    int overload_status;            /* every worker busy: 200..999 */
    int track_output_blocks;        /* book output blocks as they are generated */
    unsigned kv_block_size;         /* block size of workers that do not report theirs */
    double chars_per_token;         /* prompt text per token, for the booking */
    double kv_overlap_weight;       /* prefill's weight in the cost; 0: load only, no index */
    unsigned router_ttl_secs;       /* an indexed block's life since it was last routed */
    unsigned kv_predicted_ttl_ms;   /* ... an event worker's exact one's (the side table) */
    unsigned router_max_tree_size;  /* blocks each prefix index holds at most */
    int tokenize;                   /* key text requests by the ids a worker's /tokenize gives */
    unsigned tokenize_timeout_ms;   /* ... waiting this long at most, then the text keys */
    unsigned missed_heartbeats;     /* a worker silent this many heartbeats is not routable */
    unsigned max_heartbeat_ms;      /* a heartbeat_ms above this counts as this */
    unsigned upstream_timeout_ms;   /* a worker silent this long: 504 (or a cut stream) */
    unsigned client_timeout_ms;     /* a client idle this long: closed */
    unsigned client_header_timeout_ms; /* a request head not whole this long: 408 */
    unsigned max_client_connections;   /* open at once; 0 = from the open-file limit */
    unsigned max_header_bytes;         /* request headers larger than this: 400 */
    unsigned max_body_bytes;           /* request bodies larger than this: 413 */
    unsigned upstream_keepalive;       /* idle worker connections kept for reuse */
    unsigned stream_buffer_bytes;      /* pause reading a worker above this much unsent */
    unsigned retry_after_s;            /* Retry-After on overload answers; 0 = estimate it */
    unsigned drain_timeout_ms;         /* on SIGTERM, wait this long for requests in flight */
    char admin_token[128];             /* "" = POST /busy_threshold open to anyone (Dynamo) */
    char classifier_plugin[512];       /* a classifier's shared object ("" = none) */
    enum log_level log_level;
    int log_json;                  /* log lines as JSON objects */
    int access_log;                /* one line per finished request */
    char config_path[512];         /* the YAML file read ("" = none) */
    struct router_classes classes; /* the file's policy classes; n == 0: none (no queue) */
};

/** fills c: defaults < file < env < argv, workers checked; on OPT_ERROR err says what, where */
enum opt_result router_cfg_parse(struct router_cfg *c, int argc, char **argv, opt_env_fn env,
                                 char *err, size_t errlen);
/** a reload's reading (SIGHUP): the same sources, precedence and checks as
 *  router_cfg_parse's, but the workers file is not read (discovery reads it, as a step of its
 *  own); 0 with c filled, or -1 with err (c empty) */
int router_cfg_reparse(struct router_cfg *c, int argc, char **argv, opt_env_fn env, char *err,
                       size_t errlen);
/** compares next (just read) with cur (what runs): each setting that changed is named in the
 *  log; those that need a restart (listeners, the DNS server, the selection view's defaults,
 *  connection limits and pools, the classifier plugin) get cur's value back in next. Returns
 *  how many of those there were. The lists and the classes are not compared here */
size_t router_cfg_diff(const struct router_cfg *cur, struct router_cfg *next);
/** where each class of cur goes in next: map[i] (room for cur->n) is the class of next with
 *  cur's class i's name, else next's default class (-1 when next has none) */
void router_cfg_class_map(const struct router_classes *cur, const struct router_classes *next,
                          int *map);
/** the Retry-After of c's overload answers, in seconds: --retry-after-s, or the least */
int router_cfg_retry_after(const struct router_cfg *c);
/** frees c's lists and classes; safe after any result and twice */
void router_cfg_free(struct router_cfg *c);
/** prints the --help text */
void router_cfg_usage(FILE *out);

#endif
