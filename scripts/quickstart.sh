#!/usr/bin/env bash
# The quick start: installs what is missing to build and run (scripts/install-deps.sh run
# build), builds admitd, admit-router, admit-top and admit-mock-engine into build-release/,
# starts admitd in front of its built-in mock engine with N engine slots and a queue of Q,
# checks that the engine answers, sends a burst of streaming requests, and shows which were
# admitted, queued or rejected, and the metrics.
#
#   scripts/quickstart.sh                      # N=4, Q=4, a burst of 24
#   N=8 Q=16 COUNT=64 scripts/quickstart.sh
#   UPSTREAM=http://127.0.0.1:8000 scripts/quickstart.sh   # a real engine instead
#   scripts/quickstart.sh --no-build [DIR]     # the programs in DIR (build-release) as they
#                                              # are: nothing installed, nothing built
#
# Exits non-zero, saying why, when the engine cannot be reached, when it is not ready within
# READY_TIMEOUT seconds (60), and when a request of the burst failed (neither served nor
# rejected).
set -euo pipefail
cd "$(dirname "$0")/.."

build=1
builddir=build-release
case "${1:-}" in
"") ;;
--no-build)
    build=0
    builddir=${2:-$builddir} ;;
*)
    echo "usage: $0 [--no-build [BUILDDIR]]" >&2
    exit 2 ;;
esac

if [ "$build" = 0 ] && [ ! -x "$builddir/admitd" ]; then
    echo "quickstart: no $builddir/admitd: build it, or run the quick start without --no-build" >&2
    exit 1
fi
if [ "$build" = 1 ]; then
    scripts/install-deps.sh run build
    if [ ! -f "$builddir/build.ninja" ]; then
        meson setup "$builddir" --buildtype=release -Dtests=false >/dev/null
    fi
    # All four: every build-release/... command the README shows works after the quick start.
    ninja -C "$builddir" admitd admit-router admit-top admit-mock-engine >/dev/null
fi

N=${N:-4}
Q=${Q:-4}
COUNT=${COUNT:-24}
MAX_TOKENS=${MAX_TOKENS:-96}
READY_TIMEOUT=${READY_TIMEOUT:-60}
log=$(mktemp)
if [ -n "${UPSTREAM:-}" ]; then
    engine=(--upstream "$UPSTREAM")
else
    engine=(--mock-engine)
fi
"$builddir/admitd" "${engine[@]}" --engine-request-limit "$N" --request-queue-limit "$Q" \
    --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --publish tcp://127.0.0.1:0 2>"$log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -f "$log"' EXIT

for _ in $(seq 100); do
    grep -q "ready listen=" "$log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
done
ready=$(grep -m1 "ready listen=" "$log")
listen=$(sed -E 's/.*listen=([^ ]+).*/\1/' <<<"$ready")
metrics=$(sed -E 's/.*metrics=([^ ]+).*/\1/' <<<"$ready")
upstream=$(sed -E 's/.*upstream=([^ ]+).*/\1/' <<<"$ready")
echo "admitd is up: $ready"

# The engine must answer before the burst, or every request would fail with a 503 that
# says nothing of the cause. admitd's /ready is 200 once the engine's health check answers
# 2xx; admitd logs "engine unreachable ... reason=..." when it cannot even be reached.
deadline=$((SECONDS + READY_TIMEOUT))
until curl -fsS -o /dev/null --max-time 2 "http://$metrics/ready" 2>/dev/null; do
    if down=$(grep -m1 "engine unreachable" "$log"); then
        reason=$(sed -E 's/.*reason="([^"]*)".*/\1/' <<<"$down")
        echo "quickstart: the engine at http://$upstream cannot be reached: $reason" >&2
        echo "  admitd: ${down#* * }" >&2
        echo "  start the engine first, or leave UPSTREAM unset for admitd's built-in mock" \
            "engine" >&2
        exit 1
    fi
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    if [ "$SECONDS" -ge "$deadline" ]; then
        echo "quickstart: the engine at http://$upstream answers, but is not ready: its health" \
            "check did not answer 2xx within ${READY_TIMEOUT} s (READY_TIMEOUT)" >&2
        exit 1
    fi
    sleep 0.1
done
echo "the engine at http://$upstream is ready"

echo "sending $COUNT concurrent streaming requests (N=$N slots, Q=$Q queue, so $((N + Q)) get in)"
python3 scripts/burst.py --url "http://$listen" --metrics "http://$metrics" \
    --count "$COUNT" --max-tokens "$MAX_TOKENS"
echo
echo "run it yourself: $builddir/admitd --mock-engine --engine-request-limit $N \\"
echo "    --request-queue-limit $Q   # then: curl -N http://127.0.0.1:8080/v1/chat/completions \\"
echo "    -H 'Content-Type: application/json' -d '{\"stream\":true,\"max_tokens\":20,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'"
