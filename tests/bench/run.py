#!/usr/bin/env python3
"""admitd benchmark driver (issue 7). Python 3 standard library only.

Runs each scenario against the mock engine directly (the ceiling), admitd, HAProxy and
nginx (where it fits), in interleaved rounds (A B C D, A B C D, ...) so drift cancels, and
prints one Markdown table per scenario with medians over the rounds. It only measures and
prints: it never asserts a timing. Normally started by tests/bench/run.sh.

    python3 tests/bench/run.py --build build-bench [--rounds 3] [--duration 5]
                               [--scenarios passthrough,costs,overload,streaming,scale,publish]
    python3 tests/bench/run.py --build build-bench --scenarios router-prompt
    python3 tests/bench/run.py --build build-bench --scenarios default,allocators
"""
import argparse
import json
import os
import re
import resource
import select
import selectors
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROCS = []  # every process we started, stopped in stop_all()
ARGS = None
MEASURED = {}  # measure -> {target: value}, filled by the scenarios, read by the targets table


# ---------------------------------------------------------------- processes

class Proc:
    """A child in its own process group (so nginx workers die with their master)."""

    def __init__(self, name, argv, stdout_pipe=False, env=None):
        self.name = name
        self.logpath = os.path.join(ARGS.workdir, name + ".log")
        self.log = open(self.logpath, "wb")
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE if stdout_pipe else self.log,
                                  stderr=self.log, start_new_session=True,
                                  env=dict(os.environ, **env) if env else None)
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


def start_admitd(tag, upstream, n, q, *extra, env=None):
    p = Proc("admitd-" + tag, [os.path.join(ARGS.build, "admitd"), "--upstream", "http://" + upstream,
                               "--engine-request-limit", str(n), "--request-queue-limit", str(q),
                               "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                               "--publish", "tcp://127.0.0.1:0"] + list(extra), env=env)
    m = p.wait_line(r"ready listen=(\S+) metrics=(\S+) publish=(\S+)")
    p.addr, p.metrics, p.publish = m.group(1), m.group(2), m.group(3)
    return p, p.addr


def start_haproxy(tag, upstream, n, q, queue_timeout_ms=60000, env=None):
    port = free_port()
    cfg = fill("haproxy.cfg.in", "haproxy-%s.cfg" % tag, DIR=ARGS.workdir, PORT=port,
               UPSTREAM=upstream, N=n, Q=q, QUEUE_TIMEOUT_MS=queue_timeout_ms,
               MAXCONN=max(1000, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2 - 100))
    p = Proc("haproxy-" + tag, ["haproxy", "-db", "-f", cfg], env=env)
    wait_port(port, p)
    return p, "127.0.0.1:%d" % port


def start_nginx(tag, upstream, env=None):
    port = free_port()
    d = os.path.join(ARGS.workdir, "nginx-" + tag)
    os.makedirs(d, exist_ok=True)
    conf = fill("nginx.conf.in", "nginx-%s.conf" % tag, DIR=d, PORT=port, UPSTREAM=upstream)
    p = Proc("nginx-" + tag, ["nginx", "-p", d, "-e", os.path.join(d, "nginx-error.log"), "-c", conf],
             env=env)
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


def start_proxy(kind, tag, upstream, n, q, env=None):
    """admitd, HAProxy (both with N and Q) or nginx (no admission limit)."""
    if kind == "admitd":
        return start_admitd(tag, upstream, n, q, env=env)
    if kind == "haproxy":
        return start_haproxy(tag, upstream, n, q, env=env)
    return start_nginx(tag, upstream, env=env)


def maps_file(pid, path):
    """Whether the process has the shared object `path` mapped (an LD_PRELOAD that took)."""
    try:
        with open("/proc/%d/maps" % pid) as fh:
            return os.path.realpath(path) in fh.read()
    except OSError:
        return False


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

def wrk(addr, script, conns, duration, args=()):
    argv = ["wrk", "-t1", "-c%d" % conns, "-d%ds" % duration, "--latency", "--timeout", "10s",
            "-s", os.path.join(HERE, script), "http://%s/v1/chat/completions" % addr]
    if args:  # the script's own, for its init()
        argv += ["--"] + [str(a) for a in args]
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


def ratio(a, b):
    """a / b; NaN when either is missing or b is 0."""
    if a is None or b is None or a != a or b != b or b == 0:
        return float("nan")
    return a / b


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
    MEASURED["rps"] = {name: med([r["rps"] for r in res[name]]) for name, _, _ in targets}
    MEASURED["cpu"] = {name: med([r["cpu_us"] for r in res[name]]) for name, p, _ in targets if p}
    rps, cpu = MEASURED["rps"], MEASURED["cpu"]
    png = gnuplot_bars("passthrough", "requests/s (median of %d rounds)" % ARGS.rounds, labels, vals)
    text = table(["target", "req/s", "vs direct", "p50 ms", "p99 ms", "proxy CPU us/req", "non-2xx+errors"], rows)
    text += ("\n\nadmitd / HAProxy throughput: **%s**, CPU per request: **%s**; admitd / nginx throughput: "
             "**%s**, CPU per request: **%s**. wrk -t1 -c64, %d s per run, %d rounds; POST max_tokens 1, "
             "mock `--speedup-ratio 0`; N=%d for admitd and HAProxy."
             % (f(ratio(rps["admitd"], rps["haproxy"]), 2), f(ratio(cpu["admitd"], cpu["haproxy"]), 2),
                f(ratio(rps["admitd"], rps["nginx"]), 2), f(ratio(cpu["admitd"], cpu["nginx"]), 2),
                ARGS.duration, ARGS.rounds, n))
    if png:
        text += " Chart: `%s`." % os.path.relpath(png, ROOT)
    return text


def start_router(tag, worker, weight):
    """admit-router in front of one admitd (its --publish too), prefix-aware at weight > 0."""
    p = Proc("router-" + tag, [os.path.join(ARGS.build, "admit-router"), "--listen", "127.0.0.1:0",
                               "--metrics-listen", "127.0.0.1:0", "--kv-overlap-score-weight", str(weight),
                               "--worker=http://%s=%s" % (worker.addr, worker.publish)])
    m = p.wait_line(r"ready listen=(\S+) metrics=(\S+)")
    host, port = m.group(2).rsplit(":", 1)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # routable once the worker's first load message is in
        try:
            c = socket.create_connection((host, int(port)), timeout=5)
            c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            body = b""
            while True:
                d = c.recv(65536)
                if not d:
                    break
                body += d
            c.close()
            if re.search(rb'^admit_router_workers\{state="routable"\} [1-9]', body, re.M):
                break
        except OSError:
            pass
        time.sleep(0.1)
    return p, m.group(1)


def sc_router_prompt():
    """Issue 25: the router's CPU per request on a 2,048-token prompt against HAProxy's."""
    n, q = 1000, 16
    mock, up = start_mock("rp", "--speedup-ratio", "0")
    a, aaddr = start_admitd("rp", up, n, q)
    rp, rpaddr = start_router("rp-prefix", a, 1)
    rl, rladdr = start_router("rp-load", a, 0)
    h, haddr = start_haproxy("rp", aaddr, n, q)
    # (name, process, address, conversations): prompt.lua's first argument
    targets = [("admitd", None, aaddr, 100), ("router-prefix", rp, rpaddr, 100),
               ("router-prefix, churn", rp, rpaddr, 1000), ("router-load", rl, rladdr, 100),
               ("haproxy", h, haddr, 100)]
    for name, p, addr, conv in targets:  # warm-up: connections, caches, the prefix index
        wrk(addr, "prompt.lua", 64, 1, [conv])
    res = {t[0]: [] for t in targets}
    for rnd in range(ARGS.rounds):
        for name, p, addr, conv in targets:
            c0 = cpu_seconds(work_pid(p))
            r = wrk(addr, "prompt.lua", 64, ARGS.duration, [conv])
            r["cpu_us"] = (cpu_seconds(work_pid(p)) - c0) * 1e6 / max(1, r["requests"]) if p else float("nan")
            res[name].append(r)
            log("router-prompt round %d %-20s %8.0f req/s p50 %.2f ms cpu %.1f us/req non-2xx %d err %d"
                % (rnd + 1, name, r["rps"], r["p50_us"] / 1e3, r["cpu_us"], r["status_err"], r["errors"]))
    rows = []
    for name, p, _, conv in targets:
        rs = res[name]
        rows.append([name, conv, "%.0f" % med([r["rps"] for r in rs]), f(med([r["p50_us"] for r in rs]) / 1e3, 2),
                     f(med([r["p99_us"] for r in rs]) / 1e3, 2), f(med([r["cpu_us"] for r in rs])) if p else "-",
                     sum(r["status_err"] + r["errors"] for r in rs)])
    cpu = {t[0]: med([r["cpu_us"] for r in res[t[0]]]) for t in targets if t[1]}
    text = table(["target", "conversations", "req/s", "p50 ms", "p99 ms", "proxy CPU us/req", "non-2xx+errors"],
                 rows)
    text += ("\n\nadmit-router / HAProxy CPU per request: prefix-aware **%s** (churn: **%s**), by load only "
             "**%s** (issue 25's target: <= 1.0 prefix-aware). wrk -t1 -c64 with tests/bench/prompt.lua: "
             "non-streaming chat POSTs of 8.3 KB (a 2,048-token prompt: a 2 KB system prompt every request "
             "shares, then one of C user messages in turn), max_tokens 1; %d s per run, %d rounds; each proxy in "
             "front of the same admitd (N=%d) and mock (`--speedup-ratio 0`, whose KV capacity is 16,384 "
             "blocks of 16 tokens: 100 conversations fit, 1,000 make every request insert its blocks again and "
             "evict as many); the admitd row is the requests sent to it directly."
             % (f(ratio(cpu["router-prefix"], cpu["haproxy"]), 2),
                f(ratio(cpu["router-prefix, churn"], cpu["haproxy"]), 2),
                f(ratio(cpu["router-load"], cpu["haproxy"]), 2), ARGS.duration, ARGS.rounds, n))

    def per_round(name):  # each round's ratio, then their median: a machine whose speed drifts
        return med([a["cpu_us"] / b["cpu_us"] for a, b in zip(res[name], res["haproxy"])
                    if b["cpu_us"] > 0])  # moves both of a round's runs alike

    text += (" The median of the rounds' own ratios: prefix-aware **%s** (churn %s), by load %s "
             "(on a shared machine: `--rounds 15 --duration 2` interleaves the proxies finely)."
             % (f(per_round("router-prefix"), 2), f(per_round("router-prefix, churn"), 2),
                f(per_round("router-load"), 2)))
    return text


def response_end(buf):
    """Where the HTTP/1.1 response at the start of buf ends, or -1 while it is incomplete: framed
    by Content-Length or chunked, as the mock and the three proxies send theirs."""
    h = buf.find(b"\r\n\r\n")
    if h < 0:
        return -1
    head = bytes(buf[:h]).lower()
    m = re.search(rb"\r\ncontent-length:[ \t]*(\d+)", head)
    if m:
        end = h + 4 + int(m.group(1))
        return end if len(buf) >= end else -1
    if not re.search(rb"\r\ntransfer-encoding:[^\r]*chunked", head):
        raise RuntimeError("an answer with no length: %r" % head[:200])
    pos = h + 4
    while True:
        e = buf.find(b"\r\n", pos)
        if e < 0:
            return -1
        size = int(bytes(buf[pos:e]).split(b";")[0], 16)
        if size == 0:  # the last chunk, then trailer lines up to an empty one
            t = buf.find(b"\r\n\r\n", e)
            return t + 4 if t >= 0 else -1
        pos = e + 2 + size + 2
        if len(buf) < pos:
            return -1


class KeepAlive:
    """`conns` keep-alive connections, opened at once, each with one pass-through POST in flight
    at a time (the next sent when its answer is complete), driven from one thread: run(count)
    sends exactly `count` requests and opens no connection, so whatever the proxy does meanwhile
    is the cost of keep-alive requests."""

    def __init__(self, addr, conns):
        host, port = addr.rsplit(":", 1)
        self.req = http_request(False, 1)
        self.socks = []
        for _ in range(conns):
            s = socket.create_connection((host, int(port)), timeout=10)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.socks.append(s)
        self.sel = selectors.DefaultSelector()

    def run(self, count):
        """Sends `count` requests; returns how many were answered 200."""
        left, pending, ok, bufs = count, 0, 0, {}
        for s in self.socks[:count]:
            s.sendall(self.req)
            left, pending = left - 1, pending + 1
            bufs[s] = bytearray()
            self.sel.register(s, selectors.EVENT_READ)
        while pending:
            events = self.sel.select(10)
            if not events:
                raise RuntimeError("keep-alive client: no answer within 10 s")
            for key, _ in events:
                s = key.fileobj
                data = s.recv(65536)
                if not data:
                    raise RuntimeError("keep-alive client: the proxy closed a connection")
                b = bufs[s]
                b += data
                end = response_end(b)
                if end < 0:
                    continue
                ok += b.startswith(b"HTTP/1.1 200")
                del b[:end]
                pending -= 1
                if left:
                    s.sendall(self.req)
                    left, pending = left - 1, pending + 1
                else:
                    self.sel.unregister(s)
        return ok

    def close(self):
        self.sel.close()
        for s in self.socks:
            s.close()


def strace_during(pid, fn):
    """Runs fn() with `strace -c -f` attached to every thread of pid: (fn's result, {system call:
    calls}). It waits for strace to say it attached before fn starts, and detaches when fn
    returns."""
    out = os.path.join(ARGS.workdir, "strace-%d.txt" % pid)
    st = subprocess.Popen(["strace", "-c", "-f", "-U", "name,calls", "-o", out, "-p", str(pid)],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        said, deadline = b"", time.monotonic() + 10
        while b"attached" not in said:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([st.stderr], [], [], left)[0]:
                raise RuntimeError("strace did not attach within 10 s: %r" % said[-300:])
            chunk = os.read(st.stderr.fileno(), 4096)
            if not chunk:
                raise RuntimeError("strace exited: %r" % said[-300:])
            said += chunk
        result = fn()
    finally:
        st.send_signal(signal.SIGINT)
        try:
            st.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            st.kill()
            st.communicate()
    calls = {}
    with open(out) as fh:
        for line in fh:
            m = re.match(r"^(\w+)\s+(\d+)\s*$", line)
            if m and m.group(1) != "total":
                calls[m.group(1)] = int(m.group(2))
    return result, calls


COUNT_FIELDS = ("malloc", "calloc", "realloc", "memalign", "free")


def read_counts(path):
    """malloc_count.c's counters, read from the file it maps ({} while it holds none)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(8 + 8 * len(COUNT_FIELDS))
    except OSError:
        return {}
    if len(data) < 8 + 8 * len(COUNT_FIELDS) or data[:8] != b"MALLOCNT":
        return {}
    return dict(zip(COUNT_FIELDS, struct.unpack("<%dQ" % len(COUNT_FIELDS), data[8:])))


def sc_costs():
    count, conns = ARGS.costs_requests, [int(c) for c in ARGS.costs_conns.split(",")]
    if not shutil.which("strace"):
        raise RuntimeError("strace is not installed (tests/bench/run.sh installs it)")
    rows, notes = [], []
    shim = os.path.join(ARGS.build, "tests", "bench", "malloc_count.so")
    if not os.path.exists(shim):
        shim = None
        notes.append("No allocation counts: this build has no malloc_count.so (a build with sanitizers, "
                     "tests/bench/meson.build).")
    mock, up = start_mock("co", "--speedup-ratio", "0")
    MEASURED["mallocs"] = {}
    for c in conns:
        MEASURED["syscalls@%d" % c] = {}
    for kind in ("admitd", "haproxy", "nginx"):
        cfile = os.path.join(ARGS.workdir, "malloc-%s.counts" % kind)
        env = {"LD_PRELOAD": shim, "MALLOC_COUNT_FILE": cfile} if shim else None
        try:
            p, addr = start_proxy(kind, "co", up, 1000, 16, env=env)
        except RuntimeError as e:
            notes.append("%s would not start with malloc_count.so preloaded (%s); measured without it."
                         % (kind, str(e)[:200]))
            PROCS.pop().stop()  # the one start_proxy started
            env = None
            p, addr = start_proxy(kind, "co", up, 1000, 16)
        pid = work_pid(p)
        ok = sent = 0
        per, calls = {}, {}
        try:
            for c in conns:
                client = KeepAlive(addr, c)
                try:
                    # the proxy's pools, caches and engine connections filled before anything counts
                    ok, sent = ok + client.run(ARGS.costs_warmup), sent + ARGS.costs_warmup
                    if c == conns[0] and env:
                        m0 = read_counts(cfile) if maps_file(pid, shim) else {}
                        ok, sent = ok + client.run(count), sent + count
                        m1 = read_counts(cfile)
                        if m0:
                            per = {k: (m1[k] - m0[k]) / count for k in COUNT_FIELDS}
                        else:
                            notes.append("%s: malloc_count.so did not load or count (not in /proc/PID/maps, "
                                         "or no counters in its file)." % kind)
                    n, calls[c] = strace_during(pid, lambda: client.run(count))
                    ok, sent = ok + n, sent + count
                finally:
                    client.close()
        finally:
            PROCS.remove(p)
            p.stop()
        allocs = sum(per[k] for k in COUNT_FIELDS if k != "free") if per else float("nan")
        MEASURED["mallocs"][kind] = allocs
        for c in conns:
            MEASURED["syscalls@%d" % c][kind] = sum(calls[c].values()) / count
        row = [kind, f(allocs, 2), " / ".join(f(per[k], 2) for k in COUNT_FIELDS if k != "free") if per else "-",
               f(per["free"], 2) if per else "-"]
        for c in conns:
            top = sorted(calls[c].items(), key=lambda kv: -kv[1])[:ARGS.costs_top]
            row += [f(sum(calls[c].values()) / count, 2), ", ".join("%s %.2f" % (name, n / count) for name, n in top)]
        rows.append(row + ["%d/%d" % (ok, sent)])
        log("costs %s: %s" % (kind, rows[-1]))
    sc, ma = MEASURED["syscalls@%d" % conns[0]], MEASURED["mallocs"]
    heads = []
    for c in conns:
        heads += ["system calls per request, %d connection%s" % (c, "s" if c > 1 else ""), "of which"]
    text = table(["proxy", "allocations per request", "malloc / calloc / realloc / memalign", "frees"] + heads
                 + ["answered 200"], rows)
    text += ("\n\nadmitd / HAProxy allocations per request: **%s**, system calls per request (%d connection%s): "
             "**%s**; admitd / nginx: **%s** and **%s** (\"-\": the peer's count is 0). Keep-alive connections "
             "opened before anything counts, each with one POST (max_tokens 1) in flight at a time, %d requests of "
             "warm-up on each set of connections. Allocations: over %d requests on %d connection%s, from the "
             "counters of `tests/bench/malloc_count.so` (preloaded into the proxy) before and after. System calls: "
             "over %d more requests on each set, with `strace -c -f` attached to every thread of the proxy "
             "(nginx: its worker); with one connection no `epoll_wait` is shared between requests. Counts, not "
             "timings: nothing is timed here. Mock `--speedup-ratio 0`; N=1000 for admitd and HAProxy."
             % (f(ratio(ma["admitd"], ma["haproxy"]), 2), conns[0], "s" if conns[0] > 1 else "",
                f(ratio(sc["admitd"], sc["haproxy"]), 2), f(ratio(ma["admitd"], ma["nginx"]), 2),
                f(ratio(sc["admitd"], sc["nginx"]), 2), ARGS.costs_warmup, count, conns[0],
                "s" if conns[0] > 1 else "", count))
    for note in notes:
        text += " " + note
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


def flood_held(p, addr, n, q, reject, before_s=2.0):
    """Fills the N slots and Q queue places of the proxy p with held streams, watches their token
    gaps for before_s, then floods it with wrk for ARGS.duration: wrk's result, with the rejects
    (status `reject`) per second, the proxy's CPU per request and the held streams' gaps before
    and during the flood."""
    held = []
    try:
        held = hold_streams(addr, n, q)
        t0 = time.monotonic()
        time.sleep(before_s)
        t1 = time.monotonic()
        c0 = cpu_seconds(p.pid)
        r = wrk(addr, "flood.lua", 64, ARGS.duration)
        t2 = time.monotonic()
        r["cpu_us"] = (cpu_seconds(p.pid) - c0) * 1e6 / max(1, r["requests"])
        r["rejects"] = r["status"].get(reject, 0)
        r["rejects_s"] = r["rejects"] / (r["duration_us"] / 1e6)
        before = gaps_ms(held[0].events, t0, t1)
        during = gaps_ms(held[0].events, t1 + 0.2, t2 - 0.2)
        r["gap_before_p50"], r["gap_during_p50"] = pct(before, 50), pct(during, 50)
        r["gap_before_p99"], r["gap_during_p99"] = pct(before, 99), pct(during, 99)
        r["alive"] = sum(1 for s in held[:n] if s.is_alive() and s.error is None)
        r["queued_alive"] = sum(1 for s in held[n:] if s.is_alive() and s.status is None)
        return r
    finally:
        for s in held:
            s.close()


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
            try:
                r = flood_held(p, addr, n, q, 529 if kind == "admitd" else 503)
                res[kind].append(r)
                log("overload round %d %-8s %8.0f rejects/s (%s) p99 %.2f ms gap p50 %.2f -> %.2f ms alive %d+%d"
                    % (rnd + 1, kind, r["rejects_s"], r["status"], r["p99_us"] / 1e3, r["gap_before_p50"],
                       r["gap_during_p50"], r["alive"], r["queued_alive"]))
            finally:
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
    MEASURED["rejects"] = {k: med([r["rejects_s"] for r in res[k]]) for k in kinds}
    MEASURED["cpu_reject"] = {k: med([r["cpu_us"] for r in res[k]]) for k in kinds}
    # What one core of the proxy could shed: the flood's own client shares the 2 cores, so a
    # proxy that is not busy all the time is shown the client's ceiling, not its own.
    MEASURED["reject_capacity"] = {k: 1e6 / v for k, v in MEASURED["cpu_reject"].items() if v}
    for row, kind in zip(rows, kinds):
        row.insert(7, "%.0f%%" % (MEASURED["rejects"][kind] * MEASURED["cpu_reject"][kind] / 1e4))
    text = table(["target", "reject status", "rejects/s", "share rejected", "p50 ms to reject", "p99 ms to reject",
                  "proxy CPU us/reject", "proxy busy", "held gap p50 ms before/during",
                  "held gap p99 ms before/during", "held alive (slot+queue)"], rows)
    rej, rcpu = MEASURED["rejects"], MEASURED["cpu_reject"]
    text += ("\n\nadmitd / HAProxy rejects/s: **%s**, CPU per reject: **%s**. N=%d, Q=%d held full by %d streams "
             "(mock `--token-interval-ms 10`, so the ideal gap is 10 ms); flood: wrk -t1 -c64 %d s. Direct and nginx: "
             "not applicable (no admission limit). \"proxy busy\": rejects/s times CPU per reject, the share of one "
             "core the proxy used; below 100 %% the flood's client (on the same 2 cores) set the rate, and the "
             "proxy's own ceiling is 10^6 / CPU per reject (the targets table's \"rejects per second of proxy CPU\")."
             % (f(ratio(rej["admitd"], rej["haproxy"]), 2), f(ratio(rcpu["admitd"], rcpu["haproxy"]), 2), n, q, n + q,
                ARGS.duration))
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
    MEASURED["ttft_added"] = {name: pct(res[name]["ttft"], 50) - pct(base["ttft"], 50) for name, _, _ in targets}
    MEASURED["coalesced"] = {name: 100.0 * res[name]["coalesced"] / max(1, len(res[name]["gaps"]))
                             for name, _, _ in targets}
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
    rows, kib = [], {}
    for kind in ("admitd", "haproxy", "nginx"):
        p, addr = start_proxy(kind, "sc", up, 100000, 16)
        pid = work_pid(p)  # nginx: its worker holds the requests
        try:
            for _ in range(3):  # warm-up
                w = Holder(addr, 20, 1)
                w.run_until(lambda: w.left == 0, 10)
                w.close()
            base = rss_kib(pid)
            c0 = cpu_seconds(pid)
            t0 = time.monotonic()
            h = Holder(addr, count, hold_s)
            try:
                h.run_until(lambda: h.sent == count, 60)
                t_open = time.monotonic() - t0
                # every request is sent: sample RSS while they are all held (none answered yet)
                peak, held = rss_kib(pid), count - h.ok - h.bad
                while time.monotonic() - t0 < hold_s - 1 and h.ok + h.bad == 0:
                    h.step(0.1)
                    peak = max(peak, rss_kib(pid))
                held = count - h.ok - h.bad
                h.run_until(lambda: h.left == 0, 60)
                cpu = cpu_seconds(pid) - c0
            finally:
                h.close()
            kib[kind] = (peak - base) / max(1, held)
            rows.append([kind, count, "%.1f" % t_open, held, "%.1f" % (base / 1024.0), "%.1f" % (peak / 1024.0),
                         "%.2f" % kib[kind], "%.1f" % (cpu * 1e6 / max(1, count)),
                         "%d/%d" % (h.ok, count)])
            log("scale %s: %s" % (kind, rows[-1]))
        finally:
            PROCS.remove(p)
            p.stop()
    text = table(["proxy", "requests", "s to send all", "held at RSS peak", "RSS base MiB", "RSS peak MiB",
                  "KiB per open request",
                  "CPU us per request", "answered 200"], rows)
    MEASURED["kib_open"] = kib
    text += ("\n\nadmitd / HAProxy KiB per open request: **%s**; admitd / nginx: **%s**. "
             "All requests opened at once (non-blocking connects) by one Python client and held ~%d s by the mock "
             "(`--token-interval-ms 1000`, non-streaming, max_tokens %d); N=100000 so nothing queues. "
             "RSS and CPU are nginx's worker's. "
             "CPU is the proxy's utime+stime from opening to the last answer, divided by the requests; "
             "open file limit %d."
             % (f(ratio(kib["admitd"], kib["haproxy"]), 2), f(ratio(kib["admitd"], kib["nginx"]), 2), hold_s, hold_s,
                soft))
    return text


def publish_latency(via, iters):
    """(latencies, request-to-headers times, missed) of admitd with --publisher=via."""
    mock, up = start_mock("pub-" + via, "--speedup-ratio", "0", "--token-interval-ms", "50")
    a, addr = start_admitd("pub-" + via, up, 4, 4, "--publisher", via)
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
    for p in (top, a, mock):
        p.stop()
    return lat, first, missed


def sc_publish():
    rows = []
    for via, label in (("auto", "admitd's own PUB (`--publisher=auto`, the default)"),
                       ("nng", "nng's PUB (`--publisher=nng`)")):
        lat, first, missed = publish_latency(via, ARGS.publish_iters)
        rows.append([label, len(lat), f(pct(lat, 50), 2), f(pct(lat, 99), 2),
                     f(max(lat) if lat else float("nan"), 2), missed,
                     "%s / %s" % (f(pct(first, 50), 2), f(pct(first, 99), 2))])
    text = table(["publisher", "samples", "p50 ms", "p99 ms", "max ms", "missed",
                  "for comparison: request to its response headers p50 / p99 ms"], rows)
    text += ("\n\nFrom sending one streaming request on an open connection to admitd (N=4) to admit-top (nng's SUB) "
             "receiving the first message with engine_requests >= 1 (admit-top --stamp: the receive time on "
             "CLOCK_MONOTONIC, the clock of the sender's stamp); includes admitd reading and parsing the request. "
             "One admitd per publisher, one after the other in the same run.")
    return text


def allocators():
    """[(name, its shared object or None)]: glibc's (no preload) and the Debian packages' jemalloc
    and mimalloc, found with dpkg -L; a package that is not installed is left out."""
    out = [("glibc", None)]
    for name, pkg, pattern in (("jemalloc", "libjemalloc2", r"/libjemalloc\.so\.2$"),
                               ("mimalloc", "libmimalloc2.0", r"/libmimalloc\.so\.[\d.]+$")):
        try:
            files = subprocess.run(["dpkg", "-L", pkg], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   timeout=10).stdout.decode().split()
        except (OSError, subprocess.SubprocessError):
            files = []
        found = sorted(x for x in files if re.search(pattern, x) and os.path.exists(x))
        if found:
            out.append((name, found[0]))
        else:
            log("allocators: %s left out (package %s not installed)" % (name, pkg))
    return out


def start_with_allocator(tag, up, n, q, so, *extra):
    p, addr = start_admitd(tag, up, n, q, *extra, env={"LD_PRELOAD": so} if so else None)
    if so and not maps_file(p.pid, so):
        raise RuntimeError("admitd started without %s mapped: the preload did not take" % so)
    return p, addr


def sc_allocators():
    allocs = allocators()
    res = {name: {"pt": [], "ov": []} for name, _ in allocs}
    mock, up = start_mock("al", "--speedup-ratio", "0")
    inst = [(name,) + start_with_allocator("al-" + name, up, 1000, 16, so) for name, so in allocs]
    for _, _, addr in inst:  # warm-up
        wrk(addr, "post.lua", 64, 1)
    for rnd in range(ARGS.rounds):
        for name, p, addr in inst:
            c0 = cpu_seconds(p.pid)
            r = wrk(addr, "post.lua", 64, ARGS.duration)
            r["cpu_us"] = (cpu_seconds(p.pid) - c0) * 1e6 / max(1, r["requests"])
            res[name]["pt"].append(r)
            log("allocators pass-through round %d %-8s %8.0f req/s %.1f us/req"
                % (rnd + 1, name, r["rps"], r["cpu_us"]))
    rss = {name: rss_kib(p.pid) for name, p, _ in inst}
    for _, p, _ in inst:
        PROCS.remove(p)
        p.stop()
    mock, up = start_mock("al-ov", "--speedup-ratio", "0", "--token-interval-ms", "10")
    for rnd in range(ARGS.rounds):
        for name, so in allocs:
            p, addr = start_with_allocator("al-ov-%s-%d" % (name, rnd), up, 4, 4, so, "--queue-timeout-ms", "60000")
            try:
                r = flood_held(p, addr, 4, 4, 529, before_s=0.2)
                res[name]["ov"].append(r)
                log("allocators overload round %d %-8s %8.0f rejects/s %.1f us/reject"
                    % (rnd + 1, name, r["rejects_s"], r["cpu_us"]))
            finally:
                PROCS.remove(p)
                p.stop()
    m = {name: {k: med([r[v] for r in res[name][part]]) for k, part, v in
                (("rps", "pt", "rps"), ("cpu", "pt", "cpu_us"), ("rej", "ov", "rejects_s"), ("rcpu", "ov", "cpu_us"))}
         for name, _ in allocs}
    g = m["glibc"]
    rows = [[name, "`%s`" % os.path.basename(so) if so else "(none: glibc's)", "%.0f" % m[name]["rps"],
             f(ratio(m[name]["rps"], g["rps"]), 3), f(m[name]["cpu"]), f(ratio(m[name]["cpu"], g["cpu"]), 3),
             "%.1f" % (rss[name] / 1024.0), "%.0f" % m[name]["rej"], f(ratio(m[name]["rej"], g["rej"]), 3),
             f(m[name]["rcpu"]), f(ratio(m[name]["rcpu"], g["rcpu"]), 3)] for name, so in allocs]
    text = table(["allocator", "LD_PRELOAD", "pass-through req/s", "vs glibc", "CPU us/req", "vs glibc",
                  "RSS MiB after pass-through", "rejects/s", "vs glibc", "CPU us/reject", "vs glibc"], rows)
    text += ("\n\nadmitd alone, under each allocator (Debian's packages, `LD_PRELOAD`): pass-through as in "
             "scenario 1 (wrk -t1 -c64, N=1000, one admitd per allocator, rounds interleaved) and rejection as in "
             "scenario 3 (N=4, Q=4 held full, a wrk flood; a fresh admitd per round); %d s per run, %d rounds, "
             "medians. Issue 16 adopts one only for a win of 3 %% or more, less than these timings move between "
             "runs on a shared 2-core machine: judge from several runs." % (ARGS.duration, ARGS.rounds))
    return text


# Issue 16's targets (item 5): (measure in MEASURED, what, digits, the target, how admitd is set
# beside a peer). "ratio" is admitd / peer; "diff" is admitd - peer, for a value near zero (an
# added TTFT), where a ratio says nothing.
TARGETS = [("rps", "pass-through req/s", 0, ">= 1.0x max(HAProxy, nginx)", "ratio"),
           ("cpu", "proxy CPU us per request", 1, "<= 0.8x min(HAProxy, nginx)", "ratio"),
           ("rejects", "rejects/s (529 / 503)", 0, ">= 1.2x HAProxy", "ratio"),
           ("cpu_reject", "proxy CPU us per reject", 1, "<= 1.0x HAProxy", "ratio"),
           ("reject_capacity", "rejects per second of proxy CPU (10^6 / CPU per reject)", 0, ">= 1.2x HAProxy",
            "ratio"),
           ("syscalls", "system calls per keep-alive request, %s", 2, "<= 6", "ratio"),
           ("mallocs", "allocations per request, steady state", 2, "0", "ratio"),
           ("kib_open", "KiB per open request", 2, "<= 6.1 (before the rewrite)", "ratio"),
           ("ttft_added", "added TTFT p50 ms", 3, "unchanged (against earlier runs)", "diff"),
           ("coalesced", "coalesced SSE gaps %", 2, "<= direct's", "ratio")]


def targets_table():
    rows, targets = [], []
    for key, what, digits, target, how in TARGETS:
        if key == "syscalls":  # a row for each number of connections it was counted on
            for c in ARGS.costs_conns.split(","):
                conns = "%s connection%s" % (c, "s" if int(c) > 1 else "")
                targets.append((key + "@" + c, what % conns, digits, target, how))
        else:
            targets.append((key, what, digits, target, how))
    for key, what, digits, target, how in targets:
        v = MEASURED.get(key, {})
        a = v.get("admitd")

        def beside(peer):
            b = v.get(peer)
            if how == "diff":
                return "-" if a is None or b is None else "%+.*f" % (digits, a - b)
            return f(ratio(a, b), 2)
        rows.append([what] + [f(v[t], digits) if t in v else "-" for t in ("admitd", "haproxy", "nginx", "direct")]
                    + [beside("haproxy"), beside("nginx"), target])
    text = table(["measure", "admitd", "HAProxy", "nginx", "direct", "admitd / HAProxy", "admitd / nginx",
                  "target"], rows)
    text += ("\n\nFrom the scenarios above (\"-\": not measured in this run, not applicable, or a ratio to 0). The "
             "added-TTFT row gives admitd minus each peer, in ms; every other row admitd divided by each peer.")
    return text


# (key, title, function, run by default)
SCENARIOS = [("passthrough", "1. Pass-through", sc_passthrough, True),
             ("costs", "2. Pass-through: system calls and allocations per request", sc_costs, True),
             ("overload", "3. Overload shedding", sc_overload, True),
             ("streaming", "4. Streaming", sc_streaming, True),
             ("scale", "5. Scale", sc_scale, True),
             ("publish", "6. Load publishing latency", sc_publish, True),
             # 2 loads x 3 allocators x rounds x duration, 90 s and more at the defaults: by name only
             ("allocators", "7. Allocators (admitd under glibc, jemalloc, mimalloc)", sc_allocators, False),
             ("router-prompt", "8. admit-router: a 2,048-token prompt", sc_router_prompt, False)]


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
    ap.add_argument("--streams", type=int, default=10, help="streams per target per round (scenario 4)")
    ap.add_argument("--scale-conns", type=int, default=10000)
    ap.add_argument("--publish-iters", type=int, default=50)
    ap.add_argument("--costs-requests", type=int, default=2000,
                    help="requests counted for allocations, and again for system calls (scenario 2)")
    ap.add_argument("--costs-warmup", type=int, default=500, help="requests before the counting (scenario 2)")
    ap.add_argument("--costs-conns", default="1,8",
                    help="keep-alive connections: system calls are counted on each number in turn, allocations "
                    "on the first (scenario 2)")
    ap.add_argument("--costs-top", type=int, default=4, help="system calls listed by name (scenario 2)")
    ap.add_argument("--scenarios", default="default",
                    help="comma-separated: %s; 'default' for all but allocators, 'all' for every one"
                    % ",".join(sc[0] for sc in SCENARIOS))
    ARGS = ap.parse_args()
    wanted = set()
    for name in ARGS.scenarios.split(","):
        if name in ("default", "all"):
            wanted |= {sc[0] for sc in SCENARIOS if name == "all" or sc[3]}
        elif name in (sc[0] for sc in SCENARIOS):
            wanted.add(name)
        else:
            ap.error("unknown scenario %r" % name)
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

    mach = machine()
    parts = ["# admitd benchmarks", "", "Machine: " + mach, "",
             "Run: %s, %d rounds interleaved, medians." % (time.strftime("%Y-%m-%d %H:%M"), ARGS.rounds)]
    print("Machine: " + mach + "\n", flush=True)

    def emit(title, text):
        block = "## %s\n\n%s\n" % (title, text)
        print(block, flush=True)
        parts.extend(["", block])
        with open(os.path.join(ARGS.out, "results.md"), "w") as fh:
            fh.write("\n".join(parts))
    try:
        for key, title, fn, _ in SCENARIOS:
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
            emit(title, text)
        emit("Targets of issue 16", targets_table())
    finally:
        stop_all()
    log("wrote %s" % os.path.join(ARGS.out, "results.md"))


if __name__ == "__main__":
    main()
