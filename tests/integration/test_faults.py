"""Faults and hostile clients. After each: admitd still serves, its gauges return to 0, the
engine never ran more than N at once, every client got exactly one answer, and RSS stays
near where it started."""

import json
import os
import socket
import time

from harness import (Admitd, Mock, RawClient, Tap, chat_body, raw_request_bytes, request,
                     wait_for)


def rss_kb(proc):
    with open("/proc/%d/status" % proc.p.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def invariants(ad, mock, n):
    """The promises that must hold after any fault."""
    m = ad.wait_idle()
    assert m["dynamo_request_queue"] == 0, m
    if mock is not None:
        assert mock.metrics()["admit_mock_requests_running_peak"] <= n
        status, _, _ = request(ad.addr, "POST", "/v1/chat/completions", chat_body(max_tokens=1))
        assert status == 200, status


def test_request_smuggling_refused():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2")
    host = b"Host: x\r\n"
    cases = [
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}x",
        b"Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"Transfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n{}",
        b"Content-Length: +2\r\n\r\n{}",
        b"Transfer-Encoding : chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    ]
    for tail in cases:
        c = RawClient(ad.addr)
        c.send(b"POST /v1/chat/completions HTTP/1.1\r\n" + host + tail)
        status, hdrs = c.read_head()
        assert status == 400, (tail, status)
        c.close()
    time.sleep(0.2)
    assert mock.metrics()["admit_mock_requests_total"] == 0  # nothing was forwarded
    invariants(ad, mock, 2)
    ad.stop()
    mock.stop()


def test_slowloris_and_silent_clients_are_dropped():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--client-timeout-ms", "500")
    slow = RawClient(ad.addr)
    slow.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # and never finishes
    idle = RawClient(ad.addr)  # connects and says nothing
    for c in (slow, idle):
        try:
            data = c.s.recv(100)
        except (ConnectionError, socket.timeout):
            data = b""
        assert data == b"" or data.startswith(b"HTTP/1.1 408"), data
        c.close()
    invariants(ad, mock, 2)
    ad.stop()
    mock.stop()


def test_client_that_stops_reading():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--client-timeout-ms", "1000",
                "--stream-buffer-bytes", "65536")
    c = RawClient(ad.addr)
    c.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.post("/v1/chat/completions", chat_body(max_tokens=100000))  # about 15 MB of SSE
    time.sleep(3)  # it never reads: backpressure, then the write timeout
    m = ad.wait_idle()
    assert m['admitd_client_cancellations_total{stage="streaming"}'] == 1, m
    # At speedup 0 the engine makes all 100000 tokens in well under a second if someone
    # reads them. admitd stopped reading once the client fell behind, so it made few.
    made = mock.metrics()['vllm:generation_tokens_total{engine="0",model_name="mock-model"}']
    assert made < 50000, "the engine generated %d tokens for a client that reads none" % made
    print("# engine generated %d of 100000 tokens before admitd gave up on the client" % made)
    c.close()
    wait_for(lambda: mock.metrics()["admit_mock_requests_in_flight"] == 0, what="engine idle")
    invariants(ad, mock, 1)
    ad.stop()
    mock.stop()


def test_pipelined_and_junk():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    c = RawClient(ad.addr)
    req = raw_request_bytes(ad.addr, "/v1/chat/completions", chat_body(max_tokens=2))
    c.send(req * 3 + b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    statuses = [c.response()[0] for _ in range(4)]
    assert statuses == [200, 200, 200, 200], statuses
    c.close()
    c = RawClient(ad.addr)
    c.send(req + b"\x00\xff junk that is not HTTP\r\n\r\n")
    assert c.response()[0] == 200
    status, _ = c.read_head()
    assert status == 400
    c.close()
    invariants(ad, mock, 1)
    ad.stop()
    mock.stop()


def test_engine_killed_before_first_byte_and_restarted():
    mock = Mock("--speedup-ratio", "0.001")  # prefill of a few seconds: no byte for a while
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    clients = []
    for _ in range(3):  # not streamed: no byte comes back before the prefill ends
        c = RawClient(ad.addr)
        c.post("/v1/chat/completions", chat_body(max_tokens=5, stream=False))
        clients.append(c)
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 2, what="two queued")
    wait_for(lambda: mock.metrics()["admit_mock_requests_in_flight"] == 1, what="engine busy")
    port = int(mock.url.rsplit(":", 1)[1])
    mock.proc.kill()
    statuses = [c.response()[0] for c in clients]  # exactly one answer each, none hangs
    assert statuses == [503, 503, 503], statuses
    invariants(ad, None, 1)
    # The engine comes back on the same port: admitd serves again without a restart.
    from harness import Proc, MOCK
    back = Proc([MOCK, "--listen", "127.0.0.1:%d" % port, "--speedup-ratio", "0"],
                ready=r"listening on", name="mock2")
    wait_for(lambda: request(ad.addr, "POST", "/v1/chat/completions",
                             chat_body(max_tokens=1))[0] == 200, 10, "served again")
    back.stop_clean()
    ad.stop()


def test_many_connections_at_once():
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    n = min(int(os.environ.get("FAULT_CONNECTIONS", "2000")), soft - 200)
    mock = Mock("--token-interval-ms", "20")
    ad = Admitd(mock.url, "--engine-request-limit", "8", "--request-queue-limit", "16",
                "--client-timeout-ms", "60000")
    base = rss_kb(ad.proc)
    socks = []
    for _ in range(n):
        s = socket.create_connection(ad.addr)
        socks.append(s)
    body = json.dumps(chat_body(max_tokens=3)).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    for s in socks:
        s.sendall(head + body)
    counts = {}
    for s in socks:
        s.settimeout(30)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        status = int(data.split()[1]) if data else 0
        counts[status] = counts.get(status, 0) + 1
    grown = rss_kb(ad.proc) - base
    for s in socks:
        s.close()
    assert set(counts) <= {200, 529} and counts.get(200, 0) >= 24, counts
    assert sum(counts.values()) == n, counts
    print("# %d connections: %s; RSS grew %d kB (%.1f kB per connection)" % (
        n, counts, grown, grown / float(n)))
    invariants(ad, mock, 8)
    ad.stop()
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("request smuggling attempts are refused, not forwarded", test_request_smuggling_refused)
    tap.run("slowloris and silent clients are dropped", test_slowloris_and_silent_clients_are_dropped)
    tap.run("a client that stops reading does not make admitd buffer", test_client_that_stops_reading)
    tap.run("pipelined requests and junk after a request", test_pipelined_and_junk)
    tap.run("engine killed before the first byte, then restarted",
            test_engine_killed_before_first_byte_and_restarted)
    tap.run("many connections at once", test_many_connections_at_once)
    tap.done()
