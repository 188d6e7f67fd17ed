/* spaddr: ipc:// URLs as socket addresses (see spaddr.h). */
#include "pubsub/spaddr.h"

#include <stdio.h>
#include <string.h>
#include <sys/un.h>

int spaddr_ipc(const char *url, struct sockaddr_storage *sa, socklen_t *salen, char *err,
               size_t errlen)
{
    struct sockaddr_un *su = (struct sockaddr_un *) sa;
    size_t n = strlen(url + 6);

    /* sun_path needs its terminating NUL: a path that fills it would be cut by the kernel. */
    if (n == 0 || n >= sizeof su->sun_path) {
        snprintf(err, errlen, "an ipc path of 1 to %zu bytes", sizeof su->sun_path - 1);
        return -1;
    }
    memset(sa, 0, sizeof *sa);
    su->sun_family = AF_UNIX;
    memcpy(su->sun_path, url + 6, n + 1);
    *salen = (socklen_t) sizeof *su;
    return 0;
}
