"""Day-two operations: queue timeout, Retry-After, live limits, graceful drain, logs."""

import json
import os
import signal
import sys
import time

from harness import (Admitd, Mock, RawClient, Tap, chat_body, error_message, request,
                     wait_for)

QUEUE_TIMEOUT_MSG = "Server overloaded: request rejected after exceeding the admission queue delay"


def post_admission(ad, body, headers=None, raw=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    data = raw if raw is not None else json.dumps(body).encode()
    status, _, out = request(ad.maddr, "POST", "/admission", data, headers=h)
    return status, json.loads(out)


def test_queue_timeout_fires_at_the_right_request():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "4",
                "--queue-timeout-ms", "400")
    a = RawClient(ad.addr)
    a.post("/v1/chat/completions", chat_body(max_tokens=200))
    assert a.read_head()[0] == 200
    b = RawClient(ad.addr)
    b.post("/v1/chat/completions", chat_body(max_tokens=2))
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 1, what="b queued")
    time.sleep(0.2)
    c = RawClient(ad.addr)
    c.post("/v1/chat/completions", chat_body(max_tokens=2))
    status, hdrs, body, _ = b.response()
    t_b = time.monotonic()
    assert status == 529 and error_message(body) == QUEUE_TIMEOUT_MSG, (status, body)
    assert hdrs["x-admitd-reason"] == "queue-timeout" and int(hdrs["retry-after"]) >= 1
    # c arrived later, so it is still waiting when b leaves.
    assert ad.metrics()["dynamo_request_queue"] == 1
    status, hdrs, body, _ = c.response()
    assert status == 529 and time.monotonic() > t_b, status
    m = ad.metrics()
    assert m['admitd_requests_total{outcome="queue_timeout"}'] == 2, m
    assert m["dynamo_rejection_request_total"] == 2 and m["dynamo_request_queue"] == 0, m
    assert mock.metrics()["admit_mock_requests_total"] == 1  # b and c never reached it
    a.close()
    ad.stop()
    mock.stop()


def test_retry_after_fixed_and_estimated():
    mock = Mock("--token-interval-ms", "20")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2",
                "--retry-after", "7")
    holders = ad.fill(3, queued=2, max_tokens=100)
    status, hdrs, _ = request(ad.addr, "POST", "/v1/chat/completions", chat_body())
    assert status == 529 and hdrs["retry-after"] == "7", hdrs
    for h in holders:
        h.close()
    ad.stop()
    # Estimated: with no slot freed yet it says 10 s (the window); after 20 quick requests
    # (a slot freed twice a second or more) with 2 waiting it is a few seconds.
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    holders = ad.fill(3, queued=2, max_tokens=100)
    status, hdrs, _ = request(ad.addr, "POST", "/v1/chat/completions", chat_body())
    assert status == 529 and hdrs["retry-after"] == "10", hdrs
    for h in holders:
        h.close()
    ad.wait_idle()
    for _ in range(20):
        assert request(ad.addr, "POST", "/v1/chat/completions", chat_body(max_tokens=1))[0] == 200
    holders = ad.fill(3, queued=2, max_tokens=100)
    status, hdrs, _ = request(ad.addr, "POST", "/v1/chat/completions", chat_body())
    assert status == 529 and 1 <= int(hdrs["retry-after"]) <= 10, hdrs
    for h in holders:
        h.close()
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
    results = [h.response() for h in holders]
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
    assert all(h.response()[0] == 200 for h in holders)
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


def netns_available():
    """None when this process may create a network namespace (unshare -n), else why not."""
    import shutil
    import subprocess
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip (util-linux, iproute2) is not installed"
    p = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    return None if p.returncode == 0 else "cannot create a network namespace: %s" % (
        p.stderr.decode().strip() or "exit %d" % p.returncode)


def test_admin_mutations_only_from_loopback():
    """The checks run in a namespace of their own, where a second address on lo plays the
    remote peer: test traffic never goes to an address outside loopback (netns_admin.py)."""
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.run(["unshare", "-n", sys.executable, os.path.join(here, "netns_admin.py")],
                       capture_output=True, timeout=120, cwd=here)
    assert p.returncode == 0 and b"checks passed" in p.stdout, (
        p.returncode, p.stdout.decode()[-2000:], p.stderr.decode()[-3000:])

def test_graceful_drain_loses_nothing():
    mock = Mock("--token-interval-ms", "30")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2",
                "--health-interval-ms", "50")
    wait_for(lambda: request(ad.maddr, "GET", "/ready")[0] == 200, what="ready")
    holders = ad.fill(3, queued=2, max_tokens=30)
    ad.proc.p.send_signal(signal.SIGTERM)
    ad.proc.wait_line("draining", 10)
    assert request(ad.maddr, "GET", "/ready")[0] == 503
    status, hdrs, body = request(ad.addr, "POST", "/v1/chat/completions", chat_body())
    assert status == 503 and error_message(body) == "Server unavailable: worker draining"
    assert hdrs.get("connection", "").lower() == "close", hdrs
    results = [h.response() for h in holders]
    assert [r[0] for r in results] == [200, 200, 200] and all(r[3] for r in results), results
    assert ad.proc.p.wait(20) == 0
    assert any("drained" in line for line in ad.proc.lines), ad.proc.lines[-5:]
    mock.stop()


def test_drain_timeout_and_second_signal():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--drain-timeout-ms", "300")
    holders = ad.fill(2, queued=0, max_tokens=1000)
    ad.proc.p.send_signal(signal.SIGTERM)
    assert ad.proc.p.wait(20) == 0
    assert any("cancelled 2 requests" in line for line in ad.proc.lines), ad.proc.lines[-5:]
    for h in holders:
        status, hdrs = h.read_head()
        body, complete = h.read_body(hdrs)
        assert not complete, "a cancelled stream must not end cleanly"
    wait_for(lambda: mock.metrics()["admit_mock_requests_in_flight"] == 0, what="engine idle")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--drain-timeout-ms", "60000")
    holders = ad.fill(1, queued=0, max_tokens=1000)
    ad.proc.p.send_signal(signal.SIGTERM)
    ad.proc.wait_line("draining", 10)
    ad.proc.p.send_signal(signal.SIGTERM)
    assert ad.proc.p.wait(20) == 0
    for h in holders:
        h.close()
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
    mock = Mock("--speedup-ratio", "0")
    d = tempfile.mkdtemp()
    path = os.path.join(d, "admitd.yaml")

    def write(text):
        with open(path, "w") as f:
            f.write(text)

    # Bad files: exit 2 with file:line:column.
    for text, want in (("engine_request_limit: 2\nbogus: 1\n", ":2:1: unknown setting 'bogus'"),
                       ("engine_request_limit: two\n", ":1:23: engine_request_limit: 'two'"),
                       ("listen: [1, 2]\n", ":1:9: expected a single value for 'listen'"),
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
    write("engine_request_limit: 6\nrequest_queue_limit: 8\nheartbeat_ms: 5000\n")
    ad.proc.p.send_signal(signal.SIGHUP)
    ad.proc.wait_line("configuration reloaded", 10)
    assert any("heartbeat_ms changed; it takes effect after a restart" in x
               for x in ad.proc.lines)
    m = ad.metrics()
    assert m["admitd_engine_request_limit"] == 6 and m["admitd_limit_changes_total"] == 1, m
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
    tap.run("graceful drain: nothing lost, new requests refused, exit 0", test_graceful_drain_loses_nothing)
    tap.run("drain timeout cancels what remains; a second signal exits at once",
            test_drain_timeout_and_second_signal)
    tap.run("JSON logs and the access log", test_json_logs_and_access_log)
    tap.run("config file: errors at file:line:column, precedence, SIGHUP reload",
            test_config_file_precedence_and_reload)
    tap.done()
