"""admit-router's policy-class queues (src/router/class_queue.c) end to end.

A request of a class waits while its class has a backlog or while no worker has room under
the class's own thresholds (the router-booked load projected with the request); when it goes,
selection still judges the router-wide reject thresholds. A full class queue and a queue
timeout get the overload status with their own messages; a client that hangs up while it
waits leaves at once. Workers are real admitd processes in front of admit-mock-engine on
loopback ports picked at run time.

Prompts are one chat message of known length (test_router_booking.content): a prompt of P
tokens is exact in the router, admitd and the mock. The mock here answers a request's headers
at once and its first token after --token-interval-ms, so a prompt stays booked as prefill for
that long, which is what makes a class with a prefill threshold wait.
"""

import os
import socket
import struct
import subprocess
import shutil
import tempfile
import time

from harness import Mock, RawClient, Tap, check_own, close_own, error_message, marker, wait_for
from test_router import worker
from test_router_booking import CHAT, Router, body, mock_count

TWO_CLASSES = """
policy_classes:
  - name: interactive
    prefill_busy_threshold: 150
    quantum: 1000
    request_queue_limit_per_worker: %(limit)d
    queue_timeout_ms: %(timeout)d
  - name: batch
    quantum: 1000
default_policy_class: batch
"""


def config(text):
    fd, path = tempfile.mkstemp(prefix="admit-router-classes-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def cls(name):
    return "x-admit-class: %s\r\n" % name


def send(addr, tokens, klass, max_tokens=2, stream=True):
    """A request of class klass, with a marker and a secret of its own (check_own)."""
    c = RawClient(addr, marker=marker(), auth=True)
    c.post(CHAT, body(tokens, max_tokens, stream), cls(klass))
    return c


def metric(rt, name, **labels):
    lab = ",".join('%s="%s"' % kv for kv in labels.items())
    return rt.metrics().get("%s{%s}" % (name, lab))


def pending(rt, klass):
    return metric(rt, "dynamo_frontend_router_queue_pending_requests", policy_class=klass)


def rejected(rt, klass, reason):
    return metric(rt, "admit_router_queue_rejections_total", policy_class=klass, reason=reason)


def dispatched(rt, klass):
    return metric(rt, "admit_router_queue_dispatched_total", policy_class=klass)


def wait_queued(rt, klass, n, gone, what):
    """Waits until klass has n requests pending; a request dispatched instead (the class's
    dispatched count above `gone`) fails at once rather than after the timeout."""
    seen = wait_for(lambda: (lambda p, d: (p, d) if p == n or d > gone else None)(
        pending(rt, klass), dispatched(rt, klass) or 0), 10, what)
    assert seen[0] == n, "%s: dispatched instead (pending, dispatched: %r)" % (what, seen)


def cancelled(rt):
    return rt.metrics().get('admitd_requests_total{outcome="cancelled"}', 0)


def wait_left(rt, klass, before, what):
    """Waits until the router has finished one more request as cancelled than `before` (a
    client that hung up), then its class queue must hold none: the request leaves the queue
    in the same step that finishes it (rq_finish), so a place kept fails at once."""
    wait_for(lambda: cancelled(rt) > before, 5, what + " (counted as cancelled)")
    assert pending(rt, klass) == 0, "%s: still pending after it was cancelled" % what


class Fleet:
    """One admitd worker in front of a mock whose first token comes after first_ms, and a
    router with the given classes file and extra flags."""

    def __init__(self, classes, *router_args, first_ms=1000):
        self.mock = Mock("--speedup-ratio", "0", "--token-interval-ms", str(first_ms))
        self.ad, w = worker(self.mock)
        self.path = config(classes)
        self.rt = Router([w], "--config", self.path, *router_args)
        self.rt.wait_routable(1)

    def stop(self):
        self.rt.stop()
        self.ad.stop()
        self.mock.stop()
        os.unlink(self.path)


def test_interactive_waits_batch_flows():
    f = Fleet(TWO_CLASSES % {"limit": 0, "timeout": 0}, first_ms=1500)
    rt = f.rt
    t0 = time.monotonic()
    first = send(rt.addr, 100, "interactive")
    assert first.read_head()[0] == 200  # an idle rank takes any one request
    gone = dispatched(rt, "interactive") or 0
    waiting = send(rt.addr, 100, "interactive")  # 100 + 100 > 150: it waits
    wait_queued(rt, "interactive", 1, gone, "the second interactive request queued")
    # Batch has no thresholds of its own: its requests flow while interactive waits.
    batch = [send(rt.addr, 100, "batch") for _ in range(3)]
    heads = [c.read_head()[0] for c in batch]
    t_batch = time.monotonic()
    assert heads == [200, 200, 200], heads
    assert pending(rt, "interactive") == 1, "interactive must still wait"
    assert dispatched(rt, "batch") == 3
    # The first interactive request's first token ends its prefill: the waiter goes.
    status, hdrs = waiting.read_head()
    t_served = time.monotonic()
    assert status == 200, status
    waited_ms = float(hdrs["x-admitd-queue-wait-ms"])
    assert waited_ms >= 500, hdrs
    assert t_served > t_batch and t_served - t0 >= 0.5, (t0, t_batch, t_served)
    assert pending(rt, "interactive") == 0
    assert dispatched(rt, "interactive") == 2
    h = rt.metrics()
    assert h['admit_router_queue_wait_seconds_count{policy_class="interactive"}'] == 2, h
    close_own([first, waiting] + batch)
    f.stop()


def test_full_queue_and_timeout():
    f = Fleet(TWO_CLASSES % {"limit": 1, "timeout": 400}, first_ms=600000)
    rt = f.rt
    held = send(rt.addr, 100, "interactive")
    assert held.read_head()[0] == 200
    waiter = send(rt.addr, 100, "interactive")
    wait_for(lambda: pending(rt, "interactive") == 1, 10, "one waiting")
    t0 = time.monotonic()
    full = send(rt.addr, 100, "interactive")
    status, hdrs = full.read_head()
    body_, _ = full.read_body(hdrs)
    assert status == 529, (status, body_)
    assert error_message(body_) == "Server overloaded: router queue for class interactive is full"
    assert hdrs.get("retry-after") is not None, hdrs
    assert hdrs.get("x-admitd-reason") == "class-queue-full", hdrs
    assert time.monotonic() - t0 < 0.3, "a full queue answers at once"
    assert rejected(rt, "interactive", "queue_full") == 1
    # The waiter times out after its class's 400 ms, with its own message.
    status, hdrs = waiter.read_head()
    body_, _ = waiter.read_body(hdrs)
    assert status == 529, (status, body_)
    assert "timed out in the router queue for class interactive" in error_message(body_), body_
    assert hdrs.get("x-admitd-reason") == "class-queue-timeout", hdrs
    assert rejected(rt, "interactive", "queue_timeout") == 1
    assert pending(rt, "interactive") == 0
    assert mock_count(f.mock) == 1, "only the held request reached the engine"
    close_own([held, waiter, full])
    f.stop()


def test_hangup_while_queued_frees_the_place():
    f = Fleet(TWO_CLASSES % {"limit": 1, "timeout": 0}, first_ms=600000)
    rt = f.rt
    held = send(rt.addr, 100, "interactive")
    assert held.read_head()[0] == 200
    for how in ("fin", "rst", "fin-later"):
        c = send(rt.addr, 100, "interactive")
        wait_for(lambda: pending(rt, "interactive") == 1, 10, "queued (%s)" % how)
        if how == "rst":
            c.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif how == "fin-later":
            time.sleep(0.3)  # it hangs up after waiting a while, not at once
        before = cancelled(rt)
        check_own(c)
        c.close()
        wait_left(rt, "interactive", before, "the %s client left the queue" % how)
        # Its place is free: the next one queues instead of getting 529.
        nxt = send(rt.addr, 100, "interactive")
        wait_for(lambda: pending(rt, "interactive") == 1, 10, "the next one queued")
        before = cancelled(rt)
        close_own([nxt])
        wait_left(rt, "interactive", before, "the next one left")
    assert rejected(rt, "interactive", "queue_full") == 0
    assert mock_count(f.mock) == 1, "no queued request reached the engine"
    close_own([held])
    f.stop()


def test_selection_still_rejects_on_router_wide_thresholds():
    # batch has no class thresholds, so it never waits; the router-wide absolute prefill
    # threshold of 150 still refuses what would go over it.
    f = Fleet(TWO_CLASSES % {"limit": 0, "timeout": 0}, "--active-prefill-tokens-threshold",
              "150", first_ms=600000)
    rt = f.rt
    a = send(rt.addr, 100, "batch")
    assert a.read_head()[0] == 200
    b = send(rt.addr, 100, "batch")
    status, hdrs = b.read_head()
    body_, _ = b.read_body(hdrs)
    assert status == 529 and "All workers are busy" in error_message(body_), (status, body_)
    assert rejected(rt, "batch", "all_busy") == 1
    assert pending(rt, "batch") == 0
    close_own([a, b])
    f.stop()


def test_classifier_plugin_demotes_a_large_prompt():
    so = os.environ.get("DEMOTE_LARGE_SO", "build/examples/classifier/demote_large.so")
    assert os.path.exists(so), so
    os.environ["ADMIT_DEMOTE_MIN_TOKENS"] = "200"
    try:
        f = Fleet(TWO_CLASSES % {"limit": 0, "timeout": 0}, "--classifier-plugin",
                  os.path.abspath(so), first_ms=600000)
    finally:
        del os.environ["ADMIT_DEMOTE_MIN_TOKENS"]
    rt = f.rt
    held = send(rt.addr, 100, "interactive")
    assert held.read_head()[0] == 200
    # interactive has no room now (100 booked + 300 > 150): the large prompt goes to batch,
    # which has room, and is served at once; a small one stays interactive and waits.
    large = send(rt.addr, 300, "interactive")
    assert large.read_head()[0] == 200
    assert dispatched(rt, "batch") == 1 and pending(rt, "interactive") == 0
    small = send(rt.addr, 100, "interactive")
    wait_for(lambda: pending(rt, "interactive") == 1, 10, "the small one waits in its class")
    close_own([held, large, small])
    f.stop()


SHARES = """
policy_classes:
  - name: gold
    prefill_busy_threshold: %(threshold)d
    quantum: 300
  - name: bronze
    prefill_busy_threshold: %(threshold)d
    quantum: 100
default_policy_class: bronze
"""


def served(rt):
    m = rt.metrics()
    return tuple(m.get('admit_router_queue_dispatched_total{policy_class="%s"}' % k, 0)
                 for k in ("gold", "bronze"))


def shares_case(at_once):
    """Two classes of quanta 3:1, prompts of 100 tokens (quantum 300 buys three gold for one
    bronze), both backlogged, under class thresholds that let `at_once` prefills run at once
    (100 x at_once <= threshold < 100 x (at_once + 1); an idle rank takes any one). The
    requests' order is read from the router's own count of what each class sent on, from a
    moment when both classes wait to a later one, never from timing: whenever the gate
    opens, whatever the gate said before, the class whose turn it is keeps it, so gold
    gets three of every four."""
    window, per_class = 40, 70
    f = Fleet(SHARES % {"threshold": 100 * at_once + 50}, first_ms=100)
    rt = f.rt
    clients = []
    try:
        for _ in range(per_class):
            clients.append(send(rt.addr, 100, "gold", max_tokens=1))
            clients.append(send(rt.addr, 100, "bronze", max_tokens=1))
        # Every request is in: each one is either waiting or sent on.
        wait_for(lambda: all(d + (pending(rt, k) or 0) == per_class
                             for k, d in zip(("gold", "bronze"), served(rt))), 20,
                 "every request queued or dispatched")
        g0, b0 = served(rt)
        g1, b1 = wait_for(lambda: (lambda g, b: (g, b) if g + b - g0 - b0 >= window else None)(
            *served(rt)), 60, "%d more dispatches" % window)
        gold, bronze = g1 - g0, b1 - b0
        n = gold + bronze
        # 3:1 within one round (4 requests) and a poll's worth of slack; 1:1 would be 10 off.
        assert abs(4 * gold - 3 * n) <= 4 * 5, (at_once, gold, bronze)
        assert pending(rt, "gold") > 0 and pending(rt, "bronze") > 0, "both stayed backlogged"
        for k in ("gold", "bronze"):
            for why in ("queue_full", "queue_timeout", "all_busy"):
                assert rejected(rt, k, why) == 0, (k, why)
    finally:
        for c in clients:
            c.close()
    f.stop()


def test_shares_one_prefill_at_a_time():
    shares_case(1)


def test_shares_two_prefills_at_a_time():
    shares_case(2)


def test_queue_metrics_pass_promtool():
    if shutil.which("promtool") is None:
        raise AssertionError("promtool is not installed (apt install prometheus)")
    f = Fleet(TWO_CLASSES % {"limit": 1, "timeout": 0}, first_ms=10)
    rt = f.rt
    c = send(rt.addr, 100, "interactive")
    assert c.read_head()[0] == 200
    c.close()
    text = subprocess.run(["curl", "-sf", "http://%s:%d/metrics" % rt.maddr],
                          capture_output=True, timeout=30).stdout
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       timeout=60)
    assert p.returncode == 0, (p.stdout + p.stderr).decode()
    for family in (b"dynamo_frontend_router_queue_pending_requests",
                   b"admit_router_queue_wait_seconds_bucket",
                   b"admit_router_queue_dispatched_total", b"admit_router_queue_rejections_total"):
        assert family in text, family
    f.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("an interactive class with a prefill threshold waits while batch flows, and is "
            "served once room appears", test_interactive_waits_batch_flows)
    tap.run("a full class queue: 529 at once; a queue timeout: 529 with its own message",
            test_full_queue_and_timeout)
    tap.run("a client that hangs up while queued (FIN, RST, FIN after a wait) frees its place",
            test_hangup_while_queued_frees_the_place)
    tap.run("a dispatched request is still judged by the router-wide reject thresholds",
            test_selection_still_rejects_on_router_wide_thresholds)
    tap.run("the example classifier plugin moves a large prompt to a class with room",
            test_classifier_plugin_demotes_a_large_prompt)
    tap.run("classes of quanta 3:1 share 3:1 with one prefill at a time",
            test_shares_one_prefill_at_a_time)
    tap.run("classes of quanta 3:1 share 3:1 with two prefills at a time",
            test_shares_two_prefills_at_a_time)
    tap.run("the queue's metric families pass promtool", test_queue_metrics_pass_promtool)
    tap.done()
