#!/usr/bin/env python3
"""The architecture as a check, run as a build step before anything is compiled.

Each folder is a layer and may include only the layers beneath it:

    lib/util      pure helpers: buffers, allocation, logging, the clock, addresses, JSON scanning
    lib/wire      wire formats: HTTP/1, SSE, SP framing, Prometheus text     -> util
    lib/admission the admission domain: gate, booking, thresholds, queues,
                  load messages, token counts, engine metrics                -> util, wire
    lib/config    options, their YAML file, reload differences               -> util
                  (the four above are the pure layers: no libevent, no nng, no sockets)
    lib/net       sockets on libevent's events, no protocol (accepting)      -> pure
    lib/http      the HTTP engine (libevent's events, no evhttp)             -> pure, net
    lib/pubsub    load messages over nng                                     -> pure, net
    lib/daemon    what admitd and admit-router share above the HTTP seam     -> pure, net,
                  http, pubsub
    tests/bench/fleet  the fleet benches: load messages over lib/pubsub or nng itself
                  -> pure, pubsub
    src/<prog>   one folder per program, with its main          -> any lib/ layer
    examples/<x> code written against the public API alone        -> include/admit

evhttp, bufferevents and the libevent buffer headers appear only in the mock engine, a
program of its own (lib/http speaks HTTP/1.1 itself: ioconn, wire/h1parse), and libevent's
listener only there and in lib/http; nng only in lib/pubsub (and in tests/bench/fleet, whose
intake benches compare nng's socket layouts and spsub); and no two modules include each
other, directly or through others. Exits 1 with one line per violation, naming file:line.

  check_layers.py ROOT [--out FILE]   check (and touch FILE when clean)
  check_layers.py ROOT --list         print the files checked, one per line
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')

# The pure layers, which every layer above them may include.
PURE = ("util", "wire", "admission", "config")

# Project folders a layer may include ("admit" is the public include/admit/).
MAY_INCLUDE = {
    "lib/util": {"admit", "util"},
    "lib/wire": {"admit", "util", "wire"},
    "lib/admission": {"admit", "util", "wire", "admission"},
    "lib/config": {"admit", "util", "config"},
    "lib/net": {"admit", *PURE, "net"},
    "lib/http": {"admit", *PURE, "net", "http"},
    "lib/pubsub": {"admit", *PURE, "net", "pubsub"},
    "lib/daemon": {"admit", *PURE, "net", "http", "pubsub", "daemon"},
    "src/admitd": {"admit", *PURE, "net", "http", "pubsub", "daemon", "mock"},
    "src/router": {"admit", *PURE, "net", "http", "pubsub", "daemon"},
    "src/top": {"admit", *PURE, "pubsub"},
    "src/mock": {"admit", *PURE, "http"},
    "include/admit": {"admit"},
    # tests: the shared fixtures (testenv)
    **{"tests/unit/" + p: {"admit", *PURE, "tests"} for p in PURE},
    "tests/unit/mock": {"admit", *PURE, "mock", "tests"},
    "tests/unit/router": {"admit", *PURE, "router", "tests"},
    "tests/unit/admitd": {"admit", *PURE, "admitd", "tests"},
    # the daemon's metrics: rendered from a struct, no event loop
    "tests/unit/daemon": {"admit", *PURE, "net", "http", "daemon", "tests"},
    "fuzz": {"admit", *PURE, "router"},  # router: its pure config readers (classes)
    # the selection bench: the pure modules only; the load decoder bench: fuzz/'s oracle
    "tests/bench": {"admit", *PURE, "router", "fuzz"},
    # The fleet benches publish and receive load messages: fleetpub through lib/pubsub, and
    # the intake benches through nng itself too, since what they compare is how nng's sockets
    # are laid out (and, spsub_bench, nng against lib/pubsub/spsub).
    "tests/bench/fleet": {"admit", *PURE, "pubsub"},
    # A plugin is built from the public header alone: it links against nothing of ours.
    "examples/classifier": {"admit"},
}

# System headers, by what they are.
LIBEVENT = re.compile(r"^(event2/|event\.h$|evhttp\.h$|evdns\.h$|evutil\.h$|evrpc\.h$)")
# evhttp and bufferevents (with the buffers under them), which admitd's own HTTP replaced.
EVHTTP_NAMES = (r"http|http_struct|http_compat|keyvalq_struct|buffer|buffer_compat|bufferevent"
                r"|bufferevent_struct|bufferevent_compat")
EVHTTP = re.compile(r"^(event2/(%s)\.h$|evhttp\.h$)" % EVHTTP_NAMES)
# ... and the listener beside them: what only the HTTP engine (and the mock) may include.
HTTP_HEADERS = re.compile(r"^(event2/(%s|listener)\.h$|evhttp\.h$)" % EVHTTP_NAMES)
NNG = re.compile(r"^nng/")

# Which system headers a layer may not include, and why.
FORBIDDEN = {
    **{"lib/" + p: [(LIBEVENT, "lib/%s is pure: no libevent" % p),
                    (NNG, "lib/%s is pure: no nng" % p)] for p in PURE},
    "lib/net": [(HTTP_HEADERS, "lib/net speaks no protocol: no evhttp, buffers or listener"),
                (NNG, "nng belongs in lib/pubsub")],
    "lib/http": [(EVHTTP, "admitd's HTTP is its own (ioconn, wire/h1parse), not evhttp"),
                 (NNG, "nng belongs in lib/pubsub")],
    "lib/pubsub": [(HTTP_HEADERS, "evhttp and libevent buffers belong in lib/http")],
    "lib/daemon": [(HTTP_HEADERS, "speak http/httpreq.h, not evhttp"),
                   (NNG, "nng belongs in lib/pubsub")],
    "src/admitd": [(HTTP_HEADERS, "speak http/httpreq.h, not evhttp"),
                   (NNG, "nng belongs in lib/pubsub")],
    "src/router": [(HTTP_HEADERS, "speak http/httpreq.h, not evhttp"),
                   (NNG, "nng belongs in lib/pubsub")],
    "src/top": [(LIBEVENT, "admit-top has no event loop"), (NNG, "nng belongs in lib/pubsub")],
    "src/mock": [(NNG, "nng belongs in lib/pubsub")],
    "include/admit": [(LIBEVENT, "the public API is pure"), (NNG, "the public API is pure")],
    **{"tests/unit/" + p: [(LIBEVENT, "pure tests need no event loop"),
                           (NNG, "no nng in pure tests")] for p in PURE + ("mock",)},
    "tests/unit/router": [(LIBEVENT, "the router's unit tests link only its pure modules"),
                          (NNG, "the router's unit tests link only its pure modules")],
    "tests/unit/admitd": [(LIBEVENT, "admitd's unit tests link only its pure modules"),
                          (NNG, "admitd's unit tests link only its pure modules")],
    "fuzz": [(LIBEVENT, "the fuzzed parsers are pure"), (NNG, "the fuzzed parsers are pure")],
    "tests/bench": [(LIBEVENT, "the selection bench opens no socket"),
                    (NNG, "the selection bench opens no socket")],
    "tests/bench/fleet": [(HTTP_HEADERS, "the fleet benches speak no HTTP")],
    "examples/classifier": [(LIBEVENT, "a classifier plugin sees only admit/classify.h"),
                            (NNG, "a classifier plugin sees only admit/classify.h")],
}

# Modules of the public headers.
PUBLIC = {"admit/gate.h": "lib/admission/gate", "admit/load.h": "lib/admission/load",
          "admit/classify.h": "src/router/classify"}


def sources(root):
    out = []
    for top in ("include/admit", "lib", "src", "tests/unit", "tests/bench", "fuzz", "examples"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(dirpath, n), root))
    return sorted(out)


def layer_of(path):
    parts = path.split("/")
    if parts[0] in ("lib", "src", "examples") and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    if parts[0] == "include":
        return "include/admit"
    if parts[0] == "tests" and parts[1] == "bench":
        return "tests/bench/" + parts[2] if len(parts) > 3 else "tests/bench"
    if parts[0] == "tests" and len(parts) > 3:
        return "tests/unit/" + parts[2]
    return parts[0]


def module_of(path, root="."):
    """A module is X.h and X.c; it may span more files: X_impl.h (its private header) and
    X_*.c (its other parts), when X_impl.h exists."""
    if path.startswith("include/"):
        return PUBLIC.get(path[len("include/"):], path[:-2])
    stem = path[:-2]
    if stem.endswith("_impl"):
        return stem[:-len("_impl")]
    d, base = os.path.split(stem)
    for i in range(len(base)):
        if base[i] == "_" and os.path.exists(os.path.join(root, d, base[:i] + "_impl.h")):
            return os.path.join(d, base[:i])
    return stem


def resolve(root, path, name):
    """The project file a quoted include names, or None for a system header."""
    here = os.path.join(os.path.dirname(path), name)
    if os.path.exists(os.path.join(root, here)):
        return os.path.normpath(here)
    for base in ("include", "lib", "src"):
        cand = os.path.join(base, name)
        if os.path.exists(os.path.join(root, cand)):
            return cand
    return None


def main():
    root = sys.argv[1]
    files = sources(root)
    if "--list" in sys.argv:
        print("\n".join(os.path.join(root, f) for f in files))
        return 0
    problems, edges = [], {}
    for f in files:
        layer = layer_of(f)
        allowed = MAY_INCLUDE.get(layer)
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            for no, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, name = m.groups()
                where = "%s:%d" % (f, no)
                target = resolve(root, f, name) if kind == '"' else None
                if target is None:
                    if kind == '"':
                        problems.append("%s: \"%s\" is not a project header" % (where, name))
                    for rx, why in FORBIDDEN.get(layer, []):
                        if rx.search(name):
                            problems.append("%s: includes <%s>: %s" % (where, name, why))
                    continue
                tlayer = layer_of(target)
                folder = tlayer.split("/")[-1]
                if tlayer != layer and allowed is not None and folder not in allowed:
                    problems.append("%s: %s may not include %s (layer %s)"
                                    % (where, layer, name, tlayer))
                src, dst = module_of(f, root), module_of(target, root)
                if src != dst and not f.startswith(("tests/", "fuzz/")):
                    edges.setdefault(src, {}).setdefault(dst, where)
    # No cycles among modules: a depth-first search that reports each cycle once.
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for d in sorted(edges.get(n, {})):
            if state.get(d) == 1:
                cyc = stack[stack.index(d):] + [d]
                problems.append("include cycle: %s (%s)" % (" -> ".join(cyc), edges[n][d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in sorted(edges):
        if n not in state:
            visit(n)
    for p in problems:
        print("check_layers: " + p, file=sys.stderr)
    if problems:
        return 1
    if "--out" in sys.argv:
        with open(sys.argv[sys.argv.index("--out") + 1], "w") as fh:
            fh.write("/* generated: the layer check passed */\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
