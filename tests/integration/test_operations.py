"""Day-two operations: queue timeout, Retry-After, live limits, graceful drain, logs."""

import json
import math
import os
import signal
import subprocess
import sys
import time

from harness import (Admitd, Mock, RawClient, Tap, chat_body, close_own, error_message, marker,
                     own_request, own_response, request, wait_for)

QUEUE_TIMEOUT_MSG = "Server overloaded: request rejected after exceeding the admission queue delay"


def post_admission(ad, body, headers=None, raw=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    data = raw if raw is not None else json.dumps(body).encode()
    status, _, out = request(ad.maddr, "POST", "/admission", data, headers=h)
    return status, json.loads(out)


def test_queue_timeout_fires_at_the_right_request():
    timeout_ms, gap = 2000, 1.5
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "4",
                "--queue-timeout-ms", str(timeout_ms))
    a = RawClient(ad.addr, marker=marker(0))
    a.post("/v1/chat/completions", chat_body(max_tokens=1000))  # holds the slot for 50 s
    assert a.read_head()[0] == 200
    b = RawClient(ad.addr, marker=marker(1))
    b_sent = time.monotonic()
    b.post("/v1/chat/completions", chat_body(max_tokens=2))
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 1, what="b queued")
    # The stimulus, not a wait for an event: c arrives gap seconds after b, so each timeout
    # is measured from its own request's arrival or not.
    time.sleep(gap)
    c = RawClient(ad.addr, marker=marker(2))
    c_sent = time.monotonic()
    c.post("/v1/chat/completions", chat_body(max_tokens=2))
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 2, what="c queued")
    status, hdrs, body, _ = own_response(b)
    t_b = time.monotonic()
    assert status == 529 and error_message(body) == QUEUE_TIMEOUT_MSG, (status, body)
    # No slot was freed yet: the estimate has no history and says 10 s.
    assert hdrs["x-admitd-reason"] == "queue-timeout" and hdrs["retry-after"] == "10", hdrs
    # Not before its own deadline (libevent sleeps in whole milliseconds: 10 ms of slack).
    assert t_b - b_sent >= timeout_ms / 1000.0 - 0.01, t_b - b_sent
    # c arrived gap seconds later, so it is still waiting when b leaves.
    assert ad.metrics()["dynamo_request_queue"] == 1
    status, hdrs, body, _ = own_response(c)
    t_c = time.monotonic()
    assert status == 529 and error_message(body) == QUEUE_TIMEOUT_MSG, (status, body)
    assert hdrs["retry-after"] == "10" and t_c - c_sent >= timeout_ms / 1000.0 - 0.01, (
        hdrs, t_c - c_sent)
    m = ad.metrics()
    assert m['admitd_requests_total{outcome="queue_timeout"}'] == 2, m
    assert m["dynamo_rejection_request_total"] == 2 and m["dynamo_request_queue"] == 0, m
    assert mock.metrics()["admit_mock_requests_total"] == 1  # b and c never reached it
    close_own([a])
    ad.stop()
    mock.stop()


def retry_after_formula(waiting, releases):
    """README: ceil((waiting + 1) / releases per second over the last 10 s), clamped to
    1..60; 10 with no release in the window. In doubles, as admitd computes it."""
    if releases == 0:
        return 10
    return int(min(60, max(1, math.ceil((waiting + 1.0) / (releases / 10.0)))))


def test_retry_after_fixed_and_estimated():
    mock = Mock("--token-interval-ms", "20")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2",
                "--retry-after", "7")
    holders = ad.fill(3, queued=2, max_tokens=1000)
    status, hdrs, _ = own_request(ad.addr, "/v1/chat/completions", chat_body(), marker())
    assert status == 529 and hdrs["retry-after"] == "7", hdrs
    close_own(holders)
    ad.stop()
    # Estimated, with no slot freed yet: 10 s (the window).
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    holders = ad.fill(3, queued=2, max_tokens=1000)
    status, hdrs, _ = own_request(ad.addr, "/v1/chat/completions", chat_body(), marker())
    assert status == 529 and hdrs["retry-after"] == "10", hdrs
    close_own(holders)
    ad.stop()
    # Estimated from a known history, on a fresh admitd: exactly `releases` slots freed (one
    # request at a time), then 2 waiting behind a held slot. With every release in the window
    # that is ceil(3 / (20 / 10)) = 2, neither the fallback 10 nor a clamp.
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    releases, sent = 20, []
    for _ in range(releases):
        sent.append(time.monotonic())
        assert request(ad.addr, "POST", "/v1/chat/completions", chat_body(max_tokens=1))[0] == 200
    wait_for(lambda: ad.metrics()['admitd_requests_total{outcome="ok"}'] == releases,
             what="%d requests finished" % releases)
    holders = ad.fill(3, queued=2, max_tokens=1000)
    status, hdrs, _ = own_request(ad.addr, "/v1/chat/completions", chat_body(), marker())
    asked = time.monotonic()
    # admitd counts in whole seconds of CLOCK_MONOTONIC (Python's monotonic clock too): the
    # window holds the last 10 of them. A release is surely in it when its request was sent
    # in one of those; on a very slow run the oldest may have dropped out, which the formula
    # then allows for, and nothing else.
    surely = sum(1 for t in sent if int(t) > int(asked) - 10)
    allowed = sorted({retry_after_formula(2, k) for k in range(surely, releases + 1)})
    assert 10 not in allowed, ("too slow a run to tell the estimate from the fallback", allowed)
    assert status == 529 and int(hdrs["retry-after"]) in allowed, (hdrs, allowed)
    print("# Retry-After %s, %d..%d of %d releases surely in the window (allowed: %s)" % (
        hdrs["retry-after"], surely, releases, releases, allowed), flush=True)
    close_own(holders)
    ad.stop()
    mock.stop()


def test_live_limits():
    mock = Mock("--token-interval-ms", "30")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "4")
    status, _, body = request(ad.maddr, "GET", "/admission")
    assert status == 200 and json.loads(body)["engine_request_limit"] == 1, body
    holders = ad.fill(4, queued=3, max_tokens=60)
    # Raising N dispatches waiters at once.
    status, state = post_admission(ad, {"engine_request_limit": 3})
    assert status == 200 and state["engine_request_limit"] == 3, state
    assert state["engine_requests"] == 3 and state["queued_requests"] == 1, state
    # Lowering N kills nothing: the three running finish, and the next ones start one at a
    # time.
    status, state = post_admission(ad, {"engine_request_limit": 1, "request_queue_limit": 2})
    assert status == 200 and state["engine_requests"] == 3, state
    results = [own_response(h) for h in holders]
    assert all(r[0] == 200 and r[3] for r in results), [r[0] for r in results]
    m = ad.wait_idle()
    assert m["admitd_engine_request_limit"] == 1 and m["admitd_request_queue_limit"] == 2, m
    assert m['admitd_limit_changes_total'] == 2, m
    # From here on the engine never runs more than 1: a fresh engine proves it.
    mock2 = Mock("--token-interval-ms", "30")
    ad.stop()
    ad = Admitd(mock2.url, "--engine-request-limit", "3")
    assert post_admission(ad, {"engine_request_limit": 1})[0] == 200
    holders = ad.fill(4, queued=3, max_tokens=10)
    assert all(own_response(h)[0] == 200 for h in holders)
    assert mock2.metrics()["admit_mock_requests_running_peak"] == 1
    # Validation and errors: JSON, with a 4xx.
    for body, want in (({"engine_request_limit": 0}, 400), ({"engine_request_limit": "2"}, 400),
                       ({"request_queue_limit": 1}, 400), ({"bogus": 1}, 400), ({}, 400),
                       ([1], 400)):
        status, out = post_admission(ad, body)
        assert status == want and "error" in out, (body, status, out)
    status, out = post_admission(ad, None, raw=b"{not json")
    assert status == 400 and "error" in out
    status, out = post_admission(ad, None, headers={"Content-Type": "text/plain"}, raw=b"{}")
    assert status == 415, status
    # The media type is application/json exactly (any case, parameters allowed): a type that
    # only starts with it is another type, and changes nothing.
    for ct in ("application/jsonp", "application/json-seq", "text/json"):
        status, out = post_admission(ad, {"engine_request_limit": 2}, headers={"Content-Type": ct})
        assert status == 415 and "application/json" in out["error"], (ct, status, out)
    assert json.loads(request(ad.maddr, "GET", "/admission")[2])["engine_request_limit"] == 1
    status, state = post_admission(ad, {"engine_request_limit": 2},
                                   headers={"Content-Type": "APPLICATION/JSON; charset=utf-8"})
    assert status == 200 and state["engine_request_limit"] == 2, (status, state)
    status, out = post_admission(ad, None, raw=b" " * 5000)
    assert status == 413, status
    ad.stop()
    ad = Admitd(mock2.url)  # no cap: nothing to change
    assert post_admission(ad, {"engine_request_limit": 2})[0] == 409
    ad.stop()
    mock.stop()
    mock2.stop()


def test_admin_token():
    mock = Mock("--speedup-ratio", "0")
    token = "s3cret-token-0123456789"
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--admin-token", token)
    assert post_admission(ad, {"engine_request_limit": 3})[0] == 401
    assert post_admission(ad, {"engine_request_limit": 3},
                          headers={"Authorization": "Bearer wrong-token-0123456789"})[0] == 401
    status, state = post_admission(ad, {"engine_request_limit": 3},
                                   headers={"Authorization": "Bearer " + token})
    assert status == 200 and state["engine_request_limit"] == 3
    # Reading stays open; nothing admin-related is forwarded to the engine.
    assert request(ad.maddr, "GET", "/admission")[0] == 200
    assert request(ad.addr, "POST", "/admission", b"{}")[0] == 404  # the engine's 404
    ad.stop()
    mock.stop()


# A network namespace for the checks, inside a PID namespace of their own: when its first
# process (netns_admin.py) dies, even by SIGKILL, the kernel kills everything it started, and
# --kill-child takes it down with unshare. Its own /proc, so the sanitizers see its PIDs.
NETNS = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]


def netns_available():
    """None when this process may create the namespaces (unshare), else why not."""
    import shutil
    import subprocess
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip (util-linux, iproute2) is not installed"
    p = subprocess.run(NETNS + ["true"], capture_output=True, timeout=30)
    return None if p.returncode == 0 else "cannot create network and PID namespaces: %s" % (
        p.stderr.decode().strip() or "exit %d" % p.returncode)


def netns_members(ns):
    """PIDs of the processes in the network namespace ns ("net:[inode]")."""
    pids = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.readlink("/proc/%s/ns/net" % pid) == ns:
                pids.append(int(pid))
        except OSError:  # gone meanwhile
            pass
    return pids


def test_admin_mutations_only_from_loopback():
    """The checks run in a namespace of their own, where a second address on lo plays the
    remote peer: test traffic never goes to an address outside loopback (netns_admin.py)."""
    from harness import Proc
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "netns_admin.py")
    pr = Proc(NETNS + [sys.executable, script], name="netns_admin")
    ns = pr.wait_line(r"^netns (net:\[\d+\])$", 60).group(1)
    try:
        try:
            rc = pr.p.wait(120)
            timed_out = False
        except subprocess.TimeoutExpired:
            pr.kill()
            rc, timed_out = pr.p.returncode, True
        pr._out.join(10)
        out = getattr(pr, "stdout", b"").decode("utf-8", "replace")
        report = "stdout:\n%s\nstderr:\n%s" % (out[-2000:], "\n".join(pr.lines[-40:]))
        assert not timed_out, "netns_admin.py did not finish within 120 s\n" + report
        assert rc == 0 and "netns admin checks passed" in out, "exit %s\n%s" % (rc, report)
    finally:
        pr.kill()
        # Whatever it started inside is gone with it.
        try:
            wait_for(lambda: not netns_members(ns), 30, "no process left in the namespace")
        except AssertionError:
            left = []
            for pid in netns_members(ns):
                try:
                    with open("/proc/%d/cmdline" % pid, "rb") as f:
                        left.append("%d %s" % (pid, f.read().replace(b"\0", b" ").decode()))
                except OSError:
                    pass
            raise AssertionError("processes left in namespace %s:\n%s" % (ns, "\n".join(left)))


def test_graceful_drain_loses_nothing():
    mock = Mock("--token-interval-ms", "30")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2",
                "--health-interval-ms", "50")
    wait_for(lambda: request(ad.maddr, "GET", "/ready")[0] == 200, what="ready")
    holders = ad.fill(3, queued=2, max_tokens=30)
    ad.proc.p.send_signal(signal.SIGTERM)
    ad.proc.wait_line("draining", 10)
    assert request(ad.maddr, "GET", "/ready")[0] == 503
    status, hdrs, body = own_request(ad.addr, "/v1/chat/completions", chat_body(), marker())
    assert status == 503 and error_message(body) == "Server unavailable: worker draining"
    assert hdrs.get("connection", "").lower() == "close", hdrs
    results = [own_response(h) for h in holders]
    assert [r[0] for r in results] == [200, 200, 200] and all(r[3] for r in results), results
    assert ad.proc.p.wait(20) == 0
    ad.proc.wait_line("drained: nothing in flight", 10)
    mock.stop()


def test_drain_timeout_and_second_signal():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--drain-timeout-ms", "300")
    holders = ad.fill(2, queued=0, max_tokens=1000)
    ad.proc.p.send_signal(signal.SIGTERM)
    assert ad.proc.p.wait(20) == 0
    ad.proc.wait_line("drain timeout: cancelled 2 requests still in flight", 10)
    for h in holders:
        status, hdrs = h.read_head()
        body, complete = h.read_body(hdrs)
        assert not complete, "a cancelled stream must not end cleanly"
    close_own(holders)
    wait_for(lambda: mock.metrics()["admit_mock_requests_in_flight"] == 0, what="engine idle")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--drain-timeout-ms", "60000")
    holders = ad.fill(1, queued=0, max_tokens=1000)
    ad.proc.p.send_signal(signal.SIGTERM)
    ad.proc.wait_line("draining", 10)
    ad.proc.p.send_signal(signal.SIGTERM)
    assert ad.proc.p.wait(20) == 0
    close_own(holders)
    mock.stop()


def test_json_logs_and_access_log():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2",
                "--log-format", "json", "--access-log")
    assert request(ad.addr, "POST", "/v1/chat/completions?x=1", chat_body(max_tokens=2))[0] == 200
    ad.stop()
    lines = [json.loads(line) for line in ad.proc.lines]
    assert all(set(rec) >= {"ts", "level", "prog", "msg"} for rec in lines), lines[:2]
    access = [rec["msg"] for rec in lines if rec["msg"].startswith("access ")]
    assert len(access) == 1, access
    for part in ("method=POST", "path=/v1/chat/completions?x=1", "status=200", "outcome=ok",
                 "queue_ms=", "ttfb_ms=", "bytes="):
        assert part in access[0], (part, access[0])
    mock.stop()


def test_config_file_precedence_and_reload():
    import os
    import subprocess
    import tempfile
    from harness import ADMITD
    mock = Mock("--token-interval-ms", "20")
    d = tempfile.mkdtemp()
    path = os.path.join(d, "admitd.yaml")

    def write(text):
        with open(path, "w") as f:
            f.write(text)

    # Bad files: exit 2 with file:line:column.
    for text, want in (("engine_request_limit: 2\nbogus: 1\n", ":2:1: unknown setting 'bogus'"),
                       ("engine_request_limit: two\n", ":1:23: engine_request_limit: 'two'"),
                       ("listen: [1, 2]\n", ":1:9: expected a single value for 'listen'"),
                       ("role: leader\n", ":1:7: role: 'leader' must be prefill, decode or both"),
                       ("a: &x 1\nb: *x\n", "anchors and aliases are not allowed")):
        write(text)
        p = subprocess.run([ADMITD, "--config", path, "--check-config"], capture_output=True,
                           timeout=30)
        assert p.returncode == 2 and want in p.stderr.decode(), (text, p.stderr)
    write("engine_request_limit: 4\nrequest_queue_limit: 8\nqueue_timeout_ms: 5000\n")
    p = subprocess.run([ADMITD, "--config", path, "--check-config"], capture_output=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    # Precedence: flag > env > file > default.
    ad = Admitd(mock.url, "--config", path, "--engine-request-limit", "2",
                env={"DYN_DYNAMO_REQUEST_QUEUE_LIMIT": "3"})
    m = ad.metrics()
    assert m["admitd_engine_request_limit"] == 2 and m["admitd_request_queue_limit"] == 3, m
    ad.stop()
    # SIGHUP applies what can change live, reports what cannot, keeps the old on a bad file.
    ad = Admitd(mock.url, "--config", path)
    assert ad.metrics()["admitd_engine_request_limit"] == 4
    write("engine_request_limit: 6\nrequest_queue_limit: 2\nheartbeat_ms: 5000\n"
          "retry_after: 4\noverload_status_code: 503\nrole: prefill\n")
    ad.proc.p.send_signal(signal.SIGHUP)
    ad.proc.wait_line("configuration reloaded", 10)
    ad.proc.wait_line("heartbeat_ms changed; it takes effect after a restart", 10)
    ad.proc.wait_line("role changed; it takes effect after a restart", 10)
    # The role is the engine's: the messages keep saying both (no role key) until a restart.
    assert "role" not in json.loads(request(ad.maddr, "GET", "/load")[2])["ranks"][0]
    m = ad.metrics()
    assert m["admitd_engine_request_limit"] == 6 and m["admitd_request_queue_limit"] == 2, m
    assert m["admitd_limit_changes_total"] == 1, m
    # The new Q, overload status and Retry-After apply to the next rejection (before: Q 8,
    # 529 and an estimated 10 s).
    holders = ad.fill(8, queued=2, max_tokens=1000)
    status, hdrs, body = own_request(ad.addr, "/v1/chat/completions", chat_body(), marker())
    assert status == 503 and hdrs["retry-after"] == "4", (status, hdrs)
    assert hdrs["x-admitd-reason"] == "queue-full" and json.loads(body)["error"]["code"] == 503
    close_own(holders)
    ad.wait_idle()
    write("engine_request_limit: [oops\n")
    ad.proc.p.send_signal(signal.SIGHUP)
    ad.proc.wait_line("reload failed, the running configuration stays", 10)
    assert ad.metrics()["admitd_engine_request_limit"] == 6
    assert request(ad.addr, "POST", "/v1/chat/completions", chat_body(max_tokens=1))[0] == 200
    ad.stop()
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("the queue timeout fires at the right request and is counted",
            test_queue_timeout_fires_at_the_right_request)
    tap.run("Retry-After: fixed, and estimated from the release rate",
            test_retry_after_fixed_and_estimated)
    tap.run("live limits: raise dispatches, lower drains down, errors are JSON 4xx",
            test_live_limits)
    tap.run("an admin token guards POST /admission", test_admin_token)
    why = netns_available()
    if why is not None:
        tap.skip("admin changes only from loopback peers (in a network namespace)", why)
    else:
        tap.run("admin changes only from loopback peers (in a network namespace)",
                test_admin_mutations_only_from_loopback)
    tap.run("graceful drain: nothing lost, new requests refused, exit 0",
            test_graceful_drain_loses_nothing)
    tap.run("drain timeout cancels what remains; a second signal exits at once",
            test_drain_timeout_and_second_signal)
    tap.run("JSON logs and the access log", test_json_logs_and_access_log)
    tap.run("config file: errors at file:line:column, precedence, SIGHUP reload",
            test_config_file_precedence_and_reload)
    tap.done()
