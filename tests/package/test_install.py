"""`meson install` as a user runs it: into a temporary DESTDIR, from this build directory.

It installs what the build made (--no-rebuild: meson test has built it, and nothing may
rebuild under the tests running beside this one), then checks what a user finds there:
the four programs answering --version from their installed place; a man page for each
whose options are those of the program's --help; the two systemd units, which
systemd-analyze verify loads with their ExecStart at the installed program; the docs and
the example configurations; and libadmit, whose exported symbols are exactly the functions
of admit/gate.h and admit/load.h (lib/libadmit.sym, shared and static), against which a
small program (consumer.c) builds through `pkg-config --cflags --libs admit` alone and runs,
linked shared and static, and a classifier plugin (examples/classifier) compiles from the
installed admit/classify.h. A sanitized build installs sanitized programs and libraries, so
the consumer is built with the same -fsanitize flags (ADMIT_SANITIZE).
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import Tap  # noqa: E402

SRC = os.environ.get("ADMIT_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("ADMIT_BUILD_ROOT", "build")
VERSION = os.environ.get("ADMIT_VERSION", "")
CC = os.environ.get("CC", "cc").split()
SANITIZE = os.environ.get("ADMIT_SANITIZE", "none")
HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = {"admitd": "8", "admit-router": "8", "admit-top": "1", "admit-mock-engine": "1"}

dest = None  # the DESTDIR, made by install()
installed = None  # meson install's failure (its output), or "" when it succeeded


def run(argv, env=None, check=True, **kw):
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.run(argv, env=full, capture_output=True, text=True, timeout=120, **kw)
    if check and p.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(argv), p.returncode, p.stdout,
                                                       p.stderr))
    return p


def install():
    """Installs once, before the checks: each check stands alone on what is there (the
    mutation check runs one by its number)."""
    global dest, installed
    dest = tempfile.mkdtemp(prefix="admit-install-")
    p = run(["meson", "install", "-C", BUILD, "--destdir", dest, "--no-rebuild", "--quiet"],
            check=False)
    installed = "" if p.returncode == 0 else "meson install exited %d:\n%s%s" % (
        p.returncode, p.stdout, p.stderr)


def find(pattern):
    """The installed file whose path under DESTDIR matches the glob pattern."""
    assert installed == "", installed
    hits = sorted(glob.glob(os.path.join(dest, pattern.lstrip("/")), recursive=True))
    assert hits, "nothing installed matches %s" % pattern
    return hits[0]


def prog(name):
    return find("**/bin/" + name)


def page(name):
    return find("**/share/man/man%s/%s.%s" % (PROGRAMS[name], name, PROGRAMS[name]))


def docdir():
    return os.path.dirname(find("**/share/doc/admitd/README.md"))


def test_install():
    assert installed == "", installed
    for name in PROGRAMS:
        prog(name)
        page(name)
    for unit in ("admitd.service", "admit-router.service"):
        find("**/systemd/system/" + unit)
    for f in ("admit.pc", "libadmit.a", "libadmit.so", "libadmit.so.0", "include/admit/gate.h",
              "include/admit/load.h", "include/admit/classify.h"):
        find("**/" + f)
    assert os.path.islink(find("**/libadmit.so")) and os.path.islink(find("**/libadmit.so.0"))
    assert os.path.basename(os.path.realpath(find("**/libadmit.so.0"))) == "libadmit.so." + VERSION
    for f in ["CHANGELOG.md", "docs/install.md", "docs/load-message.md", "examples/admitd.yaml",
              "examples/admit-router.yaml", "examples/classifier/demote_large.c"]:
        assert os.path.isfile(os.path.join(docdir(), f)), f


def test_versions():
    for name in PROGRAMS:
        out = run([prog(name), "--version"]).stdout
        lines = out.splitlines()
        assert re.match(r"^%s %s \(commit [0-9a-z-]+\)$" % (re.escape(name), re.escape(VERSION)),
                        lines[0]), out
        assert re.match(r"^built with \S+ \S+, meson \S+, buildtype \S+, sanitizers \S+$",
                        lines[1]), out
        assert lines[2].startswith("libraries: ") and "jansson 2." in lines[2], out
        if name != "admit-top":
            assert "libevent 2." in lines[2], out
        if name in ("admitd", "admit-router", "admit-top"):
            assert "nng 1." in lines[2], out


def options_of(text, rx):
    return set(re.findall(rx, text, re.M))


def test_man_pages_name_every_option():
    """Each page documents the options its program's --help lists (and no other), and for
    admitd and the router every environment variable."""
    for name in PROGRAMS:
        text = open(page(name), encoding="utf-8").read()
        assert text.startswith(".\\\" Generated by scdoc"), text[:80]
        helptext = run([prog(name), "--help"]).stdout
        want = options_of(helptext, r"^\s+(--[a-z][a-z0-9-]*)")
        # roff: \fB--listen\fR at the start of an option's tag line
        have = options_of(text, r"^\\fB(--[a-z][a-z0-9-]*)\\fR")
        assert want == have, (name, sorted(want - have), sorted(have - want))
        for env in re.findall(r"env ([A-Z][A-Z0-9_]+)", helptext):
            assert env in text, (name, env)


def test_units_load():
    """systemd-analyze verify loads each unit, its ExecStart pointed at the installed program
    (under DESTDIR) and the man pages not looked up (they are not in the system's MANPATH)."""
    if shutil.which("systemd-analyze") is None:
        raise AssertionError("systemd-analyze is not installed (Debian package systemd; "
                             "scripts/install-deps.sh installs it)")
    tmp = tempfile.mkdtemp(prefix="admit-units-")
    try:
        for unit, name in (("admitd.service", "admitd"), ("admit-router.service", "admit-router")):
            text = open(find("**/systemd/system/" + unit), encoding="utf-8").read()
            where = prog(name)[len(dest):]  # its path once installed for real
            assert "ExecStart=%s --config=" % where in text, text
            assert "DynamicUser=yes" in text and "NoNewPrivileges=yes" in text, text
            assert "ProtectSystem=strict" in text, text
            with open(os.path.join(tmp, unit), "w", encoding="utf-8") as f:
                f.write(text.replace("ExecStart=" + where, "ExecStart=" + prog(name)))
            run(["systemd-analyze", "verify", "--man=no", os.path.join(tmp, unit)])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def exported(path, dynamic):
    argv = ["nm", "--defined-only", "-D" if dynamic else "-g", path]
    out = run(argv).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines()
            if len(line.split()) == 3 and line.split()[1] in "TDRBVW"}


def header_functions():
    names = set()
    for h in ("gate.h", "load.h"):
        text = open(os.path.join(SRC, "include", "admit", h), encoding="utf-8").read()
        names |= set(re.findall(r"^(?!typedef)[a-z][^;(]*?\b([a-z_][a-z0-9_]*)\(", text, re.M))
    return names


def test_symbols():
    """libadmit exports the public functions and nothing else, shared and static."""
    want = header_functions()
    listed = {l.split("#")[0].strip() for l in open(os.path.join(SRC, "lib", "libadmit.sym"))} - {""}
    assert len(want) > 20 and want == listed, (sorted(want - listed), sorted(listed - want))
    shared = exported(os.path.realpath(find("**/libadmit.so")), True)
    assert shared == want, (sorted(want - shared), sorted(shared - want))
    static = exported(find("**/libadmit.a"), False)
    assert static == want, (sorted(want - static), sorted(static - want))
    soname = run(["readelf", "-d", find("**/libadmit.so")]).stdout
    assert "Library soname: [libadmit.so.0]" in soname, soname


def pkg_env():
    return {"PKG_CONFIG_LIBDIR": os.path.dirname(find("**/admit.pc")),
            "PKG_CONFIG_PATH": "", "PKG_CONFIG_SYSROOT_DIR": dest}


def sanitize_flags():
    return [] if SANITIZE in ("", "none") else ["-fsanitize=" + SANITIZE]


def test_consumer_builds_and_runs():
    env = pkg_env()
    cflags = run(["pkg-config", "--cflags", "admit"], env=env).stdout.split()
    libs = run(["pkg-config", "--libs", "admit"], env=env).stdout.split()
    assert any(f.startswith("-I" + dest) for f in cflags), cflags
    assert "-ladmit" in libs and any(f.startswith("-L" + dest) for f in libs), libs
    assert run(["pkg-config", "--modversion", "admit"], env=env).stdout.strip() == VERSION
    tmp = tempfile.mkdtemp(prefix="admit-consumer-")
    try:
        src = os.path.join(HERE, "consumer.c")
        shared = os.path.join(tmp, "consumer")
        run(CC + sanitize_flags() + ["-std=c11", "-Wall", "-Werror", "-o", shared, src] + cflags +
            libs)
        libdir = os.path.dirname(find("**/libadmit.a"))
        out = run([shared], env={"LD_LIBRARY_PATH": libdir})
        assert out.stdout == "ok\n", out.stdout + out.stderr
        ldd = run(["ldd", shared], env={"LD_LIBRARY_PATH": libdir}).stdout
        assert os.path.join(libdir, "libadmit.so.0") in ldd, ldd
        # Static: libadmit.a and what --static adds (libm), no libadmit.so at run time.
        static = os.path.join(tmp, "consumer-static")
        slibs = run(["pkg-config", "--static", "--libs", "admit"], env=env).stdout.split()
        slibs = ["-l:libadmit.a" if f == "-ladmit" else f for f in slibs]
        run(CC + sanitize_flags() + ["-std=c11", "-Wall", "-Werror", "-o", static, src] + cflags +
            slibs)
        out = run([static])
        assert out.stdout == "ok\n", out.stdout + out.stderr
        assert "libadmit" not in run(["ldd", static], check=False).stdout
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_classifier_plugin_builds():
    """A classifier plugin needs the installed admit/classify.h alone (admit-router provides
    the functions it calls): the installed example compiles to a shared object."""
    env = pkg_env()
    cflags = run(["pkg-config", "--cflags", "admit"], env=env).stdout.split()
    tmp = tempfile.mkdtemp(prefix="admit-plugin-")
    try:
        so = os.path.join(tmp, "demote_large.so")
        src = os.path.join(docdir(), "examples", "classifier", "demote_large.c")
        run(CC + ["-std=c11", "-Wall", "-Werror", "-shared", "-fPIC", "-o", so, src] + cflags)
        syms = exported(so, True)
        assert {"admit_classifier", "admit_classifier_abi"} <= syms, syms
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    tap = Tap()
    try:
        install()
        tap.run("meson install --destdir installs everything", test_install)
        tap.run("each installed program gives its version, commit and build", test_versions)
        tap.run("a man page per program, naming every option of its --help",
                test_man_pages_name_every_option)
        tap.run("the systemd units load (systemd-analyze verify)", test_units_load)
        tap.run("libadmit exports the public API and nothing else", test_symbols)
        tap.run("a program builds against the installed libadmit through pkg-config and runs, "
                "shared and static", test_consumer_builds_and_runs)
        tap.run("a classifier plugin builds from the installed header",
                test_classifier_plugin_builds)
    finally:
        if dest is not None:
            shutil.rmtree(dest, ignore_errors=True)
    tap.done()
