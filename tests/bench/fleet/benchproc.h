/* benchproc: what the fleet benches read of their own process (CPU, /proc) and of fleetpub's
 * list of publishers. */
#ifndef ADMIT_BENCHPROC_H
#define ADMIT_BENCHPROC_H

#include <stddef.h>

struct event_base;

/** user + system CPU seconds of this process, all its threads (getrusage) */
double cpu_s(void);
/** runs base's loop for s seconds */
void run_for(struct event_base *base, double s);
/** the number after "KEY:" in /proc/self/status (VmRSS, Threads, ...), -1 if absent */
long status_field(const char *key);
/** the publishers' URLs in fleetpub's --out file (one `http://H:P=URL` line each: what
 *  follows the last '='), *n of them; exits on a file that cannot be read */
char **read_urls(const char *path, size_t *n);

#endif
