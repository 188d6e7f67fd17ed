/* libFuzzer harness for the SP framing parser (wire/spframe.h): any stream is survived, and
 * reading it through a reader's one bounded buffer, in pieces of any sizes, finds exactly
 * what parsing it whole finds: the same messages, byte for byte, and the same end.
 *
 * The first byte picks the transport (bit 0: ipc) and the maximum body (the rest, from a
 * short list that has 0 and admitd's 2048), the second seeds the piece sizes; the rest is
 * the stream. The reader's buffer is exactly SPFRAME_PREFIX_MAX + max + 1 bytes on the heap,
 * as spsub's is, so a parser that let the rest outgrow it is caught by the sanitizer and by
 * the check that a read always has room. */
#include "wire/spframe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MSGS 4096

/* What a parse of the stream found: each message's offset in the stream and length, and
 * how it ended (SPFRAME_NEED, or an error). */
struct found {
    size_t n, off[MAX_MSGS], len[MAX_MSGS];
    enum spframe_result end;
};

static void check_unit(const struct spframe *f, enum spframe_result r, const struct spframe_unit *u,
                       const uint8_t *buf, size_t len)
{
    if (u->used > len)
        abort();
    if (r == SPFRAME_MESSAGE && (u->len > f->max || u->body < buf || u->body + u->len > buf + len ||
                                 u->body + u->len != buf + u->used))
        abort();
    if (r == SPFRAME_HELLO && u->used != SPFRAME_HELLO_LEN)
        abort();
    if (r != SPFRAME_MESSAGE && r != SPFRAME_HELLO && u->used != 0)
        abort();
}

/* The whole stream at once. */
static void whole(enum spframe_mode mode, size_t max, const uint8_t *s, size_t len,
                  struct found *out)
{
    struct spframe f;
    size_t off = 0;

    spframe_init(&f, mode, SPFRAME_PROTO_PUB0, max);
    out->n = 0;
    for (;;) {
        struct spframe_unit u;
        enum spframe_result r = spframe_next(&f, s + off, len - off, &u);

        check_unit(&f, r, &u, s + off, len - off);
        if (r != SPFRAME_HELLO && r != SPFRAME_MESSAGE) {
            out->end = r;
            return;
        }
        if (r == SPFRAME_MESSAGE && out->n < MAX_MSGS) {
            out->off[out->n] = (size_t) (u.body - s);
            out->len[out->n++] = u.len;
        }
        off += u.used;
    }
}

/* The stream in pieces through one buffer, as spsub reads a socket; compared as it goes. */
static void pieces(enum spframe_mode mode, size_t max, uint8_t seed, const uint8_t *s, size_t len,
                   const struct found *ref)
{
    size_t cap = SPFRAME_PREFIX_MAX + max + 1, have = 0, fed = 0, n = 0;
    uint8_t *buf = malloc(cap);
    uint32_t rng = seed * 2654435761u + 1;
    struct spframe f;
    enum spframe_result end = SPFRAME_NEED;

    if (buf == NULL)
        abort();
    spframe_init(&f, mode, SPFRAME_PROTO_PUB0, max);
    while (fed < len && end == SPFRAME_NEED) {
        size_t room = cap - have, take, off = 0;

        if (room == 0)
            abort(); /* the invariant of wire/spframe.h */
        rng = rng * 1103515245u + 12345u;
        take = 1 + (rng >> 16) % room;
        if (take > len - fed)
            take = len - fed;
        memcpy(buf + have, s + fed, take);
        have += take;
        fed += take;
        for (;;) {
            struct spframe_unit u;
            enum spframe_result r = spframe_next(&f, buf + off, have - off, &u);

            check_unit(&f, r, &u, buf + off, have - off);
            if (r != SPFRAME_HELLO && r != SPFRAME_MESSAGE) {
                end = r;
                break;
            }
            if (r == SPFRAME_MESSAGE && n < ref->n) {
                if (u.len != ref->len[n] || memcmp(u.body, s + ref->off[n], u.len) != 0)
                    abort();
            }
            n += r == SPFRAME_MESSAGE;
            off += u.used;
        }
        memmove(buf, buf + off, have - off);
        have -= off;
    }
    if ((n < MAX_MSGS || ref->n < MAX_MSGS) && n != ref->n)
        abort();
    if (end != ref->end)
        abort();
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t maxes[] = {0, 1, 7, 64, 300, 2048};
    static struct found ref;
    enum spframe_mode mode;
    size_t max;

    if (size < 2)
        return 0;
    mode = data[0] & 1 ? SPFRAME_IPC : SPFRAME_TCP;
    max = maxes[(data[0] >> 1) % (sizeof maxes / sizeof *maxes)];
    whole(mode, max, data + 2, size - 2, &ref);
    pieces(mode, max, data[1], data + 2, size - 2, &ref);
    return 0;
}
