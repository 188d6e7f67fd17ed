/* nngrecv: a message copied out of nng (see nngrecv.h). */
#include "pubsub/nngrecv.h"

int nngrecv(nng_socket s, char *buf, size_t *len)
{
    size_t n = NNGRECV_BUF;
    int rv = nng_recv(s, buf, &n, NNG_FLAG_NONBLOCK);

    /* nng copies at most the buffer's size and reports the whole message's length. */
    *len = n < NNGRECV_BUF ? n : NNGRECV_BUF;
    return rv;
}
