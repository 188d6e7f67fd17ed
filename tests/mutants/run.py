#!/usr/bin/env python3
"""The mutation check: the test suite must catch each deliberate bug in tests/mutants/mutants.txt.

It copies the tree into a scratch folder, builds it (plainly, and with ASan+UBSan when a
mutant asks for it), runs every named test once on the unmutated copy (a test that fails
there cannot judge a mutant), then for each mutant: applies its patch, rebuilds, runs the
tests it names, and restores the file. A mutant is killed when one of its tests fails. A
mutant that survives, does not apply (its text is gone or not unique), does not build, or
is not reached within the time budget, is a failure.

Results go to a meson-style testlog.json (one "mutant/NAME" entry each), which CI's summary
line counts: a surviving mutant is a failed check.

  tests/mutants/run.py [--only NAME,...] [--dir build-mutants] [--budget-s 900] [--list]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIELDS = ("why", "file", "tests", "build")
BUILDS = {"plain": ["-Db_sanitize=none"], "asan": ["-Db_sanitize=address,undefined"]}


class Mutant:
    def __init__(self, name, line):
        self.name, self.line = name, line
        self.why = self.file = ""
        self.tests = []
        self.build = "plain"
        self.old, self.new = [], []


def parse(path):
    """The mutants of the list, in order; raises ValueError naming path:line on bad input."""
    mutants, cur, seen = [], None, set()
    with open(path, encoding="utf-8") as f:
        for no, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            where = "%s:%d" % (path, no)
            if cur is None or not line.startswith(("-", "+")):
                if not line.strip() or line.startswith("#"):
                    continue
            m = re.match(r"^\[([a-z0-9-]+)\]$", line)
            if m:
                if m.group(1) in seen:
                    raise ValueError("%s: mutant %s named twice" % (where, m.group(1)))
                seen.add(m.group(1))
                cur = Mutant(m.group(1), no)
                mutants.append(cur)
                continue
            if cur is None:
                raise ValueError("%s: expected a [name] line" % where)
            if line.startswith(("-", "+")):
                if len(line) > 1 and line[1] != " ":
                    raise ValueError("%s: a patch line is '-' or '+', a space, the text" % where)
                text = line[2:]
                if line[0] == "-":
                    if cur.new:
                        raise ValueError("%s: '-' lines come before '+' lines" % where)
                    cur.old.append(text)
                else:
                    cur.new.append(text)
                continue
            key, sep, value = line.partition(":")
            if not sep or key not in FIELDS:
                raise ValueError("%s: expected one of %s, or a patch line" % (where, ", ".join(FIELDS)))
            value = value.strip()
            if key == "tests":
                cur.tests = value.split()
            elif key == "build":
                if value not in BUILDS:
                    raise ValueError("%s: build is one of %s" % (where, ", ".join(BUILDS)))
                cur.build = value
            else:
                setattr(cur, key, value)
    for mu in mutants:
        where = "%s:%d: mutant %s" % (path, mu.line, mu.name)
        if not mu.why or not mu.file or not mu.tests or not mu.old:
            raise ValueError("%s needs why, file, tests and '-' lines" % where)
    return mutants


def copy_tree(dst):
    """The working tree's files (tracked or not, as git sees them; no build folders)."""
    try:
        names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                "--exclude-standard"], cwd=ROOT, check=True,
                               capture_output=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        names = []
        for d, dirs, files in os.walk(ROOT):
            dirs[:] = [x for x in dirs if not x.startswith(("build", ".git"))]
            names += [os.path.relpath(os.path.join(d, x), ROOT) for x in files]
    if os.path.exists(dst):
        shutil.rmtree(dst)
    for n in names:
        if not n or not os.path.isfile(os.path.join(ROOT, n)):
            continue
        os.makedirs(os.path.join(dst, os.path.dirname(n)), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, n), os.path.join(dst, n))


def run(cmd, cwd, timeout=None):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


def meson_test(build, tests, timeout, first_failure=False):
    """0 when every test passed; else non-zero and the output. With first_failure the tests
    run one by one in the order given and stop at the first that fails (a mutant names its
    quick unit tests first, so most are judged in a second)."""
    groups = [[t] for t in tests] if first_failure else [tests]
    deadline = time.time() + timeout
    out = ""
    for g in groups:
        try:
            rc, text = run(["meson", "test", "-C", build, "--no-rebuild", "--print-errorlogs",
                            "--num-processes", "2", "--timeout-multiplier", "0.3"] + g,
                           cwd=build, timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            return 1, "timed out after %d s" % timeout
        out += text
        if rc != 0:
            return rc, out
    return 0, out


def entry(name, ok, seconds, text):
    return {"name": "mutant/" + name, "result": "OK" if ok else "FAIL",
            "duration": round(seconds, 2), "stdout": text, "returncode": 0 if ok else 1}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="check the list and print it")
    ap.add_argument("--only", help="comma-separated mutant names")
    ap.add_argument("--dir", default=os.path.join(ROOT, "build-mutants"))
    ap.add_argument("--budget-s", type=float, default=900.0,
                    help="after this many seconds the rest is not run (and counts as failed)")
    a = ap.parse_args()
    try:
        mutants = parse(os.path.join(HERE, "mutants.txt"))
    except (OSError, ValueError) as e:
        print("mutants: %s" % e, file=sys.stderr)
        return 2
    if a.only:
        want = set(a.only.split(","))
        mutants = [m for m in mutants if m.name in want]
    if a.list:
        for mu in mutants:
            print("%-28s %-6s %-34s %s" % (mu.name, mu.build, mu.file, " ".join(mu.tests)))
        return 0
    start = time.time()
    a.dir = os.path.abspath(a.dir)
    src = os.path.join(a.dir, "src")
    copy_tree(src)
    builds, results = {}, []
    for kind in sorted({mu.build for mu in mutants}):
        b = os.path.join(a.dir, kind)
        if not os.path.exists(os.path.join(b, "build.ninja")):
            rc, out = run(["meson", "setup", b, src, "--buildtype=debugoptimized"] + BUILDS[kind],
                          cwd=src)
            if rc != 0:
                print(out[-3000:], file=sys.stderr)
                return 2
        rc, out = run(["ninja", "-C", b], cwd=src)
        if rc != 0:
            print("mutants: the unmutated %s build fails:\n%s" % (kind, out[-3000:]), file=sys.stderr)
            return 2
        rc, listing = run(["meson", "test", "-C", b, "--list"], cwd=b)
        known = {ln.split(" / ")[-1].strip() for ln in listing.splitlines() if " / " in ln}
        named = sorted({t for mu in mutants if mu.build == kind for t in mu.tests})
        missing = [t for t in named if t not in known]
        if missing:
            print("mutants: no such tests in the %s build: %s" % (kind, " ".join(missing)),
                  file=sys.stderr)
            return 2
        rc, out = meson_test(b, named, 900)
        if rc != 0:
            print("mutants: the tests fail on the unmutated tree; nothing can be judged:\n%s" %
                  out[-4000:], file=sys.stderr)
            return 2
        builds[kind] = b
        print("# %s build ready, baseline passed (%s) after %.0f s" % (kind, " ".join(named),
                                                                     time.time() - start))
        sys.stdout.flush()
    survivors = 0
    for mu in mutants:
        t0 = time.time()
        path = os.path.join(src, mu.file)
        if time.time() - start > a.budget_s:
            results.append(entry(mu.name, False, 0, "not run: the %.0f s budget was spent" %
                                 a.budget_s))
            survivors += 1
            continue
        try:
            with open(path, encoding="utf-8") as f:
                original = f.read()
        except OSError as e:
            results.append(entry(mu.name, False, 0, "does not apply: %s" % e))
            survivors += 1
            continue
        old = "\n".join(mu.old) + "\n"
        new = "\n".join(mu.new) + ("\n" if mu.new else "")
        if original.count(old) != 1:
            verdict, ok = "does not apply: its text occurs %d times in %s" % (
                original.count(old), mu.file), False
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(original.replace(old, new))
            try:
                rc, out = run(["ninja", "-C", builds[mu.build]], cwd=src)
                if rc != 0:
                    verdict, ok = "does not build:\n" + out[-1500:], False
                else:
                    rc, out = meson_test(builds[mu.build], mu.tests, 600, first_failure=True)
                    ok = rc != 0
                    failed = [t for t in mu.tests if re.search(
                        r"/ %s\s+(FAIL|ERROR|TIMEOUT)" % re.escape(t), out)]
                    verdict = ("killed by " + " ".join(failed or mu.tests) if ok else
                               "SURVIVED " + " ".join(mu.tests))
            finally:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(original)
        survivors += not ok
        results.append(entry(mu.name, ok, time.time() - t0, "%s - %s\n%s" % (
            "ok 1" if ok else "not ok 1", mu.why, verdict)))
        print("%s %s (%.0f s): %s" % ("ok" if ok else "NOT OK", mu.name, time.time() - t0,
                                      verdict.splitlines()[0]))
        sys.stdout.flush()
    # Put every file back as built, so a later run starts from the unmutated tree.
    for kind, b in builds.items():
        run(["ninja", "-C", b], cwd=src)
    logdir = os.path.join(a.dir, "meson-logs")
    os.makedirs(logdir, exist_ok=True)
    with open(os.path.join(logdir, "testlog.json"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    print("# %d mutants, %d killed, %d not (%.0f s)" % (len(results), len(results) - survivors,
                                                       survivors, time.time() - start))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
