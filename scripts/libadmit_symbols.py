#!/usr/bin/env python3
"""libadmit's exported symbols, from one list (lib/libadmit.sym), for both of its forms.

    libadmit_symbols.py map SYMFILE OUT
        writes the shared library's version script: the listed functions global, in version
        node LIBADMIT_0, and every other symbol local;
    libadmit_symbols.py archive SYMFILE IN OUT [--objcopy PATH] [--ar PATH] [--ld PATH]
        writes the static library OUT from IN, an archive (thin, as meson makes them) of
        libadmit's objects: they are linked into one (ld -r; meson's own prelinking is not
        there for every compiler, clang's among them), and in a copy of it every global
        symbol not listed is made local (objcopy --keep-global-symbols), so that a program
        linking libadmit.a meets no name of ours but the API's (its own xmalloc or
        jscan_init links).

The list is one name a line; '#' starts a comment.
"""
import os
import subprocess
import sys
import tempfile


def names(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            name = line.split("#", 1)[0].strip()
            if name:
                out.append(name)
    return out


def write_map(sym, out):
    with open(out, "w", encoding="utf-8") as f:
        f.write("LIBADMIT_0 {\n  global:\n")
        f.writelines("    %s;\n" % n for n in names(sym))
        f.write("  local: *;\n};\n")


def write_archive(sym, src, out, objcopy, ar, ld):
    members = subprocess.run([ar, "t", src], check=True, capture_output=True,
                             text=True).stdout.split()
    if not members:
        sys.exit("libadmit_symbols: %s holds no object" % src)
    paths = []
    for m in members:
        if not os.path.isabs(m) and not os.path.exists(m):
            m = os.path.join(os.path.dirname(src), os.path.basename(m))
        paths.append(m)
    with tempfile.TemporaryDirectory() as tmp:
        one = os.path.join(tmp, "prelinked.o")
        obj = os.path.join(tmp, "admit.o")
        subprocess.run([ld, "-r", "-o", one] + paths, check=True)
        subprocess.run([objcopy, "--keep-global-symbols=" + sym, one, obj], check=True)
        if os.path.exists(out):
            os.unlink(out)
        subprocess.run([ar, "rcsD", out, obj], check=True)


def main(argv):
    args, opts = [], {"--objcopy": "objcopy", "--ar": "ar", "--ld": "ld"}
    it = iter(argv[1:])
    for a in it:
        if a in opts:
            opts[a] = next(it)
        else:
            args.append(a)
    if len(args) == 3 and args[0] == "map":
        write_map(args[1], args[2])
    elif len(args) == 4 and args[0] == "archive":
        write_archive(args[1], args[2], args[3], opts["--objcopy"], opts["--ar"], opts["--ld"])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
