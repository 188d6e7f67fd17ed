#!/usr/bin/env bash
# Builds the Debian packages admitd, libadmit0 and libadmit-dev (debian/) with
# `dpkg-buildpackage -us -uc -b`, and prints the path of each .deb built.
#
#   scripts/build-deb.sh [--out DIR] [--install-deps] [--check]
#
#   --out DIR       where the packages go (default: dist/ at the top of the tree)
#   --install-deps  install the Build-Depends of debian/control first (apt-get build-dep),
#                   as packaging/Containerfile does on a bare Debian 12
#   --check         build and run the unit tests inside the package build too (by default
#                   nocheck: the suite runs in CI through scripts/test.sh)
#
# The build runs in a copy of the tree (the files git tracks, as they are in the work tree,
# or everything but build folders outside a git checkout), so the checkout gets none of
# dpkg-buildpackage's litter and the packages do not land in its parent folder. The commit
# --version names is this tree's, passed in as ADMIT_COMMIT (debian/rules gives it to meson),
# since the copy is no git checkout. CI builds and installs the packages with this script
# (tests/package/test_deb.py), and the Containerfile builds its image with it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/dist"
install_deps=0
check=0
while [ $# -gt 0 ]; do
    case "$1" in
    --out) out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    --install-deps) install_deps=1; shift ;;
    --check) check=1; shift ;;
    *) echo "usage: scripts/build-deb.sh [--out DIR] [--install-deps] [--check]" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ "$check" = 1 ]; then
    opts="parallel=$(nproc)"
    profiles=""
else
    opts="nocheck parallel=$(nproc)"
    profiles="nocheck"
fi
apt_get() {
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get "$@"
}
if [ "$install_deps" = 1 ]; then
    apt_get update -q
    apt_get install -y -q --no-install-recommends dpkg-dev build-essential
fi

version=$(cd "$root" && dpkg-parsechangelog -S Version)
upstream=${version%-*}
work=$(mktemp -d "${TMPDIR:-/tmp}/admitd-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
src="$work/admitd-$upstream"
mkdir "$src"
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Tracked files as they are now (uncommitted changes included; deleted ones skipped).
    (cd "$root" && git ls-files -z --cached | xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
        tar --null -T - -cf -) | tar -xf - -C "$src"
    commit=${ADMIT_COMMIT:-$(git -C "$root" describe --always --dirty --abbrev=12 --exclude='*')}
else
    (cd "$root" && tar --exclude='./build*' --exclude=./dist --exclude=./.git -cf - .) |
        tar -xf - -C "$src"
    commit=${ADMIT_COMMIT:-unknown}
fi

if [ "$install_deps" = 1 ]; then
    # debian/control's Build-Depends, read from the copy (apt-get build-dep takes a folder)
    apt_get build-dep -y -q --no-install-recommends ${profiles:+-P "$profiles"} "$src"
fi
echo "build-deb: admitd $version (commit $commit) in $src" >&2
(cd "$src" && ADMIT_COMMIT="$commit" DEB_BUILD_OPTIONS="$opts" \
    dpkg-buildpackage -us -uc -b ${profiles:+--build-profiles="$profiles"})
for f in "$work"/*.deb "$work"/*.changes "$work"/*.buildinfo; do
    if [ -e "$f" ]; then mv -f "$f" "$out/"; fi
done
ls "$out"/*_"$version"_*.deb
