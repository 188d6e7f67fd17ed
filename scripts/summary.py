#!/usr/bin/env python3
"""Prints 'N passed, N failed, N skipped' from a meson testlog.json.

Tests that speak TAP are counted by their subtests ("ok N" / "not ok N" lines), so the
line says how many checks ran, not just how many programs. A test that failed without a
failing subtest (a crash, a timeout, a leak report at exit) counts as one more failure.
"""
import json
import re
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "build-test/meson-logs/testlog.json"
passed = failed = skipped = 0
tap_line = re.compile(r"^(not ok|ok)\b(.*)$")
try:
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            t = json.loads(line)
            result = t["result"]
            if result == "SKIP":
                skipped += 1
                continue
            ok = nok = 0
            for out in (t.get("stdout") or "").splitlines():
                m = tap_line.match(out.strip())
                if not m:
                    continue
                if "# SKIP" in m.group(2).upper():
                    skipped += 1
                elif m.group(1) == "ok":
                    ok += 1
                else:
                    nok += 1
            good = result in ("OK", "EXPECTEDFAIL")
            if ok + nok == 0:
                ok, nok = (1, 0) if good else (0, 1)
            elif not good and nok == 0:
                nok = 1
            passed += ok
            failed += nok
except FileNotFoundError:
    failed = 1
print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
