/* nngrecv: a message copied out of nng (see nngrecv.h). */
#include "pubsub/nngrecv.h"

#include <string.h>

int nngrecv(nng_socket s, char *buf, size_t *len)
{
    size_t n = NNGRECV_BUF;
    int rv = nng_recv(s, buf, &n, NNG_FLAG_NONBLOCK);

    /* nng copies at most the buffer's size and reports the whole message's length. */
    *len = n < NNGRECV_BUF ? n : NNGRECV_BUF;
    return rv;
}

int nngrecv_from(nng_socket s, char *buf, size_t *len, nng_dialer *from)
{
    nng_msg *msg;
    size_t n;
    int rv = nng_recvmsg(s, &msg, NNG_FLAG_NONBLOCK);

    if (rv != 0)
        return rv;
    n = nng_msg_len(msg);
    *len = n < NNGRECV_BUF ? n : NNGRECV_BUF;
    memcpy(buf, nng_msg_body(msg), *len);
    *from = nng_pipe_dialer(nng_msg_get_pipe(msg));
    nng_msg_free(msg);
    return 0;
}
