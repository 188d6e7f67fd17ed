"""Streaming end to end: SSE unbuffered, cancellation reaches the engine, broken streams."""

import json
import os
import signal
import time

from harness import (Admitd, Mock, RawClient, Tap, chat_body, check_own, close_own, marker,
                     own_response, request, tcp_sockets, wait_for)

TOKENS = 'vllm:generation_tokens_total{engine="0",model_name="mock-model"}'


def test_sse_events_arrive_as_generated():
    gap_ms, tokens = 100, 10
    mock = Mock("--token-interval-ms", str(gap_ms), "--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2")
    c = RawClient(ad.addr)
    c.post("/v1/chat/completions", chat_body(max_tokens=tokens))
    arrivals = []
    status, hdrs, body, complete = c.response(
        on_data=lambda piece, t: arrivals.extend([t] * piece.count(b"data: ")))
    assert status == 200 and complete
    assert hdrs["content-type"].startswith("text/event-stream")
    events = [e for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"data: [DONE]", events[-1]
    # One chunk per token, each arriving on its own: a buffering proxy would deliver them
    # together at the end. The spread is compared with the engine's own pacing, so a slow
    # machine makes it larger, never smaller.
    assert len(arrivals) >= tokens, arrivals
    spread = arrivals[tokens - 1] - arrivals[0]
    assert spread >= (tokens - 2) * gap_ms / 1000.0 * 0.8, spread
    # Each one on its own: the median gap between arrivals is near the engine's (a buffering
    # proxy delivers most of them together, gaps near 0). The median, not every gap, so that
    # one stall of a busy machine (two events read at once) cannot fail it.
    gaps = sorted(b - a for a, b in zip(arrivals[:tokens - 1], arrivals[1:tokens]))
    assert gaps[len(gaps) // 2] >= gap_ms / 1000.0 * 0.5, gaps
    ad.stop()
    mock.stop()


def test_non_streaming_and_completions():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2")
    status, hdrs, body = request(ad.addr, "POST", "/v1/chat/completions",
                                 chat_body(max_tokens=5, stream=False))
    assert status == 200, body
    obj = json.loads(body)
    assert obj["usage"]["completion_tokens"] == 5, obj
    assert obj["choices"][0]["message"]["content"], obj
    status, _, body = request(ad.addr, "POST", "/v1/completions?x=1",
                              {"model": "m", "prompt": "hi", "max_tokens": 3})
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 3, body
    # The engine's own 4xx passes through untouched.
    status, _, body = request(ad.addr, "POST", "/v1/chat/completions", b"{not json",
                              headers={"Content-Type": "application/json"})
    assert status == 400, status
    status, _, _ = request(ad.addr, "GET", "/no/such/path")
    assert status == 404
    ad.stop()
    mock.stop()


def test_engine_connections_are_reused():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--health-interval-ms", "60000")
    for i in range(40):
        stream = i % 2 == 0
        status, _, body = request(ad.addr, "POST", "/v1/chat/completions",
                                  chat_body(max_tokens=3, stream=stream))
        assert status == 200, body
    # 40 requests one after another: one engine connection serves them all (keep-alive);
    # admitd's readiness probe, its metrics scraper, its /v1/models reader and this test's
    # scrape have one each. Without reuse it would be 44.
    engine = mock.metrics()
    assert engine["admit_mock_requests_total"] == 40, engine
    assert engine["admit_mock_connections_total"] <= 5, engine
    ad.stop()
    mock.stop()


def test_client_leaving_mid_stream_cancels_the_engine():
    mock = Mock("--token-interval-ms", "30")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    a = RawClient(ad.addr, marker=marker(0))
    a.post("/v1/chat/completions", chat_body(max_tokens=1000))
    status, hdrs = a.read_head()
    assert status == 200
    b = RawClient(ad.addr, marker=marker(1))
    b.post("/v1/chat/completions", chat_body(max_tokens=3))
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 1, what="b queued")
    check_own(a)
    a.reset()
    # The engine sees the cancel and stops; the slot goes to b at once.
    wait_for(lambda: mock.metrics()["admit_mock_requests_cancelled_total"] == 1,
             what="engine saw the cancel")
    status, _, body, complete = own_response(b)
    assert status == 200 and complete
    m = ad.wait_idle()
    assert m['admitd_client_cancellations_total{stage="streaming"}'] == 1, m
    assert mock.metrics()["admit_mock_requests_in_flight"] == 0
    ad.stop()
    mock.stop()


def test_client_leaving_before_first_byte_cancels_the_engine():
    mock = Mock("--token-interval-ms", "30")
    ad = Admitd(mock.url, "--engine-request-limit", "1")
    a = RawClient(ad.addr)
    a.post("/v1/chat/completions", chat_body(max_tokens=1000, stream=False))
    wait_for(lambda: mock.metrics()["admit_mock_requests_in_flight"] == 1, what="engine busy")
    a.close()
    wait_for(lambda: mock.metrics()["admit_mock_requests_cancelled_total"] == 1,
             what="engine saw the cancel")
    m = ad.wait_idle()
    assert m['admitd_client_cancellations_total{stage="waiting"}'] == 1, m
    ad.stop()
    mock.stop()


def engine_sockets_with_request(port):
    """The engine's sockets on port holding an unread request (accepted or still in the
    backlog), from /proc/net/tcp; a close alone queues 1 byte."""
    n = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, state, rx = fields[1], fields[3], int(fields[4].split(":")[1], 16)
            if int(local.split(":")[1], 16) == port and state != "0A" and rx >= 100:
                n += 1
    return n


def test_a_request_cancelled_before_the_engine_read_it_never_runs():
    # admitd closes a cancelled request's engine connection before the next request gets the
    # slot. An engine slow to read finds the cancelled request, its close, and the next one
    # all waiting at once: the mock must not start the first (it would count N+1).
    mock = Mock("--token-interval-ms", "20")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "4",
                "--health-interval-ms", "3600000", "--engine-metrics-interval-ms", "3600000")
    h = RawClient(ad.addr, marker=marker(0))
    h.post("/v1/chat/completions", chat_body(max_tokens=5000))
    assert h.read_head()[0] == 200
    a, b = RawClient(ad.addr, marker=marker(1)), RawClient(ad.addr, marker=marker(2))
    a.post("/v1/chat/completions", chat_body(max_tokens=5000))
    b.post("/v1/chat/completions", chat_body(max_tokens=5000, stream=False))
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 2, what="a and b queued")
    os.kill(mock.proc.p.pid, signal.SIGSTOP)  # the engine reads nothing from here on
    try:
        close_own([h])  # the slot goes to a, whose request reaches the engine's socket
        wait_for(lambda: engine_sockets_with_request(mock.addr[1]) == 1, what="a sent")
        close_own([a])  # a is cancelled before the engine read it; the slot goes to b
        wait_for(lambda: engine_sockets_with_request(mock.addr[1]) == 2, what="b sent")
        m = ad.metrics()
        assert m["dynamo_engine_request"] == 1 and m["dynamo_request_queue"] == 0, m
    finally:
        os.kill(mock.proc.p.pid, signal.SIGCONT)
    # The engine reads h's close, then a's request with its close behind it, then b's.
    wait_for(lambda: mock.metrics()["admit_mock_requests_cancelled_total"] == 2,
             what="engine saw h and a leave")
    engine = mock.metrics()
    assert engine["admit_mock_requests_total"] == 3, engine  # a's request was read
    assert engine["admit_mock_requests_running_peak"] == 1, engine
    assert engine["admit_mock_requests_in_flight"] == 1, engine
    close_own([b])
    ad.wait_idle()
    ad.stop()
    mock.stop()


def test_engine_dying_mid_stream_is_an_error_not_a_clean_end():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1")
    c = RawClient(ad.addr)
    c.post("/v1/chat/completions", chat_body(max_tokens=1000))
    seen = []
    status, hdrs = c.read_head()
    assert status == 200

    def on_data(piece, t):
        seen.append(piece)
        if len(seen) == 3:
            mock.proc.kill()

    body, complete = c.read_body(hdrs, on_data)
    assert not complete, "the stream ended cleanly although the engine died"
    assert b"event: error" in body and b"Bad gateway" in body, body[-300:]
    assert b"[DONE]" not in body
    m = ad.wait_idle()
    assert m['admitd_requests_total{outcome="upstream_error"}'] == 1, m
    assert m['admitd_upstream_errors_total{kind="broken"}'] == 1, m
    ad.stop()


def tcp_queued_bytes(ports):
    """Bytes the kernel holds (send and receive queues) on the TCP sockets with one of ports
    at either end."""
    return sum(recv_q + send_q for _, recv_q, send_q, _, _ in tcp_sockets(ports))


def read_until_last_chunk(c):
    """The raw rest of a chunked reply, up to and with its last chunk, read in big pieces
    (RawClient.read_body copies its buffer per chunk: too slow for megabytes)."""
    data = bytearray(c.buf)
    c.buf = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        chunk = c._recv(1 << 20)
        if not chunk:
            raise EOFError("connection closed after %d bytes" % len(data))
        data += chunk
    return bytes(data)


def dechunk(data):
    """The body of a complete chunked encoding."""
    out, i = [], 0
    while True:
        j = data.index(b"\r\n", i)
        size = int(data[i:j].split(b";")[0], 16)
        if size == 0:
            assert data[j:] == b"\r\n\r\n", data[j:j + 50]
            return b"".join(out)
        out.append(data[j + 2:j + 2 + size])
        assert data[j + 2 + size:j + 4 + size] == b"\r\n"
        i = j + 4 + size


def test_slot_held_until_the_reply_is_written():
    """The engine has finished, but its reply still sits in admitd's buffers for a client that
    reads slowly: the slot stays taken and the next request waits until the client has read
    the last byte."""
    # The reply must be far larger than what the kernel's buffers take of it (admitd's send
    # buffer, which grows up to tcp_wmem's maximum, and the client's receive buffer, which
    # stays at tcp_rmem's default while nothing is read): 100000 tokens are about 19 MB.
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        wmem_max = int(f.read().split()[2])
    with open("/proc/sys/net/ipv4/tcp_rmem") as f:
        rmem_default = int(f.read().split()[1])
    tokens = max(100000, 4 * (wmem_max + rmem_default) // 180)
    mock = Mock("--speedup-ratio", "0")
    # A stream buffer larger than the reply: admitd reads the engine to the end at once.
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2",
                "--stream-buffer-bytes", str(max(64 << 20, tokens * 400)))
    a = RawClient(ad.addr, marker=marker(0))
    a.post("/v1/chat/completions", chat_body(max_tokens=tokens))
    # The engine is done and admitd has read all of it: the engine made every token, nothing
    # is left in the kernel between them, and admitd booked them all (decode blocks of 16
    # tokens) - or, if it is broken, already let the slot go.
    wait_for(lambda: (lambda e: e[TOKENS] == tokens and e["admit_mock_requests_in_flight"] == 0)(
        mock.metrics()), 60, "the engine done with the whole reply")
    wait_for(lambda: tcp_queued_bytes({mock.addr[1]}) == 0 and (lambda m: (
        m['admitd_active_decode_blocks{dp_rank="0"}'] >= tokens // 16 or
        m["dynamo_engine_request"] == 0))(ad.metrics()), 60, "admitd holding the whole reply")
    m = ad.metrics()
    assert m["dynamo_engine_request"] == 1, m
    b = RawClient(ad.addr, marker=marker(1))
    b.post("/v1/chat/completions", chat_body(max_tokens=2))
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 1, what="b queued behind a")
    # a reads a little: still far from the end, so nothing may have moved.
    status, hdrs = a.read_head()
    assert status == 200, status
    while len(a.buf) < 1 << 20:
        a._fill()
    m = ad.metrics()
    assert m["dynamo_engine_request"] == 1 and m["dynamo_request_queue"] == 1, m
    assert mock.metrics()["admit_mock_requests_total"] == 1
    b.s.setblocking(False)
    try:
        early = b.s.recv(1)
    except BlockingIOError:
        early = None
    b.s.setblocking(True)
    b.s.settimeout(30)
    assert early is None, "b was answered while a still read: %r" % early
    # a reads the rest: only then does b get the slot.
    assert hdrs["transfer-encoding"] == "chunked", hdrs
    body = dechunk(read_until_last_chunk(a))
    assert body.endswith(b"data: [DONE]\n\n"), body[-200:]
    assert body.count(b'"content":"tok') == tokens
    status, hdrs, body, complete = own_response(b)
    assert status == 200 and complete, status
    assert float(hdrs["x-admitd-queue-wait-ms"]) > 0, hdrs
    m = ad.wait_idle()
    assert m['admitd_requests_total{outcome="ok"}'] == 2, m
    close_own([a, b])
    ad.stop()
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("SSE events arrive as the engine emits them", test_sse_events_arrive_as_generated)
    tap.run("non-streaming chat and completions pass through", test_non_streaming_and_completions)
    tap.run("engine connections are kept alive and reused", test_engine_connections_are_reused)
    tap.run("a client leaving mid-stream cancels the engine and frees the slot",
            test_client_leaving_mid_stream_cancels_the_engine)
    tap.run("a client leaving before the first byte cancels the engine",
            test_client_leaving_before_first_byte_cancels_the_engine)
    tap.run("a request cancelled before the engine read it never runs there",
            test_a_request_cancelled_before_the_engine_read_it_never_runs)
    tap.run("an engine dying mid-stream gives the client an error, not a clean end",
            test_engine_dying_mid_stream_is_an_error_not_a_clean_end)
    tap.run("a slot is held until the reply is written, not until the engine is done",
            test_slot_held_until_the_reply_is_written)
    tap.done()
