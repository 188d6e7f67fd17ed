/* spframe: SP header and message framing, parsed in place (see spframe.h). */
#include "wire/spframe.h"

#include <string.h>

/* The header's fixed part: the magic and SP version 0. */
static const unsigned char sp_magic[4] = {0x00, 'S', 'P', 0x00};
/* ipc's message type: the only one nng sends. */
#define IPC_MSG_TYPE 0x01

static uint64_t get_be64(const unsigned char *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

void spframe_init(struct spframe *f, enum spframe_mode mode, uint16_t peer, size_t max)
{
    f->mode = mode;
    f->peer = peer;
    f->max = max;
    f->hello_seen = 0;
}

void spframe_hello(uint16_t self, unsigned char out[SPFRAME_HELLO_LEN])
{
    memcpy(out, sp_magic, sizeof sp_magic);
    out[4] = (unsigned char) (self >> 8);
    out[5] = (unsigned char) (self & 0xff);
    out[6] = 0;
    out[7] = 0;
}

size_t spframe_prefix(enum spframe_mode mode, size_t len, unsigned char out[SPFRAME_PREFIX_MAX])
{
    size_t n = 0;

    if (mode == SPFRAME_IPC)
        out[n++] = 0x01;
    for (int i = 7; i >= 0; i--)
        out[n++] = (unsigned char) ((uint64_t) len >> (8 * i));
    return n;
}

/* The peer's header, all 8 bytes of it at b. As nng does, the whole header is awaited
 * before it is judged (a peer that trickles it is cut off by the caller's deadline). */
static enum spframe_result take_hello(struct spframe *f, const unsigned char *b,
                                      struct spframe_unit *u)
{
    u->proto = (uint16_t) (b[4] << 8 | b[5]);
    if (memcmp(b, sp_magic, sizeof sp_magic) != 0 || b[6] != 0 || b[7] != 0)
        return SPFRAME_NOT_SP;
    if (u->proto != f->peer)
        return SPFRAME_WRONG_PEER;
    f->hello_seen = 1;
    u->used = SPFRAME_HELLO_LEN;
    return SPFRAME_HELLO;
}

enum spframe_result spframe_next(struct spframe *f, const void *buf, size_t len,
                                 struct spframe_unit *u)
{
    const unsigned char *b = buf;
    size_t prefix = f->mode == SPFRAME_IPC ? SPFRAME_PREFIX_MAX : 8;
    uint64_t body;

    memset(u, 0, sizeof *u);
    if (!f->hello_seen)
        return len < SPFRAME_HELLO_LEN ? SPFRAME_NEED : take_hello(f, b, u);
    /* ipc's type byte is judged as soon as it is there: nothing else can follow a bad one. */
    if (f->mode == SPFRAME_IPC && len >= 1 && b[0] != IPC_MSG_TYPE)
        return SPFRAME_BAD_TYPE;
    if (len < prefix)
        return SPFRAME_NEED;
    body = get_be64(b + prefix - 8);
    /* Refused before the body is read: the buffer never has to hold more than the max. */
    if (body > f->max) {
        u->announced = body;
        return SPFRAME_TOO_LONG;
    }
    if (len - prefix < body)
        return SPFRAME_NEED;
    u->used = prefix + (size_t) body;
    u->body = b + prefix;
    u->len = (size_t) body;
    return SPFRAME_MESSAGE;
}

const char *spframe_result_name(enum spframe_result r)
{
    switch (r) {
    case SPFRAME_NEED:
        return "incomplete";
    case SPFRAME_HELLO:
        return "header";
    case SPFRAME_MESSAGE:
        return "message";
    case SPFRAME_NOT_SP:
        return "not an SP header";
    case SPFRAME_WRONG_PEER:
        return "wrong peer protocol";
    case SPFRAME_BAD_TYPE:
        return "bad ipc message type";
    case SPFRAME_TOO_LONG:
        return "message too long";
    }
    return "unknown";
}
