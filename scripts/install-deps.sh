#!/usr/bin/env bash
# Installs the Debian 12 packages that one or more purposes need:
#
#   scripts/install-deps.sh run|build|test|bench|package [...]
#
#   run      what the programs load, and what the quick start's demo runs (python3, curl)
#   build    a compiler, meson and the -dev packages: `meson setup -Dtests=false` and ninja
#   test     what `meson test` (scripts/test.sh) uses beyond a build: cmocka, clang-format,
#            promtool, Node.js, llhttp, nngcat, valgrind, ip and unshare
#   bench    what tests/bench/run.sh drives or preloads: HAProxy, nginx, wrk, allocators...
#   package  what building the Debian package takes (dpkg-buildpackage)
#
# The quick start installs run and build (none of the test and benchmark tools);
# scripts/test.sh build and test; tests/bench/run.sh build and bench. Skips apt entirely when
# every package is there already (and CI is not set).
set -euo pipefail

usage() {
    echo "usage: $0 run|build|test|bench|package [...]" >&2
    exit 2
}

[ $# -gt 0 ] || usage
pkgs=()
for purpose in "$@"; do
    case "$purpose" in
    run)
        pkgs+=(libevent-2.1-7 libnng1 libyaml-0-2 libjansson4 python3 curl
               libzmq5) ;;           # ZMQ: the mock engine's KV events publisher
    build)
        # cmake: how meson finds nng (which ships no pkg-config file) with its version.
        pkgs+=(gcc libc6-dev meson ninja-build pkg-config cmake
               libevent-dev libnng-dev libyaml-dev libjansson-dev
               libmsgpack-dev        # msgpack-c: the engines' KV events (admission/kvevents)
               libzmq3-dev           # libzmq: the mock engine publishes its KV events on ZMQ
               scdoc) ;;             # the man pages (man/*.scd), installed with the programs
    test)
        pkgs+=(libcmocka-dev python3 curl clang-format
               nng-utils             # nngcat: reads the load publisher as nng's SUB does
               prometheus            # promtool: checks the metrics and the alert rules
               nodejs                # the OpenAI SDK interop test
               node-llhttp           # llhttp's C sources: the HTTP/1.1 parser's differential test
               valgrind              # scripts/test.sh's smoke run of admitd
               iproute2 util-linux   # ip + unshare: the admin-from-a-remote-peer test's namespace
               systemd               # systemd-analyze: the install test verifies the units
               python3-zmq python3-msgpack)  # a ZMQ subscriber of the mock's KV events
        # Debian's npm conflicts with a nodejs that already bundles npm (NodeSource builds).
        command -v npm >/dev/null || pkgs+=(npm) ;;
    bench)
        # libcmocka-dev: build-bench is the whole tree, tests/ (and tests/bench) included.
        pkgs+=(python3 curl haproxy nginx wrk gnuplot-nox strace libcmocka-dev
               libjemalloc2 libmimalloc2.0  # preloaded into admitd by the allocators scenario
               valgrind                     # tests/bench/callgrind.py
               liburing-dev)                # io_uring: the intake floor bench's second reader
        ;;
    package)
        # A start: debian/ says what else it builds with (dpkg-checkbuilddeps).
        # systemd: its systemd.pc names the units' folder; systemd-analyze verifies them.
        pkgs+=(build-essential dpkg-dev debhelper fakeroot scdoc systemd) ;;
    -h | --help)
        echo "usage: $0 run|build|test|bench|package [...]"
        exit 0 ;;
    *)
        echo "install-deps: unknown purpose '$purpose'" >&2
        usage ;;
    esac
done
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ] && [ -z "${CI:-}" ]; then
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo for apt-get" >&2; exit 1; }
    sudo="sudo"
fi
echo "install-deps ($*): installing ${missing[*]:-${pkgs[*]}}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${pkgs[@]}"
