/* benchutil: what the C microbenchmarks share: a clock, medians, pinning to one core, and a
 * count of the program's allocations, so that a bench can say that its timed loop makes none.
 *
 * The count needs the program linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc
 * (tests/bench/meson.build does): the linker then sends every call through this module. */
#ifndef ADMIT_BENCHUTIL_H
#define ADMIT_BENCHUTIL_H

/** the allocations (malloc, calloc, realloc) the program has made so far */
unsigned long bench_allocs(void);
/** the CPU time this thread has had, in seconds: what a timing on a busy machine should count */
double bench_cpu_s(void);
/** the median of v[0 .. n), n > 0 (sorts v) */
double bench_median(double *v, int n);
/** pins the program to the core arg names, else $ADMIT_BENCH_CPU, else 0; says so (prog: the
 *  program's name, for the warning when it cannot) */
void bench_pin(const char *prog, const char *arg);

#endif
