#!/usr/bin/env python3
"""Prints 'N passed, N failed, N skipped' from one or more meson testlog.json files.

Tests that speak TAP are counted by their subtests ("ok N" / "not ok N" lines), so the
line says how many checks ran, not just how many programs. A test that failed without a
failing subtest (a crash, a timeout, a leak report at exit) counts as one more failure,
and so does a log that is missing.
"""
import json
import re
import sys

TAP_LINE = re.compile(r"^(not ok|ok)\b(.*)$")


def count(test):
    """(passed, failed, skipped) of one test entry."""
    if test["result"] == "SKIP":
        return 0, 0, 1
    ok = nok = skipped = 0
    for out in (test.get("stdout") or "").splitlines():
        m = TAP_LINE.match(out.strip())
        if not m:
            continue
        if "# SKIP" in m.group(2).upper():
            skipped += 1
        elif m.group(1) == "ok":
            ok += 1
        else:
            nok += 1
    good = test["result"] in ("OK", "EXPECTEDFAIL")
    if ok + nok == 0:
        return (1, 0, skipped) if good else (0, 1, skipped)
    if not good and nok == 0:
        nok = 1
    return ok, nok, skipped


def main(paths):
    totals = [0, 0, 0]
    for path in paths:
        try:
            with open(path) as f:
                for line in f:
                    if line.strip():
                        for i, n in enumerate(count(json.loads(line))):
                            totals[i] += n
        except FileNotFoundError:
            totals[1] += 1
    print("%d passed, %d failed, %d skipped" % tuple(totals))


if __name__ == "__main__":
    main(sys.argv[1:] or ["build-test/meson-logs/testlog.json"])
