"""Engine failures: unreachable (503), silent (504), /ready, and slots freed every time."""

import json
import socket

from harness import (Admitd, Mock, RawClient, Tap, chat_body, error_message, request,
                     wait_for)


def closed_port():
    """A loopback port that nothing listens on (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_engine_down_gives_503_and_frees_the_slot():
    ad = Admitd("http://127.0.0.1:%d" % closed_port(), "--engine-request-limit", "1",
                "--request-queue-limit", "2", "--health-interval-ms", "100")
    # More requests than N+Q, one after another: each must free its slot, or the later
    # ones would get 529.
    for _ in range(6):
        status, hdrs, body = request(ad.addr, "POST", "/v1/chat/completions", chat_body())
        assert status == 503, (status, body)
        assert error_message(body).startswith("Server unavailable:"), body
        assert int(hdrs["retry-after"]) >= 1
    m = ad.metrics()
    assert m["dynamo_engine_request"] == 0 and m["dynamo_request_queue"] == 0, m
    assert m['admitd_requests_total{outcome="unavailable"}'] == 6, m
    assert m['admitd_upstream_errors_total{kind="connect"}'] == 6, m
    assert m["dynamo_rejection_request_total"] == 0, m
    assert request(ad.maddr, "GET", "/ready")[0] == 503
    assert request(ad.maddr, "GET", "/health")[0] == 200
    ad.stop()


def test_engine_killed_with_queue_then_back():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2",
                "--health-interval-ms", "50")
    wait_for(lambda: request(ad.maddr, "GET", "/ready")[0] == 200, what="ready")
    clients = ad.fill(3, queued=2, max_tokens=500)
    status, hdrs = clients[0].read_head()
    assert status == 200
    mock.proc.kill()
    # The one in the slot sees a broken stream; the queued ones get 503 as they reach a slot.
    body, complete = clients[0].read_body(hdrs)
    assert not complete and b"event: error" in body, body[-200:]
    results = [c.response() for c in clients[1:]]
    assert [r[0] for r in results] == [503, 503], [r[0] for r in results]
    m = ad.wait_idle()
    assert m["dynamo_request_queue"] == 0, m
    wait_for(lambda: request(ad.maddr, "GET", "/ready")[0] == 503, what="not ready")
    ad.stop()


def test_silent_engine_gives_504():
    # An engine that accepts and never answers.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    port = srv.getsockname()[1]
    try:
        ad = Admitd("http://127.0.0.1:%d" % port, "--engine-request-limit", "1",
                    "--upstream-timeout-ms", "300")
        status, hdrs, body = request(ad.addr, "POST", "/v1/chat/completions", chat_body())
        assert status == 504, (status, body)
        assert "timeout" in error_message(body).lower()
        m = ad.metrics()
        assert m["dynamo_engine_request"] == 0, m
        assert m['admitd_upstream_errors_total{kind="timeout"}'] == 1, m
        ad.stop()
    finally:
        srv.close()


def test_engine_garbage_gives_502():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    port = srv.getsockname()[1]
    ad = Admitd("http://127.0.0.1:%d" % port, "--engine-request-limit", "1")
    c = RawClient(ad.addr)
    c.post("/v1/chat/completions", chat_body())
    idle = []
    while True:  # the first connection may be the /ready probe's
        conn, _ = srv.accept()
        if conn.recv(65536).startswith(b"POST"):
            break
        idle.append(conn)
    conn.sendall(b"this is not HTTP at all\r\n\r\n")
    conn.close()
    status, hdrs, body, complete = c.response()
    assert status == 502, status
    assert ad.metrics()["dynamo_engine_request"] == 0
    ad.stop()
    for conn in idle:
        conn.close()
    srv.close()


if __name__ == "__main__":
    tap = Tap()
    tap.run("engine down: 503 Server unavailable and the slot is freed",
            test_engine_down_gives_503_and_frees_the_slot)
    tap.run("engine killed under load: broken stream, 503s, slots freed, not ready",
            test_engine_killed_with_queue_then_back)
    tap.run("a silent engine gives 504", test_silent_engine_gives_504)
    tap.run("an engine answering garbage gives 502", test_engine_garbage_gives_502)
    tap.done()
