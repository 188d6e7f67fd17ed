#!/usr/bin/env bash
# Installs the Debian 12 packages admitd needs to build, test and run its demo.
# Skips apt entirely when everything is already there (and CI is not set).
set -euo pipefail

pkgs=(meson ninja-build pkg-config cmake gcc libc6-dev
      libevent-dev libnng-dev libyaml-dev libjansson-dev libcmocka-dev
      python3 curl nng-utils clang-format prometheus nodejs valgrind
      iproute2 util-linux   # ip + unshare: the admin-from-a-remote-peer test's namespace
      node-llhttp           # llhttp's C sources: the HTTP/1.1 parser's differential test
      liburing-dev)         # io_uring: the intake floor bench's second reader (tests/bench/fleet)
# Debian's npm conflicts with a nodejs that already bundles npm (NodeSource builds).
command -v npm >/dev/null || pkgs+=(npm)

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
echo "install-deps: installing ${missing[*]:-${pkgs[*]}}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${pkgs[@]}"
