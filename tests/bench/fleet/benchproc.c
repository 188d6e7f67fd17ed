/* benchproc: the fleet benches' measures of their own process, in one place. */
#include "benchproc.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>

double cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double) ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double) ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

double mono_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

void run_for(struct event_base *base, double s)
{
    struct timeval tv;

    tv.tv_sec = (time_t) s;
    tv.tv_usec = (suseconds_t) ((s - (double) tv.tv_sec) * 1e6);
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
}

long status_field(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t kl = strlen(key);

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, key, kl) == 0 && line[kl] == ':')
            v = strtol(line + kl + 1, NULL, 10);
    fclose(f);
    return v;
}
