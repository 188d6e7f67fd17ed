"""Integration test harness: real processes on ports chosen at run time.

Every process is started in its own session and killed (with its group) when the test
ends, passes or fails, including on an uncaught exception or a signal. Daemons are stopped
with SIGTERM and must exit 0: under ASan that also proves nothing leaked.

Tests print TAP ("ok N - name" / "not ok N - name") so meson shows each check.
"""

import atexit
import http.client
import itertools
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback

ADMITD = os.environ.get("ADMITD", "build/admitd")
MOCK = os.environ.get("MOCK_ENGINE", "build/admit-mock-engine")

_procs = []
_running_check = ""  # the function of the Tap check under way, named in markers (marker())
_marker_seq = itertools.count()  # client indexes of markers made without one


class Proc:
    """A child process whose stderr is collected by a thread."""

    def __init__(self, argv, env=None, ready=None, name=None, timeout=30):
        self.name = name or os.path.basename(argv[0])
        self.argv = argv
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=full_env, start_new_session=True)
        self.lines = []
        self._cv = threading.Condition()
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()
        self._out = threading.Thread(target=self._drain_stdout, daemon=True)
        self._out.start()
        _procs.append(self)
        self.match = None
        self.shared = False  # see keep_across_checks
        if ready is not None:
            self.match = self.wait_line(ready, timeout)

    def _read(self):
        for raw in self.p.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if os.environ.get("HARNESS_VERBOSE"):
                sys.stderr.write("[%s] %s\n" % (self.name, line))
            with self._cv:
                self.lines.append(line)
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def _drain_stdout(self):
        self.stdout = self.p.stdout.read()

    def wait_line(self, pattern, timeout):
        rx = re.compile(pattern)
        deadline = time.time() + timeout
        seen = 0
        with self._cv:
            while True:
                for line in self.lines[seen:]:
                    m = rx.search(line)
                    if m:
                        return m
                seen = len(self.lines)
                if self.p.poll() is not None and not self._t.is_alive():
                    raise AssertionError("%s exited (rc %s) before printing /%s/:\n%s" % (
                        self.name, self.p.returncode, pattern, "\n".join(self.lines[-30:])))
                left = deadline - time.time()
                if left <= 0:
                    raise AssertionError("%s did not print /%s/ in %ss:\n%s" % (
                        self.name, pattern, timeout, "\n".join(self.lines[-30:])))
                self._cv.wait(min(left, 0.2))

    def keep_across_checks(self):
        """Lets the process outlive the Tap check that started it, for many short checks
        against one daemon; it is still killed when the test exits, however it exits."""
        self.shared = True
        return self

    def alive(self):
        return self.p.poll() is None

    def cpu_seconds(self):
        """The CPU time it has used (utime + stime of /proc/PID/stat), in seconds."""
        with open("/proc/%d/stat" % self.p.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))

    def status_kb(self, field):
        """A kB field of /proc/PID/status ("VmSize", "VmRSS")."""
        with open("/proc/%d/status" % self.p.pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise AssertionError("%s has no %s" % (self.name, field))

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signals the process and returns its exit code (killing it after timeout)."""
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
                raise AssertionError("%s did not exit within %ss of signal %d" %
                                     (self.name, timeout, sig))
        self._t.join(5)
        if self in _procs:
            _procs.remove(self)
        return self.p.returncode

    def stop_clean(self):
        rc = self.stop()
        if rc != 0:
            # Its own warnings first (they may be far above a sanitizer's report), then the tail.
            warns = [ln for ln in self.lines if " warn: " in ln or " error: " in ln][-10:]
            raise AssertionError("%s exited %d; warnings:\n%s\nlast lines:\n%s" %
                                 (self.name, rc, "\n".join(warns), "\n".join(self.lines[-40:])))

    def kill(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
        if self in _procs:
            _procs.remove(self)


def _cleanup():
    for pr in list(_procs):
        try:
            os.killpg(pr.p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


atexit.register(_cleanup)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))


def hostport(s):
    host, port = s.rsplit(":", 1)
    return host.strip("[]"), int(port)


class LoopbackServer:
    """A TCP listener on a free loopback port, for fake engines written in a test: a thread
    accepts connections and runs serve(conn) for each in a thread of its own (conn with
    conn_timeout). stop() closes the listener and every connection it accepted, whether
    serve closed it or kept it."""

    def __init__(self, serve, conn_timeout=10):
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(128)
        self.srv.settimeout(0.2)
        self.hostport = "127.0.0.1:%d" % self.srv.getsockname()[1]
        self.url = "http://" + self.hostport
        self._serve, self._conn_timeout = serve, conn_timeout
        self._conns = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._accept, daemon=True)
        self._t.start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.srv.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.settimeout(self._conn_timeout)
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def stop(self):
        self._stop.set()
        self._t.join(5)
        self.srv.close()
        with self._lock:
            for conn in self._conns:
                conn.close()


class Mock:
    """admit-mock-engine on a free loopback port."""

    def __init__(self, *args):
        self.proc = Proc([MOCK, "--listen", "127.0.0.1:0"] + list(args),
                         ready=r"listening on (\S+)", name="mock")
        self.addr = hostport(self.proc.match.group(1))
        self.url = "http://%s:%d" % self.addr

    def metrics(self):
        return scrape(self.addr)

    def stop(self):
        self.proc.stop_clean()


class Admitd:
    """admitd on free loopback ports in front of an upstream URL."""

    def __init__(self, upstream, *args, env=None):
        # ADMITD_WRAP runs admitd under a tool (the valgrind smoke test sets it).
        argv = os.environ.get("ADMITD_WRAP", "").split() + [
            ADMITD, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
            "--upstream", upstream] + list(args)
        if not any(a.startswith("--publish") for a in args):
            argv += ["--publish", "tcp://127.0.0.1:0"]
        self.proc = Proc(argv, env=env, ready=r"ready listen=(\S+) metrics=(\S+) publish=(\S+)",
                         name="admitd", timeout=120 if os.environ.get("ADMITD_WRAP") else 30)
        self.addr = hostport(self.proc.match.group(1))
        self.maddr = hostport(self.proc.match.group(2))
        self.publish = self.proc.match.group(3)

    def metrics(self):
        return scrape(self.maddr)

    def wait_idle(self):
        """Waits until no request holds a slot; returns the metrics seen then."""
        return wait_for(lambda: (lambda m: m if m["dynamo_engine_request"] == 0 else None)(
            self.metrics()), what="dynamo_engine_request back to 0")

    def fill(self, count, queued, max_tokens=40):
        """Opens count long streaming requests and waits until queued of them wait in the
        queue. Returns the clients (close them to let go), each with a marker of its own
        (index i for the i-th) for check_own()."""
        holders = [RawClient(self.addr, marker=marker(i)) for i in range(count)]
        for h in holders:
            h.post("/v1/chat/completions", chat_body(max_tokens=max_tokens))
        wait_for(lambda: self.metrics()["dynamo_request_queue"] == queued,
                 what="%d requests queued" % queued)
        return holders

    def stop(self):
        self.proc.stop_clean()


def scrape(addr):
    """Returns {sample-with-labels: value} from a /metrics endpoint."""
    status, _, body = request(addr, "GET", "/metrics")
    assert status == 200, status
    out = {}
    for line in body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        out[name] = float(value)
    return out


def request(addr, method, path, body=None, headers=None, timeout=30):
    """One HTTP request on a new connection: (status, headers dict, body bytes)."""
    c = http.client.HTTPConnection(addr[0], addr[1], timeout=timeout)
    try:
        h = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def chat_body(max_tokens=8, stream=True, content="hello there"):
    return {"model": "mock-model", "stream": stream, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": content}]}


def raw_request_bytes(addr, path, body, extra=""):
    data = json.dumps(body).encode()
    return (("POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
             "Content-Length: %d\r\n%s\r\n") % (path, addr[0], addr[1], len(data), extra)
            ).encode() + data


class RawClient:
    """A client on a raw socket, for streaming reads, timing and abrupt hang-ups.

    With a marker (see marker()), every post() carries it as X-Request-Id (and, with auth, an
    Authorization made from it), and check_own(client) proves that what came back is this
    client's own answer; received keeps every byte read from the connection for that."""

    def __init__(self, addr, timeout=30, marker=None, auth=False):
        self.addr = addr
        self.s = socket.create_connection(addr, timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.received = bytearray()
        self.marker, self.auth = marker, auth

    def send(self, data):
        self.s.sendall(data)

    def post(self, path, body, extra=""):
        self.send(raw_request_bytes(self.addr, path, body,
                                    extra + marker_fields(self.marker, self.auth)))

    def _recv(self, size=65536):
        chunk = self.s.recv(size)
        self.received += chunk
        return chunk

    def _fill(self):
        chunk = self._recv()
        if not chunk:
            raise EOFError("connection closed")
        self.buf += chunk

    def read_head(self):
        """Reads the status line and headers: (status, {lowercase name: value})."""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        self.header_names = [ln.partition(":")[0].strip().lower() for ln in lines[1:]]
        return status, hdrs

    def read_body(self, hdrs, on_data=None):
        """Reads a Content-Length or chunked body; calls on_data(bytes, time) per piece.
        Returns (body, complete) where complete is False if the stream was cut."""
        body = b""
        if "content-length" in hdrs:
            n = int(hdrs["content-length"])
            try:
                while len(self.buf) < n:
                    self._fill()
            except (EOFError, ConnectionError):
                return self.buf, False
            body, self.buf = self.buf[:n], self.buf[n:]
            if on_data:
                on_data(body, time.monotonic())
            return body, True
        if hdrs.get("transfer-encoding", "").lower() != "chunked":
            try:
                while True:
                    self._fill()
            except (EOFError, ConnectionError):
                return self.buf, True
        try:
            while True:
                piece = self.read_chunk()
                if not piece:
                    return body, True
                body += piece
                if on_data:
                    on_data(piece, time.monotonic())
        except (EOFError, ConnectionError):
            return body, False

    def read_chunk(self):
        """Reads one chunk of a chunked body (the head already read): its bytes, b"" for the
        last one. Raises EOFError or ConnectionError if the connection ends first."""
        while b"\r\n" not in self.buf:
            self._fill()
        line, rest = self.buf.split(b"\r\n", 1)
        size = int(line.split(b";")[0], 16)
        while len(rest) < size + 2:
            self._fill()
            line, rest = self.buf.split(b"\r\n", 1)
        self.buf = rest[size + 2:]
        return rest[:size]

    def response(self, on_data=None):
        status, hdrs = self.read_head()
        body, complete = self.read_body(hdrs, on_data)
        return status, hdrs, body, complete

    def reset(self):
        """Hangs up with an RST (SO_LINGER 0)."""
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.s.close()

    def close(self):
        self.s.close()


def wait_for(pred, timeout=10, what="condition"):
    """Polls pred() until true; raises with what on timeout. Not a timing assertion: the
    timeout only bounds a hung test."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError("timed out waiting for %s (last: %r)" % (what, last))


def error_message(body):
    return json.loads(body)["error"]["message"]


class Tap:
    """Runs named checks and prints TAP; exits 1 if any failed.

    Switches from the environment, for the mutation check (tests/mutants/run.py):
    TAP_ONLY=fn,fn runs only the checks whose function has one of these names (the others
    are not listed at all; if none is left, the plan is "1..0 # SKIP" and the test passes
    without judging anything); TAP_FAIL_FAST=1 skips every check after the first that
    fails (one failure is enough to kill a mutant); TAP_CHECK=N runs only the Nth check (of
    those TAP_ONLY leaves), the one that failed on a mutant, to see it pass on the unmutated
    tree."""

    def __init__(self):
        self.n = 0
        self.failed = 0
        self.only = set(os.environ.get("TAP_ONLY", "").split(",")) - {""}
        self.fail_fast = os.environ.get("TAP_FAIL_FAST") == "1"
        self.nth = int(os.environ.get("TAP_CHECK") or 0)
        self.pos = 0  # the checks TAP_ONLY leaves, so far

    def run(self, name, fn, *args):
        if self.only and getattr(fn, "__name__", None) not in self.only:
            return
        self.pos += 1
        if self.nth and self.pos != self.nth:
            return
        self.n += 1
        global _running_check
        _running_check = getattr(fn, "__name__", "")
        if self.fail_fast and self.failed:
            print("ok %d - %s # SKIP an earlier check failed (TAP_FAIL_FAST)" % (self.n, name),
                  flush=True)
            return
        t0 = time.monotonic()
        try:
            fn(*args)
            print("ok %d - %s" % (self.n, name), flush=True)
        except Exception:  # noqa: BLE001 - every failure is reported, then the run goes on
            self.failed += 1
            print("not ok %d - %s" % (self.n, name), flush=True)
            # In TAP for the log, and on stderr, which meson prints for a failed test.
            for line in traceback.format_exc().splitlines():
                print("# " + line, flush=True)
            sys.stderr.write("not ok %d - %s\n%s" % (self.n, name, traceback.format_exc()))
            sys.stderr.flush()
        finally:
            for pr in list(_procs):
                if not pr.shared:
                    pr.kill()
            print("# check %d took %.1f s" % (self.n, time.monotonic() - t0), flush=True)

    def report(self, ok, name):
        """Records a check that ran elsewhere (e.g. in a Node.js script)."""
        self.n += 1
        if not ok:
            self.failed += 1
        print("%s %d - %s" % ("ok" if ok else "not ok", self.n, name), flush=True)

    def skip(self, name, reason):
        """A check that cannot run here: visible in TAP and in the CI's closing line."""
        self.n += 1
        print("ok %d - %s # SKIP %s" % (self.n, name, reason), flush=True)

    def done(self):
        if self.n == 0 and (self.only or self.nth):
            print("1..0 # SKIP no check here is %s" % (
                "named " + ",".join(sorted(self.only)) + " (TAP_ONLY)" if self.only and not self.pos
                else "number %d of %d (TAP_CHECK)" % (self.nth, self.pos)), flush=True)
            sys.exit(0)
        print("1..%d" % self.n, flush=True)
        sys.exit(1 if self.failed else 0)


# ---- exactly one answer per connection ----------------------------------------------------

def read_to_close(c, timeout=30):
    """Reads what is left on a RawClient's connection until the peer closes it. Returns
    (bytes, "eof" or "reset"). Silence for timeout seconds is a failure, not a close."""
    c.s.settimeout(timeout)
    data, c.buf = c.buf, b""
    try:
        while True:
            chunk = c._recv()
            if not chunk:
                return data, "eof"
            data += chunk
    except socket.timeout:
        raise AssertionError("the connection was still open after %ss of silence (read %r)" %
                             (timeout, data[:200]))
    except ConnectionError:
        return data, "reset"


def strict_response(c, on_data=None):
    """c.response(), after checking that the status line is the very first thing on the
    connection (RawClient.read_head alone would take stray bytes before it)."""
    while b"\r\n" not in c.buf:
        c._fill()
    first = c.buf.split(b"\r\n", 1)[0]
    assert re.match(rb"HTTP/1\.[01] \d{3}( |$)", first), "not a status line: %r" % first[:200]
    return c.response(on_data)


def only_answer(c, timeout=30):
    """Reads one whole answer and requires that nothing follows it: the client then shuts
    its sending side, and the connection must close with no further byte (no second
    status line, no stray bytes). Returns (status, headers, body)."""
    status, hdrs, body, complete = strict_response(c)
    assert complete, "answer %d cut short: %r" % (status, body[-200:])
    try:
        c.s.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # already closed by the peer: the read below sees it
    rest, _ = read_to_close(c, timeout)
    assert rest == b"", "bytes after the answer %d: %r" % (status, rest[:200])
    return status, hdrs, body


def tcp_sockets(ports):
    """The TCP sockets with one of ports at either end, from the kernel's socket table (ss,
    netlink: filtered in the kernel, so a busy table does not make it skip lines the way
    reading /proc/net/tcp can): [(state, recv_q, send_q, local_port, peer_port)]."""
    flt = " or ".join("sport = :%d or dport = :%d" % (p, p) for p in sorted(ports))
    out = subprocess.run(["ss", "-tanH", "( %s )" % flt], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    rows = []
    for line in out.splitlines():
        f = line.split()
        if len(f) < 5 or not f[4].rsplit(":", 1)[-1].isdigit():
            continue  # a listener: no peer
        rows.append((f[0], int(f[1]), int(f[2]), int(f[3].rsplit(":", 1)[1]),
                     int(f[4].rsplit(":", 1)[1])))
    return rows


# ---- each client gets its own answer ------------------------------------------------------
#
# The rule: every test with several clients at once gives each client a marker of its own
# (marker()), sent as X-Request-Id, and checks with check_own() that what the client got back
# is its own answer and holds nothing of another exchange. The mock engine echoes the marker
# as vLLM does (in the reply head, and as the base of every completion id); fake engines
# written in Python do the same with fake_reply_head() and own_completion(). Any cross-talk
# (another client's reply, request head, secret or stray bytes) fails the test.

MARKER_RX = re.compile(rb"mk-[A-Za-z0-9]+-[0-9]+-[0-9a-f]{12}")
# Fields only a request carries: one of them in a reply head is a piece of some request.
REQUEST_FIELDS = ("authorization", "proxy-authorization", "host", "cookie", "user-agent",
                  "expect", "x-admit-worker")
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([1-9][0-9]{2})(?: [^\r\n]*)?\r\n")
_FIELD_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+:[ \t]*[^\r\n]*")


def marker(index=None, test=None):
    """A marker no other client has: the test's name (by default the function of the Tap
    check running), the client's index (by default the next of a counter) and 48 random
    bits, in the characters the mock engine echoes (MARKER_RX finds it in any bytes)."""
    name = re.sub(r"[^A-Za-z0-9]", "", test or _running_check)[:40] or "test"
    return "mk-%s-%d-%s" % (name, next(_marker_seq) if index is None else index,
                            os.urandom(6).hex())


def marker_secret(m):
    """The bearer secret a client with marker m sends: it contains m, so a secret seen by
    another client is found as that client's foreign marker."""
    return "sk-" + m


def marker_headers(m, auth=False):
    """The request fields that carry marker m (nothing for None): X-Request-Id, and with auth
    Authorization: Bearer marker_secret(m)."""
    if m is None:
        return {}
    h = {"X-Request-Id": m}
    if auth:
        h["Authorization"] = "Bearer " + marker_secret(m)
    return h


def marker_fields(m, auth=False):
    """marker_headers() as raw header lines, for RawClient.post's extra."""
    return "".join("%s: %s\r\n" % kv for kv in marker_headers(m, auth).items())


def _foreign(raw, m):
    for hit in MARKER_RX.finditer(raw):
        if hit.group(0).decode() != m:
            lo = max(0, hit.start() - 120)
            raise AssertionError("client %s received another client's marker %s: ...%r..." % (
                m, hit.group(0).decode(), bytes(raw[lo:hit.end() + 160])))


def _dechunk(data):
    """A chunked body at the start of data, as far as it arrived: (payload, whether its last
    chunk came, bytes it took)."""
    out, pos = [], 0
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            return b"".join(out), False, len(data)
        size = int(data[pos:eol].split(b";")[0], 16)
        pos = eol + 2
        if size == 0:  # no trailer fields: the empty line ends the body
            assert data[pos:pos + 2] in (b"\r\n", b"\r", b""), "trailer: %r" % data[pos:pos + 80]
            return b"".join(out), data[pos:pos + 2] == b"\r\n", min(len(data), pos + 2)
        out.append(data[pos:pos + size])
        if len(data) < pos + size + 2:
            return b"".join(out), False, len(data)
        assert data[pos + size:pos + size + 2] == b"\r\n", "bad chunk end: %r" % (
            data[pos + size:pos + size + 8])
        pos += size + 2


def _status_line_begins(rest):
    """Whether rest (no CRLF in it) can be the start of a status line not read to its end."""
    template = b"HTTP/1.1 200 \r\n"
    rest = rest[:-1] if rest.endswith(b"\r") else rest
    probe = rest + template[len(rest):] if len(rest) < len(template) - 2 else rest + b"\r\n"
    return _STATUS_LINE.match(probe) is not None


def _ids_ok(obj, m, where, engine):
    """Checks one JSON answer or event: an id (a completion's) must be this client's; an
    answer that is not the engine's (no X-Request-Id) must be an error object (admitd's or
    the router's own)."""
    assert isinstance(obj, dict), "%s: not a JSON object: %r" % (where, obj)
    if "id" in obj:
        assert obj["id"] in ("chatcmpl-" + m, "cmpl-" + m), "%s: the id %r is not %s's" % (
            where, obj["id"], m)
    elif not engine:
        assert "error" in obj and isinstance(obj["error"], (dict, str)), (
            "%s: neither the engine's (no X-Request-Id) nor an error: %r" % (where, obj))


def _judge(status, fields, body, complete, m):
    """One parsed answer of the client with marker m (body None: only its head came)."""
    names = [k for k, _ in fields]
    for k in REQUEST_FIELDS:
        assert k not in names, "a request field %r in %s's reply head: %r" % (k, m, fields)
    rids = [v for k, v in fields if k == "x-request-id"]
    assert len(rids) <= 1, "several X-Request-Id in %s's reply head: %r" % (m, rids)
    assert rids == [] or rids[0] == m, "X-Request-Id %r in %s's reply" % (rids[0], m)
    ctype = dict(fields).get("content-type", "")
    if body is None:
        return
    # An engine's answer names the request; one without is admitd's or the router's own,
    # which is never a 200 and always an error body.
    assert rids or status != 200, "a 200 without %s's X-Request-Id: %r" % (m, fields)
    if ctype.startswith("text/event-stream"):
        for ev in body.split(b"\n\n")[:-1]:  # whole events only: the last is cut or empty
            for line in ev.split(b"\n"):
                if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                    _ids_ok(json.loads(line[5:]), m, "an SSE event", bool(rids))
    elif complete and body.strip():
        try:
            obj = json.loads(body)
        except ValueError:
            raise AssertionError("%s's %d answer is not JSON: %r" % (m, status, body[:300]))
        _ids_ok(obj, m, "the %d answer" % status, bool(rids))


def parse_own(raw, m):
    """Checks that raw, every byte one client with marker m read from its connection, is
    nothing but answers to it: each starts with a valid status line (no foreign byte before
    it), its head has well-formed fields, no request field (Authorization, Host, ...) and no
    X-Request-Id but m, every completion id in its body (the JSON answer, each SSE event but
    [DONE]) is chatcmpl-m or cmpl-m, an answer without m (admitd's or the router's own, 529,
    503, 404, ...) is an error object, and no other client's marker appears anywhere.
    Partial bytes (a head not read to the end, a stream cut) are judged as far as they go.
    Returns [(status, {lowercase name: value}, body, complete)] for the answers seen."""
    assert m, "parse_own needs the client's marker"
    _foreign(raw, m)
    try:
        return _answers(raw, m)
    except ValueError as e:  # a length, chunk size or JSON text that does not parse
        raise AssertionError("%s's bytes do not parse (%s): %r" % (m, e, bytes(raw[:300])))


def _answers(raw, m):
    """parse_own's walk over the answers in raw, after the marker scan."""
    out, pos = [], 0
    while pos < len(raw):
        rest = raw[pos:]
        st = _STATUS_LINE.match(rest)
        if st is None:
            assert b"\r\n" not in rest and _status_line_begins(rest), (
                "not a status line in %s's bytes at %d: %r" % (m, pos, rest[:300]))
            break  # the status line was not read to its end
        end = rest.find(b"\r\n\r\n", st.end() - 2)
        fields = []
        # A head not read to its end: its whole lines are judged.
        for line in rest[st.end():end if end >= 0 else rest.rfind(b"\r\n")].split(b"\r\n"):
            if not line:
                continue
            assert _FIELD_LINE.fullmatch(line), "not a header field in %s's reply head: %r" % (
                m, line[:300])
            k, _, v = line.partition(b":")
            fields.append((k.decode("latin-1").lower(), v.strip().decode("latin-1")))
        status, hdrs = int(st.group(1)), dict(fields)
        if end < 0:
            _judge(status, fields, None, False, m)
            break
        data = rest[end + 4:]
        if status < 200 or status in (204, 304):
            body, complete, used = b"", True, 0
        elif "content-length" in hdrs:
            n = int(hdrs["content-length"])
            body, complete, used = data[:n], len(data) >= n, min(n, len(data))
        elif hdrs.get("transfer-encoding", "").lower() == "chunked":
            body, complete, used = _dechunk(data)
        else:
            body, complete, used = data, True, len(data)
        _judge(status, fields, body, complete, m)
        if status >= 200:
            out.append((status, hdrs, body, complete))
        pos += end + 4 + used
        if not complete:
            break
    return out


def check_own(c):
    """parse_own() over everything RawClient c (made with a marker) has read so far and
    whatever has arrived unread: that is only looked at (MSG_PEEK), so the test reads or
    hangs up on the connection as it would have without the check."""
    waiting = b""
    try:
        # Not MSG_DONTWAIT alone: on a socket with a timeout Python waits out the timeout.
        if select.select([c.s], [], [], 0)[0]:
            waiting = c.s.recv(1 << 20, socket.MSG_PEEK)
    except (OSError, ValueError):  # the connection is gone, or closed by the test
        pass
    return parse_own(bytes(c.received) + waiting, c.marker)


def close_own(clients):
    """check_own() each client, then closes it (the end of a test's concurrent clients)."""
    for c in clients:
        check_own(c)
    for c in clients:
        c.close()


def own_response(c, on_data=None):
    """strict_response(c), then check_own(c): the answer read, proven c's own. When what
    came is no answer at all, the rest of its head is read (for 2 s at most) so that the
    failure names the other client whose bytes they are, if they carry a marker."""
    try:
        r = strict_response(c, on_data)
    except AssertionError:
        deadline = time.monotonic() + 2
        try:
            while b"\r\n\r\n" not in c.received and time.monotonic() < deadline:
                c.s.settimeout(max(0.01, deadline - time.monotonic()))
                if not c._recv():
                    break
        except OSError:
            pass
        check_own(c)
        raise
    check_own(c)
    return r


def own_request(addr, path, body, m, auth=False, timeout=30, method="POST", extra=""):
    """One request on a new connection, carrying marker m (body: a JSON value, or None for
    none; extra: more header lines); the answer must be the client's own (check_own).
    Returns (status, headers dict, body bytes)."""
    c = RawClient(addr, timeout=timeout, marker=m, auth=auth)
    try:
        if method == "POST":
            c.post(path, body, extra)
        else:
            data = json.dumps(body).encode() if body is not None else b""
            c.send(("%s %s HTTP/1.1\r\nHost: %s:%d\r\n%s%s%s\r\n" % (
                method, path, addr[0], addr[1], extra, marker_fields(m, auth),
                "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
                if data else "")).encode() + data)
        if method == "HEAD":
            status, hdrs = c.read_head()
            check_own(c)
            return status, hdrs, b""
        status, hdrs, data, complete = own_response(c)
        assert complete, "%s's answer %d was cut: %r" % (m, status, data[-200:])
        return status, hdrs, data
    finally:
        c.close()


# For fake engines written in Python.

def request_marker(head):
    """The X-Request-Id of a request head, or None: what a fake engine echoes. head is the
    raw bytes, or the headers of http.server's handler (self.headers)."""
    if not isinstance(head, bytes):
        return head.get("X-Request-Id")
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"x-request-id":
            return v.strip().decode("latin-1")
    return None


def fake_reply_head(head):
    """The header line a fake engine adds to its reply head for the request head it read:
    "X-Request-Id: ...\\r\\n", or "" when the request carried none."""
    m = request_marker(head)
    return "X-Request-Id: %s\r\n" % m if m else ""


def own_completion(head, chat=True):
    """The completion id a fake engine puts in its answer to the request head it read, as the
    mock engine does: chatcmpl-<marker> / cmpl-<marker>, or a fixed one without a marker."""
    return "%s-%s" % ("chatcmpl" if chat else "cmpl", request_marker(head) or "fake")
