/* optdefs: ranges and defaults of the settings admitd and admit-router share.
 *
 * Both daemons run the same proxy and the same drain, so their timeouts, limits and overload
 * status obey one rule; each option table (src/admitd/config.c, src/router/config.c) takes
 * these rows' numbers from here, and the daemons cannot drift apart. */
#ifndef ADMIT_OPTDEFS_H
#define ADMIT_OPTDEFS_H

/* The overload status used when none (or an unusable one) is configured. */
#define CFG_DEFAULT_OVERLOAD_STATUS 529
/* Dynamo's default queue limit Q. */
#define CFG_DEFAULT_QUEUE_LIMIT 16

/* Range and default (min, max, "default") of the settings admit-router shares with admitd,
 * for the two option tables: the rule is written once, so the daemons cannot drift apart. */
#define CFG_DEF_OVERLOAD_STATUS     200, 999, "529"
#define CFG_DEF_RETRY_AFTER         1, 3600, "auto"
#define CFG_DEF_UPSTREAM_TIMEOUT_MS 1, 86400000, "600000"
#define CFG_DEF_CLIENT_TIMEOUT_MS   1, 86400000, "60000"
/* A request head's deadline from its first byte (HAProxy's `timeout http-request`, nginx's
 * `client_header_timeout`): HAProxy's usual 10 s; a head comes in one segment. */
#define CFG_DEF_CLIENT_HEADER_TIMEOUT_MS 1, 86400000, "10000"
/* Client connections at once (HAProxy's maxconn): 0 derives it from the open-file limit
 * (net/acceptor.h's acc_auto_cap). */
#define CFG_DEF_MAX_CLIENT_CONNECTIONS 0, 1000000, "0"
#define CFG_DEF_MAX_HEADER_BYTES       1024, 16777216, "65536"
#define CFG_DEF_MAX_BODY_BYTES         1, 1073741824, "33554432"
#define CFG_DEF_UPSTREAM_KEEPALIVE     0, 100000, "64"
#define CFG_DEF_STREAM_BUFFER_BYTES    4096, 1073741824, "262144"
#define CFG_DEF_DRAIN_TIMEOUT_MS       0, 86400000, "30000"

#endif
