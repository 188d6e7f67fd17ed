/* benchutil: the microbenchmarks' shared helpers (see benchutil.h). */
#include "benchutil.h"

#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- allocation counting: the linker sends every malloc of the program through these ---- */

static unsigned long allocs;

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);

void *__wrap_malloc(size_t n)
{
    allocs++;
    return __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n)
{
    allocs++;
    return __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n)
{
    allocs++;
    return __real_realloc(p, n);
}

unsigned long bench_allocs(void)
{
    return allocs;
}

/* ---- timing ----------------------------------------------------------------------------- */

double bench_cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t) n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

void bench_pin(const char *prog, const char *arg)
{
    const char *v = arg ? arg : getenv("ADMIT_BENCH_CPU");
    int cpu = v && *v ? atoi(v) : 0;
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        fprintf(stderr, "%s: warning: cannot pin to CPU %d (%s); timings will move\n", prog, cpu,
                strerror(errno));
    else
        printf("pinned to CPU %d\n", cpu);
}
