"""Hostile or oversized HTTP from clients: clear 4xx answers, the daemon keeps serving."""

import json
import time

from harness import (Admitd, Mock, RawClient, Tap, chat_body, error_message, only_answer,
                     read_to_close, request, strict_response, tcp_sockets, wait_for)

BIG_HEADER = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 8000 + \
    b"\r\nContent-Length: 2\r\n\r\n{}"


def open_server_sides(port, peers):
    """admitd's ends (local port) of connections from peers that it has not closed yet."""
    return [peer for state, _, _, local, peer in tcp_sockets(peers)
            if local == port and peer in peers and state in ("ESTAB", "CLOSE-WAIT")]


def refusal(c, status):
    """Reads one answer that must be the parser's refusal with this status (an OpenAI-shaped
    error, Connection: close); the caller reads the close."""
    got, hdrs, body, complete = strict_response(c)
    assert got == status and complete, (got, body[:200])
    assert hdrs["content-type"] == "application/json", hdrs
    err = json.loads(body)["error"]
    assert err["code"] == status and err["type"] == "invalid_request_error", body
    assert hdrs.get("connection", "").lower() == "close", hdrs
    return hdrs


def test_oversized_headers_and_body():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--max-header-bytes", "4096",
                "--max-body-bytes", "10000")
    # Headers over the limit: 431 (docs/admitd.md, "What admitd answers itself"), whether they
    # come at once or in pieces that arrive later.
    for pieces in ([BIG_HEADER], [BIG_HEADER[:3000], BIG_HEADER[3000:6000], BIG_HEADER[6000:]]):
        c = RawClient(ad.addr)
        for i, piece in enumerate(pieces):
            if i:
                time.sleep(0.1)  # varied timing: the rest arrives later
            c.send(piece)
        refusal(c, 431)
        rest, _ = read_to_close(c)
        assert rest == b"", rest[:200]
        c.close()
    # A body over the limit: 413, after admitd has read the rest of it (lingering close),
    # so the client sees the answer and not a reset.
    body = json.dumps(chat_body(content="x" * 20000)).encode()
    c = RawClient(ad.addr)
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body) + body)
    refusal(c, 413)
    rest, _ = read_to_close(c)
    assert rest == b"", rest[:200]
    c.close()
    # Still serving, and nothing of the refused requests reached the engine or a slot.
    assert request(ad.addr, "POST", "/v1/chat/completions", chat_body(max_tokens=1))[0] == 200
    m = ad.metrics()
    assert m["dynamo_engine_request"] == 0 and m["dynamo_rejection_request_total"] == 0, m
    assert m["admitd_queue_wait_seconds_count"] == 1, m
    assert mock.metrics()["admit_mock_requests_total"] == 1
    ad.stop()
    mock.stop()


def test_bad_request_targets_and_methods():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2")
    c = RawClient(ad.addr)
    c.send(b"POST http://evil.example/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
           b"Content-Length: 2\r\n\r\n{}")
    status, hdrs, body = only_answer(c)
    assert status == 400, status
    assert error_message(body) == \
        "Bad request: the request target must be a path starting with /", body
    c.close()
    # TRACE, CONNECT and unknown methods: 501, and the connection closes; garbage: 400.
    for line, status in ((b"TRACE / HTTP/1.1", 501), (b"FOO / HTTP/1.1", 501),
                         (b"PROPFIND /v1/models HTTP/1.1", 501),
                         (b"CONNECT example.com:443 HTTP/1.1", 501),
                         (b"\x00\x01garbage", 400)):
        c = RawClient(ad.addr)
        c.send(line + b"\r\nHost: x\r\n\r\n")
        refusal(c, status)
        rest, _ = read_to_close(c)
        assert rest == b"", (line, rest[:200])
        c.close()
    assert request(ad.addr, "GET", "/v1/models")[0] == 200
    assert mock.metrics()["admit_mock_requests_total"] == 0
    m = ad.metrics()
    # The target refused by the proxy, and the five the parser refused.
    assert m['admitd_requests_total{outcome="bad_request"}'] == 6, m
    assert m["admitd_bypass_requests_total"] == 1, m  # the GET; no 501 reached admission
    ad.stop()
    mock.stop()


def test_hangups_in_the_middle_of_a_request():
    """Clients that send part of a request and leave, with a FIN or a reset, at once or a
    moment later: nothing reaches the engine or a slot, and admitd keeps serving."""
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--max-header-bytes", "4096")
    pieces = [b"POST /v1/chat/comp",
              b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
              BIG_HEADER[:3000]]
    peers = []
    for piece in pieces:
        for later in (False, True):
            for rst in (False, True):
                c = RawClient(ad.addr)
                peers.append(c.s.getsockname()[1])
                c.send(piece)
                if later:
                    time.sleep(0.05)  # varied timing: one more byte, later
                    c.send(b"x")
                if rst:
                    c.reset()
                else:
                    c.close()
    assert len(peers) == 12
    # admitd has closed its end of every one of them, and nothing got further.
    wait_for(lambda: not open_server_sides(ad.addr[1], peers), what="admitd closing them all")
    m = ad.metrics()
    assert m["admitd_queue_wait_seconds_count"] == 0 and m["admitd_bypass_requests_total"] == 0, m
    assert sum(v for k, v in m.items() if k.startswith("admitd_requests_total{")) == 0, m
    assert mock.metrics()["admit_mock_requests_total"] == 0
    # A whole request whose client resets while the engine works on it (50 s of tokens):
    # the engine sees the cancel, the slot is free at once.
    c = RawClient(ad.addr)
    c.post("/v1/chat/completions", chat_body(max_tokens=1000, stream=False))
    wait_for(lambda: mock.metrics()["admit_mock_requests_in_flight"] == 1, what="engine busy")
    c.reset()
    wait_for(lambda: mock.metrics()["admit_mock_requests_cancelled_total"] == 1,
             what="the engine told")
    m = ad.wait_idle()
    assert m['admitd_client_cancellations_total{stage="waiting"}'] == 1, m
    status, _, body = request(ad.addr, "POST", "/v1/chat/completions", chat_body(max_tokens=1))
    assert status == 200, body
    m = ad.wait_idle()
    assert m["dynamo_request_queue"] == 0 and m["dynamo_rejection_request_total"] == 0, m
    assert m["admitd_queue_wait_seconds_count"] == 2, m
    assert mock.metrics()["admit_mock_requests_total"] == 2
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
    wait_for(lambda: request(ad.maddr, "GET", "/ready")[0] == 200, what="ready")
    assert ad.metrics()["admitd_engine_ready"] == 1
    assert request(ad.maddr, "GET", "/nope")[0] == 404
    status, _, body = request(ad.maddr, "POST", "/metrics", b"")
    assert status == 405 and json.loads(body)["error"] == "only /admission accepts POST", body
    # The engine gone: /ready turns 503 (and /health stays 200: the process runs).
    mock.stop()
    wait_for(lambda: request(ad.maddr, "GET", "/ready")[0] == 503, what="not ready")
    assert ad.metrics()["admitd_engine_ready"] == 0
    assert request(ad.maddr, "GET", "/health")[0] == 200
    ad.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("headers over the limit get 431, bodies over it 413", test_oversized_headers_and_body)
    tap.run("bad request targets get 400, TRACE, CONNECT and unknown methods 501, garbage 400",
            test_bad_request_targets_and_methods)
    tap.run("clients hanging up in the middle of a request leave nothing behind",
            test_hangups_in_the_middle_of_a_request)
    tap.run("the metrics listener serves /metrics, /health and /ready", test_metrics_listener)
    tap.done()
