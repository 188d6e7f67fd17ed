#!/usr/bin/env python3
"""The mutation check: the test suite must catch each deliberate bug in tests/mutants/mutants.txt.

It copies the tree into a scratch folder and builds what the named tests run (plainly, and
with ASan+UBSan when a mutant asks for it), and with --jobs N (default 2) N-1 more copies with
plain builds: N mutants are judged side by side, a file's mutants in one copy, one after
another (a mutant whose test meson runs alone is judged alone, first). Then for each mutant (the build with fewer
mutants first, each build's by file): it applies the patch, and for each test the mutant
names (the unit tests first, then the others, each group in the order named) rebuilds only
what that test runs (its ninja targets, from meson introspect) and runs it, as `meson test`
would, until one fails; then it restores the file. Integration tests stop at their first
failed check (TAP_FAIL_FAST, see tests/integration/harness.py), and an optional
`checks: TEST:FUNCTION[,FUNCTION]` line runs only those checks of TEST (TAP_ONLY).

A mutant is killed when one of its tests fails there and that test passes on the unmutated
tree: at the end, with every file back, each test that killed runs once more (with the same
checks; only the check that failed, TAP_CHECK), two at a time. A test that fails there, too,
judged nothing: its mutants fail, and the exit status is 2. A mutant that survives, does not
apply (its text is gone or not unique), does not build, or is not reached within the time
budget, is a failure. Each mutant's line shows its build and test seconds, and which test
killed it at which check; the slowest are listed at the end.

Results go to a meson-style testlog.json (one "mutant/NAME" entry each), which CI's summary
line counts: a surviving mutant is a failed check.

  tests/mutants/run.py [--only NAME,...] [--dir build-mutants] [--budget-s 900] [--list]
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIELDS = ("why", "file", "tests", "build", "checks")
BUILDS = {"plain": ["-Db_sanitize=none"], "asan": ["-Db_sanitize=address,undefined"]}


class Mutant:
    def __init__(self, name, line):
        self.name, self.line = name, line
        self.why = self.file = ""
        self.tests = []
        self.build = "plain"
        self.checks = {}  # test name -> the names of the check functions to run in it
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
            elif key == "checks":
                for tok in value.split():
                    test, sep, fns = tok.rpartition(":")
                    if not sep or not test or not re.match(r"^[A-Za-z_][A-Za-z0-9_,]*$", fns):
                        raise ValueError("%s: checks are TEST:FUNCTION[,FUNCTION...]" % where)
                    cur.checks.setdefault(test, set()).update(f for f in fns.split(",") if f)
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
        for test in mu.checks:
            if test not in mu.tests:
                raise ValueError("%s: checks names %s, which is not in its tests" % (where, test))
    return mutants


def copy_tree(dst):
    """Makes dst a copy of the working tree's files (tracked or not, as git sees them; no
    build folders). A file already there with the same bytes is left alone, mtime and all;
    any other is written anew, so its mtime is now: ninja then rebuilds from it whatever was
    built from an older text (a mutant left behind by an interrupted run, say), and reuses
    the rest of a previous run's build."""
    try:
        names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                "--exclude-standard"], cwd=ROOT, check=True,
                               capture_output=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        names = []
        for d, dirs, files in os.walk(ROOT):
            dirs[:] = [x for x in dirs if not x.startswith(("build", ".git"))]
            names += [os.path.relpath(os.path.join(d, x), ROOT) for x in files]
    keep = set()
    for n in names:
        s = os.path.join(ROOT, n)
        if not n or not os.path.isfile(s):
            continue
        keep.add(os.path.normpath(n))
        d = os.path.join(dst, n)
        with open(s, "rb") as f:
            data = f.read()
        try:
            with open(d, "rb") as f:
                if f.read() == data:
                    shutil.copymode(s, d)
                    continue
        except OSError:
            pass
        os.makedirs(os.path.dirname(d), exist_ok=True)
        if os.path.islink(d) or os.path.isdir(d):
            shutil.rmtree(d) if os.path.isdir(d) else os.remove(d)
        with open(d, "wb") as f:
            f.write(data)
        shutil.copymode(s, d)
    for d, dirs, files in os.walk(dst):
        for x in files:
            if os.path.normpath(os.path.relpath(os.path.join(d, x), dst)) not in keep:
                os.remove(os.path.join(d, x))


def run(cmd, cwd, timeout=None, env=None):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=timeout, env=env)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


TIMEOUT_MULTIPLIER = 0.3  # of each test's meson timeout: a hung mutant is killed sooner


class Build:
    """One build folder and what meson knows of its tests (meson introspect): the files each
    needs built (its executable and its depends, as ninja targets), and how to run it."""

    def __init__(self, kind, path):
        self.kind, self.path = kind, path

    def introspect(self):
        rc, out = run(["meson", "introspect", "--tests", "--targets", self.path], cwd=self.path)
        if rc != 0:
            raise RuntimeError("meson introspect failed:\n" + out[-2000:])
        info = json.loads(out)
        outputs = {t["id"]: t["filename"] for t in info["targets"]}
        self.targets, self.tests = {}, {}
        for t in info["tests"]:
            files = [f for dep in t.get("depends", []) for f in outputs.get(dep, [])]
            if t["cmd"] and t["cmd"][0].startswith(self.path + os.sep):
                files.append(t["cmd"][0])
            self.targets.setdefault(t["name"], set()).update(
                os.path.relpath(f, self.path) for f in files)
            self.tests.setdefault(t["name"], []).append(t)

    def scripts(self, test):
        """The Python scripts an integration test runs (none for a unit test)."""
        return [a for t in self.tests[test] for a in t["cmd"] if a.endswith(".py")]

    def ninja(self, tests):
        targets = sorted({f for t in tests for f in self.targets[t]})
        if not targets:
            return 0, ""  # a bare `ninja` would build everything
        return run(["ninja", "-C", self.path] + targets, cwd=self.path)

    def run_test(self, test, timeout, only=None, nth=None):
        """Runs a test as `meson test` would (its command, environment and folder, all from
        meson introspect; they are all TAP), without meson's own start-up each time. It
        fails when it exits non-zero, prints "not ok" (not a TODO) or "Bail out!", or runs
        past its meson timeout times TIMEOUT_MULTIPLIER, or past `timeout` seconds.
        Integration tests stop at their first failed check, run only the checks named in
        `only`, and only the nth of those if nth (tests/integration/harness.py's Tap).
        Returns (failed, skipped: no check ran, the output)."""
        out, failed, skipped = "", False, False
        deadline = time.time() + timeout
        for t in self.tests[test]:
            env = dict(os.environ)
            for k in ("TAP_ONLY", "TAP_CHECK"):
                env.pop(k, None)
            env.setdefault("MALLOC_PERTURB_", str(random.randint(1, 255)))  # as meson does
            for k, v in t["env"].items():
                env[k] = v + os.pathsep + env[k] if k.endswith("PATH") and env.get(k) else v
            env["TAP_FAIL_FAST"] = "1"
            if only:
                env["TAP_ONLY"] = only
            if nth:
                env["TAP_CHECK"] = str(nth)
            limit = min(deadline - time.time(), (t["timeout"] or 3600) * TIMEOUT_MULTIPLIER)
            p = subprocess.Popen(t["cmd"], cwd=t["workdir"] or self.path, env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True)
            try:
                so, se = p.communicate(timeout=max(1, limit))
                timed_out = False
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                so, se = p.communicate()
                timed_out = True
            so, se = so.decode(errors="replace"), se.decode(errors="replace")
            out += so + se
            if timed_out:
                out += "\ntimed out after %.0f s\n" % limit
            failed = failed or timed_out or p.returncode != 0 or bool(
                re.search(r"^not ok\b(?![^\n#]*#\s*TODO)", so, re.M) or
                re.search(r"^Bail out!", so, re.M))
            skipped = bool(re.search(r"^1\.\.0\s*#\s*SKIP", so, re.M))
        return failed, skipped, out


def failed_check(test_out):
    """(number, what) of the first check that failed in an integration test's TAP output:
    its name and the last line of its traceback; (None, "") if none did."""
    m = re.search(r"^not ok (\d+) - (.*)\n((?:#.*\n)*)", test_out, re.M)
    if not m:
        return None, ""
    tb = [ln[2:] for ln in m.group(3).splitlines() if not ln.startswith("# check ")]
    return int(m.group(1)), "%s: %s" % (m.group(2), tb[-1][:300] if tb else "?")


def entry(name, ok, seconds, text):
    return {"name": "mutant/" + name, "result": "OK" if ok else "FAIL",
            "duration": round(seconds, 2), "stdout": text, "returncode": 0 if ok else 1}


def only_of(mu, t):
    return ",".join(sorted(mu.checks[t])) if t in mu.checks else None


def judge(mu, b, deadline):
    """Runs mu's tests on b (mu applied), the unit tests first, each after building what it
    needs; stops at the first that fails. Returns (killed, verdict, the test that killed,
    the number of its check that failed, build seconds, test seconds)."""
    order = sorted(mu.tests, key=lambda t: bool(b.scripts(t)))  # stable: as named within
    spent_build = spent_test = 0.0
    ran = []
    for t in order:
        t0 = time.time()
        rc, out = b.ninja([t])
        spent_build += time.time() - t0
        if rc != 0:
            return (False, "does not build (for %s):\n%s" % (t, out[-1500:]), None, None,
                    spent_build, spent_test)
        t0 = time.time()
        failed, skipped, out = b.run_test(t, deadline - time.time(), only_of(mu, t))
        took = time.time() - t0
        spent_test += took
        label = "%s%s (%.1f s)" % (t, "[%s]" % only_of(mu, t) if t in mu.checks else "", took)
        if failed:
            k, what = failed_check(out) if b.scripts(t) else (None, "")
            if k:
                label += " at check %d" % k
            return (True, "killed by %s%s%s" % (label, ", after " + ", ".join(ran) if ran else "",
                                                "\n  " + what if what else ""),
                    t, k, spent_build, spent_test)
        if skipped:
            label += " SKIPPED: no check ran"
        ran.append(label)
    return False, "SURVIVED " + ", ".join(ran), None, None, spent_build, spent_test


def verify_all(builds, pending):
    """Runs, on the unmutated tree (every file back), each test that killed a mutant: with the
    same checks, and only the check that failed (all, for a unit test, or when it is not
    known), two at a time (alone, if meson runs it alone).
    pending: {(kind, test, TAP_ONLY, check or None): [result indices]}. Returns {key: what
    went wrong} for those that do not pass: their failure on a mutant said nothing of it."""
    bad, keys = {}, sorted(pending, key=lambda k: (k[0], k[1], k[2] or "", k[3] or 0))
    took = {}
    for kind, b in builds.items():
        tests = sorted({k[1] for k in keys if k[0] == kind})
        if tests:
            rc, out = b.ninja(tests)
            if rc != 0:
                for k in keys:
                    if k[0] == kind:
                        bad[k] = "the unmutated %s build fails:\n%s" % (kind, out[-3000:])
    # A check that runs whole covers each of its checks one by one.
    to_rerun = [k for k in keys if k not in bad and not (k[3] and k[:3] + (None,) in pending)]

    def one(key):
        kind, t, only, nth = key
        t0 = time.time()
        failed, skipped, out = builds[kind].run_test(t, 600, only, nth)
        took[key] = time.time() - t0
        if failed or skipped:
            return "%s%s%s %s on the unmutated tree (%s build): it cannot judge a mutant\n%s" % (
                t, "[%s]" % only if only else "", " check %d" % nth if nth else "",
                "fails" if failed else "runs no check", kind, out[-4000:])
        return None

    # Two at a time, as meson runs them; a test meson runs alone (is_parallel false) alone.
    alone = [k for k in to_rerun if not all(t["is_parallel"] for t in builds[k[0]].tests[k[1]])]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        together = [k for k in to_rerun if k not in alone]
        for key, what in zip(together, pool.map(one, together)):
            if what:
                bad[key] = what
    for key in alone:
        what = one(key)
        if what:
            bad[key] = what
    for k in keys:
        if k[3] and k[:3] + (None,) in bad:
            bad[k] = bad[k[:3] + (None,)]
    if took:
        print("# the slowest again on the unmutated tree: " + ", ".join(
            "%s%s%s (%s) %.1f s" % (k[1], "[%s]" % k[2] if k[2] else "",
                                    " check %d" % k[3] if k[3] else "", k[0], s)
            for k, s in sorted(took.items(), key=lambda kv: -kv[1])[:5]))
    return bad


def set_up(kind, path, src, mutants, start, lock, label):
    """The build of kind at path from the tree at src, with what mutants' tests run built;
    (Build, None), or (None, what went wrong)."""
    b = Build(kind, path)
    if not os.path.exists(os.path.join(b.path, "build.ninja")):
        rc, out = run(["meson", "setup", b.path, src, "--buildtype=debugoptimized"] +
                      BUILDS[kind], cwd=src)
        if rc != 0:
            return None, out[-3000:]
    else:
        # A meson.build changed since the last run: have ninja reconfigure first.
        run(["ninja", "-C", b.path, "build.ninja"], cwd=src)
    try:
        b.introspect()
    except (RuntimeError, ValueError) as e:
        return None, "mutants: %s" % e
    mine = [mu for mu in mutants if mu.build == kind]
    named = sorted({t for mu in mine for t in mu.tests})
    missing = [t for t in named if t not in b.targets]
    if missing:
        return None, "mutants: no such tests in the %s build: %s" % (kind, " ".join(missing))
    for mu in mine:
        for t, fns in mu.checks.items():
            text = ""
            for script in b.scripts(t):
                with open(script, encoding="utf-8") as f:
                    text += f.read()
            gone = [fn for fn in sorted(fns) if not re.search(r"^def %s\(" % fn, text, re.M)]
            if gone:
                return None, "mutants: %s: checks: %s has no check %s" % (mu.name, t,
                                                                         ", ".join(gone))
    t0 = time.time()
    rc, out = b.ninja(named)
    if rc != 0:
        return None, "mutants: the unmutated %s build fails:\n%s" % (kind, out[-3000:])
    with lock:
        print("# %s build ready (%.0f s) after %.0f s" % (label, time.time() - t0,
                                                          time.time() - start))
        sys.stdout.flush()
    return b, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="check the list and print it")
    ap.add_argument("--only", help="comma-separated mutant names")
    ap.add_argument("--dir", default=os.path.join(ROOT, "build-mutants"))
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="mutants judged side by side, each in a copy of the tree (default 2)")
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
            print("%-28s %-6s %-34s %s%s" % (mu.name, mu.build, mu.file, " ".join(mu.tests),
                                             "".join(" [%s:%s]" % (t, ",".join(sorted(f)))
                                                     for t, f in sorted(mu.checks.items()))))
        return 0
    start = time.time()
    a.dir = os.path.abspath(a.dir)
    kinds = sorted({mu.build for mu in mutants})
    # Lanes: each a copy of the tree with builds of its own, judging mutants side by side (a
    # test mostly waits on sockets and timers). Lane 0 has every kind of build; the others
    # only the plain one, which nearly every mutant uses.
    jobs = max(1, min(a.jobs, len(mutants)))
    lanes = []
    for i in range(jobs):
        root = a.dir if i == 0 else os.path.join(a.dir, "lane%d" % i)
        want = kinds if i == 0 else [k for k in kinds if k == "plain"]
        if i > 0 and not want:
            break
        lanes.append((os.path.join(root, "src"), {k: os.path.join(root, k) for k in want}))
    for src, _ in lanes:
        copy_tree(src)
    lock = threading.Lock()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futs = [[(k, pool.submit(set_up, k, path, src, mutants, start, lock,
                                 k if n == 0 else "%s (lane %d)" % (k, n)))
                 for k, path in paths.items()] for n, (src, paths) in enumerate(lanes)]
        lane_builds = []
        for fl in futs:
            got = {}
            for k, f in fl:
                b, err = f.result()
                if b is None:
                    print(err, file=sys.stderr)
                    return 2
                got[k] = b
            lane_builds.append(got)
    builds = lane_builds[0]
    results = [None] * len(mutants)
    # The build with fewer mutants first, so that the files its mutants touched are not
    # rebuilt in the other one; and each build's mutants by file, so that a file put back is
    # compiled again once, not once for each mutant of another file in between. A lane takes
    # a file's mutants together, the next file when it is done.
    per_build = {k: sum(mu.build == k for mu in mutants) for k in builds}
    order = sorted(range(len(mutants)), key=lambda i: (per_build[mutants[i].build],
                                                       mutants[i].build, mutants[i].file))
    groups = []
    for i in order:
        mu = mutants[i]
        if groups and (mutants[groups[-1][0]].build, mutants[groups[-1][0]].file) == (
                mu.build, mu.file):
            groups[-1].append(i)
        else:
            groups.append([i])
    times, pending = [], {}

    def next_group(lane):
        with lock:
            for g in groups:
                if mutants[g[0]].build in lane_builds[lane]:
                    groups.remove(g)
                    return g
        return None

    def one(lane, idx):
        mu = mutants[idx]
        src = lanes[lane][0]
        t0 = time.time()
        path = os.path.join(src, mu.file)
        spent, ok = (0.0, 0.0), False
        if time.time() - start > a.budget_s:
            verdict = "not run: the %.0f s budget was spent" % a.budget_s
        else:
            try:
                with open(path, encoding="utf-8") as f:
                    original = f.read()
            except OSError as e:
                original, verdict = None, "does not apply: %s" % e
            old = "\n".join(mu.old) + "\n"
            new = "\n".join(mu.new) + ("\n" if mu.new else "")
            if original is None:
                pass
            elif original.count(old) != 1:
                verdict = "does not apply: its text occurs %d times in %s" % (
                    original.count(old), mu.file)
            else:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(original.replace(old, new))
                try:
                    ok, verdict, killer, k, tb, tt = judge(mu, lane_builds[lane][mu.build],
                                                           t0 + 600)
                    spent = (tb, tt)
                finally:
                    # Written anew (a new mtime): whatever was built from the mutant is rebuilt.
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(original)
                if ok:
                    key = (mu.build, killer, only_of(mu, killer), k)
                    with lock:
                        pending.setdefault(key, []).append(idx)
        took = time.time() - t0
        results[idx] = entry(mu.name, ok, took, "%s - %s\n%s\n(build %.1f s, tests %.1f s)" % (
            "ok 1" if ok else "not ok 1", mu.why, verdict, spent[0], spent[1]))
        lines = verdict.splitlines()
        with lock:
            times.append((took, mu.name, spent))
            print("%s %s (%.1f s: build %.1f, tests %.1f): %s" % (
                "ok" if ok else "NOT OK", mu.name, took, spent[0], spent[1], lines[0] + (
                    "\n" + lines[1] if len(lines) > 1 and lines[1].startswith("  ") else "")))
            sys.stdout.flush()

    def lane_loop(lane):
        while True:
            g = next_group(lane)
            if g is None:
                return
            for idx in g:
                one(lane, idx)

    # A mutant judged by a test meson runs alone (is_parallel false) is judged alone first.
    def alone(g):
        return any(not all(t["is_parallel"] for t in builds[mutants[i].build].tests[n])
                   for i in g for n in mutants[i].tests)

    for g in [g for g in groups if alone(g)]:
        groups.remove(g)
        for idx in g:
            one(0, idx)
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(lanes)) as pool:
        for f in [pool.submit(lane_loop, i) for i in range(len(lanes))]:
            f.result()
    # Every killing test, on the unmutated tree: a kill counts only if it passes there.
    t0 = time.time()
    bad = verify_all(builds, pending)
    print("# %d of the killing tests passed on the unmutated tree (%.0f s)" % (
        len(pending) - len(bad), time.time() - t0))
    for key, what in sorted(bad.items()):
        print("mutants: %s" % what, file=sys.stderr)
        for i in pending[key]:
            r = results[i]
            r.update(result="FAIL", returncode=1, stdout=r["stdout"].replace(
                "ok 1 - ", "not ok 1 - ", 1) + "\nnot judged: " + what)
            print("NOT OK %s: not judged: %s" % (r["name"][len("mutant/"):], what.splitlines()[0]))
    survivors = sum(r["result"] != "OK" for r in results)
    logdir = os.path.join(a.dir, "meson-logs")
    os.makedirs(logdir, exist_ok=True)
    with open(os.path.join(logdir, "testlog.json"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    if times:
        print("# the slowest: " + ", ".join("%s %.1f s (build %.1f)" % (n, t, s[0])
                                           for t, n, s in sorted(times, reverse=True)[:10]))
    print("# %d mutants, %d killed, %d not (%.0f s)" % (len(results), len(results) - survivors,
                                                       survivors, time.time() - start))
    return 2 if bad else 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
