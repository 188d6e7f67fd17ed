"""Admission end to end: the exact N+Q cap under a burst, rejection shape, queue hang-ups."""

import email.utils
import json
import sys
import threading
import time

from harness import (Admitd, Mock, RawClient, Tap, chat_body, error_message, request,
                     wait_for)

OVERLOAD_MSG = "Server overloaded: worker at capacity"


def burst(addr, count, max_tokens):
    """Sends count streaming requests at once; returns [(status, headers, body, complete)]."""
    clients = [RawClient(addr, timeout=60) for _ in range(count)]
    results = [None] * count
    go = threading.Barrier(count)

    def one(i):
        go.wait()
        clients[i].post("/v1/chat/completions", chat_body(max_tokens=max_tokens))
        results[i] = clients[i].response() + (clients[i].header_names,)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for c in clients:
        c.close()
    return results


def test_burst_gets_exactly_n_plus_q():
    n, q = 3, 4
    mock = Mock("--token-interval-ms", "20")
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
        results = burst(ad.addr, 4 * (n + q), max_tokens=30)
    finally:
        stop.set()
        sampler.join()
    ok = [r for r in results if r[0] == 200]
    rejected = [r for r in results if r[0] == 529]
    assert len(ok) == n + q, [r[0] for r in results]
    assert len(rejected) == 3 * (n + q), [r[0] for r in results]
    for status, hdrs, body, complete, names in rejected:
        assert error_message(body) == OVERLOAD_MSG, body
        assert int(hdrs["retry-after"]) >= 1, hdrs
        assert hdrs["content-type"] == "application/json", hdrs
        # Our own Date (rendered once a second), exactly one, and the right time.
        assert names.count("date") == 1, names
        age = time.time() - email.utils.parsedate_to_datetime(hdrs["date"]).timestamp()
        assert -2 < age < 60, (hdrs["date"], age)
    for status, hdrs, body, complete, names in ok:
        assert complete, "a stream was cut"
        assert body.rstrip().endswith(b"data: [DONE]"), body[-200:]
        assert hdrs["content-type"].startswith("text/event-stream"), hdrs
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
    c = RawClient(ad.addr)
    c.post("/v1/chat/completions", chat_body())
    status, hdrs, body, complete = c.response()
    assert status == 529 and complete and error_message(body) == OVERLOAD_MSG
    assert hdrs.get("connection", "").lower() != "close", hdrs
    # The same connection serves the next request (GET bypasses the gate).
    c.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    status, hdrs, body, complete = c.response()
    assert status == 200 and json.loads(body)["data"][0]["id"], body
    # A second rejection on the same connection, then a clean close.
    c.post("/v1/chat/completions", chat_body())
    assert c.response()[0] == 529
    c.close()
    for h in holders:
        h.close()
    wait_for(lambda: ad.metrics()["dynamo_engine_request"] == 0, what="slots drained")
    ad.stop()
    mock.stop()


def test_queued_client_disconnect_frees_its_place():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    a = RawClient(ad.addr)
    a.post("/v1/chat/completions", chat_body(max_tokens=60))
    assert a.read_head()[0] == 200
    b, c = RawClient(ad.addr), RawClient(ad.addr)
    b.post("/v1/chat/completions", chat_body(max_tokens=2))
    c.post("/v1/chat/completions", chat_body(max_tokens=2))
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 2, what="two queued")
    d = RawClient(ad.addr)
    d.post("/v1/chat/completions", chat_body())
    assert d.response()[0] == 529
    # c leaves with a FIN, b with an RST: both places are free at once.
    c.close()
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 1, what="FIN frees a place")
    b.reset()
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 0, what="RST frees a place")
    m = ad.metrics()
    assert m['admitd_client_cancellations_total{stage="queued"}'] == 2, m
    assert m['admitd_requests_total{outcome="cancelled"}'] == 2, m
    e, f = RawClient(ad.addr), RawClient(ad.addr)
    e.post("/v1/chat/completions", chat_body(max_tokens=2))
    f.post("/v1/chat/completions", chat_body(max_tokens=2))
    wait_for(lambda: ad.metrics()["dynamo_request_queue"] == 2, what="newcomers queued")
    a.close()
    assert e.response()[0] == 200
    assert f.response()[0] == 200
    # The engine never saw the two that left.
    engine = mock.metrics()
    assert engine["admit_mock_requests_total"] == 3, engine
    assert engine["admit_mock_requests_running_peak"] == 1, engine
    ad.stop()
    mock.stop()


def test_overload_status_code_env():
    mock = Mock("--token-interval-ms", "50")
    for env, want in (("503", 503), ("99", 529), ("abc", 529), ("", 529), ("429", 429)):
        ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2",
                    env={"DYN_HTTP_OVERLOAD_STATUS_CODE": env})
        holders = ad.fill(3, queued=2, max_tokens=20)
        status, hdrs, body = request(ad.addr, "POST", "/v1/chat/completions", chat_body())
        assert status == want, (env, status)
        assert error_message(body) == OVERLOAD_MSG
        for h in holders:
            h.close()
        ad.stop()
    mock.stop()


def test_get_passes_through_a_full_gate():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    holders = ad.fill(3, queued=2, max_tokens=40)
    for path in ("/v1/models", "/health"):
        status, _, _ = request(ad.addr, "GET", path)
        assert status == 200, (path, status)
    assert request(ad.addr, "HEAD", "/v1/models")[0] == 200
    m = ad.metrics()
    assert m["admitd_bypass_requests_total"] == 3, m
    assert m["dynamo_rejection_request_total"] == 0, m
    for h in holders:
        h.close()
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


if __name__ == "__main__":
    tap = Tap()
    tap.run("a burst of 4x(N+Q) gets exactly N+Q in, the rest 529", test_burst_gets_exactly_n_plus_q)
    tap.run("a rejection keeps the connection usable", test_rejection_keeps_connection_usable)
    tap.run("a queued client that hangs up frees its place at once",
            test_queued_client_disconnect_frees_its_place)
    tap.run("DYN_HTTP_OVERLOAD_STATUS_CODE follows Dynamo's rules", test_overload_status_code_env)
    tap.run("GET and HEAD pass through a full gate", test_get_passes_through_a_full_gate)
    tap.run("without --engine-request-limit there is no cap", test_no_limit_means_no_cap)
    tap.done()
