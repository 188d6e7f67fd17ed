#!/usr/bin/env python3
"""admit-router following 1,000 workers (issue 15, item 6): intake cost, memory, selection.

  meson setup build-rel --buildtype=release && ninja -C build-rel
  tests/bench/fleet.py --build build-rel [--workers 1000] [--rate 10] [--seconds 20]
                       [--rounds 2] [--skip-intake] [--skip-floor] [--subscribers nng,auto]

1. tests/bench/fleetpub publishes load messages for --workers simulated workers at --rate
   messages/s each, from one process (one nng PUB socket each, through lib/pubsub as admitd
   publishes). Every worker's HTTP address is one admit-mock-engine, at 127.0.K.J and its
   port: an address each, since a router follows one worker per address.
2. The socket layouts, alone (tests/bench/fleet/intake_bench): one SUB socket per publisher,
   one shared SUB socket with a dialer each (lib/pubsub/subscribe.c's nng side), and a
   libevent reader of nng's wire protocol with no nng at all (a floor: what nng's threads
   cost). --rounds alternating rounds of --seconds each; medians.
3. One admit-router follows all of them, its workers listed in a config file (the `worker`
   key, comma-separated), once for each --subscribers value (its --subscriber option: nng,
   nng's SUB for every worker as before; auto, spsub read in passes every --load-batch-ms),
   a fresh router each, side by side in the table. Once every worker is routable: its RSS
   (VmRSS, and VmHWM), its threads, and its CPU over --seconds of message intake with no
   request (utime + stime from /proc/PID/stat, all threads), as a percentage of one core and
   per message received (admit_router_load_messages_total over the same seconds).
4. The floor (tests/bench/fleet/floor_bench), against a fresh fleet: the least any process
   spends receiving the same messages over TCP (framed and counted, not decoded, nothing
   else running in it), woken every 2 ms as the router's poller is, once by epoll passes and
   once by io_uring's multishot recv when liburing was found; with the host's TCP segments
   and delayed ACKs per message, which say whether a lower figure is less work or work moved
   out of the process (the kernel's delayed-ACK timer is charged to no one in particular).
5. Selection: select_bench's figure at 1,024 workers of 1 rank (the selection alone), and a
   live probe (with each router): sequential requests through the router to the mock against
   the same requests straight to the mock, medians (the difference is the router's whole
   per-request path at this fleet size, selection included).

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


def metric(maddr, sample):
    _, body = get(maddr, "/metrics")
    m = re.search(rb"^" + re.escape(sample.encode()) + rb" (\S+)$", body, re.M)
    return float(m.group(1)) if m else 0.0


def routable(maddr):
    return int(metric(maddr, 'admit_router_workers{state="routable"}'))


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


def start_fleet(a, b, mock_url, urls):
    """fleetpub for --workers workers, their lines (PROXY_URL=PUB_URL) written to urls. fleetpub
    gives every worker the one HTTP address it is told, and a router follows one worker per
    address (the others are the same worker named again): each line gets an address of its
    own, 127.0.K.J at the mock's port, which the mock (listening on every address) answers."""
    port = mock_url.rsplit(":", 1)[1]
    pub, _ = start([os.path.join(b, "tests/bench/fleetpub"), "--workers", str(a.workers),
                    "--rate", str(a.rate), "--out", urls, "--http", "127.0.0.1:" + port],
                   r"^ready \d+")
    with open(urls) as f:
        pubs = [ln.strip().rsplit("=", 1)[1] for ln in f if ln.strip()]
    with open(urls, "w") as f:
        for i, u in enumerate(pubs):
            f.write("http://127.0.%d.%d:%s=%s\n" % (i // 250, i % 250 + 1, port, u))
    return pub


def run_router(a, b, tmp, via, mock_url, mock_addr):
    """One admit-router with --subscriber=via following a fresh fleet (nng's PUB slows down
    once a round of subscribers has come and gone, README "Load intake"): its figures."""
    urls = os.path.join(tmp, "workers-%s.txt" % via)
    pub = start_fleet(a, b, mock_url, urls)
    rt = None
    try:
        with open(urls) as f:
            workers = [ln.strip() for ln in f if ln.strip()]
        cfg = os.path.join(tmp, "router-%s.yaml" % via)
        with open(cfg, "w") as f:
            f.write("listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\n")
            f.write("worker: %s\n" % ",".join(workers))
        rt, m = start([os.path.join(b, "admit-router"), "--config", cfg, "--subscriber", via],
                      r"ready listen=(\S+) metrics=(\S+) workers=(\d+)")
        raddr, maddr = hostport(m.group(1)), hostport(m.group(2))
        t0 = time.time()
        while routable(maddr) < a.workers and time.time() - t0 < 60:
            time.sleep(0.5)
        heard = routable(maddr)
        time.sleep(3)  # settle
        n0 = metric(maddr, "admit_router_load_messages_total")
        ticks0, by0, w0 = proc_ticks(rt.pid), thread_ticks(rt.pid), time.monotonic()
        time.sleep(a.seconds)
        ticks1, by1, w1 = proc_ticks(rt.pid), thread_ticks(rt.pid), time.monotonic()
        n1 = metric(maddr, "admit_router_load_messages_total")
        hz = os.sysconf("SC_CLK_TCK")
        cpu_s = (ticks1 - ticks0) / hz
        by = {k: 100.0 * (by1.get(k, 0) - by0.get(k, 0)) / hz / (w1 - w0) for k in by1}
        out = {
            "routable": (heard, routable(maddr)),
            "cpu_pct": 100.0 * cpu_s / (w1 - w0),
            "split": (sum(v for k, v in by.items() if not k.startswith("nng")),
                      sum(v for k, v in by.items() if k.startswith("nng"))),
            "msgs_per_s": (n1 - n0) / (w1 - w0),
            "us_per_msg": 1e6 * cpu_s / (n1 - n0) if n1 > n0 else 0.0,
            "rss": (proc_status(rt.pid, "VmRSS") / 1024, proc_status(rt.pid, "VmHWM") / 1024),
            "threads": proc_status(rt.pid, "Threads"),
        }
        direct = probe(mock_addr, a.probe)
        routed = probe(raddr, a.probe)
        direct2 = probe(mock_addr, a.probe)
        out["probe"] = (routed, (direct + direct2) / 2)
        print("  router --subscriber=%s: %s" % (via, out), flush=True)
        return out
    finally:
        if rt is not None:
            stop(rt)
        stop(pub)


def msum(maddr, family):
    """The sum of every sample of a metric family (all its label sets)."""
    _, body = get(maddr, "/metrics")
    return sum(float(m.group(1)) for m in
               re.finditer(rb"^" + re.escape(family.encode()) + rb"(?:\{[^}]*\})? (\S+)$", body, re.M))


def run_kv(a, b, tmp):
    """Issue 26: the router following --workers workers' KV events (fleetpub --kv-rate: each
    worker stores --kv-keys blocks per message and, past --kv-blocks held, removes its oldest),
    its load messages at 1 a second each: CPU per kv_events message and per key, the events
    index's blocks and bytes, and the router's RSS, per million blocks indexed."""
    urls = os.path.join(tmp, "workers-kv.txt")
    pub, m = start([os.path.join(b, "tests/bench/fleetpub"), "--workers", str(a.workers),
                    "--rate", "1", "--out", urls, "--kv-rate", str(a.kv_rate), "--kv-keys",
                    str(a.kv_keys), "--kv-blocks", str(a.kv_blocks)], r"^kv-http (\d+)")
    port = m.group(1)
    rt = None
    try:
        deadline = time.time() + 60
        while time.time() < deadline:  # every worker's line is written once all listen
            with open(urls) as f:  # (whole lines only: the file is written as they start)
                pubs = [ln.strip().rsplit("=", 1)[1] for ln in f if ln.endswith("\n") and "=" in ln]
            if len(pubs) == a.workers:
                break
            time.sleep(0.2)
        # worker i at 127.0.(i / 250).(i % 250 + 1): the address names it to the dumps' server
        workers = ["http://127.0.%d.%d:%s=%s" % (i // 250, i % 250 + 1, port, u)
                   for i, u in enumerate(pubs)]
        held = a.workers * a.kv_blocks
        cfg = os.path.join(tmp, "router-kv.yaml")
        with open(cfg, "w") as f:
            f.write("listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\n")
            f.write("router_max_tree_size: %d\n" % max(1024, held + held // 4))
            f.write("worker: %s\n" % ",".join(workers))
        rt, m = start([os.path.join(b, "admit-router"), "--config", cfg],
                      r"ready listen=(\S+) metrics=(\S+) workers=(\d+)")
        maddr = hostport(m.group(2))
        t0 = time.time()
        while metric(maddr, "admit_router_kv_events_workers") < a.workers and time.time() - t0 < 90:
            time.sleep(0.5)
        following = metric(maddr, "admit_router_kv_events_workers")
        while metric(maddr, "admit_router_kv_events_index_blocks") < held * 0.95 and \
                time.time() - t0 < 180:  # until every cache has filled and turns over
            time.sleep(0.5)
        time.sleep(2)
        n0, k0 = msum(maddr, "admit_router_kv_events_messages_total"), \
            msum(maddr, "admit_router_kv_events_keys_total")
        g0, d0 = metric(maddr, "admit_router_kv_events_gaps_total"), \
            msum(maddr, "admit_router_kv_events_dumps_total")
        ticks0, w0 = proc_ticks(rt.pid), time.monotonic()
        time.sleep(a.seconds)
        ticks1, w1 = proc_ticks(rt.pid), time.monotonic()
        n1, k1 = msum(maddr, "admit_router_kv_events_messages_total"), \
            msum(maddr, "admit_router_kv_events_keys_total")
        cpu_s = (ticks1 - ticks0) / os.sysconf("SC_CLK_TCK")
        blocks = metric(maddr, "admit_router_kv_events_index_blocks")
        rss = proc_status(rt.pid, "VmRSS") / 1024
        out = {
            "following": following,
            "msgs_per_s": (n1 - n0) / (w1 - w0),
            "keys_per_s": (k1 - k0) / (w1 - w0),
            "cpu_pct": 100.0 * cpu_s / (w1 - w0),
            "us_per_msg": 1e6 * cpu_s / (n1 - n0) if n1 > n0 else 0.0,
            "ns_per_key": 1e9 * cpu_s / (k1 - k0) if k1 > k0 else 0.0,
            "blocks": blocks,
            "rss_mib": rss,
            "mib_per_million_blocks": rss / (blocks / 1e6) if blocks else 0.0,
            "gaps": metric(maddr, "admit_router_kv_events_gaps_total") - g0,
            "dumps": msum(maddr, "admit_router_kv_events_dumps_total") - d0,
        }
        print("  kv events: %s" % out, flush=True)
        return out
    finally:
        if rt is not None:
            stop(rt)
        stop(pub)


def print_kv(a, r):
    print()
    print("| admit-router following %d workers' KV events (%d kv_events/s each, %d blocks a "
          "message, %d held each) | measured |" % (a.workers, a.kv_rate, a.kv_keys, a.kv_blocks))
    print("|---|---:|")
    print("| workers followed; during the run, dumps fetched and gaps seen | %d; %d, %d |" % (
        r["following"], r["dumps"], r["gaps"]))
    print("| kv_events messages / keys received per second | %.0f / %.0f |" % (
        r["msgs_per_s"], r["keys_per_s"]))
    print("| CPU, %% of one core (%.0f s; with 1 load message a second per worker) | %.1f |" % (
        a.seconds, r["cpu_pct"]))
    print("| µs CPU per kv_events message | %.2f |" % r["us_per_msg"])
    print("| ns CPU per block stored or removed | %.0f |" % r["ns_per_key"])
    print("| blocks indexed | %.0f |" % r["blocks"])
    print("| router RSS MiB / per million blocks indexed | %.0f / %.0f |" % (
        r["rss_mib"], r["mib_per_million_blocks"]))


def run_floor(a, b, tmp, mock_url):
    """floor_bench in each mode this build has, against a fresh fleet: {mode label: kv}."""
    urls = os.path.join(tmp, "workers-floor.txt")
    pub = start_fleet(a, b, mock_url, urls)
    out = {}
    try:
        time.sleep(2)
        for mode in ("epoll", "uring"):
            p = subprocess.run([os.path.join(b, "tests/bench/floor_bench"), "--mode", mode,
                                "--urls", urls, "--warmup", "3", "--seconds", str(a.seconds)],
                               capture_output=True, text=True)
            if p.returncode != 0:
                print("  floor %s: %s" % (mode, p.stderr.strip()), flush=True)
                continue
            print("  floor %s" % p.stdout.strip(), flush=True)
            label = {"epoll": "epoll passes, one recv per ready connection",
                     "uring": "io_uring, multishot recv, work deferred to the pass"}[mode]
            out[label] = kv(p.stdout.strip())
    finally:
        stop(pub)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-rel")
    ap.add_argument("--workers", type=int, default=1000)
    ap.add_argument("--rate", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--probe", type=int, default=300, help="requests of the live probe")
    ap.add_argument("--skip-intake", action="store_true", help="skip the socket comparison")
    ap.add_argument("--skip-floor", action="store_true", help="skip floor_bench")
    ap.add_argument("--subscribers", default="nng,auto",
                    help="the routers' --subscriber values, one router each")
    ap.add_argument("--kv-rate", type=int, default=10,
                    help="kv_events messages per second per worker (0: no KV events run)")
    ap.add_argument("--kv-keys", type=int, default=16, help="blocks per kv_events message")
    ap.add_argument("--kv-blocks", type=int, default=1000, help="blocks each worker's cache holds")
    ap.add_argument("--kv-only", action="store_true", help="only the KV events run")
    a = ap.parse_args()
    b = a.build
    tmp = tempfile.mkdtemp(prefix="admit-fleet-")
    urls = os.path.join(tmp, "workers.txt")
    if a.kv_only:
        print_kv(a, run_kv(a, b, tmp))
        return 0
    procs = []
    print("fleet bench: %d workers x %d messages/s, %s, nproc %d" % (
        a.workers, a.rate, time.strftime("%Y-%m-%d %H:%M"), os.cpu_count()), flush=True)
    try:
        # On every address: each worker is its own loopback address (start_fleet).
        mock, m = start([os.path.join(b, "admit-mock-engine"), "--listen", "0.0.0.0:0",
                         "--speedup-ratio", "0"], r"listening on (\S+)")
        procs.append(mock)
        mock_addr = ("127.0.0.1", hostport(m.group(1))[1])

        # ---- 2. socket layouts ----
        rows = {}
        if not a.skip_intake:
            pub = start_fleet(a, b, m.group(1), urls)
            procs.append(pub)
            for r in range(a.rounds):
                for mode in ("shared", "per-socket", "native"):
                    out = subprocess.run(
                        [os.path.join(b, "tests/bench/intake_bench"), "--mode", mode, "--urls",
                         urls, "--warmup", "3", "--seconds", str(a.seconds)],
                        capture_output=True, text=True, check=True).stdout
                    got = kv(out.strip().splitlines()[-1])
                    rows.setdefault(mode, []).append(got)
                    print("  round %d %s" % (r + 1, out.strip()), flush=True)
            stop(pub)
            procs.remove(pub)

        # ---- 3. the router, with each subscriber ----
        routers = {}
        for via in a.subscribers.split(","):
            routers[via] = run_router(a, b, tmp, via, m.group(1), mock_addr)

        # ---- 4. the floor ----
        floor = {}
        if not a.skip_floor:
            floor = run_floor(a, b, tmp, m.group(1))

        # ---- 5. the engines' KV events ----
        kvr = run_kv(a, b, tmp) if a.kv_rate > 0 else None

        # ---- 6. selection ----
        sel = subprocess.run([os.path.join(b, "tests/bench/select_bench"), "--workers", "1024",
                              "--ranks", "1", "--rounds", "5", "--part", "1", "--cpu", "1"],
                             capture_output=True, text=True, check=True).stdout
        msel = re.search(r"^\|\s+1024 \|\s+1 \|\s+(\S+) \|\s+(\S+) \|", sel, re.M)
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
    vias = list(routers)
    print("| admit-router, %d workers x %d msg/s | %s | target |" % (
        a.workers, a.rate, " | ".join("--subscriber=%s" % v for v in vias)))
    print("|---|" + "---:|" * len(vias) + "---:|")

    def row(label, fmt, target=""):
        print("| %s | %s | %s |" % (label, " | ".join(fmt(routers[v]) for v in vias), target))

    row("workers routable (of %d)" % a.workers, lambda r: "%d, then %d" % r["routable"], "all")
    row("CPU of message intake, %% of one core (%.0f s)" % a.seconds,
        lambda r: "%.1f" % r["cpu_pct"], "< %.0f" % TARGET_CPU_PCT)
    row("of which the event loop / nng's threads", lambda r: "%.1f / %.1f" % r["split"])
    row("messages received per second", lambda r: "%.0f" % r["msgs_per_s"])
    row("µs CPU per message received", lambda r: "%.1f" % r["us_per_msg"])
    row("RSS MiB (peak)", lambda r: "%.1f (%.1f)" % r["rss"], "< %.0f" % TARGET_RSS_MIB)
    row("threads", lambda r: "%d" % r["threads"])
    row("live probe: through the router / straight to the mock, median ms",
        lambda r: "%.3f / %.3f" % r["probe"])
    if msel:
        print("| selection at 1,024 workers, select_bench off / on µs | %s / %s | as part 1 |" %
              (msel.group(1), msel.group(2)))
    if floor:
        print()
        print("| the floor: only reading, %d publishers x %d msg/s, every 2 ms | CPU %% of a core "
              "| µs CPU per message | host TCP segments per message | of which delayed ACKs |" %
              (a.workers, a.rate))
        print("|---|---:|---:|---:|---:|")
        for mode, r in floor.items():
            print("| %s | %.1f | %.2f | %.2f | %.2f |" % (
                mode, float(r["cpu_pct"]), float(r["us_per_msg"]),
                float(r["host_segs_per_msg"]), float(r["delayed_acks_per_msg"])))
        print("(floor_bench, %.0f s each; the target, %.0f %% of a core, is %.1f µs a message)" %
              (a.seconds, TARGET_CPU_PCT, 1e4 * TARGET_CPU_PCT / (a.workers * a.rate)))
    if kvr:
        print_kv(a, kvr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
