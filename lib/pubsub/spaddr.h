/* spaddr: the socket address of an SP ipc:// URL, for our reader (spsub) and PUB (sppub). */
#ifndef ADMIT_SPADDR_H
#define ADMIT_SPADDR_H

#include <stddef.h>
#include <sys/socket.h>

/** url, which starts with "ipc://", as a Unix socket address in sa (its path is the rest of
 *  the URL, as nng reads it); 0, or -1 with err when the path is empty or too long */
int spaddr_ipc(const char *url, struct sockaddr_storage *sa, socklen_t *salen, char *err,
               size_t errlen);

#endif
