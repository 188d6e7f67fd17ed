"""Checks that every fuzz/*.dict parses as libFuzzer expects: comments, blank lines, and
name="value" entries whose only escapes are \\\\, \\" and \\xHH (libFuzzer rejects \\n and
friends, and a bad line makes the fuzzer refuse to start)."""

import glob
import os
import re
import sys

ENTRY = re.compile(r'^[A-Za-z0-9_]*="((?:[^"\\]|\\\\|\\"|\\x[0-9A-Fa-f]{2})*)"$')


def main():
    root = os.path.dirname(os.path.abspath(__file__))
    bad = 0
    paths = sorted(glob.glob(os.path.join(root, "*.dict")))
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                if not ENTRY.match(line):
                    print("%s:%d: not a libFuzzer dictionary entry: %s" % (
                        os.path.basename(path), n, line))
                    bad += 1
    print("1..1")
    print("%s 1 - %d dictionaries checked" % ("not ok" if bad or not paths else "ok", len(paths)))
    return 1 if bad or not paths else 0


if __name__ == "__main__":
    sys.exit(main())
