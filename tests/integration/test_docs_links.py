"""The docs as a map that leads somewhere: every relative link of the Markdown files at the
top of the tree and in docs/ resolves (the file exists; an #anchor is a heading of the
target, by GitHub's rules for heading ids), and every command the README and the docs show
for a built program names a program the documented build makes, at the path it makes it,
with flags that program's --help lists (run from the build under test).

A program path is BUILDDIR/SUBDIR/NAME: BUILDDIR one that a documented `meson setup BUILDDIR`
makes, SUBDIR/NAME an executable() of SUBDIR/meson.build. A command is a program at the start
of a shell command in a code block (after a line start, `;`, `&&`, `||`, `|`, `(`, `&` or
variable assignments); comments are left out, so a path in a comment is not a command."""

import glob
import os
import re
import shlex
import subprocess

from harness import ADMITD, MOCK, Tap

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
# The programs whose flags are checked, by name: the ones the build under test made.
BUILT = {
    "admitd": ADMITD,
    "admit-mock-engine": MOCK,
    "admit-router": os.environ.get("ADMIT_ROUTER", "build/admit-router"),
    "admit-top": os.environ.get("ADMIT_TOP", "build/admit-top"),
}


def doc_files():
    """The Markdown files the docs are made of: the top of the tree and docs/."""
    files = sorted(glob.glob(os.path.join(ROOT, "*.md")) +
                   glob.glob(os.path.join(ROOT, "docs", "*.md")))
    assert any(f.endswith("README.md") for f in files), files
    return files


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


FENCE = re.compile(r"^(\s*)(```|~~~)(.*)$")


def split_fences(text):
    """[(is_code, info, lines)] in order: prose runs and fenced code blocks."""
    out, cur, code, info, fence = [], [], False, "", None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if m and (not code or m.group(2) == fence):
            if cur or code:
                out.append((code, info, cur))
            cur = []
            if code:
                code, info, fence = False, "", None
            else:
                code, info, fence = True, m.group(3).strip(), m.group(2)
            continue
        cur.append(line)
    if cur:
        out.append((code, info, cur))
    return out


def slug(heading):
    """GitHub's id for a heading: the text as rendered (no markup), lowercased, every
    character that is not a letter, digit, space, hyphen or underscore dropped, spaces as
    hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """Every heading id of a Markdown file (duplicates numbered as GitHub does)."""
    seen, out = {}, set()
    for code, _, lines in split_fences(read(path)):
        if code:
            continue
        for line in lines:
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else "%s-%d" % (base, n))
    return out


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)")


def links(path):
    """(line number, target) of every link outside code (inline code spans removed)."""
    out, no = [], 0
    for code, _, lines in split_fences(read(path)):
        no += 1  # the fence line itself
        for line in lines:
            no += 1
            if code:
                continue
            bare = re.sub(r"``[^`]*``|`[^`]*`", "", line)
            for m in LINK.finditer(bare):
                out.append((no - 1, m.group(1)))
            m = REFDEF.match(bare)
            if m:
                out.append((no - 1, m.group(1)))
    return out


def test_relative_links_resolve():
    bad, checked = [], 0
    cache = {}
    for f in doc_files():
        for no, target in links(f):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, mailto:, ...
                continue
            checked += 1
            where = "%s:%d: %s" % (os.path.relpath(f, ROOT), no, target)
            path, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if not dest.startswith(ROOT):
                bad.append(where + ": outside the repository")
                continue
            if not os.path.exists(dest):
                bad.append(where + ": no such file")
                continue
            if frag:
                if not dest.endswith(".md"):
                    bad.append(where + ": an anchor into a file that is not Markdown")
                    continue
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if frag not in cache[dest]:
                    bad.append(where + ": no heading #%s in %s" %
                               (frag, os.path.relpath(dest, ROOT)))
    print("# %d relative links checked in %d files" % (checked, len(doc_files())))
    assert checked > 50, checked  # the docs link to each other: far more than this
    assert not bad, "broken links:\n" + "\n".join(bad)


# ---- commands ------------------------------------------------------------------------------

SHELLISH = {"", "sh", "bash", "shell", "console"}


def commands(path):
    """(line number, argv) of every shell command in the shell code blocks of a file, with
    continuation lines joined and comments left out."""
    out, no = [], 0
    for code, info, lines in split_fences(read(path)):
        no += 1
        start = no
        no += len(lines)
        lang = info.split()[0] if info.split() else ""
        if not code or lang not in SHELLISH:
            continue
        joined, first = "", None
        for i, line in enumerate(lines):
            if first is None:
                first = start + i + 1
            if line.rstrip().endswith("\\"):
                joined += line.rstrip()[:-1] + " "
                continue
            joined += line
            out.extend((first, argv) for argv in split_commands(joined))
            joined, first = "", None
        if joined:
            out.extend((first, argv) for argv in split_commands(joined))
    return out


def split_commands(line):
    """The simple commands of one shell line, as argv lists (comments dropped)."""
    try:
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lex.whitespace_split = True
        lex.commenters = "#"
        toks = list(lex)
    except ValueError:  # an unbalanced quote: not shell (an output sample)
        return []
    out, cur = [], []
    for t in toks:
        if t and set(t) <= set(";&|()"):
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur:
        out.append(cur)
    # Leading variable assignments (N=8 scripts/quickstart.sh) and `$(`: the program follows.
    res = []
    for argv in out:
        while argv and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]) or
                        argv[0] in ("$", "do", "then", "time")):
            argv = argv[1:]
        if argv:
            res.append(argv)
    return res


def documented_builddirs():
    """The build directories a documented `meson setup DIR` makes."""
    dirs = set()
    for f in doc_files():
        for _, argv in commands(f):
            if argv[:2] == ["meson", "setup"]:
                dirs.update(a for a in argv[2:3] if not a.startswith("-"))
    return dirs


def executables():
    """{path under a build dir, or a regex of it: name} of every executable() in the tree's
    meson.build files ('x' + var names are taken as patterns)."""
    out = []
    for mb in glob.glob(os.path.join(ROOT, "**", "meson.build"), recursive=True):
        rel = os.path.relpath(os.path.dirname(mb), ROOT)
        if rel.split(os.sep)[0].startswith(("build", "subprojects")):
            continue
        sub = "" if rel == "." else rel + "/"
        for m in re.finditer(r"executable\(\s*((?:'[^']*'|\w+)(?:\s*\+\s*(?:'[^']*'|\w+))*)\s*,",
                             read(mb)):
            parts = re.split(r"\s*\+\s*", m.group(1))
            rx = "".join(re.escape(p[1:-1]) if p.startswith("'") else r"[\w.-]+" for p in parts)
            out.append(re.compile("^" + re.escape(sub) + rx + "$"))
    assert any(r.match("admitd") for r in out), "no executable('admitd') found"
    return out


def help_text(name):
    p = subprocess.run([BUILT[name], "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=30)
    text = p.stdout.decode()
    assert p.returncode == 0 and "usage" in text.lower(), (name, p.returncode, text[:500])
    return text


def flags_of(argv):
    """The long and short options an argv passes (before a `--`), without their values."""
    out = []
    for a in argv[1:]:
        if a == "--":
            break
        if a.startswith("--"):
            out.append(a.split("=", 1)[0])
        elif re.match(r"^-[A-Za-z]", a):
            out.append(a[:2])
    return out


def test_documented_commands_exist():
    dirs = documented_builddirs()
    exes = executables()
    helps = {}
    print("# documented build directories: %s" % ", ".join(sorted(dirs)))
    assert "build-release" in dirs, dirs  # the README's install section
    bad, seen = [], 0
    for f in doc_files():
        for no, argv in commands(f):
            prog = argv[0]
            where = "%s:%d: %s" % (os.path.relpath(f, ROOT), no, " ".join(argv)[:100])
            m = re.match(r"^(build[\w.-]*)/(.+)$", prog)
            if m:
                seen += 1
                builddir, inside = m.groups()
                if builddir not in dirs:
                    bad.append(where + ": %s is not a build directory the docs set up "
                               "(meson setup %s)" % (builddir, builddir))
                    continue
                if not any(r.match(inside) for r in exes):
                    bad.append(where + ": the build makes no program %s (no executable() "
                               "of that name in %s/meson.build)" %
                               (inside, os.path.dirname(inside) or "."))
                    continue
                name = inside
            elif prog in BUILT:
                seen += 1  # an installed program: its flags must exist all the same
                name = prog
            else:
                continue
            if name not in BUILT:
                continue
            if name not in helps:
                helps[name] = help_text(name)
            for flag in flags_of(argv):
                if not re.search(r"(^|[\s\[,])%s([=\s\],]|$)" % re.escape(flag), helps[name],
                                 re.M):
                    bad.append(where + ": %s has no option %s (its --help does not list it)" %
                               (name, flag))
    print("# %d commands of built programs checked" % seen)
    assert seen >= 10, seen  # README, admitd.md, router.md, operations.md, benchmarks.md
    assert not bad, "\n".join(bad)


if __name__ == "__main__":
    tap = Tap()
    tap.run("every relative link of README.md, the top-level docs and docs/ resolves, "
            "anchors included", test_relative_links_resolve)
    tap.run("every command the docs show for a built program names a program of the "
            "documented build, with flags its --help lists", test_documented_commands_exist)
    tap.done()
