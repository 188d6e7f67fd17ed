#!/usr/bin/env bash
# The test command: installs what is missing, builds with ASan+UBSan, runs every test
# (unit, integration, fuzz-corpus replay). Extra arguments go to `meson test`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh build test package  # package: the Debian package test (tests/package)
builddir=${BUILDDIR:-build-test}
if [ ! -f "$builddir/build.ninja" ]; then
    meson setup "$builddir" -Db_sanitize=address,undefined --buildtype=debugoptimized
fi
ninja -C "$builddir"
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1
export LSAN_OPTIONS=print_suppressions=0  # no suppressions (see lib/pubsub/nngclose.h)
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
rc=0
meson test -C "$builddir" --print-errorlogs --num-processes "$(nproc)" "$@" || rc=$?

# ASan cannot see inside Debian's uninstrumented libevent and nng: one smoke run of
# admitd under valgrind, on a build without sanitizers, covers them.
vgdir=${VALGRIND_BUILDDIR:-build-valgrind}
if [ ! -f "$vgdir/build.ninja" ]; then
    meson setup "$vgdir" -Dvalgrind=true -Db_sanitize=none --buildtype=debugoptimized
fi
ninja -C "$vgdir" admitd admit-mock-engine
meson test -C "$vgdir" --print-errorlogs --suite valgrind || rc=$?

# The mutation check: every deliberate bug in tests/mutants/mutants.txt must make one of
# its tests fail (a copy of the tree in build-mutants/; MUTANTS=0 leaves it out locally).
if [ "${MUTANTS:-1}" != 0 ]; then
    python3 tests/mutants/run.py --dir "${MUTANTS_DIR:-build-mutants}" || rc=$?
fi
exit $rc
