#!/usr/bin/env python3
"""admitd benchmark driver (issue 7). Python 3 standard library only.

Runs each scenario against the mock engine directly (the ceiling), admitd, HAProxy and
nginx (where it fits), in interleaved rounds (A B C D, A B C D, ...) so drift cancels, and
prints one Markdown table per scenario with medians over the rounds. It only measures and
prints: it never asserts a timing. Normally started by tests/bench/run.sh.

    python3 tests/bench/run.py --build build-bench [--rounds 3] [--duration 5]
                               [--scenarios passthrough,overload,streaming,scale,publish]
"""
import argparse
import json
import os
import re
import resource
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROCS = []  # every process we started, stopped in stop_all()
ARGS = None


# ---------------------------------------------------------------- processes

class Proc:
    """A child in its own process group (so nginx workers die with their master)."""

    def __init__(self, name, argv, stdout_pipe=False):
        self.name = name
        self.logpath = os.path.join(ARGS.workdir, name + ".log")
        self.log = open(self.logpath, "wb")
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE if stdout_pipe else self.log,
                                  stderr=self.log, start_new_session=True)
        self.pid = self.p.pid
        PROCS.append(self)

    def text(self):
        with open(self.logpath, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_line(self, regex, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(regex, self.text())
            if m:
                return m
            if self.p.poll() is not None:
                raise RuntimeError("%s exited (%s): %s" % (self.name, self.p.returncode,
                                                           self.text()[-500:]))
            time.sleep(0.02)
        raise RuntimeError("%s: no line matching %r within %.0fs" % (self.name, regex, timeout))

    def stop(self):
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.p.wait(timeout=wait)
                # the group may still hold children (nginx workers): one more pass kills them
            except subprocess.TimeoutExpired:
                continue
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.log.close()


def stop_all():
    while PROCS:
        PROCS.pop().stop()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.p.poll() is not None:
            raise RuntimeError("%s exited: %s" % (proc.name, proc.text()[-500:]))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s: port %d not open within %.0fs" % (proc.name, port, timeout))


def fill(template, name, **kv):
    with open(os.path.join(HERE, template)) as f:
        text = f.read()
    for k, v in kv.items():
        text = text.replace("@%s@" % k, str(v))
    path = os.path.join(ARGS.workdir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def start_mock(tag, *extra):
    p = Proc("mock-" + tag, [os.path.join(ARGS.build, "admit-mock-engine"), "--listen",
                             "127.0.0.1:0", "--log-level", "warn" if False else "info"] + list(extra))
    addr = p.wait_line(r"listening on (\S+)").group(1)
    return p, addr


def start_admitd(tag, upstream, n, q, *extra):
    p = Proc("admitd-" + tag, [os.path.join(ARGS.build, "admitd"), "--upstream", "http://" + upstream,
                               "--engine-request-limit", str(n), "--request-queue-limit", str(q),
                               "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                               "--publish", "tcp://127.0.0.1:0"] + list(extra))
    m = p.wait_line(r"ready listen=(\S+) metrics=(\S+) publish=(\S+)")
    p.addr, p.metrics, p.publish = m.group(1), m.group(2), m.group(3)
    return p, p.addr


def start_haproxy(tag, upstream, n, q, queue_timeout_ms=60000):
    port = free_port()
    cfg = fill("haproxy.cfg.in", "haproxy-%s.cfg" % tag, DIR=ARGS.workdir, PORT=port,
               UPSTREAM=upstream, N=n, Q=q, QUEUE_TIMEOUT_MS=queue_timeout_ms,
               MAXCONN=max(1000, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2 - 100))
    p = Proc("haproxy-" + tag, ["haproxy", "-db", "-f", cfg])
    wait_port(port, p)
    return p, "127.0.0.1:%d" % port


def start_nginx(tag, upstream):
    port = free_port()
    d = os.path.join(ARGS.workdir, "nginx-" + tag)
    os.makedirs(d, exist_ok=True)
    conf = fill("nginx.conf.in", "nginx-%s.conf" % tag, DIR=d, PORT=port, UPSTREAM=upstream)
    p = Proc("nginx-" + tag, ["nginx", "-p", d, "-e", os.path.join(d, "nginx-error.log"), "-c", conf])
    wait_port(port, p)
    # the worker does the work; measure it, not the master
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/task/%d/children" % (p.pid, p.pid)) as f:
                kids = f.read().split()
            if kids:
                p.work_pid = int(kids[0])
                break
        except OSError:
            pass
        time.sleep(0.05)
    return p, "127.0.0.1:%d" % port


def work_pid(proc):
    return getattr(proc, "work_pid", proc.pid) if proc else None


def cpu_seconds(pid):
    """utime+stime of a process, in seconds (0 when pid is None)."""
    if pid is None:
        return 0.0
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ---------------------------------------------------------------- load generators

def wrk(addr, script, conns, duration):
    argv = ["wrk", "-t1", "-c%d" % conns, "-d%ds" % duration, "--latency", "--timeout", "10s",
            "-s", os.path.join(HERE, script), "http://%s/v1/chat/completions" % addr]
    out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=duration + 30).stdout.decode(errors="replace")
    r = {"status": {}}
    for line in out.splitlines():
        if line.startswith("BENCH status"):
            _, _, s, n = line.split()
            r["status"][int(s)] = int(n)
        elif line.startswith("BENCH "):
            for kv in line.split()[1:]:
                k, v = kv.split("=")
                r[k] = int(v)
    if "requests" not in r:
        raise RuntimeError("wrk gave no result: " + out[-400:])
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    r["errors"] = sum(r[k] for k in ("connect_err", "read_err", "write_err", "timeout_err"))
    return r


def http_request(stream, max_tokens, extra=None):
    body = {"model": "mock-model", "stream": stream, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "hello benchmark"}]}
    body.update(extra or {})
    b = json.dumps(body).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(b)) + b


class Stream(threading.Thread):
    """One SSE stream read on a raw socket; records the arrival time of every `data:` event."""

    def __init__(self, addr, max_tokens, timeout=30.0):
        super().__init__(daemon=True)
        host, port = addr.rsplit(":", 1)
        self.addr = (host, int(port))
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.events = []      # monotonic time of each data: event ([DONE] excluded)
        self.t_send = None
        self.t_first = None   # when the status line arrived
        self.status = None
        self.done = False     # saw [DONE]
        self.error = None
        self.first = threading.Event()  # set when the status line arrived
        self.stop_flag = False
        self.sock = None

    def run(self):
        try:
            self.sock = socket.create_connection(self.addr, timeout=self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.t_send = time.monotonic()
            self.sock.sendall(http_request(True, self.max_tokens))
            buf = bytearray()
            pos = 0
            while not self.stop_flag:
                data = self.sock.recv(65536)
                now = time.monotonic()
                if not data:
                    break
                buf += data
                if self.status is None and b"\r\n" in buf:
                    self.status = int(buf.split(b" ", 2)[1])
                    self.t_first = now
                    self.first.set()
                while True:
                    i = buf.find(b"\ndata: ", pos)
                    if i < 0:
                        pos = max(pos, len(buf) - 7)
                        break
                    if buf.startswith(b"\ndata: [DONE]", i):
                        self.done = True
                    elif i + 7 < len(buf) or True:
                        self.events.append(now)
                    pos = i + 7
                if self.done:
                    break
                if len(buf) > 1 << 20:  # keep memory bounded on long streams
                    del buf[:pos]
                    pos = 0
        except OSError as e:
            if not self.stop_flag:
                self.error = str(e)
        finally:
            self.first.set()
            if self.sock:
                self.sock.close()

    def close(self):
        self.stop_flag = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def med(values):
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def f(x, digits=1):
    return "-" if x != x else ("%.*f" % (digits, x))


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def gnuplot_bars(name, ylabel, labels, values):
    if not shutil.which("gnuplot"):
        return None
    dat = os.path.join(ARGS.out, name + ".dat")
    with open(dat, "w") as fh:
        for l, v in zip(labels, values):
            fh.write('"%s" %s\n' % (l, "0" if v != v else "%.3f" % v))
    png = os.path.join(ARGS.out, name + ".png")
    script = ('set terminal pngcairo size 800,450\nset output "%s"\nset style data histograms\n'
              'set style fill solid 0.8\nset boxwidth 0.7\nset yrange [0:*]\nset grid ytics\n'
              'set ylabel "%s"\nset title "%s"\nunset key\n'
              'plot "%s" using 2:xtic(1) lc rgb "#3060a0", "" using 0:2:(sprintf("%%.0f",$2)) '
              'with labels offset 0,1 notitle\n' % (png, ylabel, name, dat))
    subprocess.run(["gnuplot"], input=script.encode(), timeout=30, check=True)
    return png


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


# ---------------------------------------------------------------- scenarios

def sc_passthrough():
    n, q = 1000, 16
    mock, up = start_mock("pt", "--speedup-ratio", "0")
    targets = [("direct", None, up)]
    a, aaddr = start_admitd("pt", up, n, q)
    targets.append(("admitd", a, aaddr))
    h, haddr = start_haproxy("pt", up, n, q)
    targets.append(("haproxy", h, haddr))
    x, xaddr = start_nginx("pt", up)
    targets.append(("nginx", x, xaddr))
    for name, p, addr in targets:  # warm-up: connections, caches
        wrk(addr, "post.lua", 64, 1)
    res = {name: [] for name, _, _ in targets}
    for rnd in range(ARGS.rounds):
        for name, p, addr in targets:
            c0 = cpu_seconds(work_pid(p))
            m0 = cpu_seconds(mock.pid)
            r = wrk(addr, "post.lua", 64, ARGS.duration)
            r["cpu_us"] = (cpu_seconds(work_pid(p)) - c0) * 1e6 / max(1, r["requests"]) if p else float("nan")
            r["mock_cpu_us"] = (cpu_seconds(mock.pid) - m0) * 1e6 / max(1, r["requests"])
            res[name].append(r)
            log("passthrough round %d %-8s %8.0f req/s p50 %.2f ms p99 %.2f ms non-2xx %d err %d"
                % (rnd + 1, name, r["rps"], r["p50_us"] / 1e3, r["p99_us"] / 1e3, r["status_err"], r["errors"]))
    direct = med([r["rps"] for r in res["direct"]])
    rows, labels, vals = [], [], []
    for name, _, _ in targets:
        rs = res[name]
        rps = med([r["rps"] for r in rs])
        labels.append(name)
        vals.append(rps)
        rows.append([name, "%.0f" % rps, "%.2f" % (rps / direct), f(med([r["p50_us"] for r in rs]) / 1e3, 2),
                     f(med([r["p99_us"] for r in rs]) / 1e3, 2), f(med([r["cpu_us"] for r in rs])),
                     sum(r["status_err"] + r["errors"] for r in rs)])
    ad, ha = med([r["rps"] for r in res["admitd"]]), med([r["rps"] for r in res["haproxy"]])
    png = gnuplot_bars("passthrough", "requests/s (median of %d rounds)" % ARGS.rounds, labels, vals)
    text = table(["target", "req/s", "vs direct", "p50 ms", "p99 ms", "proxy CPU us/req", "non-2xx+errors"], rows)
    text += "\n\nadmitd / HAProxy throughput: **%.2f**. wrk -t1 -c64, %d s per run, %d rounds; POST max_tokens 1, " \
            "mock `--speedup-ratio 0`; N=%d for admitd and HAProxy." % (ad / ha, ARGS.duration, ARGS.rounds, n)
    if png:
        text += " Chart: `%s`." % os.path.relpath(png, ROOT)
    return text


def hold_streams(addr, n, q):
    """Fill N slots (streams that started) and Q queue places; returns the streams."""
    held = []
    for i in range(n + q):
        s = Stream(addr, 100000, timeout=120)
        s.start()
        held.append(s)
        if i < n:
            if not s.first.wait(5) or s.status != 200:
                raise RuntimeError("held stream %d was not admitted (status %s, %s)" % (i, s.status, s.error))
        else:
            time.sleep(0.05)
            if s.status is not None:
                raise RuntimeError("stream %d meant to queue got status %s" % (i, s.status))
    return held


def gaps_ms(times, t0, t1):
    ts = [t for t in times if t0 <= t <= t1]
    return [(b - a) * 1e3 for a, b in zip(ts, ts[1:])]


def sc_overload():
    n, q = 4, 4
    mock, up = start_mock("ov", "--speedup-ratio", "0", "--token-interval-ms", "10")
    kinds = ["admitd", "haproxy"]
    res = {k: [] for k in kinds}
    for rnd in range(ARGS.rounds):
        for kind in kinds:
            tag = "ov-%s-%d" % (kind, rnd)
            if kind == "admitd":
                p, addr = start_admitd(tag, up, n, q, "--queue-timeout-ms", "60000")
            else:
                p, addr = start_haproxy(tag, up, n, q, 60000)
            held = []
            try:
                held = hold_streams(addr, n, q)
                t0 = time.monotonic()
                time.sleep(2.0)
                t1 = time.monotonic()
                c0 = cpu_seconds(p.pid)
                r = wrk(addr, "flood.lua", 64, ARGS.duration)
                t2 = time.monotonic()
                r["cpu_us"] = (cpu_seconds(p.pid) - c0) * 1e6 / max(1, r["requests"])
                reject = 529 if kind == "admitd" else 503
                r["rejects"] = r["status"].get(reject, 0)
                r["rejects_s"] = r["rejects"] / (r["duration_us"] / 1e6)
                before = gaps_ms(held[0].events, t0, t1)
                during = gaps_ms(held[0].events, t1 + 0.2, t2 - 0.2)
                r["gap_before_p50"], r["gap_during_p50"] = pct(before, 50), pct(during, 50)
                r["gap_before_p99"], r["gap_during_p99"] = pct(before, 99), pct(during, 99)
                r["alive"] = sum(1 for s in held[:n] if s.is_alive() and s.error is None)
                r["queued_alive"] = sum(1 for s in held[n:] if s.is_alive() and s.status is None)
                res[kind].append(r)
                log("overload round %d %-8s %8.0f rejects/s (%s) p99 %.2f ms gap p50 %.2f -> %.2f ms alive %d+%d"
                    % (rnd + 1, kind, r["rejects_s"], r["status"], r["p99_us"] / 1e3, r["gap_before_p50"],
                       r["gap_during_p50"], r["alive"], r["queued_alive"]))
            finally:
                for s in held:
                    s.close()
                PROCS.remove(p)
                p.stop()
    rows = []
    for kind in kinds:
        rs = res[kind]
        tot = sum(r["requests"] for r in rs)
        rej = sum(r["rejects"] for r in rs)
        rows.append([kind, "529" if kind == "admitd" else "503", "%.0f" % med([r["rejects_s"] for r in rs]),
                     "%.1f%%" % (100.0 * rej / max(1, tot)),
                     f(med([r["p50_us"] for r in rs]) / 1e3, 2), f(med([r["p99_us"] for r in rs]) / 1e3, 2),
                     f(med([r["cpu_us"] for r in rs])),
                     "%s / %s" % (f(med([r["gap_before_p50"] for r in rs]), 2), f(med([r["gap_during_p50"] for r in rs]), 2)),
                     "%s / %s" % (f(med([r["gap_before_p99"] for r in rs]), 2), f(med([r["gap_during_p99"] for r in rs]), 2)),
                     "%d+%d" % (min(r["alive"] for r in rs), min(r["queued_alive"] for r in rs))])
    ratio = med([r["rejects_s"] for r in res["admitd"]]) / med([r["rejects_s"] for r in res["haproxy"]])
    text = table(["target", "reject status", "rejects/s", "share rejected", "p50 ms to reject", "p99 ms to reject",
                  "proxy CPU us/reject", "held gap p50 ms before/during", "held gap p99 ms before/during",
                  "held alive (slot+queue)"], rows)
    text += ("\n\nadmitd / HAProxy rejects/s: **%.2f**. N=%d, Q=%d held full by %d streams (mock `--token-interval-ms 10`, "
             "so the ideal gap is 10 ms); flood: wrk -t1 -c64 %d s. Direct and nginx: not applicable "
             "(no admission limit)." % (ratio, n, q, n + q, ARGS.duration))
    return text


def run_streams(addr, count, conc, tokens):
    out = []
    while len(out) < count:
        batch = [Stream(addr, tokens) for _ in range(min(conc, count - len(out)))]
        for s in batch:
            s.start()
        for s in batch:
            s.join(60)
            out.append(s)
    return out


def sc_streaming():
    tokens, count, conc, interval = 256, ARGS.streams, 2, 5
    mock, up = start_mock("st", "--speedup-ratio", "0", "--token-interval-ms", str(interval))
    targets = [("direct", None, up)]
    targets.append(("admitd",) + start_admitd("st", up, 1000, 16))
    targets.append(("haproxy",) + start_haproxy("st", up, 1000, 16))
    targets.append(("nginx",) + start_nginx("st", up))
    for name, _, addr in targets:
        run_streams(addr, 1, 1, 4)
    res = {name: {"ttft": [], "gaps": [], "complete": 0, "n": 0, "coalesced": 0} for name, _, _ in targets}
    for rnd in range(ARGS.rounds):
        for name, _, addr in targets:
            ss = run_streams(addr, count, conc, tokens)
            d = res[name]
            for s in ss:
                d["n"] += 1
                if s.done and s.events:
                    d["complete"] += (len(s.events) >= tokens)
                    d["ttft"].append((s.events[0] - s.t_send) * 1e3)
                    g = [(b - a) * 1e3 for a, b in zip(s.events, s.events[1:])]
                    d["gaps"] += g
                    d["coalesced"] += sum(1 for x in g if x < 0.5)
            log("streaming round %d %-8s ttft p50 %.2f ms gap p50 %.3f ms p99 %.3f ms"
                % (rnd + 1, name, pct(d["ttft"], 50), pct(d["gaps"], 50), pct(d["gaps"], 99)))
    base = res["direct"]
    rows = []
    for name, _, _ in targets:
        d = res[name]
        rows.append([name, "%d/%d" % (d["complete"], d["n"]), f(pct(d["ttft"], 50), 2), f(pct(d["ttft"], 99), 2),
                     f(pct(d["ttft"], 50) - pct(base["ttft"], 50), 3), f(pct(d["gaps"], 50), 3), f(pct(d["gaps"], 99), 3),
                     f(pct(d["gaps"], 50) - pct(base["gaps"], 50), 3), f(pct(d["gaps"], 99) - pct(base["gaps"], 99), 3),
                     "%.2f%%" % (100.0 * d["coalesced"] / max(1, len(d["gaps"])))])
    text = table(["target", "complete streams", "TTFT p50 ms", "TTFT p99 ms", "added TTFT p50 ms", "gap p50 ms",
                  "gap p99 ms", "added gap p50 ms", "added gap p99 ms", "gaps < 0.5 ms (coalesced)"], rows)
    text += ("\n\n%d tokens per stream at a fixed %d ms gap (mock `--token-interval-ms %d`), %d streams per target per "
             "round, %d at a time, %d rounds; percentiles over all streams and gaps. A buffering proxy would show "
             "coalesced gaps near 0 and a large TTFT." % (tokens, interval, interval, count, conc, ARGS.rounds))
    return text


class Holder:
    """`count` non-streaming requests opened at once with non-blocking connects (one thread)."""

    def __init__(self, addr, count, hold_s):
        host, port = addr.rsplit(":", 1)
        self.sel = selectors.DefaultSelector()
        self.req = http_request(False, hold_s)
        self.pending = {}   # socket -> bytes left to send
        self.first = {}     # socket -> first bytes of the answer
        self.sent = self.ok = self.bad = 0
        self.left = 0
        for _ in range(count):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex((host, int(port)))
            self.pending[s] = self.req
            self.sel.register(s, selectors.EVENT_WRITE)
            self.left += 1

    def step(self, timeout):
        for key, ev in self.sel.select(timeout):
            s = key.fileobj
            if ev & selectors.EVENT_WRITE:
                try:
                    n = s.send(self.pending[s])
                except OSError:
                    self._finish(s, False)
                    continue
                self.pending[s] = self.pending[s][n:]
                if not self.pending[s]:
                    self.sent += 1
                    self.sel.modify(s, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if data and s not in self.first:
                self.first[s] = data[:12]
            if not data or data.endswith(b"}") or data.endswith(b"\r\n0\r\n\r\n"):
                self._finish(s, self.first.get(s, b"").startswith(b"HTTP/1.1 200"))

    def _finish(self, s, ok):
        self.sel.unregister(s)
        s.close()
        self.left -= 1
        if ok:
            self.ok += 1
        else:
            self.bad += 1

    def run_until(self, pred, timeout):
        deadline = time.monotonic() + timeout
        while not pred() and time.monotonic() < deadline:
            self.step(0.05)

    def close(self):
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        self.sel.close()


def sc_scale():
    count, hold_s = ARGS.scale_conns, 15
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = min(count, soft // 2 - 500)
    mock, up = start_mock("sc", "--speedup-ratio", "0", "--token-interval-ms", "1000", "--max-num-seqs", "1000000")
    rows = []
    for kind in ("admitd", "haproxy"):
        if kind == "admitd":
            p, addr = start_admitd("sc", up, 100000, 16)
        else:
            p, addr = start_haproxy("sc", up, 100000, 16)
        try:
            for _ in range(3):  # warm-up
                w = Holder(addr, 20, 1)
                w.run_until(lambda: w.left == 0, 10)
                w.close()
            base = rss_kib(p.pid)
            c0 = cpu_seconds(p.pid)
            t0 = time.monotonic()
            h = Holder(addr, count, hold_s)
            try:
                h.run_until(lambda: h.sent == count, 60)
                t_open = time.monotonic() - t0
                # every request is sent: sample RSS while they are all held (none answered yet)
                peak, held = rss_kib(p.pid), count - h.ok - h.bad
                while time.monotonic() - t0 < hold_s - 1 and h.ok + h.bad == 0:
                    h.step(0.1)
                    peak = max(peak, rss_kib(p.pid))
                held = count - h.ok - h.bad
                h.run_until(lambda: h.left == 0, 60)
                cpu = cpu_seconds(p.pid) - c0
            finally:
                h.close()
            rows.append([kind, count, "%.1f" % t_open, held, "%.1f" % (base / 1024.0), "%.1f" % (peak / 1024.0),
                         "%.2f" % ((peak - base) / max(1, held)), "%.1f" % (cpu * 1e6 / max(1, count)),
                         "%d/%d" % (h.ok, count)])
            log("scale %s: %s" % (kind, rows[-1]))
        finally:
            PROCS.remove(p)
            p.stop()
    text = table(["proxy", "requests", "s to send all", "held at RSS peak", "RSS base MiB", "RSS peak MiB",
                  "KiB per open request",
                  "CPU us per request", "answered 200"], rows)
    text += ("\n\nAll requests opened at once (non-blocking connects) by one Python client and held ~%d s by the mock "
             "(`--token-interval-ms 1000`, non-streaming, max_tokens %d); N=100000 so nothing queues. "
             "CPU is the proxy's utime+stime from opening to the last answer, divided by the requests; "
             "open file limit %d." % (hold_s, hold_s, soft))
    return text


def sc_publish():
    iters = ARGS.publish_iters
    mock, up = start_mock("pub", "--speedup-ratio", "0", "--token-interval-ms", "50")
    a, addr = start_admitd("pub", up, 4, 4)
    # --stamp: admit-top stamps each message when nng hands it over, on CLOCK_MONOTONIC (the
    # clock of time.monotonic()), so the Python reader's own wake-up is not measured.
    top = Proc("admit-top", [os.path.join(ARGS.build, "admit-top"), "--json", "--stamp", a.publish],
               stdout_pipe=True)
    lines = []
    cond = threading.Condition()

    def reader():
        for line in top.p.stdout:
            try:
                stamp, doc = line.decode().split(" ", 1)
                t = int(stamp) / 1e6
                m = json.loads(doc)
            except ValueError:
                continue
            with cond:
                lines.append((t, m.get("engine_requests")))
                cond.notify_all()

    threading.Thread(target=reader, daemon=True).start()

    def wait_for(pred, after, timeout):
        deadline = time.monotonic() + timeout
        with cond:
            while True:
                for t, er in lines:
                    if t >= after and er is not None and pred(er):
                        return t
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                cond.wait(left)

    if wait_for(lambda er: True, 0, 5) is None:
        raise RuntimeError("admit-top printed no message within 5 s: " + top.text()[-300:])
    lat, first, missed = [], [], 0
    for _ in range(iters):
        if wait_for(lambda er: er == 0, time.monotonic() - 10, 3) is None:
            missed += 1
        t0 = time.monotonic()
        s = Stream(addr, 2)
        s.start()
        t = wait_for(lambda er: er >= 1, t0, 3)
        s.join(10)
        # From the moment the request is sent on an open connection (Stream.t_send): the
        # thread start and the TCP connect before it are not publishing.
        if s.t_first and s.t_send:
            first.append((s.t_first - s.t_send) * 1e3)
        if t is None or s.t_send is None:
            missed += 1
        else:
            lat.append((t - s.t_send) * 1e3)
        time.sleep(0.05)
    text = table(["subscriber", "samples", "p50 ms", "p99 ms", "max ms", "missed",
                  "for comparison: request to its response headers p50 / p99 ms"],
                 [["admit-top --json (nng SUB)", len(lat), f(pct(lat, 50), 2), f(pct(lat, 99), 2),
                   f(max(lat) if lat else float("nan"), 2), missed,
                   "%s / %s" % (f(pct(first, 50), 2), f(pct(first, 99), 2))]])
    text += ("\n\nFrom sending one streaming request on an open connection to admitd (N=4) to admit-top receiving "
             "the first message with engine_requests >= 1 (admit-top --stamp: the receive time on CLOCK_MONOTONIC, "
             "the clock of the sender's stamp); includes admitd reading and parsing the request.")
    return text


SCENARIOS = [("passthrough", "1. Pass-through", sc_passthrough),
             ("overload", "2. Overload shedding", sc_overload),
             ("streaming", "3. Streaming", sc_streaming),
             ("scale", "4. Scale", sc_scale),
             ("publish", "5. Load publishing latency", sc_publish)]


def machine():
    def first(argv):
        try:
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
            return r.stdout.decode(errors="replace").splitlines()[0].strip()
        except (OSError, IndexError, subprocess.SubprocessError):
            return "absent"
    model = "unknown"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return ("nproc %d, %s, kernel %s; %s; %s; %s" %
            (os.cpu_count(), model, os.uname().release, first(["haproxy", "-v"]).split(" - ")[0],
             first(["nginx", "-v"]), first(["wrk", "-v"]).split(" Copyright")[0]))


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--out", default=None, help="default: BUILD/bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    ap.add_argument("--streams", type=int, default=10, help="streams per target per round (scenario 3)")
    ap.add_argument("--scale-conns", type=int, default=10000)
    ap.add_argument("--publish-iters", type=int, default=50)
    ap.add_argument("--scenarios", default=",".join(s[0] for s in SCENARIOS))
    ARGS = ap.parse_args()
    ARGS.build = os.path.abspath(ARGS.build)
    ARGS.out = os.path.abspath(ARGS.out or os.path.join(ARGS.build, "bench"))
    ARGS.workdir = os.path.join(ARGS.out, "work")
    shutil.rmtree(ARGS.workdir, ignore_errors=True)
    os.makedirs(ARGS.workdir)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for lim in (65536, hard):  # raising the hard limit needs CAP_SYS_RESOURCE; else use the hard one
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (lim, max(lim, hard)))
            break
        except (ValueError, OSError):
            continue

    def on_signal(sig, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)

    wanted = ARGS.scenarios.split(",")
    mach = machine()
    parts = ["# admitd benchmarks", "", "Machine: " + mach, "",
             "Run: %s, %d rounds interleaved, medians." % (time.strftime("%Y-%m-%d %H:%M"), ARGS.rounds)]
    print("Machine: " + mach + "\n", flush=True)
    try:
        for key, title, fn in SCENARIOS:
            if key not in wanted:
                text = "not measured: not selected (--scenarios)"
            else:
                log("scenario %s" % key)
                t0 = time.monotonic()
                try:
                    text = fn()
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # a failed scenario is reported, the others still run
                    text = "not measured: %s: %s" % (type(e).__name__, e)
                finally:
                    stop_all()
                log("scenario %s took %.0f s" % (key, time.monotonic() - t0))
            block = "## %s\n\n%s\n" % (title, text)
            print(block, flush=True)
            parts += ["", block]
            with open(os.path.join(ARGS.out, "results.md"), "w") as fh:
                fh.write("\n".join(parts))
    finally:
        stop_all()
    log("wrote %s" % os.path.join(ARGS.out, "results.md"))


if __name__ == "__main__":
    main()
