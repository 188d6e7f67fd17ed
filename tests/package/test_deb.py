"""The Debian packages, built by scripts/build-deb.sh, installed on this machine and run.

It builds admitd, libadmit0 and libadmit-dev as a user would (the script, with the
Build-Depends that scripts/install-deps.sh installs), checks what they hold, installs them
with dpkg, and then uses them from their system places: each program's --version from
/usr/bin (the commit this tree is at, not "unknown"); admitd in front of its built-in mock
engine answering a request; the example configurations in /etc/admitd passing
--check-config; the units loading with systemd-analyze verify (their man pages looked up
with man(1) when it is installed); a program built through `pkg-config --cflags --libs
admit` against the installed libadmit-dev, shared and static. Last, whatever happened, the
packages are purged (dpkg --purge), and the purge is checked.

It needs root (dpkg -i): without it the test is a visible skip. It refuses to run, and
fails, when admitd or libadmit is installed already: it would replace and then purge them.
packaging/Containerfile runs the same script and installs the same packages
(test_containerfile.py checks that it does).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

os.environ["ADMITD"] = "/usr/bin/admitd"  # before harness reads it
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import Admitd, Tap, chat_body, request  # noqa: E402

SRC = os.path.abspath(os.environ.get("ADMIT_SOURCE_ROOT",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
VERSION = os.environ.get("ADMIT_VERSION", "")
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = ("admitd", "libadmit0", "libadmit-dev")
PROGRAMS = ("admitd", "admit-router", "admit-top", "admit-mock-engine")
UNITS = ("/lib/systemd/system/admitd.service", "/lib/systemd/system/admit-router.service")

out = None  # where build-deb.sh puts the packages
debs = {}  # package -> .deb path
installed = False


def clean_env():
    """This process's environment without what meson test adds for the suite's own
    programs: the package build and the installed programs are nothing of the suite's."""
    env = dict(os.environ)
    for k in ("MALLOC_PERTURB_", "ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS", "CC"):
        env.pop(k, None)
    return env


def run(argv, check=True, timeout=120, env=None, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       env=env or clean_env(), **kw)
    if check and p.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(argv), p.returncode,
                                                       p.stdout[-3000:], p.stderr[-3000:]))
    return p


def installed_packages():
    p = run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n"] + list(PACKAGES),
            check=False)
    return [line.split()[0] for line in p.stdout.splitlines()
            if len(line.split()) == 2 and line.split()[1] != "not-installed"]


def dpkg(args):
    """dpkg, waiting out another package manager's lock (an apt run beside the suite). It runs
    in a session of its own, and a SIGTERM to this test waits until it has finished, so that
    neither cuts it half-way (which would leave the package database with work pending)."""
    deadline = time.monotonic() + 300
    while True:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            p = run(["dpkg"] + args, check=False, timeout=300, start_new_session=True)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if p.returncode == 0:
            return p
        if "lock" not in p.stderr or time.monotonic() > deadline:
            raise AssertionError("dpkg %s exited %d:\n%s%s" % (" ".join(args), p.returncode,
                                                                p.stdout, p.stderr))
        time.sleep(2)


def test_build():
    global out
    out = tempfile.mkdtemp(prefix="admit-deb-")
    t0 = time.monotonic()
    p = run([os.path.join(SRC, "scripts", "build-deb.sh"), "--out", out], timeout=800)
    print("# build-deb.sh took %.0f s" % (time.monotonic() - t0), flush=True)
    for pkg in PACKAGES:
        path = os.path.join(out, "%s_%s-1_%s.deb" % (pkg, VERSION, arch()))
        assert os.path.isfile(path), (path, os.listdir(out), p.stdout)
        assert path in p.stdout, p.stdout  # the script names what it built
        debs[pkg] = path


def arch():
    return run(["dpkg", "--print-architecture"]).stdout.strip()


def contents(pkg):
    """The paths a package holds (a symbolic link by its own name, not its target)."""
    return {line.split()[5].lstrip(".")
            for line in run(["dpkg-deb", "-c", debs[pkg]]).stdout.splitlines()}


def test_contents():
    files = contents("admitd")
    for f in ["/usr/bin/" + p for p in PROGRAMS] + list(UNITS) + [
            "/usr/share/man/man8/admitd.8.gz", "/usr/share/man/man8/admit-router.8.gz",
            "/usr/share/man/man1/admit-top.1.gz", "/usr/share/man/man1/admit-mock-engine.1.gz",
            "/etc/admitd/admitd.yaml", "/etc/admitd/admit-router.yaml", "/etc/default/admitd",
            "/usr/share/doc/admitd/copyright", "/usr/share/doc/admitd/examples/admitd.yaml"]:
        assert f in files, (f, sorted(files))
    lib = contents("libadmit0")
    assert any(re.match(r"^/usr/lib/[^/]+/libadmit\.so\.0$", f) for f in lib), sorted(lib)
    dev = contents("libadmit-dev")
    for rx in (r"/usr/include/admit/gate\.h$", r"/usr/include/admit/load\.h$",
               r"/usr/include/admit/classify\.h$", r"/libadmit\.a$", r"/libadmit\.so$",
               r"/pkgconfig/admit\.pc$"):
        assert any(re.search(rx, f) for f in dev), (rx, sorted(dev))
    info = tempfile.mkdtemp(prefix="admit-ctrl-")
    try:
        run(["dpkg-deb", "-e", debs["admitd"], info])
        with open(os.path.join(info, "conffiles"), encoding="utf-8") as f:
            listed = f.read().split()
        assert {"/etc/admitd/admitd.yaml", "/etc/admitd/admit-router.yaml",
                "/etc/default/admitd", "/etc/default/admit-router"} <= set(listed), listed
    finally:
        shutil.rmtree(info, ignore_errors=True)


def test_install():
    global installed
    installed = True  # from here on the purge runs, whatever happens
    dpkg(["-i"] + [debs[p] for p in PACKAGES])
    assert set(installed_packages()) == set(PACKAGES), installed_packages()


def expected_commit():
    p = run(["git", "-C", SRC, "describe", "--always", "--dirty", "--abbrev=12", "--exclude=*"],
            check=False)
    return p.stdout.strip() if p.returncode == 0 else None


def test_versions():
    commit = expected_commit()
    for prog in PROGRAMS:
        path = "/usr/bin/" + prog
        assert shutil.which(prog) == path, shutil.which(prog)
        text = run([path, "--version"]).stdout
        first = text.splitlines()[0]
        m = re.match(r"^%s %s \(commit (\S+)\)$" % (re.escape(prog), re.escape(VERSION)), first)
        assert m, text
        if commit is not None:
            assert m.group(1) == commit, (m.group(1), commit)
        assert "buildtype plain, sanitizers none" in text, text  # Debian's own flags


def test_runs():
    """admitd from /usr/bin in front of its built-in mock engine: a request, then a drain."""
    ad = Admitd("http://127.0.0.1:1", "--mock-engine", "--engine-request-limit=2")
    status, _, body = request(ad.addr, "POST", "/v1/chat/completions",
                              chat_body(max_tokens=4, stream=False))
    assert status == 200, body
    ad.stop()


def test_configs():
    run(["/usr/bin/admitd", "--check-config", "--config=/etc/admitd/admitd.yaml"])
    run(["/usr/bin/admit-router", "--check-config", "--config=/etc/admitd/admit-router.yaml"])


def test_units():
    argv = ["systemd-analyze", "verify"]
    if shutil.which("man") is None:
        argv.append("--man=no")  # no man(1) to look the Documentation= pages up with
    run(argv + list(UNITS))
    for unit in UNITS:
        text = open(unit, encoding="utf-8").read()
        assert re.search(r"^ExecStart=/usr/bin/admit(d|-router) --config=/etc/admitd/", text,
                         re.M), text
    state = run(["systemctl", "is-enabled", "admitd.service"], check=False).stdout.strip()
    assert state in ("disabled", ""), state  # installed, not enabled (no systemd here: "")


def test_consumer():
    cflags = run(["pkg-config", "--cflags", "admit"]).stdout.split()
    libs = run(["pkg-config", "--libs", "admit"]).stdout.split()
    slibs = ["-l:libadmit.a" if f == "-ladmit" else f
             for f in run(["pkg-config", "--static", "--libs", "admit"]).stdout.split()]
    assert run(["pkg-config", "--modversion", "admit"]).stdout.strip() == VERSION
    tmp = tempfile.mkdtemp(prefix="admit-consumer-")
    try:
        for name, link in (("shared", libs), ("static", slibs)):
            exe = os.path.join(tmp, name)
            run(["cc", "-std=c11", "-Wall", "-Werror", "-o", exe,
                 os.path.join(HERE, "consumer.c")] + cflags + link)
            p = run([exe])
            assert p.stdout == "ok\n", p.stdout + p.stderr
        ldd = run(["ldd", os.path.join(tmp, "shared")]).stdout
        assert re.search(r"libadmit\.so\.0 => (/usr)?/lib/", ldd), ldd
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def purge():
    dpkg(["--purge"] + list(PACKAGES))
    left = installed_packages()
    assert not left, left
    for path in ["/usr/bin/" + p for p in PROGRAMS] + list(UNITS) + ["/etc/admitd"]:
        assert not os.path.exists(path), path


if __name__ == "__main__":
    tap = Tap()
    if os.geteuid() != 0:
        tap.skip("the Debian packages, built, installed and run",
                 "not root: installing the packages needs dpkg -i (CI runs as root)")
        tap.done()
    there = installed_packages()
    if there:
        tap.report(False, "%s installed already: this test would replace and purge them "
                   "(dpkg --purge %s, then run it again)" % (", ".join(there), " ".join(there)))
        tap.done()
    try:
        tap.run("scripts/build-deb.sh builds admitd, libadmit0 and libadmit-dev", test_build)
        if len(debs) == len(PACKAGES):
            tap.run("the packages hold the programs, man pages, units, conffiles and library",
                    test_contents)
            tap.run("dpkg -i installs them", test_install)
            tap.run("/usr/bin's programs give version 0.2.0 and this tree's commit",
                    test_versions)
            tap.run("the installed admitd serves a request and drains", test_runs)
            tap.run("the configurations in /etc/admitd pass --check-config", test_configs)
            tap.run("the units load (systemd-analyze verify)", test_units)
            tap.run("a program builds against the installed libadmit-dev and runs",
                    test_consumer)
    finally:
        if installed:
            # A SIGTERM now (meson's timeout) would stop the purge half-way: finish it first.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            tap.run("dpkg --purge removes them, configuration included", purge)
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)
    tap.done()
