"""examples/grafana/*.json: well-formed Grafana dashboards whose every metric exists.

Each dashboard is parsed and checked for what an import needs (a Prometheus datasource
variable that every panel and query uses, unique panel ids, a grid position, an expression
per target). Every metric name in a panel's expression or a variable's query is extracted
(PromQL functions, aggregation keywords and grouping labels, label matchers, range selectors,
string literals and Grafana variables taken out), and looked up in the live /metrics of a
real admitd in front of admit-mock-engine (for admitd.json) and of a real admit-router with
policy classes configured, so that its per-class queue families exist, routing to that
admitd (for admit-router.json). A name ending in _bucket, _sum or _count must be a sample of
a histogram (or summary) family; any other name must be a family with samples. One request
goes through the router first, so that every family has its rows.
"""

import json
import os
import re

from harness import Mock, RawClient, Tap, chat_body, request
from test_router import Router, worker

HERE = os.path.dirname(os.path.abspath(__file__))
GRAFANA = os.path.join(HERE, "..", "..", "examples", "grafana")
CLASSES = os.path.join(HERE, "..", "..", "examples", "admit-router-classes.yaml")
DASHBOARDS = ("admitd.json", "admit-router.json")

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan"}
SUFFIXES = ("_bucket", "_sum", "_count")


def load(name):
    with open(os.path.join(GRAFANA, name), encoding="utf-8") as f:
        return json.load(f)


def panels(d):
    """Every panel that is not a row, rows' nested panels included."""
    out = []
    for p in d["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def expressions(d):
    exprs = [t["expr"] for p in panels(d) for t in p["targets"]]
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]
            exprs.append(q["query"] if isinstance(q, dict) else q)
    return exprs


def metric_names(expr):
    """The metric names a PromQL expression (or a label_values() query) reads."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals (label values)
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range selectors ([5m], [$__rate_interval])
    e = re.sub(r"\$\{?\w+\}?", " ", e)  # Grafana variables
    names = set()
    # label_values(metric, label): the label is not a metric.
    for m in re.finditer(r"\blabel_values\s*\(\s*([A-Za-z_:][\w:]*)\s*(,[^)]*)?\)", e):
        names.add(m.group(1))
    e = re.sub(r"\blabel_values\s*\([^)]*\)", " ", e)
    # Grouping labels: by (...), without (...), on (...), ignoring (...), group_x (...).
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    for m in re.finditer(r"([A-Za-z_:][\w:]*)(\s*\()?", e):
        ident, call = m.group(1), m.group(2)
        if call or ident.lower() in KEYWORDS:
            continue  # a function (rate, sum, histogram_quantile, ...) or a keyword
        if re.match(r"^\d", ident):
            continue
        names.add(ident)
    return names


def exposition(addr):
    """({family: type}, {sample name}) from a live /metrics."""
    status, _, body = request(addr, "GET", "/metrics")
    assert status == 200, status
    types, samples = {}, set()
    for line in body.decode().splitlines():
        m = re.match(r"^# TYPE (\S+) (\S+)$", line)
        if m:
            types[m.group(1)] = m.group(2)
        elif line and not line.startswith("#"):
            samples.add(re.match(r"^([A-Za-z_:][\w:]*)", line).group(1))
    return types, samples


def missing(names, types, samples):
    out = []
    for n in sorted(names):
        base = next((n[:-len(s)] for s in SUFFIXES if n.endswith(s)), None)
        if base is not None and types.get(base) in ("histogram", "summary"):
            if n not in samples:
                out.append(n + " (no sample)")
        elif n not in types:
            out.append(n + " (no family)")
        elif n not in samples:
            out.append(n + " (a family without samples)")
    return out


def test_extractor():
    got = metric_names('histogram_quantile(0.99, sum by (le, instance) '
                       '(rate(a_seconds_bucket{job=~"$job",x="rate(b)"}[$__rate_interval])))')
    assert got == {"a_seconds_bucket"}, got
    got = metric_names("sum by (outcome) (rate(c_total[5m])) / ignoring(outcome) d_limit > 0")
    assert got == {"c_total", "d_limit"}, got
    got = metric_names('label_values(e_workers{job=~"$job"}, instance)')
    assert got == {"e_workers"}, got


def test_well_formed():
    for name in DASHBOARDS:
        d = load(name)
        assert 36 <= d["schemaVersion"] <= 40, (name, d["schemaVersion"])
        assert d["uid"] and d["title"], name
        ds = [v for v in d["templating"]["list"] if v["type"] == "datasource"]
        assert len(ds) == 1 and ds[0]["query"] == "prometheus", (name, ds)
        ref = {"type": "prometheus", "uid": "${%s}" % ds[0]["name"]}
        ids = [p["id"] for p in d["panels"]] + [q["id"] for p in d["panels"]
                                                for q in p.get("panels", [])]
        assert len(ids) == len(set(ids)), (name, ids)
        for p in d["panels"]:
            assert set(p["gridPos"]) == {"x", "y", "w", "h"}, (name, p["title"])
            assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, (name, p["title"])
        for p in panels(d):
            assert p["datasource"] == ref and p["targets"], (name, p["title"])
            for t in p["targets"]:
                assert t["datasource"] == ref and t["expr"].strip(), (name, p["title"])
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                assert v["datasource"] == ref, (name, v["name"])


class Live:
    """A mock, an admitd in front of it, and a router with policy classes routing to it."""

    def __init__(self):
        # The first token comes after 1 s: a request stays in prefill that long.
        self.mock = Mock("--speedup-ratio", "0", "--token-interval-ms", "1000")
        self.ad, w = worker(self.mock)
        self.rt = Router([w], "--config", CLASSES, "--active-prefill-tokens-threshold", "1")
        self.rt.wait_routable(1)
        # Requests each way, so that every family has its rows (histograms included): one
        # straight to admitd; through the router, one that is held in prefill and one that
        # the prefill threshold then refuses (the rejection families' rows).
        status, _, body = request(self.ad.addr, "POST", "/v1/chat/completions",
                                  chat_body(stream=False, max_tokens=1))
        assert status == 200, (status, body)
        held = RawClient(self.rt.addr)
        held.post("/v1/chat/completions", chat_body(max_tokens=1), "x-admit-class: batch\r\n")
        assert held.read_head()[0] == 200
        status, _, body = request(self.rt.addr, "POST", "/v1/chat/completions",
                                  chat_body(stream=False, max_tokens=1),
                                  headers={"x-admit-class": "batch"})
        assert status == 529, (status, body)
        held.close()

    def stop(self):
        self.rt.stop()
        self.ad.stop()
        self.mock.stop()


def test_every_metric_exists():
    live = Live()
    try:
        found = {"admitd.json": exposition(live.ad.maddr),
                 "admit-router.json": exposition(live.rt.maddr)}
    finally:
        live.stop()
    problems = []
    for name in DASHBOARDS:
        names = set()
        for e in expressions(load(name)):
            names |= metric_names(e)
        assert len(names) >= 8, (name, names)
        print("# %s: %d metrics: %s" % (name, len(names), " ".join(sorted(names))), flush=True)
        problems += ["%s: %s" % (name, m) for m in missing(names, *found[name])]
    assert not problems, problems


if __name__ == "__main__":
    tap = Tap()
    tap.run("the metric name extractor reads PromQL as intended", test_extractor)
    tap.run("both dashboards are well-formed, on a Prometheus datasource variable",
            test_well_formed)
    tap.run("every metric in a panel exists in the live /metrics it is for",
            test_every_metric_exists)
    tap.done()
