"""examples/kubernetes-fleet.yaml: well-formed, and its programs' arguments parse.

Every document of the file is parsed (PyYAML when it is installed; without it, a reader of
the subset the file is written in: documents split on `---`, and the containers' `args`
lists, one `- --flag=value` a line) and checked for the pieces the README promises: a
headless Service for the workers, the router Deployment's --worker-dns naming that Service
with the ports the worker pods expose, probes on the metrics ports' /health and /ready, a
grace period above the drain timeout. Then `admit-router --check-config` runs with the
router container's args and `admitd --check-config` with the admitd container's: both must
exit 0. kubectl is not needed (nor used).
"""

import os
import re
import subprocess
import sys

from harness import ADMITD, Tap

ROUTER = os.environ.get("ADMIT_ROUTER", "build/admit-router")
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "kubernetes-fleet.yaml")

try:
    import yaml
except ImportError:  # the fallback below reads the file's own subset
    yaml = None


def text():
    with open(EXAMPLE, encoding="utf-8") as f:
        return f.read()


def unquote(s):
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        return s[1:-1]
    return s


def args_by_hand(doc, container):
    """The args of the named container, from block-style `- item` lines under `args:`."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\s*- name: %s\s*$" % re.escape(container), line):
            for j in range(i + 1, len(lines)):
                m = re.match(r"^(\s*)args:\s*$", lines[j])
                if m:
                    indent, out = len(m.group(1)), []
                    for ln in lines[j + 1:]:
                        mm = re.match(r"^(\s*)- (.*)$", ln)
                        if not mm or len(mm.group(1)) < indent:
                            break
                        out.append(unquote(mm.group(2)))
                    return out
                if re.match(r"^\s*- name: ", lines[j]):
                    break
    raise AssertionError("no args for container %s" % container)


def documents():
    """[(kind, name, parsed document or None, raw text)] for every document."""
    raw = [d for d in re.split(r"^---\s*$", text(), flags=re.M) if d.strip()]
    parsed = list(yaml.safe_load_all(text())) if yaml else [None] * len(raw)
    parsed = [p for p in parsed if p is not None] if yaml else parsed
    assert len(parsed) == len(raw), (len(parsed), len(raw))
    out = []
    for p, r in zip(parsed, raw):
        if p is not None:
            kind, name = p["kind"], p["metadata"]["name"]
            assert p["apiVersion"], p
        else:
            body = "\n".join(ln for ln in r.splitlines() if not ln.lstrip().startswith("#"))
            kind = re.search(r"^kind: (\S+)$", body, re.M).group(1)
            name = re.search(r"^  name: (\S+)$", body, re.M).group(1)
            assert re.search(r"^apiVersion: \S+$", body, re.M), r
        out.append((kind, name, p, r))
    return out


def find(kind, name):
    for k, n, p, r in documents():
        if (k, n) == (kind, name):
            return p, r
    raise AssertionError("no %s %s in the example" % (kind, name))


def container(p, r, name):
    """(args, the container's dict or None)."""
    if p is None:
        return args_by_hand(r, name), None
    for c in p["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return [str(a) for a in c["args"]], c
    raise AssertionError("no container %s" % name)


def flag(args, name):
    vals = [a.split("=", 1)[1] for a in args if a.startswith("--%s=" % name)]
    assert len(vals) == 1, (name, args)
    return vals[0]


def test_documents_parse():
    kinds = sorted((k, n) for k, n, _, _ in documents())
    assert ("Service", "llama-workers") in kinds and ("Deployment", "admit-router") in kinds, kinds
    assert ("StatefulSet", "llama-worker") in kinds and ("Service", "admit-router") in kinds, kinds


def test_headless_service_and_worker_dns():
    svc, svc_raw = find("Service", "llama-workers")
    dep, dep_raw = find("Deployment", "admit-router")
    sts, sts_raw = find("StatefulSet", "llama-worker")
    args, _ = container(dep, dep_raw, "admit-router")
    name, http_port, pub_port = flag(args, "worker-dns").rsplit(":", 2)
    wargs, _ = container(sts, sts_raw, "admitd")
    assert flag(wargs, "listen").endswith(":" + http_port), (wargs, http_port)
    assert flag(wargs, "publish").endswith(":" + pub_port), (wargs, pub_port)
    assert int(flag(wargs, "engine-request-limit")) > 0, wargs
    if svc is not None:
        assert svc["spec"]["clusterIP"] == "None", svc
        ns = svc["metadata"]["namespace"]
        assert name == "%s.%s.svc.cluster.local" % (svc["metadata"]["name"], ns), name
        assert dep["spec"]["replicas"] == 2, dep["spec"]
        assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
        ports = {p["port"] for p in svc["spec"]["ports"]}
        assert {int(http_port), int(pub_port)} <= ports, ports
    else:
        assert re.search(r"^\s*clusterIP: None\b", svc_raw, re.M), svc_raw
        assert name.startswith("llama-workers."), name


def test_probes_and_grace():
    for kind, name, cname in (("Deployment", "admit-router", "admit-router"),
                              ("StatefulSet", "llama-worker", "admitd")):
        p, r = find(kind, name)
        args, c = container(p, r, cname)
        drain_s = int(flag(args, "drain-timeout-ms")) / 1000
        metrics_port = int(flag(args, "metrics-listen").rsplit(":", 1)[1])
        if p is None:
            grace = int(re.search(r"terminationGracePeriodSeconds: (\d+)", r).group(1))
            assert "path: /health" in r and "path: /ready" in r, r
        else:
            spec = p["spec"]["template"]["spec"]
            grace = spec["terminationGracePeriodSeconds"]
            pre = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
            drain_s += pre
            ports = {pt["name"]: pt["containerPort"] for pt in c["ports"]}
            assert c["livenessProbe"]["httpGet"]["path"] == "/health", c
            assert c["readinessProbe"]["httpGet"]["path"] == "/ready", c
            for probe in ("livenessProbe", "readinessProbe"):
                assert ports[c[probe]["httpGet"]["port"]] == metrics_port, (probe, c)
            assert c["resources"]["requests"], c
        assert grace > drain_s, (name, grace, drain_s)


def check_config(prog, args):
    r = subprocess.run([prog, "--check-config"] + args, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, (prog, args, r.returncode, r.stdout, r.stderr)


def test_router_args_check_config():
    p, r = find("Deployment", "admit-router")
    check_config(ROUTER, container(p, r, "admit-router")[0])


def test_admitd_args_check_config():
    p, r = find("StatefulSet", "llama-worker")
    check_config(ADMITD, container(p, r, "admitd")[0])


def test_fallback_reader_agrees():
    """The hand reader and PyYAML read the same args (when PyYAML is here to compare)."""
    if yaml is None:
        return
    for kind, name, cname in (("Deployment", "admit-router", "admit-router"),
                              ("StatefulSet", "llama-worker", "admitd")):
        p, r = find(kind, name)
        assert container(p, r, cname)[0] == args_by_hand(r, cname), cname


if __name__ == "__main__":
    tap = Tap()
    print("# YAML reader: %s" % ("PyYAML %s" % yaml.__version__ if yaml else "the fallback"))
    tap.run("every document parses", test_documents_parse)
    tap.run("a headless Service, and --worker-dns names it with the pods' ports",
            test_headless_service_and_worker_dns)
    tap.run("probes on /health and /ready of the metrics port; grace above the drain",
            test_probes_and_grace)
    tap.run("admitd --check-config accepts the worker container's args",
            test_admitd_args_check_config)
    tap.run("admit-router --check-config accepts the router container's args",
            test_router_args_check_config)
    tap.run("the fallback reader agrees with PyYAML", test_fallback_reader_agrees)
    tap.done()
