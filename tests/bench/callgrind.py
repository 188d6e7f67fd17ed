#!/usr/bin/env python3
"""Instructions per request, counted by callgrind: admitd's own CPU cost, repeatable.

Timings on a shared 2-core machine move by 10 % between runs; callgrind's instruction count
for the same binary and the same requests does not. This runs admitd (a release build,
without sanitizers) under valgrind --tool=callgrind in front of the mock engine, twice per
scenario with a different number of requests, and reports the difference divided by the
difference in requests: start-up, shutdown and timers cancel out.

  pass    small non-streaming POSTs forwarded to the engine (N=1000, keep-alive)
  reject  N=1, Q=2 held full by three long streams; every POST gets the overload answer

  tests/bench/callgrind.py --build build-bench [--build build-old ...] [--requests 2000]

Several --build directories are measured side by side (e.g. before and after a change).
Numbers only: it asserts nothing, and it is not part of `meson test`.
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BODY = b'{"model":"mock-model","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}'


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_line(proc, regex, timeout=60.0):
    end = time.time() + timeout
    buf = b""
    while time.time() < end:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        buf += line
        m = re.search(regex, line.decode(errors="replace"))
        if m:
            return m
    raise RuntimeError("no %r in output: %s" % (regex, buf.decode(errors="replace")[-2000:]))


def post(port, keep):
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (port, len(BODY), b"" if keep else b"Connection: close\r\n")) + BODY


def read_response(sock, buf):
    """Reads one response with a Content-Length body; returns (status, rest of buf)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ", 2)[1])
    m = re.search(rb"(?i)content-length:\s*(\d+)", head)
    n = int(m.group(1)) if m else 0
    while len(rest) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed in a body")
        rest += chunk
    return status, rest[n:]


def send_requests(port, total, conns):
    """total POSTs over conns keep-alive connections; returns the statuses seen."""
    statuses = {}
    lock = threading.Lock()
    per = [total // conns + (1 if i < total % conns else 0) for i in range(conns)]

    def worker(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=120)
        buf = b""
        for _ in range(n):
            s.sendall(post(port, True))
            st, buf = read_response(s, buf)
            with lock:
                statuses[st] = statuses.get(st, 0) + 1
        s.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in per if n > 0]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses


def hold_streams(port, n):
    """n streaming requests that stay open; returns their sockets."""
    socks = []
    body = BODY.replace(b'"max_tokens":1', b'"max_tokens":100000,"stream":true')
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        socks.append(s)
        time.sleep(0.3)
    return socks


def run_once(build, scenario, requests, conns, keep=None):
    """Total instructions of one admitd run that served `requests` POSTs."""
    out = keep or tempfile.mktemp(prefix="callgrind.", suffix=".out")
    mock_args = ["--speedup-ratio", "0"] if scenario == "pass" else ["--token-interval-ms",
                                                                      "1000"]
    mock = subprocess.Popen([os.path.join(build, "admit-mock-engine"), "--listen",
                             "127.0.0.1:0"] + mock_args, stderr=subprocess.PIPE)
    mport = int(wait_line(mock, r"listening on \S+:(\d+)").group(1))
    port = free_port()
    limits = ["--engine-request-limit", "1000"] if scenario == "pass" else [
        "--engine-request-limit", "1", "--request-queue-limit", "2"]
    ad = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
         os.path.join(build, "admitd"), "--upstream", "http://127.0.0.1:%d" % mport,
         "--listen", "127.0.0.1:%d" % port, "--metrics-listen", "127.0.0.1:0",
         "--publish", "none", "--engine-metrics-interval-ms", "3600000",
         "--health-interval-ms", "3600000", "--queue-timeout-ms", "0",
         "--log-level", "warn"] + limits, stderr=subprocess.PIPE)
    try:
        wait_line(ad, r"ready listen=")
        held = hold_streams(port, 3) if scenario == "reject" else []
        if held:
            time.sleep(1.0)
        statuses = send_requests(port, requests, conns)
        for s in held:
            s.close()
    finally:
        ad.send_signal(signal.SIGINT)
        ad.wait(timeout=120)
        mock.send_signal(signal.SIGTERM)
        mock.wait(timeout=30)
    with open(out) as f:
        text = f.read()
    if keep is None:
        os.unlink(out)
    m = re.search(r"^summary:\s+(\d+)", text, re.M) or re.search(r"^totals:\s+(\d+)", text, re.M)
    return int(m.group(1)), statuses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", action="append", required=True,
                    help="a build directory with admitd and admit-mock-engine (repeatable)")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--scenarios", default="pass,reject")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep each large run's callgrind file here (for callgrind_annotate)")
    a = ap.parse_args()
    small = max(1, a.requests // 4)
    print("| build | scenario | instructions per request | statuses (large run) |")
    print("|---|---|---|---|")
    for scenario in a.scenarios.split(","):
        for build in a.build:
            lo, _ = run_once(build, scenario, small, a.conns)
            keep = None
            if a.keep:
                os.makedirs(a.keep, exist_ok=True)
                keep = os.path.join(a.keep, "%s.%s.out" % (build.strip("/").replace("/", "_"),
                                                           scenario))
            hi, st = run_once(build, scenario, a.requests, a.conns, keep)
            per = (hi - lo) / (a.requests - small)
            print("| %s | %s | %.0f | %s |" % (build, scenario, per,
                                               ", ".join("%d: %d" % kv for kv in sorted(st.items()))))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
