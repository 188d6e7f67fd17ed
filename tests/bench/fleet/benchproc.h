/* benchproc: what the fleet benches read of their own process (CPU, clock, /proc). */
#ifndef ADMIT_BENCHPROC_H
#define ADMIT_BENCHPROC_H

struct event_base;

/** user + system CPU seconds of this process, all its threads (getrusage) */
double cpu_s(void);
/** seconds on the monotonic clock */
double mono_s(void);
/** runs base's loop for s seconds */
void run_for(struct event_base *base, double s);
/** the number after "KEY:" in /proc/self/status (VmRSS, Threads, ...), -1 if absent */
long status_field(const char *key);

#endif
