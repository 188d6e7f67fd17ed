"""Admission end to end: the exact N+Q cap under a burst, rejection shape, queue hang-ups."""

import email.utils
import http.server
import json
import math
import signal
import socket
import threading
import time

from harness import (Admitd, Mock, RawClient, Tap, chat_body, check_own, close_own,
                     error_message, marker, marker_fields, only_answer, own_request,
                     own_response, read_to_close, request, request_marker, wait_for)

OVERLOAD_MSG = "Server overloaded: worker at capacity"
QUEUE_TIMEOUT_MSG = "Server overloaded: request rejected after exceeding the admission queue delay"


def retry_after_formula(waiting, releases):
    """README: ceil((waiting + 1) / releases per second over 10 s), clamped to 1..60; 10 with
    no release in the window."""
    if releases == 0:
        return 10
    return min(60, max(1, math.ceil((waiting + 1) / (releases / 10.0))))


def releases(m):
    """Slot releases so far: every admitted request releases its slot once, when it ends."""
    return int(m["admitd_queue_wait_seconds_count"] - m["dynamo_engine_request"])


def read_events(c, n):
    """Reads until n more SSE events of a streaming reply have arrived (the engine's pace)."""
    target = c.buf.count(b"data: ") + n
    while c.buf.count(b"data: ") < target:
        c._fill()


def burst(addr, count, max_tokens):
    """Sends count streaming requests at once, each client with its own marker and its
    answer checked to be its own; returns [(status, headers, body, complete, header names,
    time sent, time the head arrived)]."""
    clients = [RawClient(addr, timeout=60, marker=marker(i)) for i in range(count)]
    results = [None] * count
    go = threading.Barrier(count)

    def one(i):
        go.wait()
        sent = time.time()
        clients[i].post("/v1/chat/completions", chat_body(max_tokens=max_tokens))
        status, hdrs = clients[i].read_head()
        got = time.time()
        body, complete = clients[i].read_body(hdrs)
        check_own(clients[i])
        results[i] = (status, hdrs, body, complete, clients[i].header_names, sent, got)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for c in clients:
        c.close()
    assert None not in results, "a client failed (its traceback is above)"
    return results


def test_burst_gets_exactly_n_plus_q():
    n, q = 3, 4
    # Streams of 10 tokens 200 ms apart: 2 s, so the whole burst (sent in milliseconds)
    # arrives while the first admitted ones still hold their slots, even on a slow machine.
    mock = Mock("--token-interval-ms", "200")
    ad = Admitd(mock.url, "--engine-request-limit", str(n),
                env={"DYN_DYNAMO_REQUEST_QUEUE_LIMIT": str(q)})
    peaks = {"engine": 0, "queue": 0}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            m = ad.metrics()
            peaks["engine"] = max(peaks["engine"], m["dynamo_engine_request"])
            peaks["queue"] = max(peaks["queue"], m["dynamo_request_queue"])
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        results = burst(ad.addr, 4 * (n + q), max_tokens=10)
    finally:
        stop.set()
        sampler.join()
    ok = [r for r in results if r[0] == 200]
    rejected = [r for r in results if r[0] == 529]
    assert len(ok) == n + q, [r[0] for r in results]
    assert len(rejected) == 3 * (n + q), [r[0] for r in results]
    for status, hdrs, body, complete, names, sent, got in rejected:
        assert error_message(body) == OVERLOAD_MSG, body
        assert hdrs["x-admitd-reason"] == "queue-full", hdrs
        # No slot was released before the streams end: the estimate has no history.
        assert int(hdrs["retry-after"]) == 10, hdrs
        assert hdrs["content-type"] == "application/json", hdrs
        # Our own Date (rendered once a second), exactly one, and the right time: the second
        # it was rendered in lies between sending the request and reading the answer.
        assert names.count("date") == 1, names
        date = email.utils.parsedate_to_datetime(hdrs["date"]).timestamp()
        assert math.floor(sent) <= date <= got, (hdrs["date"], sent, got)
    for status, hdrs, body, complete, names, sent, got in ok:
        assert complete, "a stream was cut"
        assert body.rstrip().endswith(b"data: [DONE]"), body[-200:]
        assert hdrs["content-type"].startswith("text/event-stream"), hdrs
    # The first n got a slot at once; the q others waited for one.
    waits = sorted(float(r[1]["x-admitd-queue-wait-ms"]) for r in ok)
    assert waits[:n] == [0.0] * n and min(waits[n:]) > 0, waits
    engine = mock.metrics()
    assert engine["admit_mock_requests_running_peak"] == n, engine
    assert engine["admit_mock_requests_total"] == n + q, engine
    m = ad.wait_idle()
    assert m["dynamo_rejection_request_total"] == len(rejected), m
    assert m["dynamo_request_queue"] == 0, m
    assert m['admitd_requests_total{outcome="ok"}'] == n + q, m
    assert m['admitd_requests_total{outcome="rejected"}'] == len(rejected), m
    assert peaks["engine"] <= n and peaks["queue"] <= q, peaks
    assert m["admitd_queue_wait_seconds_count"] == n + q, m
    ad.stop()
    mock.stop()


def test_rejection_keeps_connection_usable():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    holders = ad.fill(3, queued=2, max_tokens=40)
    c = RawClient(ad.addr, marker=marker(3))
    c.post("/v1/chat/completions", chat_body())
    status, hdrs, body, complete = c.response()
    assert status == 529 and complete and error_message(body) == OVERLOAD_MSG
    assert hdrs.get("connection", "").lower() != "close", hdrs
    # The same connection serves the next request (GET bypasses the gate).
    c.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n%s\r\n" % marker_fields(c.marker).encode())
    status, hdrs, body, complete = c.response()
    assert status == 200 and json.loads(body)["data"][0]["id"], body
    # A second rejection on the same connection, then a clean close.
    c.post("/v1/chat/completions", chat_body())
    assert c.response()[0] == 529
    close_own([c] + holders)
    wait_for(lambda: ad.metrics()["dynamo_engine_request"] == 0, what="slots drained")
    ad.stop()
    mock.stop()


def test_queued_client_disconnect_frees_its_place():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    a = RawClient(ad.addr, marker=marker(0))
    a.post("/v1/chat/completions", chat_body(max_tokens=60))
    assert a.read_head()[0] == 200
    b, c = RawClient(ad.addr, marker=marker(1)), RawClient(ad.addr, marker=marker(2))
    b.post("/v1/chat/completions", chat_body(max_tokens=2))
    c.post("/v1/chat/completions", chat_body(max_tokens=2))
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 2, what="two queued")
    d = RawClient(ad.addr, marker=marker(3))
    d.post("/v1/chat/completions", chat_body())
    assert own_response(d)[0] == 529
    check_own(b)
    check_own(c)
    # c leaves with a FIN, b with an RST: both places are free at once.
    c.close()
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 1, what="FIN frees a place")
    b.reset()
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 0, what="RST frees a place")
    m = ad.metrics()
    assert m['admitd_client_cancellations_total{stage="queued"}'] == 2, m
    assert m['admitd_requests_total{outcome="cancelled"}'] == 2, m
    e, f = RawClient(ad.addr, marker=marker(4)), RawClient(ad.addr, marker=marker(5))
    e.post("/v1/chat/completions", chat_body(max_tokens=2))
    f.post("/v1/chat/completions", chat_body(max_tokens=2))
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 2, what="newcomers queued")
    close_own([a])
    assert own_response(e)[0] == 200
    assert own_response(f)[0] == 200
    # The engine never saw the two that left.
    engine = mock.metrics()
    assert engine["admit_mock_requests_total"] == 3, engine
    assert engine["admit_mock_requests_running_peak"] == 1, engine
    ad.stop()
    mock.stop()


def cpu_seconds(proc):
    """utime + stime of a process, in seconds (/proc/PID/stat)."""
    import os
    with open("/proc/%d/stat" % proc.p.pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_queued_hangup_behind_pipelined_bytes():
    # A queued client sends a pipelined request after its own, later, then hangs up (FIN, or
    # RST): admitd sees it at once, frees the place, and does not spin on the unread bytes.
    # A small one admitd reads (and keeps for its turn); a larger one does not fit the free
    # room of the connection's buffer and stays partly in the socket, where only the
    # kernel's TCP state shows the hang-up behind it.
    small = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    big = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n" +
           b"x" * 60000)
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    a = RawClient(ad.addr, marker=marker(0))
    a.post("/v1/chat/completions", chat_body(max_tokens=400))
    assert a.read_head()[0] == 200
    for i, (extra, leave) in enumerate(((small, "close"), (small, "reset"), (big, "close"),
                                        (big, "reset"))):
        b = RawClient(ad.addr, marker=marker(1 + i))
        b.post("/v1/chat/completions", chat_body(max_tokens=2))
        wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 1, what="queued")
        time.sleep(0.3)
        b.send(extra)
        time.sleep(0.3)
        check_own(b)
        getattr(b, leave)()
        wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 0, 5,
                 "the place freed after a %s behind pipelined bytes" % leave)
        before = cpu_seconds(ad.proc)
        time.sleep(1.0)
        used = cpu_seconds(ad.proc) - before
        assert used < 0.3, "admitd used %.2f s of CPU in 1 s after a %s" % (used, leave)
    m = ad.metrics()
    assert m['admitd_client_cancellations_total{stage="queued"}'] == 4, m
    close_own([a])
    assert mock.metrics()["admit_mock_requests_total"] == 1
    ad.stop()
    mock.stop()


def test_overload_status_code_env():
    mock = Mock("--token-interval-ms", "50")
    for env, want in (("503", 503), ("99", 529), ("abc", 529), ("", 529), ("429", 429)):
        ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2",
                    env={"DYN_HTTP_OVERLOAD_STATUS_CODE": env})
        holders = ad.fill(3, queued=2, max_tokens=20)
        status, hdrs, body = own_request(ad.addr, "/v1/chat/completions", chat_body(),
                                         marker(3))
        assert status == want, (env, status)
        assert error_message(body) == OVERLOAD_MSG
        close_own(holders)
        ad.stop()
    mock.stop()


def test_get_passes_through_a_full_gate():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    holders = ad.fill(3, queued=2, max_tokens=40)
    for i, path in enumerate(("/v1/models", "/health")):
        status, _, _ = own_request(ad.addr, path, None, marker(3 + i), method="GET")
        assert status == 200, (path, status)
    assert own_request(ad.addr, "/v1/models", None, marker(5), method="HEAD")[0] == 200
    m = ad.metrics()
    assert m["admitd_bypass_requests_total"] == 3, m
    assert m["dynamo_rejection_request_total"] == 0, m
    close_own(holders)
    ad.stop()
    mock.stop()


def test_tokenizer_passes_a_full_gate():
    """POST /tokenize and /detokenize (vLLM's pair) go to the engine outside the gate: with
    N=1 Q=2 held full by long streams the engine's tokens come back, while a generation
    request still gets 529; they have a counter of their own."""
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    holders = ad.fill(3, queued=2, max_tokens=400)
    want = json.loads(request(mock.addr, "POST", "/tokenize", {"prompt": "hello there"})[2])
    assert want["count"] > 0 and len(want["tokens"]) == want["count"], want
    status, _, body = own_request(ad.addr, "/tokenize", {"prompt": "hello there"}, marker(3))
    assert status == 200 and json.loads(body)["tokens"] == want["tokens"], (status, body)
    status, _, body = own_request(ad.addr, "/tokenize?x=1", {
        "model": "mock-model", "messages": [{"role": "user", "content": "hi"}],
        "add_generation_prompt": True}, marker(4))
    assert status == 200 and json.loads(body)["count"] > 0, (status, body)
    # The mock has no /detokenize: its 404 proves the request reached it, past the gate.
    status, _, body = own_request(ad.addr, "/detokenize", {"tokens": [1, 2]}, marker(5))
    assert status == 404 and "no route" in error_message(body), (status, body)
    # A path that only begins like it, and a generation request, are gated: 529.
    for i, path in enumerate(("/tokenizer", "/v1/completions")):
        status, _, body = own_request(ad.addr, path, {"prompt": "x"}, marker(6 + i))
        assert status == 529 and error_message(body) == OVERLOAD_MSG, (path, status, body)
    m = ad.metrics()
    assert m["admitd_tokenizer_requests_total"] == 3, m
    assert m["admitd_bypass_requests_total"] == 0, m
    assert m["dynamo_rejection_request_total"] == 2, m
    assert m["dynamo_engine_request"] == 1 and m["dynamo_request_queue"] == 2, m
    close_own(holders)
    ad.stop()
    mock.stop()


def test_no_limit_means_no_cap():
    mock = Mock("--token-interval-ms", "20")
    ad = Admitd(mock.url, env={"DYN_DYNAMO_REQUEST_QUEUE_LIMIT": "1"})  # ignored without N
    results = burst(ad.addr, 20, max_tokens=20)
    assert [r[0] for r in results] == [200] * 20, [r[0] for r in results]
    assert mock.metrics()["admit_mock_requests_running_peak"] == 20
    m = ad.metrics()
    assert m["dynamo_rejection_request_total"] == 0 and m["admitd_engine_request_limit"] == 0
    ad.stop()
    mock.stop()


def test_reasons_queue_wait_and_retry_after():
    """X-Admitd-Queue-Wait-Ms on gated replies; queue-full, queue-timeout and draining answers
    with their X-Admitd-Reason and the estimated Retry-After."""
    timeout_s = 2.0
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2",
                "--queue-timeout-ms", str(int(timeout_s * 1000)))
    # a gets the slot at once: it waited 0.0.
    a = RawClient(ad.addr, marker=marker(0))
    a.post("/v1/chat/completions", chat_body(max_tokens=400))
    status, hdrs = a.read_head()
    assert status == 200 and hdrs["x-admitd-queue-wait-ms"] == "0.0", (status, hdrs)
    # b waits until a leaves, five tokens later: its header says how long, within what
    # this client saw (queued before t_queued, admitted after t_left, answered by t_done).
    b = RawClient(ad.addr, marker=marker(1))
    t_sent = time.monotonic()
    b.post("/v1/chat/completions", chat_body(max_tokens=2))
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 1, what="b queued")
    t_queued = time.monotonic()
    read_events(a, 5)
    t_left = time.monotonic()
    check_own(a)
    a.reset()
    status, hdrs, body = only_answer(b)
    t_done = time.monotonic()
    check_own(b)
    assert status == 200 and body.endswith(b"data: [DONE]\n\n"), (status, body[-100:])
    waited = float(hdrs["x-admitd-queue-wait-ms"])
    assert (t_left - t_queued) * 1000 - 0.05 <= waited <= (t_done - t_sent) * 1000 + 0.05, \
        (waited, t_left - t_queued, t_done - t_sent)
    # Bypassing requests carry neither header.
    status, hdrs, _ = request(ad.addr, "GET", "/v1/models")
    assert status == 200 and "x-admitd-queue-wait-ms" not in hdrs, hdrs
    assert "x-admitd-reason" not in hdrs, hdrs
    # d holds the slot, e1 and e2 fill the queue: h is refused at once, queue-full.
    d = RawClient(ad.addr, marker=marker(2))
    d.post("/v1/chat/completions", chat_body(max_tokens=400))
    assert d.read_head()[1]["x-admitd-queue-wait-ms"] == "0.0"
    e1, e2 = RawClient(ad.addr, marker=marker(3)), RawClient(ad.addr, marker=marker(4))
    t_e1 = time.monotonic()
    e1.post("/v1/chat/completions", chat_body(max_tokens=2))
    e2.post("/v1/chat/completions", chat_body(max_tokens=2))
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 2, what="e1 and e2 queued")
    m = ad.metrics()
    gone = releases(m)
    assert gone == 2, m  # a and b
    h = RawClient(ad.addr, marker=marker(5))
    h.post("/v1/chat/completions", chat_body(max_tokens=2))
    status, hdrs, body, complete = own_response(h)
    assert status == 529 and error_message(body) == OVERLOAD_MSG, (status, body)
    assert hdrs["x-admitd-reason"] == "queue-full", hdrs
    assert int(hdrs["retry-after"]) == retry_after_formula(2, gone) == 15, hdrs
    h.close()
    # e2 leaves; e1 waits out its queue timeout alone.
    close_own([e2])
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 1, what="e2 gone")
    status, hdrs, body = only_answer(e1)
    check_own(e1)
    waited = time.monotonic() - t_e1
    assert status == 529 and error_message(body) == QUEUE_TIMEOUT_MSG, (status, body)
    assert hdrs["x-admitd-reason"] == "queue-timeout", hdrs
    assert int(hdrs["retry-after"]) == retry_after_formula(0, gone) == 5, hdrs
    assert timeout_s * 0.95 <= waited < timeout_s + 10, waited
    m = ad.metrics()
    assert m['admitd_requests_total{outcome="queue_timeout"}'] == 1, m
    assert m["dynamo_rejection_request_total"] == 2, m
    # Draining: d still streams, a newcomer gets 503 draining, Connection: close.
    ad.proc.p.send_signal(signal.SIGTERM)
    ad.proc.wait_line(r"draining", 10)
    f = RawClient(ad.addr, marker=marker(6))
    f.post("/v1/chat/completions", chat_body(max_tokens=2))
    status, hdrs, body = only_answer(f)
    check_own(f)
    assert status == 503 and error_message(body) == "Server unavailable: worker draining", body
    assert hdrs["x-admitd-reason"] == "draining", hdrs
    assert hdrs["connection"].lower() == "close", hdrs
    assert int(hdrs["retry-after"]) == retry_after_formula(0, gone), hdrs
    close_own([d])
    assert ad.proc.p.wait(30) == 0
    ad.proc.stop_clean()
    mock.stop()


def test_retry_after_estimate_edges():
    """Retry-After without any release (10), clamped at 60, and fixed by --retry-after."""
    mock = Mock("--token-interval-ms", "50")
    cases = [
        # (queue limit, short requests first, extra options, expected Retry-After)
        (2, 0, [], 10),                       # no history
        (8, 1, [], 60),                       # ceil(9 / 0.1) = 90, clamped
        (2, 12, [], 3),                       # ceil(3 / 1.2)
        (2, 12, ["--retry-after", "7"], 7),   # fixed
    ]
    for q, short, extra, want in cases:
        ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", str(q),
                    *extra)
        for _ in range(short):
            assert request(ad.addr, "POST", "/v1/chat/completions",
                           chat_body(max_tokens=1))[0] == 200
        holders = ad.fill(q + 1, queued=q, max_tokens=400)
        gone = releases(ad.metrics())
        assert gone == short, (gone, short)
        if not extra:
            assert retry_after_formula(q, gone) == want, (q, gone, want)
        status, hdrs, body = own_request(ad.addr, "/v1/chat/completions", chat_body(),
                                         marker(q + 1))
        assert status == 529 and hdrs["x-admitd-reason"] == "queue-full", (status, hdrs)
        assert int(hdrs["retry-after"]) == want, (q, short, extra, hdrs)
        close_own(holders)
        ad.stop()
    mock.stop()


class HeldEngine:
    """An engine (Python's threaded HTTP server) that holds every PUT, PATCH, DELETE and POST
    until the test lets one go (release()), and answers GET, HEAD and OPTIONS at once.
    Records the methods in the order they arrived and the most it ever held at once."""

    def __init__(self):
        eng = self
        self.arrived = []
        self.holding = 0
        self.peak = 0
        self.gate = threading.Semaphore(0)
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def answer(self, held):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                if held:
                    with eng.lock:
                        eng.arrived.append(self.command)
                        eng.holding += 1
                        eng.peak = max(eng.peak, eng.holding)
                    ok = eng.gate.acquire(timeout=60)
                    with eng.lock:
                        eng.holding -= 1
                    if not ok:
                        return
                elif self.command == "OPTIONS":
                    with eng.lock:
                        eng.arrived.append(self.command)
                body = json.dumps({"method": self.command}).encode()
                self.send_response(200)
                if request_marker(self.headers):  # whose answer it is, as the mock says
                    self.send_header("X-Request-Id", request_marker(self.headers))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_GET(self):
                self.answer(False)

            def do_HEAD(self):
                self.answer(False)

            def do_OPTIONS(self):
                self.answer(False)

            def do_POST(self):
                self.answer(True)

            do_PUT = do_PATCH = do_DELETE = do_POST

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        self._t = threading.Thread(target=self.srv.serve_forever, args=(0.1,), daemon=True)
        self._t.start()

    def release(self):
        self.gate.release()

    def stop(self):
        for _ in range(64):
            self.gate.release()
        self.srv.shutdown()
        self.srv.server_close()
        self._t.join(5)


def send(ad, method, body=None, m=None):
    c = RawClient(ad.addr, marker=m)
    data = json.dumps(body).encode() if body is not None else b""
    c.send(b"%s /v1/things HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n%s\r\n" % (method.encode(), len(data),
                                                 marker_fields(m).encode()) + data)
    return c


def test_put_patch_delete_are_gated_options_is_not():
    eng = HeldEngine()
    try:
        ad = Admitd(eng.url, "--engine-request-limit", "1", "--request-queue-limit", "3",
                    "--health-interval-ms", "60000")
        # PUT takes the one slot; PATCH, DELETE and POST queue behind it in that order.
        held = [send(ad, "PUT", {"x": 1}, marker(0))]
        wait_for(lambda: eng.arrived == ["PUT"], what="PUT at the engine")
        for i, method in enumerate(("PATCH", "DELETE", "POST")):
            held.append(send(ad, method, {"x": 1} if method != "DELETE" else None,
                             marker(1 + i)))
            wait_for(lambda: ad.metrics()["dynamo_request_queue"] == i + 1,
                     what="%s queued" % method)
        m = ad.metrics()
        assert m["dynamo_engine_request"] == 1 and eng.arrived == ["PUT"], (m, eng.arrived)
        # Full: each gated method is refused like POST.
        for i, method in enumerate(("PUT", "PATCH", "DELETE", "POST")):
            c = send(ad, method, None, marker(4 + i))
            status, hdrs, body = only_answer(c)
            check_own(c)
            assert status == 529 and hdrs["x-admitd-reason"] == "queue-full", (method, status)
            assert error_message(body) == OVERLOAD_MSG, body
        # OPTIONS, GET and HEAD pass the full gate and reach the engine at once.
        for i, method in enumerate(("OPTIONS", "GET", "HEAD")):
            c = send(ad, method, m=marker(8 + i))
            if method == "HEAD":  # a head and nothing else
                status, hdrs = c.read_head()
                c.s.shutdown(socket.SHUT_WR)
                body, _ = read_to_close(c)
                assert body == b"", body
                assert hdrs["x-request-id"] == c.marker, hdrs
            else:
                status, hdrs, body = only_answer(c)
                check_own(c)
            assert status == 200, (method, status, body)
            assert "x-admitd-queue-wait-ms" not in hdrs and "x-admitd-reason" not in hdrs, hdrs
            if method != "HEAD":
                assert json.loads(body) == {"method": method}, body
        m = ad.metrics()
        assert m["admitd_bypass_requests_total"] == 3, m
        assert m["dynamo_request_queue"] == 3 and m["dynamo_engine_request"] == 1, m
        assert eng.arrived == ["PUT", "OPTIONS"], eng.arrived
        # Let them go one by one: each reaches the engine alone, first come first served.
        order = ["PUT", "PATCH", "DELETE", "POST"]
        for i, c in enumerate(held):
            wait_for(lambda: [x for x in eng.arrived if x != "OPTIONS"] == order[:i + 1],
                     what="%s at the engine" % order[i])
            eng.release()
            status, hdrs, body = only_answer(c)
            check_own(c)
            assert status == 200 and json.loads(body) == {"method": order[i]}, body
            wait = float(hdrs["x-admitd-queue-wait-ms"])
            assert (wait == 0.0) if i == 0 else (wait > 0), (order[i], wait)
        assert eng.peak == 1, eng.peak
        m = ad.wait_idle()
        assert m["dynamo_rejection_request_total"] == 4, m
        assert m['admitd_requests_total{outcome="ok"}'] == 4 + 3, m
        assert m["admitd_queue_wait_seconds_count"] == 4, m
        ad.stop()
    finally:
        eng.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("a burst of 4x(N+Q) gets exactly N+Q in, the rest 529", test_burst_gets_exactly_n_plus_q)
    tap.run("a rejection keeps the connection usable", test_rejection_keeps_connection_usable)
    tap.run("a queued client that hangs up frees its place at once",
            test_queued_client_disconnect_frees_its_place)
    tap.run("a queued client's hang-up behind pipelined bytes (FIN, RST): seen, no spin",
            test_queued_hangup_behind_pipelined_bytes)
    tap.run("DYN_HTTP_OVERLOAD_STATUS_CODE follows Dynamo's rules", test_overload_status_code_env)
    tap.run("GET and HEAD pass through a full gate", test_get_passes_through_a_full_gate)
    tap.run("POST /tokenize and /detokenize pass a full gate, counted apart",
            test_tokenizer_passes_a_full_gate)
    tap.run("without --engine-request-limit there is no cap", test_no_limit_means_no_cap)
    tap.run("gated replies: X-Admitd-Queue-Wait-Ms, queue-full, queue-timeout, draining",
            test_reasons_queue_wait_and_retry_after)
    tap.run("Retry-After: no history 10, clamped at 60, the estimate, --retry-after",
            test_retry_after_estimate_edges)
    tap.run("PUT, PATCH and DELETE are gated; OPTIONS, GET and HEAD are not",
            test_put_patch_delete_are_gated_options_is_not)
    tap.done()
