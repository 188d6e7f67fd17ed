#!/usr/bin/env bash
# admitd benchmarks (issues 7 and 16): installs haproxy, nginx, wrk, gnuplot, strace and the
# jemalloc and mimalloc libraries from Debian when missing, builds admitd optimised into
# build-bench/ (with tests/bench/malloc_count.so, the allocation counter it preloads), and runs
# tests/bench/run.py, which prints one Markdown table per scenario and one of issue 16's
# targets, and writes build-bench/bench/results.md and build-bench/bench/passthrough.png.
# Extra arguments go to run.py, e.g.
#   tests/bench/run.sh --rounds 5 --duration 10 --scenarios passthrough,streaming
#   tests/bench/run.sh --scenarios default,allocators
#   tests/bench/run.sh --scenarios router-prompt    # admit-router vs HAProxy, 2,048-token prompts
# `tests/bench/run.sh workload [ARGS]` runs tests/bench/workload.py instead (issue 25: multi-turn
# and trace workloads through HAProxy and admit-router; writes build-bench/bench/workload.md).
# Numbers only: nothing here asserts a timing, and it is not part of `meson test`.
set -euo pipefail
cd "$(dirname "$0")/../.."

# haproxy, nginx, wrk, gnuplot, strace, jemalloc, mimalloc...: scripts/install-deps.sh bench.
# (The Debian nginx package starts a system nginx on :80; it is not used here: run.py starts
# its own on a free port, so leave the system's services alone.)
scripts/install-deps.sh build bench >/dev/null

# werror=false: at -O3 GCC 12 reports a false -Wmaybe-uninitialized in lib/admission/load.c, which the
# project's werror=true turns into a build failure of the release build.
if [ ! -f build-bench/build.ninja ]; then
    meson setup build-bench --buildtype=release -Db_sanitize=none -Dwerror=false >/dev/null
fi
ninja -C build-bench >/dev/null

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
if [ "${1:-}" = workload ]; then
    shift
    exec python3 tests/bench/workload.py --build build-bench "$@"
fi
exec python3 tests/bench/run.py --build build-bench "$@"
