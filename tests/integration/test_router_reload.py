"""admit-router's SIGHUP reload end to end: the config file is read again and what can change
live is applied (the worker set, the busy thresholds, the policy classes, the log level),
what needs a restart is named in the log and keeps its running value, and a bad file is
reported with its file:line:column while the running configuration goes on serving.

Workers are real admitd processes in front of admit-mock-engine on loopback ports picked at
run time. The mock starts each request (and sends its stream's headers) at once but sends no
token for minutes, so every prompt stays booked as prefill while the checks run: a request
of P tokens (test_router_booking.content) is admitted or refused by the thresholds alone.
The router gets no --worker flag: its workers are the file's, so that a reload can change
them (a flag would win over the file).
"""

import json
import os
import re
import signal
import tempfile
import time

from harness import (Mock, RawClient, Tap, close_own, error_message, marker, request,
                     wait_for)
from test_router import MODEL, worker
from test_router_booking import CHAT, NO_TOKEN, Router, body
from test_router_classes import dispatched, pending
from test_router_discovery import DnsServer, dns_worker, free_ports

RELOADED = r"configuration reloaded|reload failed"


def write(path, text):
    """Replaces the file at once (a rename), as a config management tool would."""
    with open(path + ".new", "w") as f:
        f.write(text)
    os.replace(path + ".new", path)


def config(text):
    path = os.path.join(tempfile.mkdtemp(prefix="admit-router-reload-"), "router.yaml")
    write(path, text)
    return path


def workers_key(*ws):
    return 'worker: "%s"\n' % ",".join("%s=%s" % w for w in ws)


def hup(rt):
    """SIGHUP, then waits for the reload's outcome line; returns the lines the router logged
    from the signal to that line."""
    rx = re.compile(RELOADED)
    before = len(rt.proc.lines)
    done = sum(1 for ln in rt.proc.lines if rx.search(ln))
    rt.proc.p.send_signal(signal.SIGHUP)
    wait_for(lambda: sum(1 for ln in rt.proc.lines if rx.search(ln)) > done, 10,
             "the reload's outcome in the log")
    lines = rt.proc.lines[before:]
    last = max(i for i, ln in enumerate(lines) if rx.search(ln))
    return lines[:last + 1]


def has(lines, pattern):
    return any(re.search(pattern, ln) for ln in lines)


def send(rt, tokens, extra=""):
    """A request with a marker and a secret of its own (check_own)."""
    c = RawClient(rt.addr, marker=marker(), auth=True)
    c.post(CHAT, body(tokens), extra)
    return c


def refused(rt, tokens):
    """A request that must get the overload answer at once."""
    c = send(rt, tokens)
    status, hdrs = c.read_head()
    data, _ = c.read_body(hdrs)
    close_own([c])
    assert status == 529 and "All workers are busy" in error_message(data), (status, data)


def thresholds(rt):
    got = json.loads(request(rt.addr, "GET", "/busy_threshold")[2])["thresholds"]
    return {t["model"]: t for t in got}


def reloads(rt, result):
    return rt.metrics()['admit_router_config_reloads_total{result="%s"}' % result]


def close_all(cs):
    close_own(cs)


def test_thresholds_workers_restart_keys_log_level():
    mock = Mock(*NO_TOKEN)
    ad, w = worker(mock)
    path = config(workers_key(w) + "active_prefill_tokens_threshold: 150\n")
    rt = Router([], "--config", path)
    rt.wait_routable(1)
    held = [send(rt, 100)]
    assert held[0].read_head()[0] == 200
    refused(rt, 100)  # 100 booked + 100 > 150
    # Raised in the file, with a setting that needs a restart: the threshold applies at once,
    # the other is named and not applied.
    write(path, workers_key(w) + "active_prefill_tokens_threshold: 1000\nupstream_keepalive: 7\n")
    lines = hup(rt)
    assert has(lines, r"configuration reloaded from %s$" % re.escape(path)), lines
    assert has(lines, r"warn: reload: upstream_keepalive changed; it takes effect after a "
                      r"restart"), lines
    assert has(lines, r"info: reload: active_prefill_tokens_threshold changed"), lines
    held.append(send(rt, 100))
    assert held[1].read_head()[0] == 200  # now admitted: 200 <= 1000
    assert thresholds(rt)[MODEL]["active_prefill_tokens_threshold"] == 1000
    # A model's own threshold, set through the API, outlives a reload of the defaults.
    status, _, data = request(rt.addr, "POST", "/busy_threshold",
                              {"model": MODEL, "active_prefill_tokens_threshold": 150})
    assert status == 200, data
    write(path, workers_key(w) + "active_prefill_tokens_threshold: 5000\n"
          "active_decode_blocks_threshold: 0.9\nupstream_keepalive: 7\n")
    hup(rt)
    t = thresholds(rt)[MODEL]
    assert t["active_prefill_tokens_threshold"] == 150, t
    assert t["active_decode_blocks_threshold"] == 0.9, t  # a field the API did not set follows
    refused(rt, 100)  # 300 > 150, the model's own
    assert reloads(rt, "ok") == 2 and reloads(rt, "failed") == 0
    # The log level: at warn, this reload's info lines are gone, its warnings are not.
    write(path, workers_key(w) + "active_prefill_tokens_threshold: 5000\nretry_after: 3\n"
          "upstream_keepalive: 7\nlog_level: warn\n")
    lines = hup(rt)
    assert has(lines, r"upstream_keepalive changed; it takes effect after a restart"), lines
    assert not has(lines, r" info: reload: "), lines  # retry_after changed, at info
    close_all(held)
    wait_for(lambda: rt.workers()[0]["in_flight"] == 0, 10, "the streams' end seen")
    # The worker set: a second worker added in the file, then the first one taken out.
    mock2 = Mock(*NO_TOKEN)
    ad2, w2 = worker(mock2)
    write(path, workers_key(w, w2) + "log_level: info\n")
    lines = hup(rt)
    assert has(lines, r"--worker: worker %s added" % re.escape(w2[0])), lines
    rt.wait_routable(2)
    write(path, workers_key(w2))
    lines = hup(rt)
    assert has(lines, r"--worker: worker %s is gone" % re.escape(w[0])), lines
    wait_for(lambda: [x["url"] for x in rt.workers()] == [w2[0][len("http://"):]], 10,
             "only the second worker left")
    m = rt.metrics()
    assert m['admit_router_worker_changes_total{change="removed"}'] == 1, m
    assert reloads(rt, "ok") == 5, m
    rt.stop()
    for a in (ad, ad2):
        a.stop()
    for mk in (mock, mock2):
        mk.stop()


def test_bad_file_keeps_the_running_config():
    mock = Mock(*NO_TOKEN)
    ad, w = worker(mock)
    good = workers_key(w) + "active_prefill_tokens_threshold: 150\n"
    path = config(good)
    rt = Router([], "--config", path)
    rt.wait_routable(1)
    held = send(rt, 100)
    assert held.read_head()[0] == 200
    stays = r"error: reload failed, the running configuration stays: %s:" % re.escape(path)
    cases = [
        # a YAML syntax error: an unclosed flow sequence
        ("active_prefill_tokens_threshold: 1000\nmodel: [a, b\n", r"\d+:\d+: "),
        # a value out of range, at its line and column
        ("active_prefill_tokens_threshold: 1000\nactive_decode_blocks_threshold: 1.5\n",
         r"3:33: active_decode_blocks_threshold"),
        # a policy class without its quantum
        ("active_prefill_tokens_threshold: 1000\npolicy_classes:\n  - {name: a}\n", r"4:5: "),
    ]
    for k, (text, where) in enumerate(cases):
        write(path, workers_key(w) + text)
        lines = hup(rt)
        assert has(lines, stays + where), lines
        assert not has(lines, r"configuration reloaded"), lines
        refused(rt, 100)  # still the running 150, not the file's 1000
        assert reloads(rt, "failed") == k + 1
    assert reloads(rt, "ok") == 0
    assert thresholds(rt)[MODEL]["active_prefill_tokens_threshold"] == 150
    # Mended: applied.
    write(path, workers_key(w) + "active_prefill_tokens_threshold: 1000\n")
    hup(rt)
    c = send(rt, 100)
    assert c.read_head()[0] == 200
    assert reloads(rt, "ok") == 1 and reloads(rt, "failed") == 3
    close_all([held, c])
    rt.stop()
    ad.stop()
    mock.stop()


CLASSES = """
policy_classes:
  - {name: interactive, quantum: 1000, prefill_busy_threshold: 150}
%s
default_policy_class: %s
"""


def test_classes_added_and_removed_lose_no_request():
    mock = Mock(*NO_TOKEN)
    ad, w = worker(mock)
    batch = "  - {name: batch, quantum: 1000, prefill_busy_threshold: 150}"
    path = config(workers_key(w) + CLASSES % (batch, "batch"))
    rt = Router([], "--config", path)
    rt.wait_routable(1)
    cls = lambda name: "x-admit-class: %s\r\n" % name  # noqa: E731
    held = send(rt, 100, cls("interactive"))
    assert held.read_head()[0] == 200  # an idle rank takes one request
    waiting = {"interactive": [send(rt, 100, cls("interactive")) for _ in range(2)],
               "batch": [send(rt, 100, cls("batch")) for _ in range(2)]}
    wait_for(lambda: pending(rt, "interactive") == 2 and pending(rt, "batch") == 2, 10,
             "two requests waiting in each class")
    # A client that hangs up while it waits: at info, the proxy's debug line is not printed.
    gone = send(rt, 100, cls("interactive"))
    wait_for(lambda: pending(rt, "interactive") == 3, 10, "a third one waiting")
    gone.close()
    wait_for(lambda: pending(rt, "interactive") == 2, 10, "it left the queue")
    # batch removed, bulk added as the default (no threshold: it never waits for room), and
    # the log at debug. batch's waiters move to bulk and go; interactive keeps its queue.
    write(path, workers_key(w) + "log_level: debug\n" +
          CLASSES % ("  - {name: bulk, quantum: 1000}", "bulk"))
    lines = hup(rt)
    assert has(lines, r"reload: policy classes changed: 2 -> 2 classes \(added: bulk; "
                      r"removed: batch\)"), lines
    assert has(lines, r"reload: of 4 requests waiting in the policy-class queue, 2 stay in "
                      r"their class, 2 move to the default class"), lines
    assert pending(rt, "interactive") == 2 and pending(rt, "bulk") == 0
    assert dispatched(rt, "bulk") == 2 and dispatched(rt, "interactive") == 1
    for c in waiting["batch"]:
        assert c.read_head()[0] == 200
    assert pending(rt, "batch") is None  # no such class any more
    m = rt.metrics()
    assert m['admit_router_queue_rejections_total{policy_class="interactive",'
             'reason="queue_full"}'] == 0, m
    # At debug, a client that hangs up in the queue is logged; the one before was not.
    gone = send(rt, 100, cls("interactive"))
    wait_for(lambda: pending(rt, "interactive") == 3, 10, "a third one waiting again")
    gone.close()
    rt.proc.wait_line(r"debug: client left while queued", 10)
    assert sum(1 for ln in rt.proc.lines if "client left while queued" in ln) == 1
    # A class that stays takes its new thresholds: interactive's waiters go.
    v3 = CLASSES % ("  - {name: bulk, quantum: 1000}", "bulk")
    write(path, workers_key(w) + v3.replace("threshold: 150", "threshold: 100000"))
    hup(rt)
    for c in waiting["interactive"]:
        assert c.read_head()[0] == 200
    assert dispatched(rt, "interactive") == 3
    # Waiting again, then no classes at all: they go on to selection.
    later = [send(rt, 100, cls("bulk")) for _ in range(2)]
    for c in later:
        assert c.read_head()[0] == 200
    write(path, workers_key(w) + CLASSES % ("  - {name: bulk, quantum: 1000}", "bulk"))
    hup(rt)
    last = [send(rt, 100, cls("interactive")) for _ in range(2)]
    wait_for(lambda: pending(rt, "interactive") == 2, 10, "two waiting before the classes go")
    write(path, workers_key(w))
    lines = hup(rt)
    assert has(lines, r"reload: of 2 requests waiting in the policy-class queue, 0 stay in "
                      r"their class, 2 go on to selection"), lines
    for c in last:
        assert c.read_head()[0] == 200
    assert "dynamo_frontend_router_queue_pending_requests" not in str(rt.metrics())
    close_all([held] + waiting["interactive"] + waiting["batch"] + later + last)
    rt.stop()
    ad.stop()
    mock.stop()


def test_dns_names_and_workers_file_follow_the_config():
    name = "reload.test"
    addr = "127.0.0.2"
    http_port, pub_port = free_ports([addr])
    dns = DnsServer()
    dns.records[name] = [addr]
    mock2, ad2 = dns_worker(addr, http_port, pub_port, *NO_TOKEN)
    dw = "%s:%d" % (addr, http_port)
    mock = Mock(*NO_TOKEN)
    ad, w = worker(mock)
    path = config(workers_key(w))
    rt = Router([], "--config", path, "--dns-nameserver", "127.0.0.1:%d" % dns.port)
    rt.wait_routable(1)
    # A name added: resolved at once (the resolver set up now), its worker followed.
    write(path, workers_key(w) + 'worker_dns: "%s:%d:%d"\ndns_interval_ms: 300\n' %
          (name, http_port, pub_port))
    lines = hup(rt)
    assert has(lines, r"reload: dns_interval_ms changed"), lines
    assert has(lines, r"dns %s: new in the configuration" % name), lines
    rt.wait_routable(2)
    queries = dns.queries
    wait_for(lambda: dns.queries >= queries + 2, 10, "the name resolved every 300 ms")
    # The name taken out while a lookup of it runs (the server silent): its worker retired
    # (and, idle, removed), its metrics gone; the lookup's late end finds it forgotten.
    dns.mode = "silent"
    queries = dns.queries
    wait_for(lambda: dns.queries > queries, 10, "a lookup the server does not answer")
    write(path, workers_key(w))
    lines = hup(rt)
    assert has(lines, r"dns %s: no longer in the configuration" % name), lines
    wait_for(lambda: len(rt.workers()) == 1, 10, "the name's worker gone")
    assert not any(k.startswith("admit_router_dns") for k in rt.metrics())
    time.sleep(1.5)  # two attempts of 0.5 s: the lookup has ended (ASan sees its callback)
    assert len(rt.workers()) == 1
    # A workers file named, then no more.
    wpath = os.path.join(os.path.dirname(path), "workers")
    write(wpath, "http://%s=tcp://%s:%d\n" % (dw, addr, pub_port))
    write(path, workers_key(w) + "workers_file: %s\n" % wpath)
    hup(rt)
    rt.proc.wait_line(r"workers file %s read: 1 workers" % re.escape(wpath), 10)
    rt.wait_routable(2)
    assert rt.metrics()["admit_router_workers_file_workers"] == 1
    write(path, workers_key(w))
    lines = hup(rt)
    assert has(lines, r"workers file %s: no longer in the configuration" % re.escape(wpath))
    wait_for(lambda: [x["url"] for x in rt.workers()] == [w[0][len("http://"):]], 10,
             "the file's worker gone")
    assert reloads(rt, "ok") == 4
    rt.stop()
    for a in (ad, ad2):
        a.stop()
    for mk in (mock, mock2):
        mk.stop()
    dns.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("thresholds apply at once (a request refused, then admitted), an API threshold "
            "stays, a restart-only key is named and kept, the log level, the worker set",
            test_thresholds_workers_restart_keys_log_level)
    tap.run("a bad file (syntax, value, class) is logged at file:line:column and the running "
            "configuration keeps serving", test_bad_file_keeps_the_running_config)
    tap.run("classes added and removed with requests waiting: none is lost",
            test_classes_added_and_removed_lose_no_request)
    tap.run("DNS names and the workers file follow the config",
            test_dns_names_and_workers_file_follow_the_config)
    tap.done()
