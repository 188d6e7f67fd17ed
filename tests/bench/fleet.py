#!/usr/bin/env python3
"""admit-router following 1,000 workers (issue 15, item 6): intake cost, memory, selection.

  meson setup build-rel --buildtype=release && ninja -C build-rel
  tests/bench/fleet.py --build build-rel [--workers 1000] [--rate 10] [--seconds 20]
                       [--rounds 2] [--skip-intake]

1. tests/bench/fleetpub publishes load messages for --workers simulated workers at --rate
   messages/s each, from one process (one nng PUB socket each, through lib/pubsub as admitd
   publishes). Every worker's HTTP address is one admit-mock-engine.
2. The socket layouts, alone (tests/bench/fleet/intake_bench): one SUB socket per publisher,
   one shared SUB socket with a dialer each (what lib/pubsub/subscribe.c does), and a
   libevent reader of nng's wire protocol with no nng at all (a floor: what nng's threads
   cost). --rounds alternating rounds of --seconds each; medians.
3. One admit-router follows all of them, its workers listed in a config file (the `worker`
   key, comma-separated). Once every worker is routable: its RSS (VmRSS, and VmHWM) and its
   CPU over --seconds of message intake with no request (utime + stime from
   /proc/PID/stat, all threads), as a percentage of one core.
4. Selection: select_bench's figure at 1,024 workers of 1 rank (the selection alone), and a
   live probe: sequential requests through the router to the mock against the same requests
   straight to the mock, medians (the difference is the router's whole per-request path at
   this fleet size, selection included).

Prints numbers and asserts nothing (a timing on a shared machine is no test).
"""

import argparse
import http.client
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

TARGET_CPU_PCT = 5.0
TARGET_RSS_MIB = 64.0


def start(argv, ready, timeout=60):
    """A child whose stderr (or stdout) line matching `ready` has been seen."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            raise SystemExit("%s exited before it was ready" % argv[0])
        m = re.search(ready, line)
        if m:
            # Keep reading what it writes, so that a full pipe never blocks it.
            threading.Thread(target=lambda: p.stdout.read(), daemon=True).start()
            return p, m
    raise SystemExit("%s not ready in %d s" % (argv[0], timeout))


def stop(p):
    p.terminate()
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def kv(line):
    return {k: v for k, v in (f.split("=", 1) for f in line.split() if "=" in f)}


def proc_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def thread_ticks(pid):
    """{thread name: utime + stime ticks} summed by name: the loop ("admit-router") and
    nng's threads ("nng:poll:epoll", "nng:task", ...)."""
    out = {}
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, t)) as f:
                st = f.read()
        except OSError:
            continue
        name = st[st.index("(") + 1:st.rindex(")")]
        fields = st.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0) + int(fields[11]) + int(fields[12])
    return out


def proc_status(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def get(addr, path, body=None):
    c = http.client.HTTPConnection(addr[0], addr[1], timeout=30)
    try:
        if body is None:
            c.request("GET", path)
        else:
            c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def routable(maddr):
    _, body = get(maddr, "/metrics")
    m = re.search(rb'^admit_router_workers\{state="routable"\} (\S+)$', body, re.M)
    return int(float(m.group(1))) if m else 0


def hostport(s):
    h, p = s.rsplit(":", 1)
    return h, int(p)


def probe(addr, n):
    """Median ms of n sequential small POSTs on one keep-alive connection."""
    body = (b'{"model":"mock-model","max_tokens":1,"stream":false,'
            b'"messages":[{"role":"user","content":"hi"}]}')
    c = http.client.HTTPConnection(addr[0], addr[1], timeout=30)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        c.request("POST", "/v1/chat/completions", body=body,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        times.append((time.perf_counter() - t0) * 1000)
        assert r.status == 200, r.status
    c.close()
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-rel")
    ap.add_argument("--workers", type=int, default=1000)
    ap.add_argument("--rate", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--probe", type=int, default=300, help="requests of the live probe")
    ap.add_argument("--skip-intake", action="store_true", help="skip the socket comparison")
    a = ap.parse_args()
    b = a.build
    tmp = tempfile.mkdtemp(prefix="admit-fleet-")
    urls = os.path.join(tmp, "workers.txt")
    procs = []
    print("fleet bench: %d workers x %d messages/s, %s, nproc %d" % (
        a.workers, a.rate, time.strftime("%Y-%m-%d %H:%M"), os.cpu_count()), flush=True)
    try:
        mock, m = start([os.path.join(b, "admit-mock-engine"), "--listen", "127.0.0.1:0",
                         "--speedup-ratio", "0"], r"listening on (\S+)")
        procs.append(mock)
        mock_addr = hostport(m.group(1))
        pub, _ = start([os.path.join(b, "tests/bench/fleetpub"), "--workers", str(a.workers),
                        "--rate", str(a.rate), "--out", urls, "--http", m.group(1)],
                       r"^ready \d+")
        procs.append(pub)

        # ---- 2. socket layouts ----
        rows = {}
        if not a.skip_intake:
            for r in range(a.rounds):
                for mode in ("shared", "per-socket", "native"):
                    out = subprocess.run(
                        [os.path.join(b, "tests/bench/intake_bench"), "--mode", mode, "--urls",
                         urls, "--warmup", "3", "--seconds", str(a.seconds)],
                        capture_output=True, text=True, check=True).stdout
                    got = kv(out.strip().splitlines()[-1])
                    rows.setdefault(mode, []).append(got)
                    print("  round %d %s" % (r + 1, out.strip()), flush=True)

        # ---- 3. the router ----
        with open(urls) as f:
            workers = [ln.strip() for ln in f if ln.strip()]
        cfg = os.path.join(tmp, "router.yaml")
        with open(cfg, "w") as f:
            f.write("listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\n")
            f.write("worker: %s\n" % ",".join(workers))
        rt, m = start([os.path.join(b, "admit-router"), "--config", cfg],
                      r"ready listen=(\S+) metrics=(\S+) workers=(\d+)")
        procs.append(rt)
        raddr, maddr = hostport(m.group(1)), hostport(m.group(2))
        t0 = time.time()
        while routable(maddr) < a.workers and time.time() - t0 < 60:
            time.sleep(0.5)
        heard = routable(maddr)
        time.sleep(3)  # settle
        ticks0, by0, w0 = proc_ticks(rt.pid), thread_ticks(rt.pid), time.monotonic()
        time.sleep(a.seconds)
        ticks1, by1, w1 = proc_ticks(rt.pid), thread_ticks(rt.pid), time.monotonic()
        hz = os.sysconf("SC_CLK_TCK")
        cpu_pct = 100.0 * (ticks1 - ticks0) / hz / (w1 - w0)
        by = {k: 100.0 * (by1.get(k, 0) - by0.get(k, 0)) / hz / (w1 - w0) for k in by1}
        rss_kib, hwm_kib = proc_status(rt.pid, "VmRSS"), proc_status(rt.pid, "VmHWM")
        threads = proc_status(rt.pid, "Threads")
        routable_after = routable(maddr)

        # ---- 4. selection ----
        sel = subprocess.run([os.path.join(b, "tests/bench/select_bench"), "--workers", "1024",
                              "--ranks", "1", "--rounds", "5", "--part", "1", "--cpu", "1"],
                             capture_output=True, text=True, check=True).stdout
        msel = re.search(r"^\|\s+1024 \|\s+1 \|\s+(\S+) \|\s+(\S+) \|", sel, re.M)
        direct = probe(mock_addr, a.probe)
        routed = probe(raddr, a.probe)
        direct2 = probe(mock_addr, a.probe)
    finally:
        for p in reversed(procs):
            stop(p)

    print()
    if rows:
        print("| layout (%d publishers, %d msg/s each) | messages/s | CPU %% of a core | "
              "µs CPU per message | RSS MiB | threads | descriptors |" % (a.workers, a.rate))
        print("|---|---:|---:|---:|---:|---:|---:|")
        names = {"shared": "one nng SUB socket, a dialer per publisher (lib/pubsub now)",
                 "per-socket": "one nng SUB socket per publisher (before)",
                 "native": "no nng: SP over TCP read by libevent (a floor)"}
        for mode in ("shared", "per-socket", "native"):
            rs = rows[mode]

            def med(k):
                return statistics.median(float(r[k]) for r in rs)

            print("| %s | %.0f | %.1f | %.1f | %.1f | %.0f | %.0f |" % (
                names[mode], med("msgs_per_s"), med("cpu_pct"), med("us_per_msg"),
                med("rss_kib") / 1024, med("threads"), med("fds")))
        print("(intake_bench: medians of %d rounds of %.0f s; each message decoded with "
              "admit_load_decode)" % (a.rounds, a.seconds))
        print()
    print("| admit-router, %d workers x %d msg/s | value | target |" % (a.workers, a.rate))
    print("|---|---:|---:|")
    print("| workers routable (of %d) | %d, then %d | all |" % (a.workers, heard, routable_after))
    print("| CPU of message intake, %% of one core (%.0f s) | %.1f | < %.0f |" % (
        a.seconds, cpu_pct, TARGET_CPU_PCT))
    print("| of which the event loop (decode, selection view) / nng's threads | %.1f / %.1f | |" % (
        sum(v for k, v in by.items() if not k.startswith("nng")),
        sum(v for k, v in by.items() if k.startswith("nng"))))
    print("| RSS MiB (peak) | %.1f (%.1f) | < %.0f |" % (rss_kib / 1024, hwm_kib / 1024,
                                                       TARGET_RSS_MIB))
    print("| threads | %d | |" % threads)
    if msel:
        print("| selection at 1,024 workers, select_bench off / on µs | %s / %s | as part 1 |" %
              (msel.group(1), msel.group(2)))
    print("| live probe: request through the router / straight to the mock, median ms | "
          "%.3f / %.3f | |" % (routed, (direct + direct2) / 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
