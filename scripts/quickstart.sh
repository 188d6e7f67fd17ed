#!/usr/bin/env bash
# The quick start: installs what is missing, builds admitd, starts it in front of its
# built-in mock engine with N engine slots and a queue of Q, sends a burst of streaming
# requests, and shows which were admitted, queued or rejected, and the metrics.
#
#   scripts/quickstart.sh                      # N=4, Q=4, a burst of 24
#   N=8 Q=16 COUNT=64 scripts/quickstart.sh
#   UPSTREAM=http://127.0.0.1:8000 scripts/quickstart.sh   # a real engine instead
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
if [ ! -f build-release/build.ninja ]; then
    meson setup build-release --buildtype=release >/dev/null
fi
ninja -C build-release admitd admit-mock-engine >/dev/null

N=${N:-4}
Q=${Q:-4}
COUNT=${COUNT:-24}
MAX_TOKENS=${MAX_TOKENS:-96}
log=$(mktemp)
if [ -n "${UPSTREAM:-}" ]; then
    engine=(--upstream "$UPSTREAM")
else
    engine=(--mock-engine)
fi
build-release/admitd "${engine[@]}" --engine-request-limit "$N" --request-queue-limit "$Q" \
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
echo "admitd is up: $ready"
echo "sending $COUNT concurrent streaming requests (N=$N slots, Q=$Q queue, so $((N + Q)) get in)"
python3 scripts/burst.py --url "http://$listen" --metrics "http://$metrics" \
    --count "$COUNT" --max-tokens "$MAX_TOKENS"
echo
echo "run it yourself: build-release/admitd --mock-engine --engine-request-limit $N \\"
echo "    --request-queue-limit $Q   # then: curl -N http://127.0.0.1:8080/v1/chat/completions \\"
echo "    -H 'Content-Type: application/json' -d '{\"stream\":true,\"max_tokens\":20,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'"
