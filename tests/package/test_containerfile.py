"""packaging/Containerfile, which no machine of this project can build (there is no
container engine): what can be checked without building it.

Its build stage must run scripts/build-deb.sh (which tests/package/test_deb.py runs and
whose packages it installs and runs) with options the script has, on Debian 12; the
runtime stage must copy the packages from where that run puts them and install them with
apt-get, run as a user that is not root, and each target must start a program the admitd
package installs (debian/admitd.install) and expose the ports that program listens on by
default (its --help). The release's version must be the same everywhere it is written:
meson.build, debian/changelog, CHANGELOG.md, and the images the Kubernetes examples name,
whose comments say how to build and push them from this file.
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import Tap  # noqa: E402

SRC = os.environ.get("ADMIT_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
VERSION = os.environ.get("ADMIT_VERSION", "")
BUILD = os.environ.get("ADMIT_BUILD_ROOT", "build")
TARGETS = {"admitd": ["8080", "9091", "5557"], "admit-router": ["8090", "9092"]}


def read(rel):
    with open(os.path.join(SRC, rel), encoding="utf-8") as f:
        return f.read()


def stages():
    """The Containerfile's stages: name -> (base image, [(instruction, arguments)])."""
    out, cur = {}, None
    lines = read("packaging/Containerfile").replace("\\\n", " ").splitlines()
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            m = re.match(r"^(\S+) AS (\S+)$", rest.strip(), re.I)
            assert m, line
            cur = m.group(2)
            out[cur] = (m.group(1), [])
        else:
            assert cur is not None, line
            out[cur][1].append((word, rest.strip()))
    return out


def runs(stage):
    return [args for word, args in stage[1] if word == "RUN"]


def test_build_stage_runs_the_script():
    st = stages()
    base, steps = st["build"]
    assert base in ("debian:12", "debian:bookworm"), base
    calls = [r for r in runs(st["build"]) if "scripts/build-deb.sh" in r]
    assert len(calls) == 1, runs(st["build"])
    m = re.search(r"scripts/build-deb\.sh((?: --[a-z-]+(?: [^ -]\S*)?)*)", calls[0])
    flags = re.findall(r"--[a-z-]+", m.group(1))
    usage = read("scripts/build-deb.sh")
    for f in flags:
        assert re.search(r"^\s+%s\)" % re.escape(f), usage, re.M), f  # the script takes it
    assert "--install-deps" in flags and "--out" in flags, flags
    out = re.search(r"--out[ =](\S+)", calls[0]).group(1)
    # The whole tree goes in, from the top: the script finds debian/ there.
    assert ("COPY", ". .") in steps and ("WORKDIR", "/src") in steps, steps
    copies = [a for s in st.values() for w, a in s[1] if w == "COPY" and "--from=build" in a]
    assert copies and all(out + "/" in c for c in copies), (out, copies)


def test_runtime_installs_the_package():
    st = stages()
    base, steps = st["runtime"]
    assert base in ("debian:12-slim", "debian:bookworm-slim"), base
    copy = [a for w, a in steps if w == "COPY"]
    assert len(copy) == 1 and re.search(r"/admitd_\*\.deb (\S+)/$", copy[0]), copy
    dest = re.search(r" (\S+)/$", copy[0]).group(1)
    assert any(re.search(r"apt-get install .*%s/\*\.deb" % re.escape(dest), r)
               for r in runs(st["runtime"])), runs(st["runtime"])
    users = [a for w, a in steps if w == "USER"]
    assert users and users[-1] not in ("root", "0"), users
    assert any("useradd --system" in r and users[-1] in r for r in runs(st["runtime"]))


def test_targets_start_the_packaged_programs():
    st = stages()
    installed = set(read("debian/admitd.install").split())
    for target, ports in TARGETS.items():
        base, steps = st[target]
        assert base == "runtime", (target, base)
        entry = [a for w, a in steps if w == "ENTRYPOINT"]
        assert entry == ['["/usr/bin/%s"]' % target], (target, entry)
        assert "usr/bin/" + target in installed, installed
        exposed = [a for w, a in steps if w == "EXPOSE"]
        assert exposed and exposed[0].split() == ports, (target, exposed)
        helptext = subprocess.run([os.path.join(BUILD, target), "--help"], capture_output=True,
                                  text=True, timeout=30).stdout
        defaults = re.findall(r"default (?:0\.0\.0\.0|tcp://0\.0\.0\.0):(\d+)", helptext)
        assert sorted(defaults) == sorted(ports), (target, defaults, ports)
    assert list(st)[-1] == "admitd", list(st)  # the default target, without --target


def test_one_version_everywhere():
    assert re.match(r"^\d+\.\d+\.\d+$", VERSION), VERSION
    assert re.search(r"version : '%s'" % re.escape(VERSION), read("meson.build"))
    first = read("debian/changelog").splitlines()[0]
    assert first.startswith("admitd (%s-" % VERSION), first
    assert re.search(r"^## \[%s\] - \d{4}-\d\d-\d\d$" % re.escape(VERSION), read("CHANGELOG.md"),
                     re.M)
    for example in ("examples/kubernetes-fleet.yaml", "examples/kubernetes-vllm-sidecar.yaml"):
        text = read(example)
        images = re.findall(r"image: (registry\.example/\S+)", text)
        assert images and all(i.endswith(":" + VERSION) for i in images), (example, images)
        for image in set(images):
            name = image.split("/")[1].split(":")[0]
            assert re.search(r"build -f packaging/Containerfile --target %s(?: \\\n#\s+)? -t %s "
                             % (name, re.escape(image)), text), (example, image)
            assert "push " + image in text, (example, image)
    assert "FROM debian:12" in read("packaging/Containerfile")


if __name__ == "__main__":
    tap = Tap()
    tap.run("the build stage runs scripts/build-deb.sh on Debian 12",
            test_build_stage_runs_the_script)
    tap.run("the runtime stage installs the package it built, as a user",
            test_runtime_installs_the_package)
    tap.run("each target starts a packaged program and exposes its default ports",
            test_targets_start_the_packaged_programs)
    tap.run("one version in meson.build, debian/changelog, CHANGELOG.md and the images",
            test_one_version_everywhere)
    tap.done()
