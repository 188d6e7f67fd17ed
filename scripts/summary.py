#!/usr/bin/env python3
"""Prints 'N passed, N failed' from a meson testlog.json (one JSON object per line)."""
import json
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "build-test/meson-logs/testlog.json"
passed = failed = skipped = 0
try:
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)["result"]
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                skipped += 1
            else:
                failed += 1
except FileNotFoundError:
    failed = 1
print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
