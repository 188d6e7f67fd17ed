"""Engine failures: unreachable (503), closed early (503), silent (504), garbage (502), /ready,
and slots freed every time. Each answer is admitd's exact text and X-Admitd-Reason, and the
only thing on its connection."""

import math
import socket

from harness import (Admitd, LoopbackServer, Mock, RawClient, Tap, chat_body, check_own,
                     error_message, only_answer, request, wait_for)


def closed_port():
    """A loopback port that nothing listens on (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def retry_after_formula(waiting, releases):
    """README: ceil((waiting + 1) / releases per second over 10 s), clamped to 1..60; 10 with
    no release in the window."""
    if releases == 0:
        return 10
    return min(60, max(1, math.ceil((waiting + 1) / (releases / 10.0))))


class FakeEngine:
    """A loopback listener that reads each request's head and then does what `answer` says:
    "close" (hang up without a byte), "garbage" (bytes that are not HTTP, then close) or
    "silent" (keep the connection and say nothing). Every socket operation has a timeout.
    Records the request lines it saw."""

    def __init__(self, answer):
        self.answer = answer
        self.lines = []
        self.server = LoopbackServer(self._serve)
        self.url = self.server.url

    def _serve(self, conn):
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        if data:
            self.lines.append(data.split(b"\r\n", 1)[0].decode("latin-1"))
        if self.answer == "silent" and data:
            return  # held open: the server closes it at stop()
        if self.answer == "garbage" and data:
            try:
                conn.sendall(b"this is not HTTP at all\r\n\r\n")
            except OSError:
                pass
        conn.close()

    def posts(self):
        return [ln for ln in self.lines if ln.startswith("POST ")]

    def stop(self):
        self.server.stop()


def one_request(ad, max_tokens=8):
    c = RawClient(ad.addr)
    c.post("/v1/chat/completions", chat_body(max_tokens=max_tokens))
    status, hdrs, body = only_answer(c)
    c.close()
    return status, hdrs, body


def test_engine_down_gives_503_and_frees_the_slot():
    port = closed_port()
    ad = Admitd("http://127.0.0.1:%d" % port, "--engine-request-limit", "1",
                "--request-queue-limit", "2", "--health-interval-ms", "100")
    # More requests than N+Q, one after another: each must free its slot, or the later
    # ones would get 529. Each one's slot is released after its answer, so the i-th answer's
    # Retry-After is the formula's value for i releases (nobody waiting): 10, 10, 5, 4, ...
    got, want = [], []
    for i in range(12):
        status, hdrs, body = one_request(ad)
        assert status == 503, (status, body)
        assert error_message(body) == \
            "Server unavailable: engine at 127.0.0.1:%d is unreachable" % port, body
        assert hdrs["x-admitd-reason"] == "engine-unavailable", hdrs
        assert hdrs.get("connection", "").lower() != "close", hdrs
        got.append(int(hdrs["retry-after"]))
        want.append(retry_after_formula(0, i))
    assert got == want, (got, want)
    assert len(set(want)) >= 5, want  # the sequence tells the formula from a constant
    m = ad.metrics()
    assert m["dynamo_engine_request"] == 0 and m["dynamo_request_queue"] == 0, m
    assert m['admitd_requests_total{outcome="unavailable"}'] == 12, m
    assert m['admitd_upstream_errors_total{kind="connect"}'] == 12, m
    assert m["dynamo_rejection_request_total"] == 0, m
    assert request(ad.maddr, "GET", "/ready")[0] == 503
    assert request(ad.maddr, "GET", "/health")[0] == 200
    ad.stop()


def test_engine_closing_before_answering_gives_503():
    eng = FakeEngine("close")
    try:
        ad = Admitd(eng.url, "--engine-request-limit", "1", "--health-interval-ms", "60000")
        for i in range(2):  # the slot is freed: the second one is served (badly) too
            status, hdrs, body = one_request(ad)
            assert status == 503, (status, body)
            assert error_message(body) == "Server unavailable: engine at %s closed the " \
                "connection before answering" % eng.url[len("http://"):], body
            assert hdrs["x-admitd-reason"] == "engine-unavailable", hdrs
            assert int(hdrs["retry-after"]) == retry_after_formula(0, i), hdrs
        assert len(eng.posts()) == 2, eng.lines
        m = ad.metrics()
        assert m["dynamo_engine_request"] == 0, m
        assert m['admitd_upstream_errors_total{kind="broken"}'] == 2, m
        assert m['admitd_requests_total{outcome="unavailable"}'] == 2, m
        ad.stop()
    finally:
        eng.stop()


def test_engine_killed_with_queue_then_back():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2",
                "--health-interval-ms", "50")
    wait_for(lambda: request(ad.maddr, "GET", "/ready")[0] == 200, what="ready")
    clients = ad.fill(3, queued=2, max_tokens=500)
    status, hdrs = clients[0].read_head()
    assert status == 200
    mock.proc.kill()
    # The one in the slot sees a broken stream and the connection close; the queued ones
    # get 503 as they reach a slot, and nothing after it.
    body, complete = clients[0].read_body(hdrs)
    assert not complete and b"event: error" in body, body[-200:]
    assert b"[DONE]" not in body
    results = [only_answer(c) for c in clients[1:]]
    for c in clients:  # each with its own marker (Admitd.fill): nothing of another's
        check_own(c)
    assert [r[0] for r in results] == [503, 503], [r[0] for r in results]
    for r in results:
        assert r[1]["x-admitd-reason"] == "engine-unavailable", r[1]
    m = ad.wait_idle()
    assert m["dynamo_request_queue"] == 0, m
    wait_for(lambda: request(ad.maddr, "GET", "/ready")[0] == 503, what="not ready")
    ad.stop()


def test_silent_engine_gives_504():
    eng = FakeEngine("silent")
    try:
        ad = Admitd(eng.url, "--engine-request-limit", "1", "--upstream-timeout-ms", "300",
                    "--health-interval-ms", "60000")
        status, hdrs, body = one_request(ad)
        assert status == 504, (status, body)
        assert error_message(body) == "Gateway timeout: engine sent nothing for 300 ms", body
        assert hdrs["x-admitd-reason"] == "engine-timeout", hdrs
        assert "retry-after" not in hdrs, hdrs  # not an overload: the README's table
        assert len(eng.posts()) == 1, eng.lines
        m = ad.metrics()
        assert m["dynamo_engine_request"] == 0, m
        assert m['admitd_upstream_errors_total{kind="timeout"}'] == 1, m
        ad.stop()
    finally:
        eng.stop()


def test_engine_garbage_gives_502():
    eng = FakeEngine("garbage")
    try:
        ad = Admitd(eng.url, "--engine-request-limit", "1", "--health-interval-ms", "60000")
        status, hdrs, body = one_request(ad)
        assert status == 502, (status, body)
        assert error_message(body) == "Bad gateway: engine sent an invalid response", body
        assert hdrs["x-admitd-reason"] == "engine-error", hdrs
        assert "retry-after" not in hdrs, hdrs
        assert len(eng.posts()) == 1, eng.lines
        m = ad.metrics()
        assert m["dynamo_engine_request"] == 0
        assert m['admitd_upstream_errors_total{kind="invalid"}'] == 1, m
        assert m['admitd_requests_total{outcome="upstream_error"}'] == 1, m
        ad.stop()
    finally:
        eng.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("engine down: 503 Server unavailable, Retry-After estimated, the slot freed",
            test_engine_down_gives_503_and_frees_the_slot)
    tap.run("an engine closing before it answers gives 503",
            test_engine_closing_before_answering_gives_503)
    tap.run("engine killed under load: broken stream, 503s, slots freed, not ready",
            test_engine_killed_with_queue_then_back)
    tap.run("a silent engine gives 504", test_silent_engine_gives_504)
    tap.run("an engine answering garbage gives 502", test_engine_garbage_gives_502)
    tap.done()
