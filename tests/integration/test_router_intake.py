"""admit-router's intake of load messages (README "Metrics" and "1,000 workers"): its own
reader (spsub) for the publishers at a numeric tcp:// address, nng's SUB for the rest (a host
name) or for all (--subscriber=nng), and the admit_router_load_* families that count them.

The workers are real admitd processes with a 100 ms heartbeat, in front of one mock engine;
the hostile publishers are loadpub's, TCP listeners on 127.0.0.1 that speak as much of nng's
SP protocol as each case needs (README "Load publishing": 8-byte header, then 8-byte
big-endian length and body per message), each with the bytes its case sends.
"""

import os
import signal
import struct
import tempfile

from harness import Mock, Tap, wait_for
from loadpub import LoadPub
from test_router import Router, worker


def threads(rt):
    return len(os.listdir("/proc/%d/task" % rt.proc.p.pid))


def load(rt, name, label=None):
    m = rt.metrics()
    return m.get(name if label is None else '%s{%s}' % (name, label), 0)


def test_auto_takes_addresses_and_leaves_names_to_nng():
    mock = Mock("--speedup-ratio", "0")
    a, wa = worker(mock)
    b, wb = worker(mock)
    # One router with both at their addresses: spsub for both, and no nng thread.
    rt = Router([wa, wb])
    rt.wait_routable(2)
    assert load(rt, "admit_router_load_subscribers", 'via="spsub"') == 2, rt.metrics()
    assert load(rt, "admit_router_load_subscribers", 'via="nng"') == 0, rt.metrics()
    assert load(rt, "admit_router_load_connected") == 2, rt.metrics()
    assert load(rt, "admit_router_load_connects_total") == 2, rt.metrics()
    assert threads(rt) == 1, threads(rt)
    rt.stop()
    # The second one by a host name: nng resolves it, the first stays spsub's.
    named = (wb[0], wb[1].replace("127.0.0.1", "localhost"))
    assert named[1].startswith("tcp://localhost:"), named
    rt = Router([wa, named])
    rt.wait_routable(2)
    assert load(rt, "admit_router_load_subscribers", 'via="spsub"') == 1, rt.metrics()
    assert load(rt, "admit_router_load_subscribers", 'via="nng"') == 1, rt.metrics()
    assert load(rt, "admit_router_load_connected") == 1, rt.metrics()
    assert threads(rt) > 1  # nng's own
    rt.stop()
    a.stop()
    b.stop()
    mock.stop()


def test_subscriber_nng_for_every_worker():
    mock = Mock("--speedup-ratio", "0")
    a, wa = worker(mock)
    rt = Router([wa], "--subscriber=nng")
    rt.wait_routable(1)
    assert load(rt, "admit_router_load_subscribers", 'via="nng"') == 1, rt.metrics()
    assert load(rt, "admit_router_load_subscribers", 'via="spsub"') == 0, rt.metrics()
    wait_for(lambda: load(rt, "admit_router_load_messages_total") >= 3, what="messages counted")
    assert load(rt, "admit_router_load_connects_total") == 0  # nng's are not seen
    rt.stop()
    a.stop()
    mock.stop()


def test_messages_counted_as_published(via):
    """Over a second or so, the router counts what admitd says it published (its
    admitd_load_messages_total), give or take a message in flight at either end."""
    mock = Mock("--speedup-ratio", "0")
    a, wa = worker(mock)
    rt = Router([wa], "--subscriber=" + via)
    rt.wait_routable(1)
    wait_for(lambda: load(rt, "admit_router_load_messages_total") >= 2, what="messages")
    r0, p0 = load(rt, "admit_router_load_messages_total"), a.metrics()["admitd_load_messages_total"]
    wait_for(lambda: a.metrics()["admitd_load_messages_total"] >= p0 + 10, what="10 published")
    p1 = a.metrics()["admitd_load_messages_total"]
    wait_for(lambda: load(rt, "admit_router_load_messages_total") >= r0 + (p1 - p0) - 1,
             what="the router's count to follow")
    r1 = load(rt, "admit_router_load_messages_total")
    assert p1 - p0 - 2 <= r1 - r0 <= p1 - p0 + 2, (r0, r1, p0, p1)
    # Each message is the topic, a space and a JSON object of a hundred bytes or more.
    assert load(rt, "admit_router_load_bytes_total") > 100 * r1, rt.metrics()
    rt.stop()
    a.stop()
    mock.stop()


def frame(body):
    return struct.pack(">Q", len(body)) + body


def test_refusals_counted():
    """A peer that is not PUB0, a message over 2048 bytes, one that does not decode and one
    of another topic: each counted under its reason, and the router goes on."""
    bad_header = LoadPub(hello=b"\x00SP\x00\x00\x21\x00\x00")  # SUB0, not PUB0
    oversized = LoadPub(struct.pack(">Q", 4096) + b"k" * 100)
    invalid = LoadPub(frame(b"kv_metrics {not json"))
    other = LoadPub(frame(b"other_topic {}") * 3)
    fakes = [bad_header, oversized, invalid, other]
    rt = Router([("http://127.0.0.%d:9" % (i + 2), f.url) for i, f in enumerate(fakes)],
                "--missed-heartbeats", "10")

    def reason(r):
        return load(rt, "admit_router_load_refused_total", 'reason="%s"' % r)

    wait_for(lambda: reason("bad_header") >= 2, what="bad headers, reconnecting")
    wait_for(lambda: reason("oversized") >= 2, what="oversized messages, reconnecting")
    wait_for(lambda: reason("invalid") >= 1, what="an invalid message")
    wait_for(lambda: reason("other_topic") >= 3, what="messages of another topic")
    assert reason("timeout") == 0, rt.metrics()
    assert load(rt, "admit_router_load_reconnects_total") >= 2, rt.metrics()
    # The invalid message's and the other topic's connections stay up; the others do not.
    assert invalid.accepts == 1 and other.accepts == 1, (invalid.accepts, other.accepts)
    assert load(rt, "admit_router_load_messages_total") == 1, rt.metrics()  # the invalid one
    rt.stop()
    for f in fakes:
        f.close()


def test_counters_survive_a_retired_worker():
    """A worker that leaves the workers file is retired: its subscriber goes, but what it
    counted stays in the totals, which never go down."""
    mock = Mock("--speedup-ratio", "0")
    a, wa = worker(mock)
    b, wb = worker(mock)
    fd, path = tempfile.mkstemp(prefix="admit-intake-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        f.write("%s=%s\n%s=%s\n" % (wa + wb))
    rt = Router([], "--workers-file", path)
    rt.wait_routable(2)
    wait_for(lambda: load(rt, "admit_router_load_messages_total") >= 10, what="messages")
    with open(path, "w") as f:
        f.write("%s=%s\n" % wa)
    before = load(rt, "admit_router_load_messages_total")
    connects = load(rt, "admit_router_load_connects_total")
    os.kill(rt.proc.p.pid, signal.SIGHUP)
    wait_for(lambda: load(rt, "admit_router_load_subscribers", 'via="spsub"') == 1,
             what="the retired worker's subscriber gone")
    assert load(rt, "admit_router_load_messages_total") >= before, rt.metrics()
    assert load(rt, "admit_router_load_connects_total") == connects, rt.metrics()
    assert load(rt, "admit_router_load_connected") == 1, rt.metrics()
    rt.stop()
    os.unlink(path)
    a.stop()
    b.stop()
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("auto: spsub for addresses (no nng thread), nng for a host name",
            test_auto_takes_addresses_and_leaves_names_to_nng)
    tap.run("--subscriber=nng: nng's SUB for every worker", test_subscriber_nng_for_every_worker)
    tap.run("the messages counted are those published (auto)", test_messages_counted_as_published,
            "auto")
    tap.run("the messages counted are those published (nng)", test_messages_counted_as_published,
            "nng")
    tap.run("refusals counted by reason; the router goes on", test_refusals_counted)
    tap.run("counters survive a retired worker", test_counters_survive_a_retired_worker)
    tap.done()
