"""How admitd relays what an engine's reply head says about its own framing and connection,
against scripted engines on loopback (issue 23, items 5, 6 and 9):

- "Connection: close" (or an HTTP/1.0 reply without keep-alive) ends the engine connection's
  use: no second request is ever written on it (RFC 9112 9.6), whether the engine then closes
  it at once (uvicorn and nginx do) or keeps it open, and waiters dispatched as it ends get a
  fresh connection rather than a 503 "closed the connection before answering".
- A reply head and a broken chunked body that arrive together give the client a well-formed
  502 (nothing was written yet); a body that breaks after the head went out gives a cleanly
  cut stream (an SSE client also gets an error event), never a head cut short or a bare close.
- A repeated Content-Length of one value reaches the client as one field; differing values
  are a 502.
- When the drain timeout runs out, requests still queued get the drain's 503, not a close.

Where several clients are in flight at once, each sends a marker of its own, the scripted
engine echoes it as the mock does (fake_reply_head, own_completion), and each client's bytes
are checked to be its own answer (harness's check_own).
"""

import json
import signal
import socket
import struct
import threading
import time

from harness import (Admitd, LoopbackServer, Mock, RawClient, Tap, chat_body, check_own,
                     error_message, fake_reply_head, marker, only_answer, own_completion,
                     own_response)


def read_request(conn, buf):
    """Reads one request (head and Content-Length body) from conn: (head, body, rest), or None
    at a close."""
    while b"\r\n\r\n" not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    n = 0
    for ln in head.split(b"\r\n")[1:]:
        k, _, v = ln.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v.strip())
    while len(rest) < n:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return head, rest[:n], rest[n:]


class ScriptedEngine:
    """Answers every POST with reply(index, request head, body) -> [(delay_s, bytes), ...]
    then, per `after`:
    "close" (close the connection), "reset" (close it with an RST), "keep" (keep reading requests on it) or "hold" (say
    nothing more and keep it open). GETs (admitd's probes) get an empty 404 and the
    connection goes on. Counts POSTs per connection, so a second request on a connection
    that was to carry none is seen."""

    def __init__(self, reply, after="keep"):
        self.reply, self.after = reply, after
        self.lock = threading.Lock()
        self.posts = 0
        self.per_conn = []  # POSTs seen on each connection that carried one
        self.server = LoopbackServer(self._serve)
        self.url = self.server.url

    def _serve(self, conn):
        buf, mine = b"", 0
        try:
            while True:
                got = read_request(conn, buf)
                if got is None:
                    return
                head, body, buf = got
                if not head.startswith(b"POST "):
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                with self.lock:
                    i = self.posts
                    self.posts += 1
                    if mine == 0:
                        self.per_conn.append(0)
                        slot = len(self.per_conn) - 1
                    self.per_conn[slot] += 1
                mine += 1
                for delay, data in self.reply(i, head, body):
                    if delay:
                        time.sleep(delay)
                    conn.sendall(data)
                if self.after in ("close", "reset"):
                    if self.after == "reset":
                        # After admitd has read what was sent: an RST that overtook the
                        # bytes would make the kernel drop them, and the case would be
                        # "closed before answering" (503), not the one under test.
                        time.sleep(0.2)
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                        struct.pack("ii", 1, 0))
                    conn.close()
                    return
                if self.after == "hold":
                    while conn.recv(65536):
                        with self.lock:
                            self.per_conn[slot] += 1  # anything more is a second request
                    return
        except OSError:
            return

    def stop(self):
        self.server.stop()


def json_reply(i, req, extra=b"", version=b"1.1"):
    """The i-th answer, to the request whose head is req: it echoes the request's marker (in
    the reply head and as the completion id) as the mock engine does."""
    body = json.dumps({"id": own_completion(req), "object": "chat.completion",
                       "choices": [{"index": 0, "message": {"role": "assistant",
                                                            "content": "answer %d" % i}}]}).encode()
    return (b"HTTP/" + version + b" 200 OK\r\nContent-Type: application/json\r\n" + extra +
            fake_reply_head(req).encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def admitd(url, *args):
    return Admitd(url, "--health-interval-ms", "60000", "--engine-metrics-interval-ms", "3600000",
                  "--engine-models-interval-ms", "0", *args)


def post(addr, m, stream=False):
    """A client with marker m (its X-Request-Id) that sends one chat request."""
    c = RawClient(addr, marker=m)
    c.post("/v1/chat/completions", chat_body(max_tokens=4, stream=stream))
    return c


def served_one_per_connection(after, extra, version=b"1.1"):
    """N=1 and a queue of 4: five clients at once against an engine that answers each request
    with extra (a Connection: close) and then `after`. Every client gets its own 200 (its
    marker echoed, check_own), and no engine connection carries a second request."""
    eng = ScriptedEngine(lambda i, req, body: [(0.05, json_reply(i, req, extra, version))],
                         after)
    try:
        ad = admitd(eng.url, "--engine-request-limit", "1", "--request-queue-limit", "4")
        clients = [post(ad.addr, marker(k)) for k in range(5)]
        answers = [only_answer(c) for c in clients]
        for c in clients:
            check_own(c)
        assert [a[0] for a in answers] == [200] * 5, [(a[0], a[2][:120]) for a in answers]
        contents = sorted(json.loads(a[2])["choices"][0]["message"]["content"] for a in answers)
        assert contents == ["answer %d" % k for k in range(5)], contents
        assert eng.posts == 5, eng.posts
        assert eng.per_conn == [1] * 5, eng.per_conn
        m = ad.wait_idle()
        assert m['admitd_requests_total{outcome="unavailable"}'] == 0, m
        ad.stop()
    finally:
        eng.stop()


def test_connection_close_engine_closes():
    served_one_per_connection("close", b"Connection: close\r\n")


def test_connection_close_engine_keeps_it_open():
    served_one_per_connection("hold", b"Connection: close\r\n")


def test_http10_reply_without_keep_alive():
    served_one_per_connection("close", b"", version=b"1.0")


def test_keep_alive_still_reused():
    """The control: an engine that keeps its connections gets several requests on one."""
    eng = ScriptedEngine(lambda i, req, body: [(0, json_reply(i, req))], "keep")
    try:
        ad = admitd(eng.url, "--engine-request-limit", "1")
        for k in range(4):
            c = post(ad.addr, "k%d" % k)
            assert only_answer(c)[0] == 200
            c.close()
        assert eng.posts == 4 and max(eng.per_conn) > 1, eng.per_conn
        ad.stop()
    finally:
        eng.stop()


SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
PLAIN_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
EVENT = b'data: {"id":"cmpl-1","choices":[{"delta":{"content":"hi"}}]}\n\n'
GOOD_CHUNK = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)
BROKEN = {
    "bad size": b"zz\r\nhello\r\n",
    "bad chunk end": b"5\r\nhelloXY",
    "bad trailer": GOOD_CHUNK + b"0\r\nthis line has no colon\r\n\r\n",
}


def expect_502(ad, marker, stream):
    c = post(ad.addr, marker, stream)
    status, hdrs, body = only_answer(c)
    assert status == 502, (status, hdrs, body[:200])
    assert error_message(body) == "Bad gateway: engine sent an invalid response", body
    assert hdrs["x-admitd-reason"] == "engine-error", hdrs
    assert hdrs.get("content-type") == "application/json", hdrs


def test_head_and_broken_body_in_one_read():
    """Head and broken body in one write (so in one read), the engine then closing or
    resetting: nothing was written to the client, which gets a clean 502 (SSE or not)."""
    n = 0
    for name, broken in BROKEN.items():
        for head in (SSE_HEAD, PLAIN_HEAD):
            for after in ("close", "reset"):
                eng = ScriptedEngine(lambda i, req, body: [(0, head + broken)], after)
                try:
                    ad = admitd(eng.url, "--engine-request-limit", "1")
                    expect_502(ad, "one-read", head is SSE_HEAD)
                    m = ad.wait_idle()
                    assert m['admitd_requests_total{outcome="upstream_error"}'] == 1, (name, m)
                    ad.stop()
                    n += 1
                finally:
                    eng.stop()
    assert n == 12


def test_broken_body_after_the_head_cuts_cleanly():
    """The head (and an event) went out first, the broken bytes come 0.3 s later, then a close
    or a reset: the client has the head, then sees a visible cut (an SSE client an error
    event first, in a well-formed chunk), never a clean end."""
    for name in ("bad size", "bad trailer"):
        for head in (SSE_HEAD, PLAIN_HEAD):
            for after in ("close", "reset"):
                script = [(0, head + GOOD_CHUNK), (0.3, BROKEN[name].replace(GOOD_CHUNK, b""))]
                eng = ScriptedEngine(lambda i, req, body: script, after)
                try:
                    ad = admitd(eng.url, "--engine-request-limit", "1")
                    c = post(ad.addr, "after", head is SSE_HEAD)
                    status, hdrs = c.read_head()
                    assert status == 200, (name, status, hdrs)
                    body, complete = c.read_body(hdrs)
                    assert not complete, (name, after, body)
                    assert body.startswith(EVENT), (name, after, body)
                    if head is SSE_HEAD:
                        assert body[len(EVENT):].startswith(b"event: error\n"), (name, body)
                    ad.wait_idle()
                    ad.stop()
                finally:
                    eng.stop()


def test_repeated_content_length():
    for extra in (b"Content-Length: 5\r\nContent-Length: 5\r\n", b"Content-Length: 5, 5\r\n",
                  b"Content-Length: 5,5\r\n"):
        reply = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra +
                 b"\r\n{\"a\"}")
        eng = ScriptedEngine(lambda i, req, body: [(0, reply)], "keep")
        try:
            ad = admitd(eng.url, "--engine-request-limit", "1")
            c = post(ad.addr, "cl")
            status, hdrs, body = only_answer(c)
            assert status == 200 and body == b'{"a"}', (extra, status, body)
            lines = [n for n in c.header_names if n == "content-length"]
            assert lines == ["content-length"], (extra, c.header_names)
            assert hdrs["content-length"] == "5", (extra, hdrs)
            ad.stop()
        finally:
            eng.stop()
    reply = (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{\"a\"}x")
    eng = ScriptedEngine(lambda i, req, body: [(0, reply)], "keep")
    try:
        ad = admitd(eng.url, "--engine-request-limit", "1")
        expect_502(ad, "cl-differ", False)
        ad.stop()
    finally:
        eng.stop()


def test_drain_timeout_answers_the_queued():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "3",
                "--drain-timeout-ms", "400")
    holders = ad.fill(3, queued=2, max_tokens=1000)
    status, hdrs = holders[0].read_head()
    assert status == 200
    ad.proc.p.send_signal(signal.SIGTERM)
    body, complete = holders[0].read_body(hdrs)
    assert not complete, "the running stream is cut, never ended cleanly"
    check_own(holders[0])
    for h in holders[1:]:
        status, hdrs, body, complete = own_response(h)
        assert status == 503 and complete, (status, body)
        assert error_message(body) == "Server unavailable: worker draining", body
        assert hdrs["connection"].lower() == "close", hdrs
        assert hdrs["x-admitd-reason"] == "draining", hdrs
        assert int(hdrs["retry-after"]) >= 1, hdrs
    assert ad.proc.p.wait(20) == 0
    ad.proc.wait_line(r"drain timeout: cancelled 3 requests still in flight \(2 still queued", 10)
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("Connection: close, then the engine closes: every waiter served, one request a "
            "connection", test_connection_close_engine_closes)
    tap.run("Connection: close, and the engine keeps the socket open: no second request on it",
            test_connection_close_engine_keeps_it_open)
    tap.run("an HTTP/1.0 reply without keep-alive is not reused", test_http10_reply_without_keep_alive)
    tap.run("a kept-alive engine connection is still reused", test_keep_alive_still_reused)
    tap.run("a head and a broken chunked body in one read: a clean 502",
            test_head_and_broken_body_in_one_read)
    tap.run("a body broken after the head: a visibly cut stream",
            test_broken_body_after_the_head_cuts_cleanly)
    tap.run("a repeated Content-Length goes out once; differing values: 502",
            test_repeated_content_length)
    tap.run("the drain timeout answers the queued 503 and cuts the running",
            test_drain_timeout_answers_the_queued)
    tap.done()
