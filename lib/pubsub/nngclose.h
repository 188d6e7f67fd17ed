/* nngclose: closing an nng socket without risking a hung process.
 *
 * nng 1.5.2 (Debian 12's) can block forever in nng_close: now and then a pipe that was being
 * set up or torn down is never reaped, and the close waits for it (nng issues #1543, #1813;
 * reworked in later releases). We only close sockets when a program is ending, so the close
 * runs on a helper thread and the caller waits a bounded time: a close that does not finish
 * is abandoned, and the operating system reclaims the socket when the process exits. The
 * same goes for nng_fini, which closes whatever is left and waits for nng's reaper. */
#ifndef ADMIT_NNGCLOSE_H
#define ADMIT_NNGCLOSE_H

#include <nng/nng.h>

/** closes s, waiting at most timeout_ms; 0 when closed, -1 when the close was left running */
int nngc_close(nng_socket s, int timeout_ms);
/** nng_fini() with the same deadline, last thing before a program returns from main: nng
 *  frees closed sockets' pipes and endpoints on its own reaper thread, and exiting while
 *  it works makes the leak checker report them; nng_fini waits for the reaper */
int nngc_fini(int timeout_ms);
/** the last step of a program's main: nngc_fini, and when nng is wedged (a close or the fini
 *  did not finish) a warning and _exit(rc) at once. Exit-time handlers are skipped on
 *  purpose: the leak checker would report the wedged socket's memory, which only the
 *  operating system can take back now */
void nngc_finish(int rc, int timeout_ms);

#endif
