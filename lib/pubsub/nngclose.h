/* nngclose: closing an nng socket without risking a hung process.
 *
 * nng 1.5.2 (Debian 12's) can block forever in nng_close: now and then a pipe that was being
 * set up or torn down is never reaped, and the close waits for it (nng issues #1543, #1813;
 * reworked in later releases). A socket closed while its dialer connects can also lose the
 * dialer and its pipe, memory nobody frees. Hence two rules:
 *
 * At exit nothing of nng is torn down. pub_free, sub_free and feed_free free our side and
 * leave every socket open; there is no nng_close and no nng_fini, and the operating system
 * reclaims sockets and threads when the process ends, as it would after SIGKILL. Shutdown
 * cannot hang on nng, and everything nng allocated is still reachable from nng's own lists
 * and threads when LeakSanitizer looks, so the leak check needs no suppression and sees
 * every allocation of ours, messages received from nng included.
 *
 * A socket closed while the program runs is closed on a helper thread with a deadline,
 * nngc_close: a close that does not finish is abandoned to the exit. admit-router's
 * subscriber to a worker that left the fleet (sub_close) closes only its dialer on the
 * shared subscriber socket (see subscribe.c), the same way: nngc_dialer_close. */
#ifndef ADMIT_NNGCLOSE_H
#define ADMIT_NNGCLOSE_H

#include <nng/nng.h>

/** closes s, waiting at most timeout_ms; 0 when closed, -1 when the close was left running */
int nngc_close(nng_socket s, int timeout_ms);
/** nng_dialer_close(d) the same way, the dialer's socket left open; 0 when closed (or gone
 *  already), -1 when the close was left running */
int nngc_dialer_close(nng_dialer d, int timeout_ms);
/** nng_fini() with the same deadline, for tests that close every socket they opened and
 *  want nng's reaper done before the leak check; 0, or -1 when it did not finish */
int nngc_fini(int timeout_ms);

#endif
