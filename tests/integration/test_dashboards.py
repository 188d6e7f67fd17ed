"""examples/grafana/*.json: well-formed Grafana dashboards whose every metric exists.

Each dashboard is parsed and checked for what an import needs (a Prometheus datasource
variable that every panel and query uses, unique panel ids, a grid position, an expression
per target). Every metric name in a panel's expression or a variable's query is extracted
(PromQL functions, aggregation keywords and grouping labels, label matchers, range selectors,
string literals and Grafana variables taken out), and looked up in the live /metrics of a
real admitd in front of admit-mock-engine (for admitd.json) and of a real admit-router with
policy classes configured, so that its per-class queue families exist, routing to that
admitd (for admit-router.json); the router also has a --worker-dns name (this suite's own DNS
server, answering NXDOMAIN) and a workers file, so that the discovery families exist. A name
ending in _bucket, _sum or _count must be a sample of a histogram (or summary) family; any
other name must be a family with samples. One request goes through the router first, so
that every family has its rows. The router's dashboard must also show what discovery and
learned models added: every state of admit_router_workers (retired included), the worker
changes, the DNS lookups and workers, the workers file, and the rejection reasons
(model_not_found included, from a live 404).
"""

import json
import os
import re
import tempfile

from harness import (Mock, RawClient, Tap, chat_body, close_own, marker, own_request, request,
                     wait_for)
from test_router import Router, worker
from test_router_discovery import DnsServer

HERE = os.path.dirname(os.path.abspath(__file__))
GRAFANA = os.path.join(HERE, "..", "..", "examples", "grafana")
CLASSES = os.path.join(HERE, "..", "..", "examples", "admit-router-classes.yaml")
DASHBOARDS = ("admitd.json", "admit-router.json")

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan"}
SUFFIXES = ("_bucket", "_sum", "_count")

# What the router's dashboard must graph: the families discovery, learned models and the
# load intake brought, and the label values its panels must show (the panel groups by the
# label; the live /metrics must have the row).
ROUTER_FAMILIES = {"admit_router_workers", "admit_router_worker_changes_total",
                   "admit_router_dns_lookups_total", "admit_router_dns_workers",
                   "admit_router_workers_file_reloads_total", "admit_router_workers_file_workers",
                   "admit_router_rejections_total", "admit_router_load_messages_total",
                   "admit_router_load_refused_total", "admit_router_load_subscribers",
                   "admit_router_load_connected", "admit_router_load_reconnects_total"}
ROUTER_ROWS = {"admit_router_workers": ("state", ("configured", "routable", "busy", "retired")),
               "admit_router_rejections_total": ("reason",
                                                 ("all_busy", "no_worker", "model_not_found")),
               "admit_router_worker_changes_total": ("change",
                                                     ("added", "revived", "retired", "removed",
                                                      "lost", "back")),
               "admit_router_dns_lookups_total": ("result", ("ok", "failed", "empty")),
               "admit_router_load_refused_total": ("reason", ("oversized", "bad_header", "timeout",
                                                              "invalid", "other_topic",
                                                              "bad_worker_id", "worker_id_taken")),
               "admit_router_load_subscribers": ("via", ("spsub", "nng"))}


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


def grouped_by(d, family):
    """The labels the panels of d group family by (sum by (...) (family...))."""
    out = set()
    for e in expressions(d):
        for m in re.finditer(r"\bby\s*\(([^)]*)\)\s*\(\s*(?:\w+\s*\(\s*)*%s\b" %
                             re.escape(family), e):
            out |= {x.strip() for x in m.group(1).split(",")}
    return out


def test_router_dashboard_has_discovery():
    d = load("admit-router.json")
    names = set()
    for e in expressions(d):
        names |= metric_names(e)
    assert ROUTER_FAMILIES <= names, sorted(ROUTER_FAMILIES - names)
    for family, (label, _) in ROUTER_ROWS.items():
        assert label in grouped_by(d, family), (family, label, grouped_by(d, family))


class Live:
    """A mock, an admitd in front of it, and a router with policy classes routing to it,
    with a DNS name and a workers file besides."""

    def __init__(self):
        # The first token comes after 1 s: a request stays in prefill that long.
        self.mock = Mock("--speedup-ratio", "0", "--token-interval-ms", "1000")
        self.ad, w = worker(self.mock)
        self.dns = DnsServer()  # no records: every lookup is NXDOMAIN (result "empty")
        self.wfile = os.path.join(tempfile.mkdtemp(), "workers")
        with open(self.wfile, "w", encoding="utf-8") as f:
            f.write("# the same worker, named by a second source\n%s=%s\n" % w)
        self.rt = Router([w], "--config", CLASSES, "--active-prefill-tokens-threshold", "1",
                         "--worker-dns", "dashboards.test:8080:5557",
                         "--dns-nameserver", "127.0.0.1:%d" % self.dns.port,
                         "--dns-interval-ms", "200", "--workers-file", self.wfile)
        self.rt.wait_routable(1)
        wait_for(lambda: self.rt.metrics().get(
            'admit_router_dns_lookups_total{name="dashboards.test",result="empty"}', 0) >= 1,
            15, "a DNS lookup")
        # A model no worker serves, once the worker's list is known: 404 model_not_found.
        wait_for(lambda: all(x["models"] for x in self.rt.workers() if x["state"] == "active"
                             and x["routable"]), 15, "the worker's models")
        status, _, body = request(self.rt.addr, "POST", "/v1/chat/completions",
                                  dict(chat_body(stream=False, max_tokens=1),
                                       model="no-such-model"))
        assert status == 404, (status, body)
        # Requests each way, so that every family has its rows (histograms included): one
        # straight to admitd; through the router, one that is held in prefill and one that
        # the prefill threshold then refuses (the rejection families' rows).
        status, _, body = request(self.ad.addr, "POST", "/v1/chat/completions",
                                  chat_body(stream=False, max_tokens=1))
        assert status == 200, (status, body)
        # That request's prefill tokens, published by admitd, make the worker busy under the
        # threshold of 1 until its next message says they are gone: wait for that message
        # (on a loaded machine it can come after the next request would).
        wait_for(lambda: not any(x["busy"] for x in self.rt.workers() if x["routable"]), 15,
                 "the worker's load to clear")
        held = RawClient(self.rt.addr, marker=marker(), auth=True)
        held.post("/v1/chat/completions", chat_body(max_tokens=1), "x-admit-class: batch\r\n")
        head = held.read_head()
        assert head[0] == 200, head
        status, _, body = own_request(self.rt.addr, "/v1/chat/completions",
                                      chat_body(stream=False, max_tokens=1), marker(),
                                      auth=True, extra="x-admit-class: batch\r\n")
        assert status == 529, (status, body)
        close_own([held])

    def stop(self):
        self.rt.stop()
        self.ad.stop()
        self.mock.stop()
        self.dns.stop()
        os.unlink(self.wfile)
        os.rmdir(os.path.dirname(self.wfile))


def test_every_metric_exists():
    live = Live()
    try:
        found = {"admitd.json": exposition(live.ad.maddr),
                 "admit-router.json": exposition(live.rt.maddr)}
        rows = live.rt.metrics()
    finally:
        live.stop()
    # Every row the router's panels show by label is in its live /metrics.
    for family, (label, values) in ROUTER_ROWS.items():
        for v in values:
            assert any(k.startswith(family + "{") and '%s="%s"' % (label, v) in k
                       for k in rows), (family, label, v)
    assert rows['admit_router_rejections_total{reason="model_not_found"}'] == 1, rows
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
    tap.run("the router's dashboard graphs discovery, retired workers and every rejection reason",
            test_router_dashboard_has_discovery)
    tap.run("every metric in a panel exists in the live /metrics it is for",
            test_every_metric_exists)
    tap.done()
