#!/usr/bin/env bash
# The test command: installs what is missing, builds with ASan+UBSan, runs every test
# (unit, integration, fuzz-corpus replay). Extra arguments go to `meson test`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
builddir=${BUILDDIR:-build-test}
if [ ! -f "$builddir/build.ninja" ]; then
    meson setup "$builddir" -Db_sanitize=address,undefined --buildtype=debugoptimized
fi
ninja -C "$builddir"
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
meson test -C "$builddir" --print-errorlogs --num-processes "$(nproc)" "$@"
