#!/usr/bin/env python3
"""Multi-turn workloads and prefix caching (issue 25, item 2): routing policies side by side.

    tests/bench/workload.py --build build-bench [--quick] [--workers 4]
                            [--workloads chat,trace,shared] [--policies all]
                            [--trace FILE.jsonl] [--seconds 25]

K workers, each an admit-mock-engine behind its own admitd (loopback, ports picked at run
time), sized so that the fleet's KV cache holds the workload's working set only when sessions
are partitioned across workers. For each workload and each policy a fresh fleet serves the
same requests through one front:

  haproxy-rr         HAProxy balance roundrobin
  haproxy-leastconn  HAProxy balance leastconn
  haproxy-hash       HAProxy balance hdr(X-Session-Id), hash-type consistent (affinity)
  router-load        admit-router by load (--kv-overlap-score-weight 0 when it has the flag)
  router-prefix      admit-router prefix-aware (--kv-overlap-score-weight 1): only when the
                     build's admit-router lists that flag in --help
  router-events      router-prefix on the engines' KV events: each mock publishes them
                     (--kv-events-endpoint), its admitd relays them (--engine-kv-events), and
                     the router, with --tokenize when it has it, keys text as the engine does
  router-prefix-x2   two router-prefix replicas over the fleet, each request to one of them
                     at random (an L4 balancer without affinity): each sees half the traffic
  router-events-x2   the same with two router-events replicas

Workloads (tests/bench/workload_gen.py): `chat`, closed-loop users each running multi-turn
sessions (a system prompt shared by a group of sessions, an opening of the session's own, T
turns that resend the whole conversation with the answers as returned, think time, an
X-Session-Id header); `trace`, a Mooncake trace replayed open-loop at its timestamps (--trace,
or a sample made up at run time); `shared`, chat sessions that all open with one long system
prompt (a naive prefix router would pile them on one worker).

Per policy: hit rate (cached / prompt tokens from the answers' usage, when the mock has
--enable-prompt-tokens-details; else from its vllm:prefix_cache_* counters; else "-"), TTFT
p50/p99 (time to the first content chunk of the stream), end-to-end p50/p99, completed
requests per second, 529 and 503 counts, and the spread of prompt tokens across workers (max /
mean of the mocks' vllm:prompt_tokens_total). Markdown tables on stdout and in
BUILD/bench/workload.md, a PNG (gnuplot) beside it. Prints numbers and asserts nothing.
Features missing from this build (the mock's prefix cache, the router's prefix index) are
detected from each program's --help and said so; the rest runs.
"""
import argparse
import http.client
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet as F  # noqa: E402  (metric, routable, hostport)
import run as R  # noqa: E402  (Proc, start_mock, start_admitd, fill, free_port, pct, table...)
import workload_gen as G  # noqa: E402

POLICIES = ["haproxy-rr", "haproxy-leastconn", "haproxy-hash", "router-load", "router-prefix",
            "router-events", "router-prefix-x2", "router-events-x2"]
BALANCE = {"haproxy-rr": "roundrobin", "haproxy-leastconn": "leastconn",
           "haproxy-hash": "hdr(X-Session-Id)\n    hash-type consistent"}
MODEL = "mock-model"


# ---------------------------------------------------------------- features of this build

def helptext(prog):
    try:
        return subprocess.run([os.path.join(R.ARGS.build, prog), "--help"], capture_output=True,
                              text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def features():
    mock, router = helptext("admit-mock-engine"), helptext("admit-router")
    admitd = helptext("admitd")
    return types.SimpleNamespace(
        events="--kv-events-endpoint" in mock and "--engine-kv-events" in admitd,
        tokenize="--tokenize" in router,
        blocks="--num-gpu-blocks" in mock,
        prefix_cache="--no-enable-prefix-caching" in mock or "--enable-prompt-tokens-details" in mock,
        details="--enable-prompt-tokens-details" in mock,
        kv_weight="--kv-overlap-score-weight" in router,
        haproxy=shutil.which("haproxy") is not None)


def chars_per_token(mock_addr):
    """The mock's characters per token for workload_gen's text, by POST /tokenize when it
    answers it (the prefix-cache mock's tokenizer); 4 otherwise (bytes / 4, today's count)."""
    sample = G.text(("calibrate",), 2000, 4)
    try:
        st, body = F.get(F.hostport(mock_addr), "/tokenize",
                         json.dumps({"model": MODEL, "prompt": sample}).encode())
        if st == 200:
            n = json.loads(body).get("count") or len(json.loads(body).get("tokens", []))
            if n:
                return len(sample) / n
    except (OSError, ValueError):
        pass
    return 4.0


# ---------------------------------------------------------------- the fleet and the fronts

def mock_flags(a, feat, blocks):
    fl = ["--speedup-ratio", str(a.speedup), "--token-interval-ms", str(a.token_ms),
          "--max-num-seqs", str(a.slots)]
    if feat.blocks:
        fl += ["--num-gpu-blocks", str(blocks), "--block-size", str(a.block_size)]
    if feat.details:
        fl += ["--enable-prompt-tokens-details"]
    return fl


def start_fleet(a, feat, tag, blocks, events=False):
    """K mocks, each behind an admitd of N = --slots, Q = --queue: [(mock addr, admitd)]. With
    events, each mock publishes its KV events and its admitd relays them (the mock's PUB binds
    a wildcard port, admitd connects to it on loopback, as vLLM's default has it)."""
    out = []
    for k in range(a.workers):
        mflags, aflags = mock_flags(a, feat, blocks), []
        if events:
            port = R.free_port()
            mflags += ["--kv-events-endpoint", "tcp://*:%d" % port]
            aflags += ["--engine-kv-events", "tcp://127.0.0.1:%d" % port]
        _, maddr = R.start_mock("%s-%d" % (tag, k), *mflags)
        ad, _ = R.start_admitd("%s-%d" % (tag, k), maddr, a.slots, a.queue, *aflags)
        out.append((maddr, ad))
    return out


def start_haproxy(tag, policy, fleet):
    """HAProxy from run.py's template (one thread, keep-alive, http-no-delay), its backend the
    K admitds under `balance`: admission is theirs, so HAProxy itself neither caps nor sheds."""
    port = R.free_port()
    big = 100000
    cfg = R.fill("haproxy.cfg.in", "haproxy-%s.cfg" % tag, DIR=R.ARGS.workdir, PORT=port,
                 UPSTREAM="@UPSTREAM@", N=big, Q=big, QUEUE_TIMEOUT_MS=60000, MAXCONN=4000)
    with open(cfg) as fh:
        text = fh.read()
    servers = "    balance %s\n" % BALANCE[policy] + "".join(
        "    server w%d %s maxconn %d\n" % (k, ad.addr, big) for k, (_, ad) in enumerate(fleet))
    text, n = re.subn(r"^\s*server mock .*\n", servers, text, flags=re.M)
    if n != 1:
        raise RuntimeError("haproxy.cfg.in: no `server mock` line to replace")
    with open(cfg, "w") as fh:
        fh.write(text)
    p = R.Proc("haproxy-" + tag, ["haproxy", "-db", "-f", cfg])
    R.wait_port(port, p)
    return "127.0.0.1:%d" % port


def start_router(tag, policy, fleet, feat):
    argv = [os.path.join(R.ARGS.build, "admit-router"), "--listen", "127.0.0.1:0",
            "--metrics-listen", "127.0.0.1:0"]
    argv += ["--worker=http://%s=%s" % (ad.addr, ad.publish) for _, ad in fleet]
    if feat.kv_weight:
        argv += ["--kv-overlap-score-weight",
                 "0" if policy == "router-load" else R.ARGS.prefix_weight]
    if policy.startswith("router-events") and feat.tokenize:
        argv += ["--tokenize"]
    p = R.Proc("router-" + tag, argv)
    m = p.wait_line(r"ready listen=(\S+) metrics=(\S+)")
    maddr = F.hostport(m.group(2))
    deadline = time.monotonic() + 20
    while F.routable(maddr) < len(fleet) and time.monotonic() < deadline:
        time.sleep(0.1)
    return m.group(1), maddr


# ---------------------------------------------------------------- the client

class Result:
    __slots__ = ("status", "ttft", "e2e", "prompt", "cached", "content", "t_end")


def stream_request(conn, path, body, headers, times=None):
    """One streaming request on a keep-alive connection: a Result (status, ttft and e2e in
    seconds, usage's prompt and cached tokens or None, the content as returned); the arrival
    of each content chunk appended to `times` when given (disagg.py's inter-token gaps)."""
    r = Result()
    r.ttft = r.e2e = r.prompt = r.cached = None
    r.content = ""
    data = json.dumps(body).encode()
    h = {"Content-Type": "application/json"}
    h.update(headers)
    t0 = time.monotonic()
    conn.request("POST", path, body=data, headers=h)
    resp = conn.getresponse()
    r.status = resp.status
    if resp.status != 200:
        resp.read()
        r.t_end = time.monotonic()
        return r
    parts = []
    for line in resp:
        if not line.startswith(b"data: "):
            continue
        payload = line[6:].strip()
        if payload == b"[DONE]":
            break
        ev = json.loads(payload)
        for ch in ev.get("choices") or []:
            piece = (ch.get("delta") or {}).get("content") if "delta" in ch else ch.get("text")
            if piece:
                now = time.monotonic()
                if r.ttft is None:
                    r.ttft = now - t0
                if times is not None:
                    times.append(now)
                parts.append(piece)
        u = ev.get("usage")
        if u:
            r.prompt = u.get("prompt_tokens")
            det = u.get("prompt_tokens_details")
            if "prompt_tokens_details" in u:  # vLLM answers null for 0 cached tokens
                r.cached = (det or {}).get("cached_tokens") or 0
    resp.read()
    r.t_end = time.monotonic()
    r.e2e = r.t_end - t0
    r.content = "".join(parts)
    return r


class Client:
    """A keep-alive connection that reopens after an error; requests counted as errors."""

    def __init__(self, addr):
        self.addr = F.hostport(addr)
        self.conn = None

    def send(self, path, body, headers):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(*self.addr, timeout=120)
            try:
                return stream_request(self.conn, path, body, headers)
            except (OSError, http.client.HTTPException, ValueError):
                self.conn.close()
                self.conn = None
        r = Result()
        r.status, r.ttft, r.e2e, r.prompt, r.cached, r.content = 0, None, None, None, None, ""
        r.t_end = time.monotonic()
        return r


def run_chat(addrs, spec, seconds, cpt, results):
    """Closed loop: spec.users threads, each running sessions one after the other until
    `seconds` have passed (a session in progress stops there too). A rejected turn (529, 503)
    is retried after a pause, as a client honouring the overload answer would. Each request
    goes to one of addrs (the fronts) at random, as an L4 balancer without affinity sends it."""
    stop_at = time.monotonic() + seconds
    lock = threading.Lock()

    def user(u):
        cls = [Client(addr) for addr in addrs]
        pick = random.Random("front/%s/%d" % (spec.name, u))
        rnd = random.Random("think/%s/%d" % (spec.name, u))
        k = 0
        while time.monotonic() < stop_at:
            sid, system, opening, msgs = spec.session(u, k, cpt)
            k += 1
            conv = [{"role": "system", "content": system}]
            for t, m in enumerate(msgs):
                conv.append({"role": "user", "content": (opening + m) if t == 0 else m})
                while time.monotonic() < stop_at:
                    r = pick.choice(cls).send("/v1/chat/completions",
                                {"model": MODEL, "messages": conv, "max_tokens": spec.answer_tokens,
                                 "stream": True, "stream_options": {"include_usage": True}},
                                {"X-Session-Id": sid})
                    with lock:
                        results.append(r)
                    if r.status == 200:
                        break
                    time.sleep(0.2 + rnd.random() * 0.3)
                else:
                    return
                conv.append({"role": "assistant", "content": r.content})
                time.sleep(min(spec.think(rnd), max(0.0, stop_at - time.monotonic())))

    threads = [threading.Thread(target=user, args=(u,), daemon=True) for u in range(spec.users)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(seconds + 180)


def run_trace(addrs, records, speed, block_tokens, cpt, conc, results):
    """Open loop: each record sent at its timestamp / speed (from the first), by a pool of
    `conc` client threads (a record finding none free waits: its lateness is not counted), to
    one of addrs at random."""
    import queue
    q = queue.Queue()
    lock = threading.Lock()
    cache = {}
    prompts = [G.trace_prompt(r, block_tokens, cpt, cache) for r in records]

    def worker(w):
        cls = [Client(addr) for addr in addrs]
        pick = random.Random("front/trace/%d" % w)
        while True:
            item = q.get()
            if item is None:
                return
            rec, prompt = item
            r = pick.choice(cls).send("/v1/completions",
                        {"model": MODEL, "prompt": prompt, "max_tokens": rec["output_length"],
                         "stream": True, "stream_options": {"include_usage": True}}, {})
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(conc)]
    for th in threads:
        th.start()
    t0 = time.monotonic()
    ts0 = records[0]["timestamp"] if records else 0
    for rec, prompt in zip(records, prompts):
        delay = t0 + (rec["timestamp"] - ts0) / 1000.0 / speed - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        q.put((rec, prompt))
    for _ in threads:
        q.put(None)
    for th in threads:
        th.join(300)


# ---------------------------------------------------------------- one policy, one workload

def mock_counters(maddr):
    """Sums over the mock's engines of prompt tokens and of the prefix cache's queries and
    hits (None when the mock has no such counter)."""
    _, body = F.get(F.hostport(maddr), "/metrics")
    out = {}
    for name in ("vllm:prompt_tokens_total", "vllm:prefix_cache_queries_total",
                 "vllm:prefix_cache_hits_total"):
        vals = re.findall(rb"^" + re.escape(name.encode()) + rb"(?:\{[^}]*\})? (\S+)$", body, re.M)
        out[name] = sum(float(v) for v in vals) if vals else None
    return out


def measure(a, feat, wl, policy, blocks, cpt_box):
    tag = "%s-%s" % (wl["name"], policy)
    events = policy.startswith("router-events")
    fleet = start_fleet(a, feat, tag, blocks, events=events)
    if cpt_box[0] is None:
        cpt_box[0] = chars_per_token(fleet[0][0])
    cpt = cpt_box[0]
    maddrs = []
    if policy.startswith("haproxy"):
        addrs = [start_haproxy(tag, policy, fleet)]
    else:
        addrs = []
        for i in range(2 if policy.endswith("-x2") else 1):
            addr, maddr = start_router("%s-%d" % (tag, i), policy, fleet, feat)
            addrs.append(addr)
            maddrs.append(maddr)
    results = []
    t0 = time.monotonic()
    if wl["kind"] == "trace":
        run_trace(addrs, wl["records"], a.trace_speed, a.trace_block, cpt, a.trace_conc, results)
    else:
        run_chat(addrs, wl["spec"], wl["seconds"], cpt, results)
    elapsed = time.monotonic() - t0
    counters = [mock_counters(m) for m, _ in fleet]
    index = None
    if policy.startswith("router-") and policy != "router-load":
        index = {k: sum(F.metric(m, "admit_router_prefix_%s_cached_tokens_total" % k) or 0
                        for m in maddrs) for k in ("predicted", "confirmed")}
    R.stop_all()

    ok = [r for r in results if r.status == 200 and r.e2e is not None]
    row = {"policy": policy, "n": len(ok), "rps": len(ok) / elapsed if elapsed > 0 else float("nan"),
           "s529": sum(1 for r in results if r.status == 529),
           "s503": sum(1 for r in results if r.status == 503),
           "other": sum(1 for r in results if r.status not in (200, 529, 503))}
    row["ttft50"] = R.pct([r.ttft * 1000 for r in ok if r.ttft is not None], 50)
    row["ttft99"] = R.pct([r.ttft * 1000 for r in ok if r.ttft is not None], 99)
    row["e2e50"] = R.pct([r.e2e * 1000 for r in ok], 50)
    row["e2e99"] = R.pct([r.e2e * 1000 for r in ok], 99)
    with_det = [r for r in ok if r.cached is not None and r.prompt]
    q = [c["vllm:prefix_cache_queries_total"] for c in counters]
    h = [c["vllm:prefix_cache_hits_total"] for c in counters]
    if with_det:
        row["hit"] = 100.0 * sum(r.cached for r in with_det) / sum(r.prompt for r in with_det)
        row["hit_from"] = "usage"
    elif None not in q and None not in h and sum(q) > 0:
        row["hit"] = 100.0 * sum(h) / sum(q)
        row["hit_from"] = "counters"
    else:
        row["hit"], row["hit_from"] = float("nan"), "-"
    pt = [c["vllm:prompt_tokens_total"] or 0.0 for c in counters]
    mean = sum(pt) / len(pt) if pt else 0
    row["spread"] = max(pt) / mean if mean > 0 else float("nan")
    row["per_worker"] = pt
    if index is not None and with_det:
        # What the router's index predicted against what the engines found: the engines also
        # cache each answer's blocks, which the router does not index (issue 25: "the answer
        # can extend the session's predicted prefix: decide with measurements").
        row["index"] = dict(index, cached=sum(r.cached for r in with_det))
    R.log("%s %s: %d ok in %.1f s, hit %s%% (%s), ttft p50 %.0f ms, spread %.2f" % (
        wl["name"], policy, len(ok), elapsed, R.f(row["hit"]), row["hit_from"], row["ttft50"],
        row["spread"]))
    return row


def blocks_for(a, total, partitioned, longest):
    """KV blocks per worker: --kv-slack x the tokens one worker holds when sessions are
    partitioned, never less than what its slots' longest requests hold at once. Said
    when the cache would hold the whole working set (then every policy hits: too big to tell)."""
    need = int(math.ceil(a.kv_slack * partitioned / a.block_size))
    need = max(need, a.slots * int(math.ceil(longest / a.block_size)), 1)
    return need, need * a.block_size >= total


# ---------------------------------------------------------------- report

def report_table(rows):
    head = ["policy", "hit rate %", "TTFT p50 ms", "TTFT p99 ms", "e2e p50 ms", "e2e p99 ms",
            "completed/s", "529", "503", "other errors", "prompt-token spread (max/mean)"]
    body = [[r["policy"], R.f(r["hit"]), R.f(r["ttft50"], 0), R.f(r["ttft99"], 0),
             R.f(r["e2e50"], 0), R.f(r["e2e99"], 0), R.f(r["rps"], 2), r["s529"], r["s503"],
             r["other"], R.f(r["spread"], 2)] for r in rows]
    return R.table(head, body)


def plot(results, path):
    """Three panels (hit rate, TTFT p50, TTFT p99), bars per policy clustered by workload."""
    if not shutil.which("gnuplot") or not results:
        return None
    wls = list(results)
    pols = []
    for w in wls:
        for r in results[w]:
            if r["policy"] not in pols:
                pols.append(r["policy"])
    dat = path[:-4] + ".dat"
    with open(dat, "w") as fh:
        for key in ("hit", "ttft50", "ttft99"):
            fh.write("# %s\nworkload %s\n" % (key, " ".join(pols)))
            for w in wls:
                by = {r["policy"]: r[key] for r in results[w]}
                fh.write("%s %s\n" % (w, " ".join(
                    "%.3f" % by[p] if by.get(p) == by.get(p) and p in by else "0" for p in pols)))
            fh.write("\n\n")
    plots = []
    for i, (key, label) in enumerate((("hit", "hit rate %"), ("ttft50", "TTFT p50 ms"),
                                      ("ttft99", "TTFT p99 ms"))):
        cols = ", ".join('"%s" index %d using %d:xtic(1) title col' % (dat if j == 0 else "", i, j + 2)
                         for j in range(len(pols)))
        none = all(r[key] != r[key] for w in wls for r in results[w])
        plots.append('set yrange [0:%s]\nset ylabel "%s"\nset title "%s%s"\nplot %s\n' % (
            "1" if none else "*", label, label, " (not measured in this build)" if none else "", cols))
    script = ('set terminal pngcairo size 1200,400\nset output "%s"\nset multiplot layout 1,3\n'
              'set style data histograms\nset style histogram clustered gap 1\n'
              'set style fill solid 0.8\nset yrange [0:*]\nset grid ytics\n'
              'set key below font ",8"\n' % path) + "".join(plots) + "unset multiplot\n"
    subprocess.run(["gnuplot"], input=script.encode(), timeout=30, check=True)
    return path


# Issue 25's targets for router-prefix: (workload, measure, key, peer, bound, sense): met when
# router-prefix's value is >= (sense +1) or <= (sense -1) bound x the peer's ("*" every peer).
TARGETS = [("chat", "hit rate >= consistent hashing's", "hit", "haproxy-hash", 1.0, 1),
           ("chat", "hit rate >= 2x load-only's", "hit", "router-load", 2.0, 1),
           ("chat", "TTFT p50 <= 0.5x HAProxy leastconn's", "ttft50", "haproxy-leastconn", 0.5, -1),
           ("chat", "TTFT p99 <= 0.8x consistent hashing's", "ttft99", "haproxy-hash", 0.8, -1),
           ("chat", "completed/s >= every peer's", "rps", "*", 1.0, 1),
           ("chat", "529s <= load-only's", "s529", "router-load", 1.0, -1),
           ("shared", "prompt-token spread <= 1.5x load-only's", "spread", "router-load", 1.5, -1)]


def targets_table(results):
    """Issue 25's targets, router-prefix against its peers: met, missed or not measured."""
    rows = []
    for wl, what, key, peer, bound, sense in TARGETS:
        by = {r["policy"]: r for r in results.get(wl, [])}
        me = by.get("router-prefix", {}).get(key)
        # every peer: the other fronts, not router-prefix's own variants (on events, or two)
        peers = [p for p in by if not p.startswith(("router-prefix", "router-events"))] \
            if peer == "*" else [peer]
        vals = [by[p][key] for p in peers if p in by]
        nums = [me] + vals
        if not vals or not all(isinstance(v, (int, float)) and v == v for v in nums):
            rows.append([wl, what, "-", "-", "not measured"])
            continue
        ref = max(vals) if sense > 0 else min(vals)
        ok = me >= bound * ref if sense > 0 else me <= bound * ref
        rows.append([wl, what, R.f(float(me), 2), R.f(float(ref), 2), "met" if ok else "missed"])
    return R.table(["workload", "target (router-prefix)", "router-prefix", "peer", "verdict"], rows)


# ---------------------------------------------------------------- main

def workloads(a):
    wl = []
    if "chat" in a.workloads:
        wl.append({"name": "chat", "kind": "chat", "seconds": a.seconds, "spec": G.ChatSpec(
            "chat", a.users, a.turns, a.sys_tokens, a.groups, a.own_tokens, a.user_tokens,
            a.answer_tokens, a.think, a.seed)})
    if "trace" in a.workloads:
        if a.trace:
            recs = G.load_trace(a.trace, a.trace_requests)
            src = a.trace
        else:
            recs = G.sample_trace(a.trace_requests, a.trace_rate, a.trace_block, a.seed)
            src = os.path.join(R.ARGS.out, "workload-sample-trace.jsonl")
            G.write_trace(src, recs)
        if a.trace_max_input:
            for r in recs:
                r["input_length"] = min(r["input_length"], a.trace_max_input)
        wl.append({"name": "trace", "kind": "trace", "records": recs, "source": src})
    if "shared" in a.workloads:
        wl.append({"name": "shared", "kind": "chat", "seconds": a.shared_seconds, "spec": G.ChatSpec(
            "shared", a.users, a.turns, a.shared_tokens, 1, a.own_tokens, a.user_tokens,
            a.answer_tokens, a.think, a.seed)})
    return wl


def sizing(a, w):
    if w["kind"] == "trace":
        total = G.trace_working_set(w["records"], a.trace_block)
        part = total / a.workers
        longest = max((r["input_length"] + r["output_length"] for r in w["records"]), default=0)
        desc = "%d requests, %d distinct blocks of %d tokens (%s), replayed at %gx" % (
            len(w["records"]), total // a.trace_block, a.trace_block,
            os.path.relpath(w["source"]), a.trace_speed)
    else:
        s = w["spec"]
        total, part = s.working_set(a.workers)
        longest = s.final_context()
        desc = ("%d users, sessions of %d turns, system prompt %d tokens (%d shared), own opening %d, "
                "user message %d, answer %d, think %.1f s mean, %.0f s" % (
                    s.users, s.turns, s.sys_tokens, s.groups, s.own_tokens, s.user_tokens,
                    s.answer_tokens, s.think_s, w["seconds"]))
    blocks, holds_all = blocks_for(a, total, part, longest)
    return blocks, total, part, holds_all, desc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(R.ROOT, "build-bench"))
    ap.add_argument("--out", default=None, help="default: BUILD/bench")
    ap.add_argument("--quick", action="store_true", help="a ~30 s smoke run: fewer users, shorter runs")
    ap.add_argument("--policies", default="all", help="comma-separated of: " + ",".join(POLICIES))
    ap.add_argument("--workloads", default="chat,trace,shared")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--slots", type=int, default=4, help="each mock's --max-num-seqs and admitd's N")
    ap.add_argument("--queue", type=int, default=16, help="each admitd's Q")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--kv-slack", type=float, default=1.25,
                    help="KV blocks per worker = slack x the partitioned working set per worker")
    ap.add_argument("--speedup", type=float, default=0.25,
                    help="the mocks' --speedup-ratio: prefill 1/X times Dynamo's fit")
    ap.add_argument("--token-ms", type=float, default=10, help="the mocks' --token-interval-ms")
    ap.add_argument("--seconds", type=float, default=25, help="chat workload, per policy")
    ap.add_argument("--shared-seconds", type=float, default=15, help="shared workload, per policy")
    ap.add_argument("--users", type=int, default=16)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--groups", type=int, default=4, help="system prompts shared by the chat sessions")
    ap.add_argument("--sys-tokens", type=int, default=1024)
    ap.add_argument("--shared-tokens", type=int, default=2048, help="the shared workload's one opening")
    ap.add_argument("--own-tokens", type=int, default=4096,
                    help="each chat session's own opening (a document, say)")
    ap.add_argument("--user-tokens", type=int, default=128)
    ap.add_argument("--answer-tokens", type=int, default=64)
    ap.add_argument("--think", type=float, default=1.0, help="mean think time, s (exponential)")
    ap.add_argument("--trace", default=None, help="a Mooncake JSONL trace (default: a sample made up)")
    ap.add_argument("--trace-requests", type=int, default=120, help="records replayed (0: all of --trace)")
    ap.add_argument("--trace-rate", type=float, default=8.0, help="the sample's arrivals per second")
    ap.add_argument("--trace-speed", type=float, default=1.0, help="replay speed (2: twice as fast)")
    ap.add_argument("--trace-block", type=int, default=512, help="tokens per hash id (Mooncake: 512)")
    ap.add_argument("--trace-max-input", type=int, default=8192, help="input_length cap (0: none)")
    ap.add_argument("--trace-conc", type=int, default=32, help="client threads of the replayer")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prefix-weight", default="1",
                    help="router-prefix's --kv-overlap-score-weight (default 1, the router's default)")
    a = ap.parse_args()
    if a.quick:
        a.seconds, a.shared_seconds, a.users, a.turns = 3, 2, 8, 3
        a.trace_requests = min(a.trace_requests, 12) if a.trace_requests else 12
    b = os.path.abspath(a.build)
    out = os.path.abspath(a.out or os.path.join(b, "bench"))
    R.ARGS = types.SimpleNamespace(build=b, out=out, workdir=os.path.join(out, "work-workload"),
                                   prefix_weight=a.prefix_weight)
    shutil.rmtree(R.ARGS.workdir, ignore_errors=True)
    os.makedirs(R.ARGS.workdir)

    feat = features()
    wanted = POLICIES if a.policies == "all" else a.policies.split(",")
    skipped = []
    policies = []
    for p in wanted:
        if p not in POLICIES:
            ap.error("unknown policy %r" % p)
        if p.startswith("haproxy") and not feat.haproxy:
            skipped.append((p, "haproxy not installed (scripts/install-deps.sh bench)"))
        elif p.startswith("router-") and p != "router-load" and not feat.kv_weight:
            skipped.append((p, "admit-router has no --kv-overlap-score-weight in this build"))
        elif p.startswith("router-events") and not feat.events:
            skipped.append((p, "the mock or admitd has no KV events in this build"))
        else:
            policies.append(p)
    notes = []
    if not feat.prefix_cache:
        notes.append("the mock has no prefix cache in this build (no --no-enable-prefix-caching "
                     "in its --help): every prompt is computed in full, hit rates are '-'")
    elif not feat.details:
        notes.append("the mock has no --enable-prompt-tokens-details: hit rates from its counters")
    if not feat.kv_weight:
        notes.append("router-load is admit-router as built (load only: it has no prefix index)")
    if feat.events and not feat.tokenize and any(p.startswith("router-events") for p in policies):
        notes.append("admit-router has no --tokenize in this build: the KV events' keys are of "
                     "token ids, so router-events matches the chat's text by its own history "
                     "only (as router-prefix, its guesses kept 5 s for a worker that sends events)")
    if not feat.blocks:
        notes.append("the mock has no --num-gpu-blocks: the KV sizing below is not applied")

    lines = ["# Multi-turn workloads (prefix caching)", "",
             "Run: %s, %s; %d workers (admit-mock-engine --speedup-ratio %g --token-interval-ms %g "
             "--max-num-seqs %d --block-size %d, admitd N=%d Q=%d)." % (
                 time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), R.machine(), a.workers,
                 a.speedup, a.token_ms, a.slots, a.block_size, a.slots, a.queue),
             "", "Policies run: %s." % ", ".join(policies)]
    lines += ["Not run: %s: %s." % (p, why) for p, why in skipped]
    lines += ["Note: %s." % n for n in notes]
    print("\n".join(lines) + "\n", flush=True)

    results = {}
    cpt_box = [None]
    try:
        for w in workloads(a):
            blocks, total, part, holds_all, desc = sizing(a, w)
            head = ("## %s\n\n%s. Working set %d tokens; %d per worker when partitioned; "
                    "--num-gpu-blocks %d per worker (%d tokens, %.0f%% of the working set)%s." % (
                        w["name"], desc, total, part, blocks, blocks * a.block_size,
                        100.0 * blocks * a.block_size / max(1, total),
                        " -- NOTE: that holds the whole working set" if holds_all else ""))
            R.log("workload %s: %d blocks per worker" % (w["name"], blocks))
            rows = []
            for p in policies:
                try:
                    rows.append(measure(a, feat, w, p, blocks, cpt_box))
                except Exception as e:  # a failed policy is reported, the others still run
                    R.log("%s %s failed: %s: %s" % (w["name"], p, type(e).__name__, e))
                    rows.append({"policy": p + " (failed: %s)" % e, "hit": float("nan"),
                                 **{k: float("nan") for k in ("ttft50", "ttft99", "e2e50", "e2e99",
                                                              "rps", "spread")},
                                 "s529": "-", "s503": "-", "other": "-"})
                finally:
                    R.stop_all()
            results[w["name"]] = [r for r in rows if "n" in r]
            block = head + "\n\n" + report_table(rows) + "\n"
            for r in rows:
                x = r.get("index")
                if x and x["predicted"] > 0:
                    block += ("\n%s's index: predicted %d cached tokens, engines confirmed %d of "
                              "them (%.1f %%); the engines found %d cached in all (%.2f x the "
                              "prediction: the answers' blocks and what other sessions left)\n" % (
                                  r["policy"], x["predicted"], x["confirmed"],
                                  100.0 * x["confirmed"] / x["predicted"], x["cached"],
                                  x["cached"] / x["predicted"]))
            print(block, flush=True)
            lines += ["", block]
            with open(os.path.join(out, "workload.md"), "w") as fh:
                fh.write("\n".join(lines))
        block = "## Targets of issue 25\n\n" + targets_table(results) + "\n"
        print(block, flush=True)
        lines += ["", block]
        png = plot(results, os.path.join(out, "workload.png"))
        tail = "(text at %.2f characters per token; plot: %s)" % (cpt_box[0] or 4.0, png or "no gnuplot")
        print(tail)
        lines += ["", tail]
        with open(os.path.join(out, "workload.md"), "w") as fh:
            fh.write("\n".join(lines) + "\n")
    finally:
        R.stop_all()
    R.log("wrote %s" % os.path.join(out, "workload.md"))


if __name__ == "__main__":
    main()
