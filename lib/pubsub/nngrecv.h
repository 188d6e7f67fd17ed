/* nngrecv: receiving a load message into a buffer of ours.
 *
 * nng_recvmsg hands over a message that the caller must free. Forgetting that free is a leak
 * the leak checker cannot see: nng never releases its sockets here (nngclose.h), and its
 * queues keep stale pointers to the messages they passed on, so a dropped message stays
 * "reachable". Copying each message out (nng_recv without NNG_FLAG_ALLOC; nng frees its own
 * copy at once) means nothing nng allocated is ever ours to free. Load messages are small
 * (ADMIT_LOAD_MSG_MAX), so the copy is a few hundred bytes. */
#ifndef ADMIT_NNGRECV_H
#define ADMIT_NNGRECV_H

#include "admit/load.h"

#include <nng/nng.h>
#include <stddef.h>

/* One byte more than a valid message may have: a longer one arrives cut to this size, which
 * the decoder then refuses as too long, never as a valid shorter message. */
#define NNGRECV_BUF (ADMIT_LOAD_MSG_MAX + 1)

/** receives one message without blocking into buf (NNGRECV_BUF bytes): its length, at most
 *  NNGRECV_BUF, in *len; 0, or nng's error (NNG_EAGAIN when none is waiting) */
int nngrecv(nng_socket s, char *buf, size_t *len);
/** as nngrecv, and the dialer whose pipe carried the message in *from (an id of -1 when the
 *  pipe is gone, or was not a dialer's): the message is taken as an nng_msg, copied out and
 *  freed at once, so that here too nothing of nng's stays ours */
int nngrecv_from(nng_socket s, char *buf, size_t *len, nng_dialer *from);

#endif
