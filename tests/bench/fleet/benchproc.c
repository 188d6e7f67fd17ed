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

char **read_urls(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    char line[1024], **urls = NULL;
    size_t cap = 0;

    if (f == NULL) {
        perror(path);
        exit(1);
    }
    *n = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        char *u = strrchr(line, '=');

        line[strcspn(line, "\r\n")] = '\0';
        u = u != NULL ? u + 1 : line;
        if (*u == '\0')
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 1024;
            urls = realloc(urls, cap * sizeof *urls);
            if (urls == NULL)
                exit(1);
        }
        if ((urls[(*n)++] = strdup(u)) == NULL)
            exit(1);
    }
    fclose(f);
    return urls;
}
