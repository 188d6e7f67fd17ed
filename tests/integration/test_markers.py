"""Per-client markers: the mock engine echoes a request's X-Request-Id as vLLM does, admitd
carries it both ways, and the harness's ownership check (check_own / parse_own) fails on
every kind of cross-talk, so that the concurrent tests that rely on it can fail."""

import json
import threading

from harness import (Admitd, LoopbackServer, Mock, RawClient, Tap, chat_body, check_own,
                     fake_reply_head, marker, marker_fields, own_completion, own_request,
                     parse_own)

CHAT, COMPL = "/v1/chat/completions", "/v1/completions"


def compl_body(max_tokens=3, stream=False):
    return {"model": "mock-model", "prompt": "once upon", "max_tokens": max_tokens,
            "stream": stream}


def ids_of(hdrs, body):
    """The completion ids of an answer: the JSON's, or every SSE data event's but [DONE]."""
    if hdrs.get("content-type", "").startswith("text/event-stream"):
        return [json.loads(ln[5:])["id"] for ln in body.split(b"\n")
                if ln.startswith(b"data:") and ln[5:].strip() != b"[DONE]"]
    return [json.loads(body)["id"]]


def post(addr, path, body, extra=""):
    c = RawClient(addr)
    try:
        c.post(path, body, extra)
        status, hdrs, data, complete = c.response()
        assert complete, data
        return status, hdrs, data
    finally:
        c.close()


def test_mock_echoes_the_marker():
    mock = Mock("--speedup-ratio", "0")
    cases = [(CHAT, chat_body(max_tokens=3, stream=False), "chatcmpl"),
             (CHAT, chat_body(max_tokens=3, stream=True), "chatcmpl"),
             (COMPL, compl_body(), "cmpl"), (COMPL, compl_body(stream=True), "cmpl")]
    for i, (path, body, prefix) in enumerate(cases):
        m = marker(i)
        status, hdrs, data = post(mock.addr, path, body, marker_fields(m))
        assert status == 200 and hdrs.get("x-request-id") == m, (status, hdrs)
        ids = ids_of(hdrs, data)
        assert len(ids) >= (4 if body["stream"] else 1), data  # 3 tokens and the end
        assert ids == ["%s-%s" % (prefix, m)] * len(ids), (m, ids)
    # The longest accepted (128), and any visible ASCII but '"' and '\'.
    for m in ("x" * 128, "A~!#$%&'()*+,-./:;<=>?@[]^_`{|}~z"):
        status, hdrs, data = post(mock.addr, CHAT, chat_body(max_tokens=1, stream=True),
                                  "X-Request-Id: %s\r\n" % m)
        assert hdrs.get("x-request-id") == m, hdrs
        assert set(ids_of(hdrs, data)) == {"chatcmpl-" + m}, data
    # Error answers name the request too.
    m = marker(9)
    status, hdrs, data = post(mock.addr, CHAT, {"messages": [], "max_tokens": 0},
                              marker_fields(m))
    assert status == 400 and hdrs.get("x-request-id") == m, (status, hdrs, data)
    mock.stop()


def test_mock_ignores_a_bad_marker():
    mock = Mock("--speedup-ratio", "0")
    bad = ["x" * 129, "with space", 'quo"te', "back\\slash", "tab\there", "caf\xe9",
           "two\r\nX-Request-Id: ok"]
    for v in bad + [None]:
        extra = "X-Request-Id: %s\r\n" % v if v is not None else ""
        status, hdrs, data = post(mock.addr, CHAT, chat_body(max_tokens=2, stream=True), extra)
        assert status == 200, (v, status, data)
        assert "x-request-id" not in hdrs, (v, hdrs)
        ids = set(ids_of(hdrs, data))
        assert len(ids) == 1 and ids.pop().startswith("chatcmpl-mock-"), (v, data)
    # An empty one: as if absent.
    status, hdrs, data = post(mock.addr, COMPL, compl_body(), "X-Request-Id:\r\n")
    assert "x-request-id" not in hdrs and json.loads(data)["id"].startswith("cmpl-mock-"), data
    mock.stop()


def test_admitd_carries_the_marker_both_ways():
    mock = Mock("--token-interval-ms", "20")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    holders = ad.fill(3, queued=2, max_tokens=10)
    # N=1 and Q=2 full: admitd's own 529 carries no marker and passes the check.
    m = marker(5)
    status, hdrs, data = own_request(ad.addr, CHAT, chat_body(max_tokens=1), m, auth=True)
    assert status == 529 and "x-request-id" not in hdrs, (status, hdrs)
    for h in holders:
        status, hdrs, data, complete = h.response()
        assert status == 200 and complete and hdrs["x-request-id"] == h.marker, hdrs
        assert set(ids_of(hdrs, data)) == {"chatcmpl-" + h.marker}, data
        assert check_own(h)[0][0] == 200
        h.close()
    for path, body, prefix in ((CHAT, chat_body(max_tokens=2, stream=False), "chatcmpl"),
                               (COMPL, compl_body(stream=True), "cmpl")):
        m = marker(7)
        status, hdrs, data = own_request(ad.addr, path, body, m, auth=True)
        assert status == 200 and hdrs["x-request-id"] == m, hdrs
        assert set(ids_of(hdrs, data)) == {prefix + "-" + m}, data
    ad.stop()
    mock.stop()


def answer(m, rid=None, chat=True):
    """A mock-like non-streaming answer to the client with marker m."""
    data = json.dumps({"id": "%s-%s" % ("chatcmpl" if chat else "cmpl", m),
                       "object": "chat.completion"}).encode()
    return (b"HTTP/1.1 200 OK\r\nX-Request-Id: %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % ((rid or m).encode(), len(data))) + data


def stream(m, ids=None):
    events = [b"data: %s\n\n" % json.dumps({"id": "chatcmpl-" + i}).encode()
              for i in (ids or [m, m])] + [b"data: [DONE]\n\n"]
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    return (b"HTTP/1.1 200 OK\r\nX-Request-Id: %s\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" % m.encode()) + chunks


def refuses(raw, m, why):
    try:
        parse_own(raw, m)
    except AssertionError as e:
        assert why in str(e), (why, str(e))
        return
    raise AssertionError("cross-talk not caught (%s): %r" % (why, raw[:200]))


def own_error(body=b'{"error":{"message":"busy","type":"overloaded_error","code":529}}'):
    """An answer of admitd's own: no marker, an error body."""
    return (b"HTTP/1.1 529 Too Many Requests\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


def test_the_check_catches_cross_talk():
    me, other = marker(0), marker(1)
    # What must pass: whole answers, several in a row, cut ones, admitd's own errors.
    for raw in (answer(me), answer(me) + stream(me), stream(me)[:-40], stream(me)[:30],
                b"HTTP/1.", own_error(), answer(me, chat=False)):
        parse_own(raw, me)
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:1\r\nX-Request-Id: %s\r\n"
            b"Authorization: Bearer sk-%s\r\n\r\n" % (other.encode(), other.encode()))
    refuses(head + answer(me), me, "another client's marker " + other)  # the bug of issue 23
    refuses(b"POST / HTTP/1.1\r\nHost: x\r\n\r\n" + answer(me), me, "not a status line")
    refuses(b"\r\n" + answer(me), me, "not a status line")
    refuses(answer(me) + b"HTTP/1.1 200 OK\r\nX-Request-Id: %s\r\n" % other.encode(), me,
            "another client's marker")
    refuses(answer(me) + b"tail", me, "not a status line")
    refuses(answer(me, rid="someone-else"), me, "X-Request-Id 'someone-else'")
    refuses(answer("someone-else", rid=me), me, "is not " + me)
    refuses(stream(me, ids=[me, "x"]), me, "is not " + me)
    refuses(answer(me).replace(b"\r\n\r\n", b"\r\nAuthorization: Bearer x\r\n\r\n"), me,
            "request field 'authorization'")
    refuses(answer(me).split(b"\r\n\r\n")[0].replace(b"Content-Type", b"Host: w\r\nContent-"
                                                     b"Type"), me, "request field 'host'")
    refuses(answer(me).replace(b"X-Request-Id: %s\r\n" % me.encode(), b""), me,
            "a 200 without")
    refuses(own_error(b'{"choices":["hello"]}'), me, "neither the engine's")
    refuses(answer(me).replace(b"Content-Type", b"Content Type"), me, "not a header field")


def swapped(swap):
    """Three clients at once against a fake engine that answers each request with the marker
    of the one before it when swap is set (a proxy that mixed up its exchanges), else with
    its own (fake_reply_head, own_completion). Returns how many clients' checks failed."""
    heads, lock = [], threading.Lock()
    gate = threading.Barrier(3, timeout=10)

    def serve(conn):
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        with lock:
            heads.append(data)
        gate.wait()  # all three requests in before any answer
        with lock:
            theirs = heads[heads.index(data) - 1] if swap else data
        body = json.dumps({"id": own_completion(theirs)}).encode()
        conn.sendall(("HTTP/1.1 200 OK\r\n%sContent-Type: application/json\r\nContent-Length:"
                      " %d\r\n\r\n" % (fake_reply_head(theirs), len(body))).encode() + body)

    srv = LoopbackServer(serve)
    try:
        clients = [RawClient(("127.0.0.1", int(srv.hostport.rsplit(":", 1)[1])),
                             marker=marker(i)) for i in range(3)]
        for c in clients:
            c.post(CHAT, chat_body(max_tokens=1, stream=False))
        caught = 0
        for c in clients:
            assert c.response()[0] == 200
            try:
                check_own(c)
            except AssertionError as e:
                assert "another client's marker" in str(e), e
                caught += 1
            c.close()
        return caught
    finally:
        srv.stop()


def test_the_check_catches_a_live_swap():
    assert swapped(True) == 3, "not every swapped answer was caught"
    assert swapped(False) == 0, "an answer of the client's own was refused"


if __name__ == "__main__":
    tap = Tap()
    tap.run("the mock echoes X-Request-Id in the head and as the base of every completion id",
            test_mock_echoes_the_marker)
    tap.run("the mock ignores an X-Request-Id it cannot echo as it is",
            test_mock_ignores_a_bad_marker)
    tap.run("admitd carries the marker both ways; its own 529 passes the check",
            test_admitd_carries_the_marker_both_ways)
    tap.run("the ownership check refuses every kind of cross-talk",
            test_the_check_catches_cross_talk)
    tap.run("the ownership check catches answers swapped between live clients",
            test_the_check_catches_a_live_swap)
    tap.done()
