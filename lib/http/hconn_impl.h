/* hconn_impl: the listener and its connections, private to the hconn module, which is three
 * files: hlisten.c (accepting, the pool of connection structs, the heads and Date of the
 * answers made here), hconn.c (one connection's events, answering its requests in order,
 * timeouts, closing) and hconn_read.c (a request out of the connection's buffer: head, body,
 * handing it to the owner).
 *
 * Life of a connection:
 *
 *   HEAD --head parsed--> BODY --body read--> BUSY (the owner has the request) --hc_end-->
 *   FLUSH (the answer is being written) --written--> HEAD (keep-alive) or LINGER --> closed
 *
 * A closed connection goes back to the pool (hc_recycle) only when no call that uses it is
 * on the stack: depth counts those calls, and hc_close asked for inside them leaves the
 * recycling to the last one as it returns. */
#ifndef ADMIT_HCONN_IMPL_H
#define ADMIT_HCONN_IMPL_H

#include "util/buf.h"
#include "wire/h1body.h"
#include "wire/h1parse.h"
#include "http/hconn.h"
#include "http/ioconn.h"

#include <arpa/inet.h>
#include <event2/event_struct.h>
#include <stdint.h>
#include <sys/queue.h>
#include <time.h>

/* Field lines a request may have (HAProxy's default is 101). */
#define HC_MAX_HEADERS 64
/* Field lines a connection keeps inline: LLM SDKs send about 12. A head with more takes a
 * larger array, once per connection. Every open request carries these slots, so they are
 * counted: the parse itself runs in the listener's HC_MAX_HEADERS slots. */
#define HC_INLINE_HEADERS 14

enum hc_state {
    HC_HEAD,   /* reading a head (or idle between requests) */
    HC_BODY,   /* reading the body */
    HC_BUSY,   /* the owner has the request */
    HC_FLUSH,  /* the answer is complete and being written */
    HC_LINGER, /* closing gracefully: sending side shut, reading what still comes */
    HC_CLOSED  /* to be freed */
};

struct hconn {
    struct ioconn io;
    struct hlisten *l;
    struct event tmo; /* idle, write and linger timeouts */
    enum hc_state state;
    int depth;              /* calls using the connection on the stack */
    int keep;               /* after this answer: read the next request */
    int tmo_on;             /* tmo armed */
    int kick;               /* bytes of a next request wait: parse them before reading more */
    int in_process;         /* the parsing loop is on the stack and goes on by itself */
    unsigned progress_at;   /* io.progress at the timer's last tick */
    int stalled;            /* bytes were waiting for the client at the last tick */
    void *owner;            /* the owner's state for the request in BUSY */
    struct cwatch *watch;   /* BUSY with a full buffer: a watch for the hang-up */
    struct timeval last;    /* last bytes read (idle timeout) */
    struct timeval head_at; /* when the request head began (the head deadline) */
    int head_on;            /* a head began: the deadline runs (HC_HEAD only) */
    struct h1_parser hp;
    struct h1_body body; /* its body being read */
    const char *hp_base; /* the buffer address the head was parsed at */
    size_t scanned;      /* head bytes already looked at for a line end */
    size_t body_at;      /* offset (from in.off) of the body's first byte */
    size_t body_len;     /* decoded body bytes at body_at */
    size_t raw_at;       /* offset of the next body byte not taken yet */
    size_t req_len;      /* bytes of the whole request from in.off (head and raw body):
                          * with a Content-Length, known from the head */
    int sent_continue;
    struct http_req req;
    char peer[INET6_ADDRSTRLEN];
    LIST_ENTRY(hconn) link;    /* live connections, or the free list */
    struct h1_header *hdr_big; /* HC_MAX_HEADERS slots, for heads with more than the inline */
    struct h1_header hdr[HC_INLINE_HEADERS];
};

struct hlisten {
    struct event_base *base;
    struct hc_limits lim;
    struct hc_ops ops;
    void *arg;
    struct acceptor *acc;
    struct listen_stats *st; /* lim.stats, or own_st */
    struct listen_stats own_st;
    const struct timeval *idle_tv; /* a common timeout: O(1) to arm */
    const struct timeval *head_tv; /* the head deadline, the same way (NULL: none) */
    LIST_HEAD(, hconn) live;
    LIST_HEAD(, hconn) spare; /* closed connections kept for the next accept */
    unsigned nspare;
    time_t date_at;
    char date[32];
    struct buf head; /* the heads hc_reply builds, one at a time */
    /* Where heads are parsed: each parse runs whole in one call (see hconn_read.c's parse_head),
     * so one set of slots serves every connection. */
    struct h1_header slots[HC_MAX_HEADERS];
};

/** sets up a new connection on fd from the pool and starts it (hc_begin) */
void hc_start(struct hlisten *l, int fd, const struct sockaddr *sa);
/** starts reading the first request of a connection just set up */
void hc_begin(struct hconn *c);
/** closes c now and returns it to the pool, unless a call on the stack still uses it */
void hc_close(struct hconn *c);
/** puts a closed connection back in the pool (or frees it) */
void hc_recycle(struct hconn *c);
/** frees c's storage (hl_free) */
void hc_destroy(struct hconn *c);
/** answers status in OpenAI's error shape and closes the connection gracefully after it; the
 *  client's faults go to the refused hook, 500 (no memory for the request) is counted */
void hc_refuse(struct hconn *c, int status, const char *reason);
/** parses what has been read (head, then body) and hands a whole request to the owner; goes
 *  on with pipelined requests answered at once */
void hc_process(struct hconn *c);
/** the most bytes held while a request is read: a head's limit; a body with a length, the
 *  request and a little of the next (so the buffer grows to what this one needs, no more); a
 *  chunked one, its limit and room for the chunk lines */
size_t hc_read_max(const struct hconn *c);

#endif
