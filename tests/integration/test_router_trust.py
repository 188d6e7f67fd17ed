"""What admit-router takes from a load message, and what it does not (README "admit-router",
"Load messages from the workers"): a worker_id is admitd's kind (printable ASCII without
blanks, quotes or backslashes) and belongs to the first worker that claims it while that one
is heard (another's claim is refused: no duplicate metrics series, no pin sent astray); text
from the network is escaped in the log, so an id with a newline forges no line; a worker's
model names join /busy_threshold and leave it when no worker lists them, so made-up names
cannot fill the registry against a real worker's model.

The misbehaving publishers are loadpub's; the real workers are admitd in front of mock
engines."""

import json
import os
import re
import signal
import tempfile

from harness import Admitd, Mock, Proc, Tap, hostport, request, wait_for
from loadpub import LoadPub, dead_port, load_message
from test_router import ROUTER, Router


def refused(rt, reason):
    return rt.metrics().get('admit_router_load_refused_total{reason="%s"}' % reason, 0)


def raw_metrics(rt):
    status, _, body = request(rt.maddr, "GET", "/metrics")
    assert status == 200, status
    return [ln for ln in body.decode().splitlines() if ln and not ln.startswith("#")]


def served(mock):
    return mock.metrics()["admit_mock_requests_total"]


def pinned(rt, name):
    body = {"stream": False, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    return request(rt.addr, "POST", "/v1/chat/completions", body,
                   headers={"X-Admit-Worker": name})[0]


def test_worker_id_of_another_refused():
    """A second publisher claims the worker_id "alpha" of a live worker: its messages are
    refused (counted, logged once, escaped), /metrics has one series per (worker_id, rank),
    and requests pinned to alpha reach alpha. Once alpha is gone and silent past its window,
    the id passes to the claimant."""
    mocks = [Mock("--speedup-ratio", "0"), Mock("--speedup-ratio", "0")]
    alpha = Admitd(mocks[0].url, "--heartbeat-ms", "100", "--worker-id", "alpha")
    other = Admitd(mocks[1].url, "--heartbeat-ms", "100", "--worker-id", "other")
    pub = LoadPub()
    # The claimant first: the pin would go to it if its claim counted.
    claimant_hp = "%s:%d" % other.addr
    rt = Router([("http://" + claimant_hp, pub.url),
                 ("http://%s:%d" % alpha.addr, alpha.publish)], "--missed-heartbeats", "5")
    wait_for(lambda: sum(w["routable"] for w in rt.workers()) == 1, 15, "alpha routable")
    wait_for(lambda: pub.subscribers() == 1, what="the router to subscribe to the claimant")
    pub.beat(lambda seq: load_message("alpha", seq=seq), 100)
    # Heard: refused, or (were the claim taken) the claimant routable as alpha.
    wait_for(lambda: refused(rt, "worker_id_taken") >= 5 or
             sum(w["routable"] for w in rt.workers()) == 2, 15, "the claims heard")
    lines = raw_metrics(rt)
    assert len(lines) == len(set(ln.rpartition(" ")[0] for ln in lines)), \
        "duplicate series: %r" % [ln for ln in lines if 'worker_id="alpha"' in ln]
    assert sum('worker_id="alpha"' in ln and "active_decode_blocks" in ln for ln in lines) == 1
    for _ in range(5):
        assert pinned(rt, "alpha") == 200
    assert served(mocks[0]) == 5 and served(mocks[1]) == 0, (served(mocks[0]), served(mocks[1]))
    assert refused(rt, "worker_id_taken") >= 5
    claims = [ln for ln in rt.proc.lines if "names itself alpha" in ln]
    assert len(claims) == 1 and claimant_hp in claims[0], claims
    # alpha goes; once silent past its window (5 x 100 ms) the claimant's next message
    # takes the id (within 0.6 s: 5 s is room enough, and a mutant that never passes it is
    # not waited for long)
    alpha.proc.kill()
    rt.proc.wait_line(r"worker_id alpha passes from worker %s:%d \(silent\) to worker %s" %
                      (alpha.addr[0], alpha.addr[1], re.escape(claimant_hp)), 5)
    wait_for(lambda: pinned(rt, "alpha") == 200 and served(mocks[1]) >= 1, 15,
             "a pin to alpha to reach the claimant")
    rt.stop()
    pub.close()
    other.stop()
    for m in mocks:
        m.stop()


def test_worker_id_newline_forges_no_line():
    """An id with an escaped newline (and a model list, which gets logged): refused by
    admitd's rule for ids, counted, and the one log line about it shows the id escaped; no
    line of the router's log is the forged one."""
    pub = LoadPub()
    forged = "2026-01-01T00:00:00.000Z admit-router warn: FORGED"
    rt = Router([("http://127.0.0.1:%d" % dead_port(), pub.url)])
    wait_for(lambda: pub.subscribers() == 1, what="the router to subscribe")
    pub.beat(lambda seq: load_message("evil\n" + forged, seq=seq, models=["m\x7f\"q"]), 100)
    # Heard: refused, or (were it taken) logged with its list, or routable.
    wait_for(lambda: refused(rt, "bad_worker_id") >= 3 or
             any(ln.startswith(forged[:24]) for ln in rt.proc.lines) or
             rt.workers()[0]["routable"], 15, "the messages heard")
    assert not any(ln.startswith(forged[:24]) for ln in rt.proc.lines), rt.proc.lines[-10:]
    assert refused(rt, "bad_worker_id") >= 3
    said = [ln for ln in rt.proc.lines if "FORGED" in ln]
    assert len(said) == 1 and "evil\\x0a2026-01-01" in said[0], said
    assert not rt.workers()[0]["routable"]
    # A valid id with an odd model name (a DEL, a quote): taken, and the name escaped.
    pub.beat(lambda seq: load_message("odd", seq=seq, models=["m\x7f\"q"]), 100)
    rt.proc.wait_line(r'model m\\x7f"q: served by a worker', 15)
    rt.stop()
    pub.close()


class RouterFile(Router):
    """admit-router with a workers file, and --model only as given."""

    def __init__(self, path, *args):  # noqa: super's __init__ is replaced, not extended
        argv = [ROUTER, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                "--workers-file", path] + list(args)
        self.proc = Proc(argv, ready=r"ready listen=(\S+) metrics=(\S+)", name="router")
        self.addr = hostport(self.proc.match.group(1))
        self.maddr = hostport(self.proc.match.group(2))


def thresholds(rt):
    status, _, body = request(rt.addr, "GET", "/busy_threshold")
    assert status == 200, (status, body)
    return [t["model"] for t in json.loads(body)["thresholds"]]


def set_threshold(rt, model):
    return request(rt.addr, "POST", "/busy_threshold",
                   {"model": model, "active_decode_blocks_threshold": 0.5})[0]


def test_model_flood_forgotten():
    """One publisher lists 1,200 made-up names, 50 at a time: /busy_threshold holds only its
    newest list (and the configured model), so a real worker's model that comes later is
    registered (200 on a POST, not 404); a name no list holds any more is forgotten, a
    configured one stays."""
    pub = LoadPub()
    flooder = "http://127.0.0.1:%d=%s" % (dead_port(), pub.url)
    path = os.path.join(tempfile.mkdtemp(), "workers")
    with open(path, "w") as f:
        f.write(flooder + "\n")
    rt = RouterFile(path, "--model", "declared")
    wait_for(lambda: pub.subscribers() == 1, what="the router to subscribe")
    for k in range(24):
        names = ["f%d" % (k * 50 + i) for i in range(50)] + (["declared"] if k == 0 else [])
        pub.send(load_message("flooder", seq=pub.next_seq(), models=names))
    last = ["f%d" % i for i in range(1150, 1200)]
    wait_for(lambda: rt.workers()[0]["models"] == last, 15, "the newest list heard")
    assert sorted(thresholds(rt)) == sorted(["declared"] + last), thresholds(rt)
    # A real worker's model, after the flood.
    mock = Mock("--speedup-ratio", "0", "--model-name", "real-model")
    ad = Admitd(mock.url, "--heartbeat-ms", "100", "--engine-models-interval-ms", "200")
    with open(path, "w") as f:
        f.write("%s\nhttp://%s:%d=%s\n" % ((flooder,) + ad.addr + (ad.publish,)))
    os.kill(rt.proc.p.pid, signal.SIGHUP)
    wait_for(lambda: "real-model" in thresholds(rt), 15, "real-model in /busy_threshold")
    assert set_threshold(rt, "real-model") == 200
    # The flooder lists one name, then none: its names are forgotten; declared stays.
    pub.send(load_message("flooder", seq=pub.next_seq(), models=["f0"]))
    wait_for(lambda: "f1199" not in thresholds(rt), 15, "the flood forgotten")
    assert "f0" in thresholds(rt)
    pub.send(load_message("flooder", seq=pub.next_seq(), models=[]))
    wait_for(lambda: "f0" not in thresholds(rt), 15, "f0 forgotten")
    assert sorted(thresholds(rt)) == ["declared", "real-model"], thresholds(rt)
    assert set_threshold(rt, "f0") == 404
    rt.stop()
    pub.close()
    ad.stop()
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("a worker_id another live worker holds is refused: one series, pins to the owner",
            test_worker_id_of_another_refused)
    tap.run("a worker_id with a newline is refused and forges no log line",
            test_worker_id_newline_forges_no_line)
    tap.run("1,200 made-up model names do not crowd out a real worker's model",
            test_model_flood_forgotten)
    tap.done()
