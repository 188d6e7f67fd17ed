/* select_bench part 3: prefix keys and the prefix index, per request (select_kv.c). */
#ifndef ADMIT_BENCH_SELECT_KV_H
#define ADMIT_BENCH_SELECT_KV_H

/** prints part 3's table: rounds of about ms each (or iters requests), all fleet sizes or
    only_workers; allocations in the timed loops are added to *allocs */
void kv_table(int rounds, double ms, long iters, int only_workers, unsigned long *allocs);

#endif
