#!/usr/bin/env python3
"""Disaggregated prefill/decode through admit-router (issue 27, item 5). Python 3 standard
library only; prints numbers and asserts nothing (a timing on a shared machine is no test).

  meson setup build-bench --buildtype=release -Dwerror=false && ninja -C build-bench
  python3 tests/bench/disagg.py --build build-bench [--seconds 25] [--rate 9]
                                [--cpu-rate 60] [--cpu-seconds 5] [--cpu-rounds 5]

Every worker is an admit-mock-engine behind its own admitd (whose --publish the router
follows), all on loopback ports picked at run time, one admit-router in front.

1. Latency: fleets of the same size (--workers, 4) in turn: aggregated (every worker
   --worker, whole requests), 2 prefill + 2 decode, and 1 prefill + 3 decode
   (--prefill-worker / --decode-worker: the router sends a prefill leg, then the decode leg
   streamed to the client). The same mocks (--speedup-ratio 1, Dynamo mocker's timing fits;
   --prefill-interference, so that a rank's prefills run one at a time and stall its decoding
   streams, as in an engine without chunked prefill, and a decode worker, which prefills
   nothing, is never stalled; --max-num-seqs and admitd's N = --seqs) and the same workload
   for each, aggregated and disaggregated: open-loop arrivals, Poisson at --rate a second for
   --seconds (one seeded schedule), streaming chat requests of 1,000-3,000 prompt tokens (each
   its own, so no prefix cache hit) and max_tokens 64-256. Per fleet: TTFT (to the first
   content chunk), the gaps between content chunks of a stream (inter-token latency), end to
   end, p50 and p99 (ITL p99.9 too); completed and output tokens a second over the run (first
   send to last end); 529s, 503s and other failures; the decode tokens that waited for a
   prefill on the workers that stream (both, decode: admit_mock_decode_stalls_total, and
   their share of the tokens streamed) and their mean wait.
2. Router CPU: the same mix at --cpu-rate a second for --cpu-seconds through one router in
   front of an aggregated fleet and one in front of a 2 + 2 fleet, both up at once, the mocks
   without delay (--speedup-ratio 0), taken in turns for --cpu-rounds rounds: the router's
   CPU (every thread's run time from /proc/PID/task/*/schedstat, ns; utime+stime's 10 ms
   ticks are too coarse for a few hundred requests) per completed request, and each round's
   disaggregated / aggregated ratio, with their median.
"""
import argparse
import glob
import http.client
import os
import random
import shutil
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fleet  # noqa: E402
import run  # noqa: E402
import workload  # noqa: E402
from run import Proc, f, log, med, pct, ratio, start_admitd, start_mock, stop_all, table  # noqa: E402

MODEL = "mock-model"


# ---------------------------------------------------------------- the fleet

def start_fleet(tag, prefill, decode, both, mock_args, n, q):
    """prefill + decode + both workers (mock + admitd each) and a router following them."""
    argv = [os.path.join(run.ARGS.build, "admit-router"), "--listen", "127.0.0.1:0",
            "--metrics-listen", "127.0.0.1:0"]
    roles = [("prefill", "--prefill-worker")] * prefill + [("decode", "--decode-worker")] * decode
    roles += [("both", "--worker")] * both
    mocks = []
    for i, (role, opt) in enumerate(roles):
        _, mock_addr = start_mock("%s-%d" % (tag, i), "--role", role, *mock_args)
        if role != "prefill":  # a prefill leg's one token is not streamed: TTFT shows it
            mocks.append(fleet.hostport(mock_addr))
        ad, addr = start_admitd("%s-%d" % (tag, i), mock_addr, n, q)
        argv.append("%s=http://%s=%s" % (opt, addr, ad.publish))
    rt = Proc("router-" + tag, argv)
    m = rt.wait_line(r"ready listen=(\S+) metrics=(\S+)")
    rt.addr, rt.maddr = fleet.hostport(m.group(1)), fleet.hostport(m.group(2))
    rt.mocks = mocks
    deadline = time.monotonic() + 20
    while fleet.routable(rt.maddr) < len(roles):  # every worker's first load message is in
        if time.monotonic() > deadline:
            raise RuntimeError("router %s: not every worker routable within 20 s" % tag)
        time.sleep(0.1)
    return rt


def disagg_counts(rt):
    body = fleet.get(rt.maddr, "/metrics")[1].decode()
    out = {}
    for line in body.splitlines():
        if line.startswith("admit_router_disagg_total{"):
            k, v = line.rsplit(" ", 1)
            out[k.split('"')[1]] = int(float(v))
    return out


def stalls(rt):
    """(decode tokens that waited for a prefill, seconds they waited) over the mocks of the
    workers that stream (both, decode)."""
    n = secs = 0.0
    for addr in rt.mocks:
        for line in fleet.get(addr, "/metrics")[1].decode().splitlines():
            if line.startswith("admit_mock_decode_stalls_total{"):
                n += float(line.rsplit(" ", 1)[1])
            elif line.startswith("admit_mock_decode_stall_seconds_total{"):
                secs += float(line.rsplit(" ", 1)[1])
    return n, secs


def cpu_ns(pid):
    """The run time of every thread of pid so far, ns (schedstat's first field)."""
    total = 0
    for path in glob.glob("/proc/%d/task/*/schedstat" % pid):
        try:
            with open(path) as fh:
                total += int(fh.read().split()[0])
        except OSError:
            pass  # a thread that ended between the glob and the read
    return total


# ---------------------------------------------------------------- the workload

def schedule(seed, rate, seconds):
    """[(send offset s, prompt tokens, max_tokens)]: Poisson arrivals, one seeded schedule."""
    rnd = random.Random(seed)
    out, t = [], 0.0
    while True:
        t += rnd.expovariate(rate)
        if t >= seconds:
            return out
        out.append((t, rnd.randint(1000, 3000), rnd.randint(64, 256)))


def prompt(i, tokens):
    """A chat message of `tokens` prompt tokens (the mock's 4-byte pieces and its 4 template
    tokens) that begins with its own number, so that no two share a cached block."""
    head = "%08d" % i
    return head + "x" * (4 * (tokens - 4) - len(head))


class Req(threading.Thread):
    """One streaming chat request (workload.py's client); when each content chunk arrived."""

    def __init__(self, addr, i, tokens, max_tokens):
        super().__init__(daemon=True)
        self.addr = addr
        self.max_tokens = max_tokens
        self.body = {"model": MODEL, "stream": True, "max_tokens": max_tokens,
                     "messages": [{"role": "user", "content": prompt(i, tokens)}]}
        self.r = None
        self.chunks = []  # arrival times of chunks with content

    def run(self):
        c = http.client.HTTPConnection(*self.addr, timeout=60)
        self.t_send = time.monotonic()
        try:
            self.r = workload.stream_request(c, "/v1/chat/completions", self.body, {}, self.chunks)
        except (OSError, http.client.HTTPException, ValueError):
            pass  # counted as an error: no status
        finally:
            c.close()

    def status(self):
        return self.r.status if self.r else None

    def ok(self):
        """200 and every token asked for (the mock generates max_tokens, one a chunk)."""
        return self.status() == 200 and len(self.chunks) == self.max_tokens


def drive(addr, plan, join_s=120.0):
    """Sends the plan open-loop (each request at its offset, however the others fare)."""
    reqs = []
    t0 = time.monotonic()
    for i, (at, tokens, max_tokens) in enumerate(plan):
        delay = t0 + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        r = Req(addr, i, tokens, max_tokens)
        r.start()
        reqs.append(r)
    deadline = time.monotonic() + join_s
    for r in reqs:
        r.join(max(0.0, deadline - time.monotonic()))
    return t0, reqs


def summarize(t0, reqs):
    ok = [q for q in reqs if q.ok()]
    ttft = [(q.chunks[0] - q.t_send) * 1e3 for q in ok]
    itl = [(b - a) * 1e3 for q in ok for a, b in zip(q.chunks, q.chunks[1:])]
    e2e = [(q.r.t_end - q.t_send) * 1e3 for q in ok]
    wall = max((q.r.t_end for q in ok), default=t0 + 1) - t0
    st = [q.status() for q in reqs]
    return {"ok": len(ok), "sent": len(reqs), "ttft": ttft, "itl": itl, "e2e": e2e,
            "rps": len(ok) / wall, "tps": sum(len(q.chunks) for q in ok) / wall,
            "tokens": sum(len(q.chunks) for q in reqs),
            "529": st.count(529), "503": st.count(503),
            "err": len(reqs) - len(ok) - st.count(529) - st.count(503)}


# ---------------------------------------------------------------- 1. latency

CONFIGS = [(0, 0), (2, 2), (1, 3)]  # (prefill, decode) workers of 4; 0 + 0: aggregated


def latency(a):
    plan = schedule(a.seed, a.rate, a.seconds)
    mock_args = ["--speedup-ratio", "1", "--prefill-interference", "--max-num-seqs", str(a.seqs)]
    rows = []
    for p, d in CONFIGS:
        k = a.workers // 4  # the same shares of a larger fleet
        p, d, both = p * k, d * k, a.workers if p + d == 0 else 0
        log("latency: %d + %d + %d, %d requests over %.0f s" % (p, d, both, len(plan), a.seconds))
        rt = start_fleet("lat", p, d, both, mock_args, a.seqs, 4 * a.seqs)
        try:
            s = summarize(*drive(rt.addr, plan))
            dc = disagg_counts(rt)
            st_n, st_s = stalls(rt)
        finally:
            stop_all()
        name = "%d prefill + %d decode" % (p, d) if p + d else "aggregated (%d x both)" % both
        rows.append([name,
                     f(pct(s["ttft"], 50)), f(pct(s["ttft"], 99)), f(pct(s["itl"], 50)),
                     f(pct(s["itl"], 99)), f(pct(s["itl"], 99.9)), f(pct(s["e2e"], 50), 0), f(pct(s["e2e"], 99), 0),
                     "%d/%d" % (s["ok"], s["sent"]), f(s["rps"], 2), f(s["tps"], 0),
                     s["529"], s["503"], s["err"],
                     "%d (%.1f %%)" % (st_n, 100.0 * st_n / max(1, s["tokens"])),
                     f(1e3 * st_s / st_n if st_n else float("nan")),
                     ", ".join("%s %d" % kv for kv in sorted(dc.items()) if kv[1]) or "-"])
    return table(["fleet", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms",
                  "ITL p99.9 ms", "e2e p50 ms", "e2e p99 ms", "completed", "completed/s", "output tok/s",
                  "529", "503", "errors", "tokens stalled by a prefill", "mean stall ms",
                  "disagg_total"], rows)


# ---------------------------------------------------------------- 2. router CPU

def router_cpu(a):
    mock_args = ["--speedup-ratio", "0"]
    half = a.workers // 2
    agg = start_fleet("cpu-agg", 0, 0, a.workers, mock_args, 256, 1024)
    dis = start_fleet("cpu-dis", half, a.workers - half, 0, mock_args, 256, 1024)
    plan = schedule(a.seed + 1, a.cpu_rate, a.cpu_seconds)
    drive(agg.addr, plan[:50])  # warm both up (connections to the workers, allocator)
    drive(dis.addr, plan[:50])
    per = {"agg": [], "dis": []}
    bad = {"agg": 0, "dis": 0}
    rounds = []
    for rnd in range(a.cpu_rounds):
        us = {}
        for key, rt in (("agg", agg), ("dis", dis)) if rnd % 2 == 0 else (("dis", dis), ("agg", agg)):
            c0 = cpu_ns(rt.pid)
            s = summarize(*drive(rt.addr, plan))
            us[key] = (cpu_ns(rt.pid) - c0) / 1e3 / max(1, s["ok"])
            per[key].append(us[key])
            bad[key] += s["sent"] - s["ok"]
        rounds.append(ratio(us["dis"], us["agg"]))
        log("router cpu round %d: aggregated %.1f us, disaggregated %.1f us a request" %
            (rnd + 1, us["agg"], us["dis"]))
    dc = disagg_counts(dis)
    stop_all()
    rows = [["aggregated (%d x both)" % a.workers, f(med(per["agg"])), bad["agg"], "-"],
            ["%d prefill + %d decode" % (half, a.workers - half), f(med(per["dis"])), bad["dis"],
             f(med(rounds), 2)]]
    return (table(["router in front of", "router CPU µs/request (median of rounds)",
                   "requests not completed", "disaggregated / aggregated (median of rounds' ratios)"],
                  rows) +
            "\n\nPer round (disaggregated / aggregated): %s; %d requests a round at %g/s; "
            "disagg_total: %s." % (", ".join(f(x, 2) for x in rounds), len(plan), a.cpu_rate,
                                   ", ".join("%s %d" % kv for kv in sorted(dc.items()))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(run.ROOT, "build-bench"))
    ap.add_argument("--workers", type=int, default=4, help="workers in each fleet (a multiple of 4)")
    ap.add_argument("--seqs", type=int, default=8, help="each mock's --max-num-seqs and admitd's N")
    ap.add_argument("--rate", type=float, default=9.0, help="arrivals a second, part 1")
    ap.add_argument("--seconds", type=float, default=25.0, help="seconds of arrivals per fleet, part 1")
    ap.add_argument("--cpu-rate", type=float, default=60.0, help="arrivals a second, part 2")
    ap.add_argument("--cpu-seconds", type=float, default=5.0, help="seconds per router per round, part 2")
    ap.add_argument("--cpu-rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--parts", default="latency,cpu")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    workdir = os.path.join(a.build, "bench", "disagg")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    run.ARGS = argparse.Namespace(build=a.build, workdir=workdir)
    with open("/proc/cpuinfo") as fh:
        cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "?")
    print("Machine: nproc %d, %s, kernel %s; %s\n" % (os.cpu_count(), cpu, os.uname().release,
                                                     time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())),
          flush=True)
    try:
        if "latency" in a.parts:
            print("## Disaggregated against aggregated (%d workers, %g requests/s for %g s, "
                  "max-num-seqs %d)\n" % (a.workers, a.rate, a.seconds, a.seqs), flush=True)
            print(latency(a) + "\n", flush=True)
        if "cpu" in a.parts:
            print("## Router CPU per request\n", flush=True)
            print(router_cpu(a) + "\n", flush=True)
    finally:
        stop_all()


if __name__ == "__main__":
    main()
