"""Failures that say so (issue 24, item 2): admitd logs when its engine cannot be reached,
at start and later, and when it can again; admit-router the same for a worker's HTTP side;
one line per change, never one per poll or per request, each naming the URL (and, for the
unreachable side, the reason). The quick start fails, saying why, against an engine that is
not there, and its burst does not call an unreachable engine's 503s rejections.

The engine's port is one nothing listens on at first; a mock engine is then started on that
very port, and killed again."""

import os
import re
import subprocess
import time

from harness import MOCK, Admitd, Proc, Tap, request, wait_for
from loadpub import LoadPub, dead_port, load_message
from test_router import MODEL, Router

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILDDIR = os.path.dirname(os.path.abspath(os.environ.get("ADMITD", "build/admitd")))
REASON = r'reason="[^"]+"'


def mock_on(port):
    """admit-mock-engine on the given port (answers at once: no timing model)."""
    return Proc([MOCK, "--listen", "127.0.0.1:%d" % port, "--speedup-ratio", "0"],
                ready=r"listening on", name="mock")


def count(proc, pattern):
    rx = re.compile(pattern)
    return sum(1 for ln in list(proc.lines) if rx.search(ln))


def settle(seconds):
    """Lets several polls (or heartbeats) pass, so that a line logged per poll or per request
    rather than per change would be seen more than once. Not a timing assertion."""
    time.sleep(seconds)


def test_admitd_logs_engine_reach():
    port = dead_port()
    url = re.escape("http://127.0.0.1:%d" % port)
    down = r"warn: engine unreachable url=%s probe=/health %s" % (url, REASON)
    up = r"info: engine reachable url=%s probe=/health status=200" % url
    ad = Admitd("http://127.0.0.1:%d" % port, "--health-interval-ms", "20",
                "--engine-models-interval-ms", "0")
    line = ad.proc.wait_line(down, 10)
    assert 'reason="Connection refused"' in line.string, line.string
    settle(0.5)  # some 25 polls, each refused
    assert count(ad.proc, r"engine unreachable") == 1, ad.proc.lines
    assert request(ad.maddr, "GET", "/ready")[0] == 503

    mock = mock_on(port)
    ad.proc.wait_line(up, 10)
    wait_for(lambda: request(ad.maddr, "GET", "/ready")[0] == 200, what="/ready 200")
    settle(0.5)
    assert count(ad.proc, r"engine reachable") == 1, ad.proc.lines
    assert count(ad.proc, r"engine unreachable") == 1, ad.proc.lines

    mock.kill()
    wait_for(lambda: count(ad.proc, r"engine unreachable url=%s probe=/health %s" %
                           (url, REASON)) == 2, what="a second unreachable line")
    settle(0.5)
    assert count(ad.proc, r"engine unreachable") == 2, ad.proc.lines
    assert count(ad.proc, r"engine reachable") == 1, ad.proc.lines
    ad.stop()


def chat(rt):
    body = {"model": MODEL, "stream": False, "max_tokens": 1,
            "messages": [{"role": "user", "content": "hi"}]}
    return request(rt.addr, "POST", "/v1/chat/completions", body)[0]


def test_router_logs_worker_http_reach():
    """One worker whose load publisher speaks (a heartbeat each 50 ms) but whose HTTP port
    is down at start: the first request sent there logs it unreachable, the requests after
    it do not (the worker is routable again at each heartbeat, and refuses again); a mock
    engine on that port makes it reachable, once; killed, unreachable again."""
    port = dead_port()
    url = re.escape("http://127.0.0.1:%d" % port)
    down = r"warn: worker unreachable url=%s %s" % (url, REASON)
    up = r"info: worker reachable url=%s$" % url
    pub = LoadPub()
    rt = Router([("http://127.0.0.1:%d" % port, pub.url)], "--missed-heartbeats", "30")
    wait_for(lambda: pub.subscribers() == 1, what="the router to subscribe")
    pub.beat(lambda seq: load_message("w", seq=seq, heartbeat_ms=50), 50)
    for i in range(4):
        rt.wait_routable(1)  # back at its next heartbeat after each refusal
        assert chat(rt) == 503
        if i == 0:
            line = rt.proc.wait_line(down, 10)
            assert 'reason="Connection refused"' in line.string, line.string
    assert count(rt.proc, r"worker unreachable") == 1, rt.proc.lines
    assert count(rt.proc, r"lost: its engine's port refused") >= 2, rt.proc.lines

    mock = mock_on(port)
    rt.wait_routable(1)
    for _ in range(4):
        assert chat(rt) == 200
    rt.proc.wait_line(up, 10)
    assert count(rt.proc, r"worker reachable") == 1, rt.proc.lines

    mock.kill()
    # (A pooled connection the kill closed may still carry one request, answered 502.)
    wait_for(lambda: (rt.wait_routable(1), chat(rt))[1] == 503, what="a refusal")
    wait_for(lambda: count(rt.proc, down) == 2, what="a second unreachable line")
    for _ in range(3):
        rt.wait_routable(1)
        assert chat(rt) == 503
    assert count(rt.proc, r"worker unreachable") == 2, rt.proc.lines
    assert count(rt.proc, r"worker reachable") == 1, rt.proc.lines
    pub.stop_beat()
    rt.stop()
    pub.close()


def test_router_logs_worker_publisher_reach():
    """A worker whose load publisher is not up when the router starts: one warn line saying
    it is unreachable at start (not one per reconnect attempt), then, once a publisher comes
    up on that port and speaks, one line saying it is reachable, and it is routable."""
    port = dead_port()
    pub_url = "tcp://127.0.0.1:%d" % port
    rt = Router([("http://127.0.0.1:%d" % dead_port(), pub_url)])
    line = rt.proc.wait_line(r"warn: worker \S+ unreachable at start: its load publisher "
                             r"cannot be reached \(connect: Connection refused\)", 10)
    settle(1.0)  # several reconnect attempts, each refused
    assert count(rt.proc, r"unreachable at start") == 1, rt.proc.lines
    assert count(rt.proc, r"reachable: it publishes") == 0, rt.proc.lines
    pub = LoadPub(port=port)
    wait_for(lambda: pub.subscribers() == 1, timeout=15, what="the router to subscribe")
    pub.beat(lambda seq: load_message("w", seq=seq, heartbeat_ms=50), 50)
    rt.proc.wait_line(r"info: worker \S+ reachable: it publishes$", 10)
    rt.wait_routable(1)
    settle(0.3)
    assert count(rt.proc, r"reachable: it publishes") == 1, rt.proc.lines
    assert count(rt.proc, r"unreachable at start") == 1, (line.string, rt.proc.lines)
    pub.stop_beat()
    rt.stop()
    pub.close()


def quickstart(upstream=None, **env):
    """scripts/quickstart.sh on the programs of this build, as they are (--no-build: nothing
    is installed or built): (exit code, stdout, stderr)."""
    e = dict(os.environ, COUNT="6", MAX_TOKENS="4", **env)
    e.pop("UPSTREAM", None)
    if upstream is not None:
        e["UPSTREAM"] = upstream
    p = subprocess.run([os.path.join(ROOT, "scripts", "quickstart.sh"), "--no-build", BUILDDIR],
                       env=e, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_quickstart_fails_without_engine():
    port = dead_port()
    rc, out, err = quickstart("http://127.0.0.1:%d" % port)
    assert rc != 0, (out, err)
    assert ("quickstart: the engine at http://127.0.0.1:%d cannot be reached: Connection refused"
            % port) in err, err
    assert "sending" not in out, out  # no burst against it


def test_quickstart_runs_with_the_mock_engine():
    rc, out, err = quickstart()
    assert rc == 0, (out, err)
    assert "is ready" in out and "admitted at once: " in out, out
    assert re.search(r"rejected: \d+, other: 0", out), out


def test_burst_counts_engine_failures_apart():
    """burst.py through an admitd whose engine is down: each request is answered 503 by
    admitd, and none of them is a rejection."""
    ad = Admitd("http://127.0.0.1:%d" % dead_port(), "--engine-models-interval-ms", "0")
    p = subprocess.run(["python3", os.path.join(ROOT, "scripts", "burst.py"),
                        "--url", "http://%s:%d" % ad.addr, "--metrics", "http://%s:%d" % ad.maddr,
                        "--count", "3", "--max-tokens", "2"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "rejected: 0, other: 3" in p.stdout, p.stdout
    assert "failed: engine-unavailable" in p.stdout, p.stdout
    assert "3 of 3 requests failed" in p.stderr, p.stderr
    ad.stop()


if __name__ == "__main__":
    t = Tap()
    t.run("admitd: engine unreachable at start, reachable, unreachable: one line each",
          test_admitd_logs_engine_reach)
    t.run("admit-router: worker HTTP unreachable at start, reachable, unreachable: one line "
          "each", test_router_logs_worker_http_reach)
    t.run("admit-router: worker load publisher unreachable at start, then reachable: one line "
          "each", test_router_logs_worker_publisher_reach)
    t.run("quickstart: exits non-zero naming the engine and why when it cannot be reached",
          test_quickstart_fails_without_engine)
    t.run("quickstart: runs its burst in front of the built-in mock engine",
          test_quickstart_runs_with_the_mock_engine)
    t.run("burst.py: an unreachable engine's 503s are failures, not rejections",
          test_burst_counts_engine_failures_apart)
    t.done()
