"""HTTP/1.1 conformance at the client listener (issue 16, item 3), as a hostile client sees it.

The cases are those of HAProxy's reg-tests/http-messaging, nginx-tests' body_chunked.t and
the published request-smuggling families (CL.TE, TE.CL, TE.TE obfuscations, obs-fold, bare
CR and LF, NUL, ...), written again here as raw bytes. Each case is one TAP check of two
things:

- what the client gets. A refused request gets the parser's status (docs/http1-parser.md),
  an OpenAI-shaped JSON error, `Connection: close`, and then the end of the connection with
  no further byte. An accepted one gets the engine's answers, in order.
- what the engine receives, seen by a recording engine in this file. For a refused request,
  not one byte. For an accepted one, a well-formed request: CRLF lines, token names, one
  Host naming the engine, the body de-chunked and sent with a Content-Length, no
  Transfer-Encoding, and none of the hop-by-hop headers.

One admitd serves every case (its process outlives the checks, Proc.keep_across_checks); a
case that kills it fails, and the next case starts another. The last check stops it, which
must exit 0 (under ASan: no leak)."""

import json
import re
import threading
import time

from harness import Admitd, LoopbackServer, RawClient, Tap, read_to_close, strict_response

MAX_HEADER = 4096
MAX_BODY = 4096
READ_TIMEOUT = 2.0  # admitd answers loopback at once; silence this long is a failure
SETTLE = 0.05  # after a refusal, how long a late forward would have to show up
DELAY = 0.03  # between the sends of a request split on purpose
PROBE = "/__conformance_probe"  # admitd's own health and metrics polls: not the client's
REFUSAL_TYPE = "invalid_request_error"
HOP_BY_HOP = ("keep-alive", "te", "trailer", "upgrade", "proxy-connection", "transfer-encoding")

TCHAR = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
REQUEST_LINE = re.compile(rb"(" + TCHAR + rb") ([!-~]+) (HTTP/1\.[01])\Z")
FIELD_LINE = re.compile(rb"(" + TCHAR + rb"):[ \t]*(.*?)[ \t]*\Z", re.S)
BAD_VALUE_BYTE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


# ---- the recording engine -------------------------------------------------------------------

class EngineRequest:
    """One request as the engine read it: its exact bytes, its parts, and every way in which
    it is not a well-formed HTTP/1.1 request (problems)."""

    def __init__(self, raw, method, target, version, fields, body, problems):
        self.raw, self.method, self.target, self.version = raw, method, target, version
        self.fields, self.body, self.problems = fields, body, problems

    def values(self, name):
        return [v for k, v in self.fields if k.lower() == name.encode()]

    def __repr__(self):
        return "EngineRequest(%r)" % self.raw[:400]


def parse_chunked(buf):
    """A chunked body at the front of buf, leniently (a forwarder should never send one):
    (body, bytes used) or None if incomplete. Raises ValueError on a size that is not hex."""
    pos, body = 0, b""
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(buf[pos:eol].split(b";")[0] or b"0", 16)
        pos = eol + 2
        if size == 0:
            end = buf.find(b"\r\n\r\n", pos - 2)
            return (body, end + 4) if end >= 0 else None
        if len(buf) < pos + size + 2:
            return None
        body += buf[pos:pos + size]
        pos += size + 2


def parse_request(buf):
    """The request at the front of buf: (EngineRequest, bytes used), or None while it is
    incomplete. Anything that does not start as a request comes back whole, method None."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head, problems = buf[:end], []
    if re.search(rb"(?<!\r)\n|\r(?!\n)", head):
        problems.append("bare CR or LF")
    lines = head.split(b"\r\n")
    m = REQUEST_LINE.match(lines[0])
    if m is None:
        return EngineRequest(buf, None, None, None, [], b"", ["not a request line"]), len(buf)
    fields = []
    for line in lines[1:]:
        f = FIELD_LINE.match(line)
        if f is None or BAD_VALUE_BYTE.search(f.group(2)):
            problems.append("bad field line %r" % line[:80])
            continue
        fields.append((f.group(1), f.group(2)))
    req = EngineRequest(None, m.group(1).decode(), m.group(2).decode("latin-1"),
                        m.group(3).decode(), fields, b"", problems)
    pos = end + 4
    cls = req.values("content-length")
    if req.values("transfer-encoding"):
        problems.append("Transfer-Encoding reached the engine")
        got = parse_chunked(buf[pos:])
        if got is None:
            return None
        req.body, used = got
        pos += used
    elif cls:
        if len(cls) > 1 or not cls[0].isdigit():
            problems.append("Content-Length %r" % cls)
            return req, len(buf)
        n = int(cls[0])
        if len(buf) < pos + n:
            return None
        req.body = buf[pos:pos + n]
        pos += n
    req.raw = buf[:pos]
    return req, pos


class RecordingEngine:
    """A loopback engine that records every byte it receives and every request it parses,
    and answers each request `200 OK` with a small JSON body naming it (keep-alive).

    mark() and since() delimit what one case sent: since() counts the bytes received after
    the mark, less those of admitd's own polls (PROBE), which come on their own connections."""

    def __init__(self):
        self.lock = threading.Lock()
        self.received = 0  # every byte, on every connection
        self.probe_bytes = 0
        self.requests = []  # the client's requests (not PROBE), in arrival order
        self.server = LoopbackServer(self._serve, conn_timeout=30)
        self.hostport, self.url = self.server.hostport, self.server.url

    def _serve(self, conn):
        buf = b""
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                with self.lock:
                    self.received += len(data)
                buf += data
                while buf:
                    try:
                        got = parse_request(buf)
                    except ValueError:  # a chunk size that is not hex: recorded, then the end
                        got = EngineRequest(buf, None, None, None, [], b"", ["bad chunk"]), len(buf)
                    if got is None:
                        break
                    req, used = got
                    buf = buf[used:]
                    if not self._answer(conn, req):
                        return
        except OSError:
            pass
        finally:
            conn.close()

    def _answer(self, conn, req):
        with self.lock:
            if req.target is not None and req.target.startswith(PROBE):
                self.probe_bytes += len(req.raw)
            else:
                self.requests.append(req)
            seq = len(self.requests)
        if req.method is None:
            return False  # not HTTP: recorded, and the connection ends
        body = json.dumps({"seq": seq, "method": req.method, "target": req.target,
                           "body_bytes": len(req.body)}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) +
                     (body if req.method != "HEAD" else b""))
        return True

    def mark(self):
        with self.lock:
            return (self.received, self.probe_bytes, len(self.requests))

    def since(self, mark):
        """(bytes of the client's requests received after mark, the requests parsed)."""
        with self.lock:
            return ((self.received - mark[0]) - (self.probe_bytes - mark[1]),
                    list(self.requests[mark[2]:]))

    def stop(self):
        self.server.stop()


class Rig:
    """The recording engine and one admitd in front of it, started again if a case kills it."""

    def __init__(self):
        self.engine = RecordingEngine()
        self.ad = None
        self.starts = 0

    def admitd(self):
        if self.ad is None or not self.ad.proc.alive():
            self.ad = Admitd(self.engine.url, "--engine-request-limit", "4",
                             "--max-header-bytes", str(MAX_HEADER),
                             "--max-body-bytes", str(MAX_BODY), "--client-timeout-ms", "5000",
                             "--health-path", PROBE, "--health-interval-ms", "3600000",
                             "--engine-metrics-url", self.engine.url + PROBE + "/metrics",
                             "--engine-metrics-interval-ms", "3600000",
                             "--engine-models-interval-ms", "0")
            self.ad.proc.keep_across_checks()
            self.starts += 1
        return self.ad

    def client(self):
        return RawClient(self.admitd().addr, timeout=READ_TIMEOUT)

    def still_running(self):
        assert self.ad.proc.alive(), "admitd died (rc %s):\n%s" % (
            self.ad.proc.p.returncode, "\n".join(self.ad.proc.lines[-30:]))

    def nothing_reached_engine(self, mark):
        time.sleep(SETTLE)
        n, reqs = self.engine.since(mark)
        assert n == 0 and not reqs, "%d bytes reached the engine: %r" % (n, reqs)


# ---- what the client sends ------------------------------------------------------------------

HOST = b"Host: conformance.test\r\n"
BODY = b'{"model":"m","prompt":"hello there"}'


def head(fields=b"", method=b"POST", target=b"/v1/completions", version=b"HTTP/1.1", host=HOST):
    return method + b" " + target + b" " + version + b"\r\n" + host + fields + b"\r\n"


def with_length(body=BODY, fields=b"", **kw):
    return head(b"Content-Length: %d\r\n" % len(body) + fields, **kw) + body


def with_chunks(chunked, fields=b"", te=b"chunked", **kw):
    return head(b"Transfer-Encoding: " + te + b"\r\n" + fields, **kw) + chunked


def chunks(body=BODY, size=7, ext=b"", last=b"0\r\n\r\n"):
    """body in chunks of size bytes, each size line followed by ext."""
    out = b""
    for i in range(0, len(body), size):
        piece = body[i:i + size]
        out += b"%x%s\r\n%s\r\n" % (len(piece), ext, piece)
    return out + last


class Pieces(list):
    """Bytes to send in pieces, with a pause of delay seconds between two."""

    def __init__(self, pieces, delay=DELAY):
        super().__init__(pieces)
        self.delay = delay


def trickle(data):
    """data one byte a send."""
    return Pieces([data[i:i + 1] for i in range(len(data))], delay=0.002)


def size_line(line):
    """A chunked body whose first chunk line is line, then seven bytes of data."""
    return with_chunks(line + b"abcdefg\r\n0\r\n\r\n")


def send_pieces(c, data):
    """Sends bytes, or Pieces with their pauses."""
    for i, piece in enumerate(data if isinstance(data, Pieces) else [data]):
        if i:
            time.sleep(data.delay)
        c.send(piece)


# ---- what the client must get, and the engine -----------------------------------------------

def expect_refusal(c, status):
    """One answer with this status, in the error shape, with Connection: close, and then the
    end of the connection with nothing after it."""
    got, hdrs, body, complete = strict_response(c)
    assert got == status, "status %d, not %d: %r %r" % (got, status, hdrs, body[:300])
    assert complete, body[:300]
    assert hdrs.get("connection", "").lower() == "close", hdrs
    assert hdrs.get("content-type", "").startswith("application/json"), hdrs
    err = json.loads(body)["error"]
    assert err["type"] == REFUSAL_TYPE and err["code"] == status and err["param"] is None, err
    assert status != 400 or err["message"].startswith("Bad request"), err
    rest, how = read_to_close(c, READ_TIMEOUT)
    assert rest == b"" and how == "eof", "after the %d: %r, then %s" % (status, rest[:300], how)


def expect_answer(c, target):
    status, hdrs, body, complete = strict_response(c)
    assert status == 200 and complete, (status, hdrs, body[:300])
    echo = json.loads(body)
    assert echo["target"] == target, "the answer to %s came for %s" % (echo["target"], target)


class Want:
    """A request the engine must receive: method, target, decoded body; header names that
    must not reach it (gone) and (name, value) pairs that must, as they are (kept)."""

    def __init__(self, target="/v1/completions", body=BODY, method="POST", gone=(), kept=()):
        self.target, self.body, self.method = target, body, method
        self.gone, self.kept = gone, kept


def well_formed(req, want, engine):
    assert not req.problems, (req.problems, req)
    assert (req.method, req.target) == (want.method, want.target), req
    assert req.values("host") == [engine.hostport.encode()], req
    assert req.body == want.body, (req.body, want.body)
    cls = req.values("content-length")
    assert len(cls) <= 1 and (not cls or int(cls[0]) == len(req.body)), req
    assert cls or not want.body, "a body without a Content-Length: %r" % req
    for name in HOP_BY_HOP + tuple(want.gone):
        assert not req.values(name), "%s reached the engine: %r" % (name, req)
    for value in req.values("connection"):
        tokens = {t.strip().lower() for t in value.split(b",")}
        assert tokens <= {b"keep-alive", b"close"}, req
    for name, value in want.kept:
        assert req.values(name) == [value], (name, req)


# ---- the checks -----------------------------------------------------------------------------

def refused(rig, data, status):
    mark = rig.engine.mark()
    c = rig.client()
    try:
        try:
            send_pieces(c, data)
        except OSError:
            pass  # closed before the last piece: the answer must still be there
        expect_refusal(c, status)
    finally:
        c.close()
    rig.nothing_reached_engine(mark)
    rig.still_running()


def accepted(rig, data, wants, close_after=False):
    """The answers come in order, and the engine receives exactly the wanted requests,
    well-formed, and not one other byte. close_after: admitd then closes the connection."""
    mark = rig.engine.mark()
    c = rig.client()
    try:
        send_pieces(c, data)
        for w in wants:
            expect_answer(c, w.target)
        if close_after:
            rest, how = read_to_close(c, READ_TIMEOUT)
            assert rest == b"" and how == "eof", (rest[:300], how)
    finally:
        c.close()
    time.sleep(SETTLE)
    n, reqs = rig.engine.since(mark)
    assert len(reqs) == len(wants), reqs
    # Pipelined requests may reach the engine on several connections, in any order.
    for req, w in zip(sorted(reqs, key=lambda r: r.target or ""),
                      sorted(wants, key=lambda w: w.target)):
        well_formed(req, w, rig.engine)
    assert n == sum(len(r.raw) for r in reqs), "%d bytes beside the requests" % n
    rig.still_running()


def valid_then_refused(rig, first, second, status):
    """A valid request and a bad one behind it on one connection: the first is answered, the
    second refused, and only the first reaches the engine."""
    mark = rig.engine.mark()
    c = rig.client()
    try:
        c.send(first + second)
        expect_answer(c, "/first")
        expect_refusal(c, status)
    finally:
        c.close()
    time.sleep(SETTLE)
    n, reqs = rig.engine.since(mark)
    assert len(reqs) == 1 and n == len(reqs[0].raw), (n, reqs)
    well_formed(reqs[0], Want("/first"), rig.engine)
    rig.still_running()


def hung_up(rig, data, rst):
    """A client that sends part of a request and leaves (RST or FIN): nothing reaches the
    engine, and admitd serves the next client."""
    mark = rig.engine.mark()
    c = rig.client()
    send_pieces(c, data)
    time.sleep(DELAY)
    if rst:
        c.reset()
    else:
        c.close()
    time.sleep(SETTLE)
    rig.nothing_reached_engine(mark)
    rig.still_running()
    accepted(rig, with_length(target=b"/after"), [Want("/after")])


def stops_cleanly(rig):
    rig.admitd().stop()
    rig.engine.stop()
    assert rig.starts == 1, "admitd was started %d times: a case killed it" % rig.starts


def long_extensions():
    ext = b";a=" + b"x" * 1500
    return with_chunks(chunks(BODY, size=12, ext=ext))


SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: conformance.test\r\n\r\n"
TE_CL_BODY = b"%x\r\n%s\r\n0\r\n\r\n" % (len(SMUGGLED), SMUGGLED)

REFUSED = [
    # CL.TE and TE.CL: a length and a coding, whichever another server would obey.
    ("CL.TE: Content-Length, then Transfer-Encoding: chunked", 400,
     head(b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % (5 + len(SMUGGLED))) +
     b"0\r\n\r\n" + SMUGGLED),
    ("TE.CL: Transfer-Encoding: chunked, then Content-Length", 400,
     head(b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n") + TE_CL_BODY),
    # TE.TE: a Transfer-Encoding one server sees and another does not.
    ("TE.TE: a second Transfer-Encoding line (x)", 400,
     with_chunks(chunks(), b"Transfer-Encoding: x\r\n")),
    ("TE.TE: Transfer-Encoding: chunked on two lines", 400,
     with_chunks(chunks(), b"Transfer-Encoding: chunked\r\n")),
    ("TE.TE: chunked, chunked", 400, with_chunks(chunks(), te=b"chunked, chunked")),
    ("TE.TE: a space before the colon (Transfer-Encoding : chunked), with a Content-Length",
     400, head(b"Content-Length: 5\r\nTransfer-Encoding : chunked\r\n") + b"0\r\n\r\n"),
    ("TE.TE: a tab before the colon", 400,
     head(b"Transfer-Encoding\t: chunked\r\n") + chunks()),
    ("TE.TE: xchunked", 400, with_chunks(chunks(), te=b"xchunked")),
    ("TE.TE: a vertical tab before chunked", 400, with_chunks(chunks(), te=b"\x0bchunked")),
    ("TE.TE: \"chunked\" in quotes", 400, with_chunks(chunks(), te=b'"chunked"')),
    ("TE.TE: chunked followed by an obs-text byte", 400,
     with_chunks(chunks(), te=b"chunked\xff")),
    ("TE.TE: chunked folded onto an obs-fold line, with a Content-Length", 400,
     head(b"Transfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n") + b"0\r\n\r\n"),
    ("Transfer-Encoding: identity (RFC 9112 6.3: not ending in chunked)", 400,
     with_chunks(b"0\r\n\r\n", te=b"identity")),
    ("Transfer-Encoding: chunked, identity", 400,
     with_chunks(b"0\r\n\r\n", te=b"chunked, identity")),
    ("Transfer-Encoding: chunked, gzip", 400, with_chunks(b"0\r\n\r\n", te=b"chunked, gzip")),
    ("Transfer-Encoding: gzip", 400, with_chunks(b"0\r\n\r\n", te=b"gzip")),
    ("Transfer-Encoding: gzip, chunked (a coding not implemented)", 501,
     with_chunks(b"0\r\n\r\n", te=b"gzip, chunked")),
    ("Transfer-Encoding on HTTP/1.0", 400, with_chunks(chunks(), version=b"HTTP/1.0")),
    # Content-Length.
    ("Content-Length 1 and Content-Length 0", 400,
     head(b"Content-Length: 1\r\nContent-Length: 0\r\n") + b"x"),
    ("Content-Length: 1, 2", 400, head(b"Content-Length: 1, 2\r\n") + b"xy"),
    ("Content-Length: +1", 400, head(b"Content-Length: +1\r\n") + b"x"),
    ("Content-Length: -1", 400, head(b"Content-Length: -1\r\n") + b"x"),
    ("Content-Length: 0x1", 400, head(b"Content-Length: 0x1\r\n") + b"x"),
    ("Content-Length: 1 1", 400, head(b"Content-Length: 1 1\r\n") + b"x"),
    ("Content-Length: 1, (an empty member)", 400, head(b"Content-Length: 1,\r\n") + b"x"),
    ("an empty Content-Length", 400, head(b"Content-Length:\r\n") + b"x"),
    ("a space before the colon (Content-Length : 1)", 400,
     head(b"Content-Length : 1\r\n") + b"x"),
    ("Content-Length past 2^63-1", 400, head(b"Content-Length: 99999999999999999999\r\n")),
    # Line ends, folding, bytes that are not allowed.
    ("bare LF line ends throughout", 400,
     b"GET /v1/models HTTP/1.1\nHost: conformance.test\n\n"),
    ("a bare LF ending one field line", 400, head(b"X-A: a\nX-B: b\r\n", method=b"GET")),
    ("a bare LF as the blank line", 400, head(method=b"GET")[:-2] + b"\n"),
    ("a bare LF before the request line", 400, b"\n" + head(method=b"GET")),
    ("a bare CR inside a value", 400, head(b"X-A: a\rb\r\n", method=b"GET")),
    ("a bare CR as a line end", 400, head(b"X-A: a\rX-B: b\r\n", method=b"GET")),
    ("obs-fold (a continuation line starting with SP)", 400,
     head(b"X-A: a\r\n b\r\n", method=b"GET")),
    ("obs-fold (a continuation line starting with HTAB)", 400,
     head(b"X-A: a\r\n\tb\r\n", method=b"GET")),
    ("whitespace right after the request line", 400,
     b"GET /v1/models HTTP/1.1\r\n Host: conformance.test\r\n\r\n"),
    ("a NUL in a value", 400, head(b"X-A: a\x00b\r\n", method=b"GET")),
    ("a control byte (0x01) in a value", 400, head(b"X-A: a\x01b\r\n", method=b"GET")),
    ("DEL in a value", 400, head(b"X-A: a\x7fb\r\n", method=b"GET")),
    ("a name byte that is not a tchar (X@A)", 400, head(b"X@A: a\r\n", method=b"GET")),
    ("a space inside a name (X A: a)", 400, head(b"X A: a\r\n", method=b"GET")),
    ("an empty name (: a)", 400, head(b": a\r\n", method=b"GET")),
    ("a field line without a colon", 400, head(b"X-A-a\r\n", method=b"GET")),
    ("more than 4 empty lines before the request line", 400,
     b"\r\n" * 5 + head(method=b"GET")),
    # Host on HTTP/1.1.
    ("HTTP/1.1 without Host", 400, head(method=b"GET", host=b"")),
    ("two different Host lines", 400, head(b"Host: other.test\r\n", method=b"GET")),
    ("two identical Host lines", 400, head(HOST, method=b"GET")),
    ("a Host with a space (a b)", 400, head(method=b"GET", host=b"Host: a b\r\n")),
    ("a Host with userinfo (u@a)", 400, head(method=b"GET", host=b"Host: u@a\r\n")),
    # The request line.
    ("two spaces after the method", 400, b"GET  /v1/models HTTP/1.1\r\n" + HOST + b"\r\n"),
    ("a space after the version", 400, b"GET /v1/models HTTP/1.1 \r\n" + HOST + b"\r\n"),
    ("a tab as a separator", 400, b"GET\t/v1/models HTTP/1.1\r\n" + HOST + b"\r\n"),
    ("a request line starting with a space", 400,
     b" GET /v1/models HTTP/1.1\r\n" + HOST + b"\r\n"),
    ("an HTTP/0.9 request (no version)", 400, b"GET /v1/models\r\n\r\n"),
    ("a method byte that is not a tchar (GE@T)", 400, head(method=b"GE@T")),
    ("a fragment (#) in the target", 400, head(method=b"GET", target=b"/v1/models#x")),
    ("a byte >= 0x80 in the target", 400, head(method=b"GET", target=b"/v1/mod\xe9ls")),
    ("the asterisk form on GET", 400, head(method=b"GET", target=b"*")),
    ("a target neither a path nor absolute (admin)", 400, head(method=b"GET", target=b"admin")),
    ("a lowercase version (http/1.1)", 400, head(method=b"GET", version=b"http/1.1")),
    ("HTTP/1.10", 400, head(method=b"GET", version=b"HTTP/1.10")),
    ("HTTP/1 without a minor version", 400, head(method=b"GET", version=b"HTTP/1")),
    ("HTTP/2.0 over HTTP/1 framing", 505, head(method=b"GET", version=b"HTTP/2.0")),
    ("HTTP/0.9 as a version", 505, head(method=b"GET", version=b"HTTP/0.9")),
    # Methods admitd does not serve.
    ("TRACE", 501, head(method=b"TRACE", target=b"/")),
    ("CONNECT", 501,
     head(method=b"CONNECT", target=b"example.com:443", host=b"Host: example.com:443\r\n")),
    ("an unknown method (FOO)", 501, head(method=b"FOO", target=b"/")),
    ("a lowercase get (methods are case-sensitive)", 501, head(method=b"get")),
    # Limits.
    ("a request line over --max-header-bytes", 414,
     head(method=b"GET", target=b"/" + b"a" * (MAX_HEADER + 100))),
    ("a head over --max-header-bytes", 431,
     head(b"X-Big: " + b"a" * (MAX_HEADER + 100) + b"\r\n", method=b"GET")),
    ("a Content-Length over --max-body-bytes", 413, with_length(b"x" * (MAX_BODY + 1))),
    ("a chunked body over --max-body-bytes, in several chunks", 413,
     with_chunks(chunks(b"x" * (MAX_BODY + 1), size=1024))),
    ("a chunk size of 16 hex digits (ffffffffffffffff)", 413,
     with_chunks(b"ffffffffffffffff\r\nabc")),
    # Chunk lines.
    ("a chunk size 0x7", 400, size_line(b"0x7\r\n")),
    ("a chunk size +7", 400, size_line(b"+7\r\n")),
    ("a chunk size after a space ( 7)", 400, size_line(b" 7\r\n")),
    ("an empty chunk size line", 400, size_line(b"\r\n")),
    ("17 hex digits of chunk size, leading zeros counted", 400,
     size_line(b"00000000000000007\r\n")),
    ("17 hex digits of chunk size (1ffffffffffffffff)", 400,
     size_line(b"1ffffffffffffffff\r\n")),
    ("a bare LF after the chunk size", 400, size_line(b"7\n")),
    ("a bare LF after the chunk data", 400, with_chunks(b"7\r\nabcdefg\n0\r\n\r\n")),
    ("a bare LF after the last chunk's size", 400, with_chunks(b"7\r\nabcdefg\r\n0\n\r\n")),
    ("a bare LF as the blank line after the last chunk", 400,
     with_chunks(b"7\r\nabcdefg\r\n0\r\n\n")),
    ("chunk data not followed by CRLF (nginx's runaway chunk)", 400,
     with_chunks(b"4\r\nSEE-THIS\r\n0\r\n\r\n")),
    ("whitespace after the chunk size with no extension (7 )", 400,
     size_line(b"7 \r\n")),
    ("an empty chunk extension (7;)", 400, size_line(b"7;\r\n")),
    ("a chunk extension value with a space inside (7;a=b c)", 400,
     size_line(b"7;a=b c\r\n")),
    ("chunk extensions over 4 KiB in one request", 400, long_extensions()),
    ("a NUL in a trailer field", 400, with_chunks(b"7\r\nabcdefg\r\n0\r\nX-T: a\x00b\r\n\r\n")),
    ("obs-fold in the trailers", 400, with_chunks(b"7\r\nabcdefg\r\n0\r\nX-T: a\r\n b\r\n\r\n")),
    # The same refusals, whatever the bytes' timing.
    ("obs-fold arriving in a later send", 400,
     Pieces([head(b"X-A: a\r\n", method=b"GET")[:-2], b" b\r\n", b"\r\n"])),
    ("a bad chunk line arriving after a delay", 400,
     Pieces([with_chunks(b"7\r\nabcdefg\r\n"), b"0x0\r\n", b"\r\n"])),
    ("the head of a CL.TE request sent one byte at a time", 400,
     trickle(head(b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"))),
]


def accepted_cases():
    """(name, bytes or pieces, [Want], close_after)."""
    got = Want(body=BODY)
    limit = b"y" * MAX_BODY
    hop = (b"Connection: keep-alive, X-Drop-Me\r\nX-Drop-Me: 1\r\nKeep-Alive: timeout=5\r\n"
           b"TE: trailers\r\nTrailer: X-T\r\nProxy-Connection: keep-alive\r\nX-Kept: yes\r\n")
    whole = with_chunks(chunks())
    plain = with_length()
    crlf = plain.find(b"\r\n") + 1
    cut = [whole.find(b"\r\n") + 1, whole.find(b"\r\n\r\n") + 3, whole.find(b"\r\n\r\n") + 5,
           whole.find(b"\r\n\r\n") + 9]
    return [
        # Chunk extensions: the RFC says a recipient MUST ignore the ones it does not know.
        ("a chunk extension with a token value (7;ext=1)",
         with_chunks(chunks(ext=b";ext=1")), [got], False),
        ("a chunk extension without a value (7;ext)",
         with_chunks(chunks(ext=b";ext")), [got], False),
        ("a quoted chunk extension with an escaped quote",
         with_chunks(chunks(ext=b';ext="a \\"q\\" b"')), [got], False),
        ("BWS around the chunk extension's ; and = (7 ; a = b)",
         with_chunks(chunks(ext=b" ; a = b")), [got], False),
        ("several extensions per chunk, and on the last chunk",
         with_chunks(chunks(ext=b';a=1;b="2"', last=b"0;end=yes\r\n\r\n")), [got], False),
        ("trailers after the last chunk are not forwarded",
         with_chunks(chunks(last=b"0\r\nX-T: t\r\n\r\n"), b"Trailer: X-T\r\n"),
         [Want(gone=("x-t",))], False),
        ("Transfer-Encoding: CHUNKED (codings are case-insensitive)",
         with_chunks(chunks(), te=b"CHUNKED"), [got], False),
        ("Transfer-Encoding: , chunked (empty list members are skipped)",
         with_chunks(chunks(), te=b", chunked"), [got], False),
        ("Transfer-Encoding:<HTAB>chunked (OWS may be a tab)",
         head(b"Transfer-Encoding:\tchunked\r\n") + chunks(), [got], False),
        ("a chunked body of no bytes", with_chunks(b"0\r\n\r\n"), [Want(body=b"")], False),
        ("a chunked body of exactly --max-body-bytes, in two chunks",
         with_chunks(chunks(limit, size=MAX_BODY // 2)), [Want(body=limit)], False),
        ("a Content-Length of exactly --max-body-bytes", with_length(limit),
         [Want(body=limit)], False),
        ("a chunked body split across sends (size line, CRLF, data)",
         Pieces([whole[:cut[0]], whole[cut[0]:cut[1]], whole[cut[1]:cut[2]],
                 whole[cut[2]:cut[3]], whole[cut[3]:]]), [got], False),
        ("a head split between CR and LF", Pieces([plain[:crlf], plain[crlf:]]), [got], False),
        ("a request sent one byte at a time", trickle(with_length(b"{}")),
         [Want(body=b"{}")], False),
        ("Content-Length: 5, 5 is one Content-Length of 5",
         head(b"Content-Length: 5, 5\r\n") + b"12345", [Want(body=b"12345")], False),
        ("two identical Content-Length lines",
         head(b"Content-Length: 5\r\nContent-Length: 5\r\n") + b"12345",
         [Want(body=b"12345")], False),
        ("a GET with a body gets it to the engine (HAProxy h1_to_h1)",
         with_length(b"this must be delivered, like it or not", method=b"GET", target=b"/g"),
         [Want("/g", b"this must be delivered, like it or not", "GET")], False),
        ("hop-by-hop headers and those Connection names are not forwarded, others are",
         with_length(fields=hop), [Want(gone=("x-drop-me",), kept=(("x-kept", b"yes"),))],
         False),
        ("Upgrade is not refused, only not forwarded",
         head(b"Upgrade: websocket\r\nConnection: Upgrade\r\n", method=b"GET", target=b"/u"),
         [Want("/u", b"", "GET")], False),
        ("HTAB and obs-text in a value reach the engine as they are",
         with_length(fields=b"X-Text: a\tb\xe9\r\n"), [Want(kept=(("x-text", b"a\tb\xe9"),))],
         False),
        ("HTTP/1.0 without Host is served, with the engine's Host",
         head(method=b"GET", target=b"/old", version=b"HTTP/1.0", host=b""),
         [Want("/old", b"", "GET")], False),
        ("one empty line before the request line is skipped (RFC 9112 2.2)",
         b"\r\n" + head(method=b"GET", target=b"/e"), [Want("/e", b"", "GET")], False),
        ("Connection: close: answered, closed, and the bytes after it never forwarded",
         with_length(fields=b"Connection: close\r\n", target=b"/c") + b"this is not sent\r\n\r\n",
         [Want("/c")], True),
        # Pipelining (nginx's "chunked body pipelined").
        ("two pipelined requests are answered in order",
         with_length(target=b"/p1") + with_length(b"{}", target=b"/p2"),
         [Want("/p1"), Want("/p2", b"{}")], False),
        ("chunked, Content-Length and GET pipelined in one send, answered in order",
         with_chunks(chunks(), target=b"/q1") + with_length(b"[1]", target=b"/q2") +
         head(method=b"GET", target=b"/q3"),
         [Want("/q1"), Want("/q2", b"[1]"), Want("/q3", b"", "GET")], False),
        ("a pipelined pair split in the middle of the second request",
         Pieces([with_length(target=b"/s1") + with_chunks(chunks(), target=b"/s2")[:40],
                 with_chunks(chunks(), target=b"/s2")[40:]]), [Want("/s1"), Want("/s2")],
         False),
    ]


HANGUPS = [
    ("RST after part of a head", b"POST /v1/completions HTTP/1.1\r\nHost: conf", True),
    ("RST after the head and part of a Content-Length body", with_length()[:-5], True),
    ("RST after part of a chunked body", with_chunks(chunks())[:-12], True),
    ("FIN before the last CRLF of a chunked body (HAProxy http_request_buffer)",
     with_chunks(chunks())[:-2], False),
]


if __name__ == "__main__":
    tap = Tap()
    rig = Rig()
    for name, status, data in REFUSED:
        tap.run("refused %d: %s" % (status, name), refused, rig, data, status)
    for name, data, wants, close_after in accepted_cases():
        tap.run("accepted: " + name, accepted, rig, data, wants, close_after)
    tap.run("a valid request, then CL.TE behind it: the first answered, the second refused",
            valid_then_refused, rig, with_length(target=b"/first"),
            head(b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") + b"0\r\n\r\n", 400)
    tap.run("a valid request, then one without Host: the first answered, the second refused",
            valid_then_refused, rig, with_length(target=b"/first"),
            head(method=b"GET", host=b""), 400)
    for name, data, rst in HANGUPS:
        tap.run("hang-up: " + name, hung_up, rig, data, rst)
    tap.run("admitd exits 0 after every case, never restarted", stops_cleanly, rig)
    tap.done()
