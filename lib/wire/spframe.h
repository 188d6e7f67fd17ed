/* spframe: the framing of nng's SP protocols on a byte stream, parsed from a buffer.
 *
 * What nng's tcp:// and ipc:// transports put on the wire (the nanomsg RFCs sp-tcp-mapping
 * and sp-ipc-mapping; checked against Debian's libnng 1.5.2, see lib/pubsub/spsub.h):
 *
 *   the header, 8 bytes, sent by each side as soon as the connection is up (neither waits
 *   for the other's): 0x00 'S' 'P' 0x00, the sender's protocol as a 16-bit big-endian
 *   number (PUB0 0x0020, SUB0 0x0021), two reserved bytes that must be zero;
 *   then messages: tcp, an 8-byte big-endian body length and the body; ipc, the same with a
 *   message-type byte before the length, always 0x01.
 *
 * The parser knows nothing of sockets: the caller reads into a buffer of its own and asks
 * spframe_next for the next unit (the header, or one message) at its start, again and again
 * until it says SPFRAME_NEED. A unit is never copied: a message's body points into the
 * buffer. The caller keeps the bytes a unit did not use and reads more after them.
 *
 * Invariant for a reader with one fixed buffer: what is left after every unit was taken is
 * shorter than SPFRAME_PREFIX_MAX + max, so a buffer of that size plus one byte always has
 * room to read into; a longer message is refused (SPFRAME_TOO_LONG) as soon as its length is
 * known, before its body is read. */
#ifndef ADMIT_SPFRAME_H
#define ADMIT_SPFRAME_H

#include <stddef.h>
#include <stdint.h>

/* The SP header's length, and the protocol numbers of pub/sub version 0. */
#define SPFRAME_HELLO_LEN  8
#define SPFRAME_PROTO_PUB0 0x0020
#define SPFRAME_PROTO_SUB0 0x0021
/* The longest framing before a body: ipc's type byte and 8-byte length. */
#define SPFRAME_PREFIX_MAX 9

/* Which transport's framing. */
enum spframe_mode {
    SPFRAME_TCP, /* length, body */
    SPFRAME_IPC  /* 0x01, length, body */
};

/* What spframe_next found at the start of the buffer. The ones after SPFRAME_MESSAGE are
 * protocol errors: the stream cannot go on, the connection is to be dropped. */
enum spframe_result {
    SPFRAME_NEED = 0,   /* not a whole unit yet: read more */
    SPFRAME_HELLO,      /* the peer's header, accepted */
    SPFRAME_MESSAGE,    /* one message (body, len) */
    SPFRAME_NOT_SP,     /* the header is not SP's (magic, version or reserved bytes wrong) */
    SPFRAME_WRONG_PEER, /* an SP header, of a protocol other than the one expected */
    SPFRAME_BAD_TYPE,   /* ipc: a message type other than 0x01 */
    SPFRAME_TOO_LONG    /* a message announced longer than the maximum */
};

/* One connection's parsing state. */
struct spframe {
    enum spframe_mode mode;
    uint16_t peer;  /* the protocol the peer must announce */
    size_t max;     /* the longest body accepted */
    int hello_seen; /* the peer's header was taken: messages follow */
};

/* A unit found: how many bytes of the buffer it took, and for a message its body. */
struct spframe_unit {
    size_t used;               /* bytes to drop from the buffer's start (0 unless a unit) */
    const unsigned char *body; /* SPFRAME_MESSAGE: the body, inside the buffer */
    size_t len;                /* SPFRAME_MESSAGE: its length */
    uint64_t announced;        /* SPFRAME_TOO_LONG: the length the peer announced */
    uint16_t proto;            /* SPFRAME_HELLO, SPFRAME_WRONG_PEER: the peer's protocol */
};

/** starts f for a new connection: nothing seen, the peer's header comes first */
void spframe_init(struct spframe *f, enum spframe_mode mode, uint16_t peer, size_t max);
/** writes the header announcing protocol self into out */
void spframe_hello(uint16_t self, unsigned char out[SPFRAME_HELLO_LEN]);
/** writes the framing that goes before a body of len bytes into out; its length */
size_t spframe_prefix(enum spframe_mode mode, size_t len, unsigned char out[SPFRAME_PREFIX_MAX]);
/** the next unit at the start of buf[0..len); u->used bytes of it are taken (0 with
 *  SPFRAME_NEED and with an error, after which f must not be used until spframe_init) */
enum spframe_result spframe_next(struct spframe *f, const void *buf, size_t len,
                                 struct spframe_unit *u);
/** a short name of a result ("too long"), for logs */
const char *spframe_result_name(enum spframe_result r);

#endif
