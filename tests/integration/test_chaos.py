"""A bounded randomised run: mixed streaming and non-streaming requests, client aborts at
every stage, engine restarts, live limit changes; invariants checked all along.

SOAK_SECONDS sets the length (default 40 in CI; run it for longer by hand). The run is
seeded (SOAK_SEED) and prints what it did, so a failure can be replayed."""

import json
import os
import random
import socket
import threading
import time

from harness import (MOCK, Admitd, Proc, RawClient, Tap, chat_body, raw_request_bytes,
                     request, scrape, wait_for)

SECONDS = float(os.environ.get("SOAK_SECONDS", "40"))
SEED = int(os.environ.get("SOAK_SEED", str(int(time.time()) % 100000)))
MAX_N, MAX_Q = 6, 8


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start_mock(port):
    return Proc([MOCK, "--listen", "127.0.0.1:%d" % port, "--token-interval-ms", "5"],
                ready=r"listening on", name="mock")


def test_chaos():
    rnd = random.Random(SEED)
    print("# seed %d, %.0f s" % (SEED, SECONDS), flush=True)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mock = start_mock(port)
    ad = Admitd("http://127.0.0.1:%d" % port, "--engine-request-limit", "4",
                "--request-queue-limit", "4", "--queue-timeout-ms", "3000",
                "--upstream-timeout-ms", "5000", "--health-interval-ms", "200")
    lock = threading.Lock()
    counts = {}
    problems = []
    stop = threading.Event()
    peaks = {"engine": 0, "queue": 0}
    rss = []
    # The engine's own peak concurrency, read before each kill and at the end, against the
    # largest N admitd had while that engine ran (lowering N drains down, never kills).
    engine_peaks = []
    bound = {"n": 4}

    def note(key):
        with lock:
            counts[key] = counts.get(key, 0) + 1

    def client(seed):
        r = random.Random(seed)
        while not stop.is_set():
            stream = r.random() < 0.6
            body = chat_body(max_tokens=r.randint(1, 60), stream=stream)
            abort = r.choice(["none"] * 6 + ["before", "after_head", "mid", "rst"])
            try:
                c = RawClient(ad.addr, timeout=30)
                c.send(raw_request_bytes(ad.addr, "/v1/chat/completions", body))
                if abort == "before":
                    time.sleep(r.random() * 0.05)
                    c.close()
                    note("abort_before_answer")
                    continue
                status, hdrs = c.read_head()
                note("status_%d" % status)
                if abort == "after_head" and status == 200:
                    c.close()
                    note("abort_after_head")
                    continue
                if abort in ("mid", "rst") and status == 200 and stream:
                    time.sleep(r.random() * 0.1)
                    c.reset() if abort == "rst" else c.close()
                    note("abort_mid_stream")
                    continue
                _, complete = c.read_body(hdrs)
                note("complete" if complete else "cut")
                c.close()
            except socket.timeout:
                problems.append("a client waited 30 s without an answer (abort=%s)" % abort)
            except (ConnectionError, EOFError, OSError):
                note("connection_error")

    current = {"n": 4}

    def record_engine_peak():
        try:
            peak = scrape(("127.0.0.1", port))["admit_mock_requests_running_peak"]
        except OSError:
            return  # the engine is down already (being restarted)
        with lock:
            engine_peaks.append((peak, bound["n"]))

    def chaos():
        nonlocal mock
        r = random.Random(SEED + 1)
        while not stop.wait(r.uniform(0.5, 2.0)):
            what = r.random()
            if what < 0.15:
                record_engine_peak()
                with lock:
                    bound["n"] = current["n"]
                mock.kill()
                note("engine_killed")
                time.sleep(r.uniform(0.1, 1.0))
                mock = start_mock(port)
            elif what < 0.6:
                n, q = r.randint(1, MAX_N), r.randint(2, MAX_Q)
                with lock:
                    current["n"] = n
                    bound["n"] = max(bound["n"], n)
                status, _, _ = request(ad.maddr, "POST", "/admission",
                                       json.dumps({"engine_request_limit": n,
                                                   "request_queue_limit": q}).encode(),
                                       headers={"Content-Type": "application/json"})
                if status != 200:
                    problems.append("POST /admission answered %d" % status)
                note("limit_change")

    def watch():
        while not stop.wait(0.05):
            try:
                m = ad.metrics()
            except OSError as e:
                problems.append("metrics listener failed: %s" % e)
                continue
            peaks["engine"] = max(peaks["engine"], m["dynamo_engine_request"])
            peaks["queue"] = max(peaks["queue"], m["dynamo_request_queue"])
            if m["dynamo_engine_request"] > MAX_N or m["dynamo_request_queue"] > MAX_Q:
                problems.append("gauges out of bounds: %r" % m)
            if len(rss) < 10000:
                rss.append(rss_kb(ad.proc.p.pid))

    threads = [threading.Thread(target=client, args=(SEED * 100 + i,)) for i in range(12)]
    threads += [threading.Thread(target=chaos), threading.Thread(target=watch)]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a client thread hung"
    record_engine_peak()
    m = ad.wait_idle()
    assert m["dynamo_request_queue"] == 0, m
    wait_for(lambda: request(ad.addr, "POST", "/v1/chat/completions",
                             chat_body(max_tokens=1))[0] == 200, 15, "admitd serves")
    print("# counts: %s" % json.dumps(dict(sorted(counts.items()))), flush=True)
    print("# peaks seen in /metrics: engine %d, queue %d" % (peaks["engine"], peaks["queue"]))
    print("# engine's own peak per engine life (peak, largest N meanwhile): %s" % engine_peaks)
    if rss:
        print("# admitd RSS kB: first %d, max %d, last %d (ASan quarantine inflates it)" % (rss[0], max(rss),
                                                                         rss[-1]))
    outcomes = {k: v for k, v in m.items() if k.startswith("admitd_requests_total")}
    print("# outcomes: %s" % json.dumps(outcomes), flush=True)
    assert not problems, problems[:5]
    assert engine_peaks and all(peak <= n for peak, n in engine_peaks), engine_peaks
    assert sum(v for k, v in counts.items() if k.startswith("status_")) > 50, counts
    ad.stop()
    mock.stop_clean()


if __name__ == "__main__":
    tap = Tap()
    tap.run("a randomised run keeps every invariant", test_chaos)
    tap.done()
