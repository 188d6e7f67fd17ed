"""Hostile or oversized HTTP from clients: clear 4xx answers, the daemon keeps serving."""

import json

from harness import Admitd, Mock, RawClient, Tap, chat_body, request


def test_oversized_headers_and_body():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--max-header-bytes", "4096",
                "--max-body-bytes", "10000")
    c = RawClient(ad.addr)
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 8000 +
           b"\r\nContent-Length: 2\r\n\r\n{}")
    status, _ = c.read_head()
    assert status in (400, 431), status
    c.close()
    body = json.dumps(chat_body(content="x" * 20000)).encode()
    status, _, _ = request(ad.addr, "POST", "/v1/chat/completions", body,
                           headers={"Content-Type": "application/json"})
    assert status == 413, status
    # Still serving, and nothing of the refused requests reached the engine or a slot.
    assert request(ad.addr, "POST", "/v1/chat/completions", chat_body(max_tokens=1))[0] == 200
    m = ad.metrics()
    assert m["dynamo_engine_request"] == 0 and m["dynamo_rejection_request_total"] == 0, m
    assert mock.metrics()["admit_mock_requests_total"] == 1
    ad.stop()
    mock.stop()


def test_bad_request_targets_and_methods():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2")
    c = RawClient(ad.addr)
    c.send(b"POST http://evil.example/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
           b"Content-Length: 2\r\n\r\n{}")
    status, hdrs, body, complete = c.response()
    assert status == 400, status
    assert "path" in json.loads(body)["error"]["message"]
    c.close()
    c = RawClient(ad.addr)
    c.send(b"TRACE / HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _ = c.read_head()
    assert status in (405, 501), status
    c.close()
    c = RawClient(ad.addr)
    c.send(b"\x00\x01garbage\r\n\r\n")
    status, _ = c.read_head()
    assert status == 400, status
    c.close()
    assert request(ad.addr, "GET", "/v1/models")[0] == 200
    assert mock.metrics()["admit_mock_requests_total"] == 0
    ad.stop()
    mock.stop()


def test_metrics_listener():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--health-interval-ms", "50")
    status, hdrs, body = request(ad.maddr, "GET", "/metrics")
    assert status == 200 and hdrs["content-type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    for fam in ("dynamo_rejection_request_total counter", "dynamo_engine_request gauge",
                "dynamo_request_queue gauge", "admitd_queue_wait_seconds histogram",
                "admitd_requests_total counter"):
        assert "# TYPE " + fam in text, fam
    assert request(ad.maddr, "GET", "/health")[0] == 200
    st, _, _ = request(ad.maddr, "GET", "/ready")
    assert st in (200, 503)
    from harness import wait_for
    wait_for(lambda: request(ad.maddr, "GET", "/ready")[0] == 200, what="ready")
    assert request(ad.maddr, "GET", "/nope")[0] == 404
    assert request(ad.maddr, "POST", "/metrics", b"")[0] in (405, 501)
    ad.stop()
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("oversized headers and bodies get 4xx", test_oversized_headers_and_body)
    tap.run("bad request targets, methods and garbage get 4xx/5xx",
            test_bad_request_targets_and_methods)
    tap.run("the metrics listener serves /metrics, /health and /ready", test_metrics_listener)
    tap.done()
