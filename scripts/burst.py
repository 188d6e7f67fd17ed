#!/usr/bin/env python3
"""Sends a burst of concurrent streaming chat requests through admitd and shows what
happened to each: admitted at once, queued then served, rejected (admitd's overload answer:
its queue was full, or a request waited too long), or failed (anything else, such as the 503
of an engine that cannot be reached); then the metrics. Exits 1 when a request failed.

  scripts/burst.py --url http://127.0.0.1:8080 --metrics http://127.0.0.1:9091
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse


def split(url):
    u = urllib.parse.urlsplit(url)
    return u.hostname, u.port or 80


def one(addr, i, max_tokens, go, out):
    body = json.dumps({"model": "mock-model", "stream": True, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": "request %d: tell me a story" % i}]})
    go.wait()
    t0 = time.monotonic()
    c = http.client.HTTPConnection(*addr, timeout=300)
    try:
        c.request("POST", "/v1/chat/completions", body=body,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        t_head = time.monotonic() - t0
        wait_ms = r.getheader("X-Admitd-Queue-Wait-Ms")
        data = r.read()
        res = {"status": r.status, "head_s": t_head, "total_s": time.monotonic() - t0,
               "wait_ms": float(wait_ms) if wait_ms else None}
        if r.status == 200:
            res["tokens"] = sum(1 for ln in data.split(b"\n")
                                if ln.startswith(b"data: {") and b'"content"' in ln)
        else:
            try:
                res["message"] = json.loads(data)["error"]["message"]
            except ValueError:
                res["message"] = data[:80].decode("utf-8", "replace")
            res["retry_after"] = r.getheader("Retry-After")
            res["reason"] = r.getheader("X-Admitd-Reason")
    except OSError as e:
        res = {"status": "error", "message": str(e), "head_s": 0, "total_s": 0}
    finally:
        c.close()
    out[i] = res


# X-Admitd-Reason of an overload answer: admitd's (queue-*) and admit-router's (all-busy).
OVERLOAD_REASONS = ("queue-full", "queue-timeout", "all-busy")


def rejected(res):
    """True for an overload answer (whatever --overload-status makes its status), false for
    a failure: an engine that cannot be reached is answered 503 too, and is no rejection."""
    if res.get("reason") is not None:
        return res["reason"] in OVERLOAD_REASONS
    return res["status"] in (529, 429)


def scrape(maddr, path="/metrics"):
    c = http.client.HTTPConnection(*maddr, timeout=10)
    c.request("GET", path)
    text = c.getresponse().read().decode()
    c.close()
    return text


def value(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--metrics", default="http://127.0.0.1:9091")
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=128)
    a = ap.parse_args()
    addr, maddr = split(a.url), split(a.metrics)

    out = [None] * a.count
    go = threading.Barrier(a.count + 1)
    threads = [threading.Thread(target=one, args=(addr, i, a.max_tokens, go, out))
               for i in range(a.count)]
    for t in threads:
        t.start()
    peak = {"engine": 0.0, "queue": 0.0, "load": None}
    done = threading.Event()

    def sampler():
        while not done.is_set():
            text = scrape(maddr)
            engine = value(text, "dynamo_engine_request")
            queue = value(text, "dynamo_request_queue")
            if engine + queue > peak["engine"] + peak["queue"] or peak["load"] is None:
                peak["load"] = scrape(maddr, "/load")
            peak["engine"] = max(peak["engine"], engine)
            peak["queue"] = max(peak["queue"], queue)
            time.sleep(0.02)

    s = threading.Thread(target=sampler)
    s.start()
    go.wait()
    for t in threads:
        t.join()
    done.set()
    s.join()

    print("\n%-4s %-7s %-22s %10s %10s %8s" % ("req", "status", "outcome", "wait ms",
                                               "total s", "tokens"))
    admitted = queued = n_rejected = other = 0
    for i, r in enumerate(out):
        if r["status"] == 200:
            if r["wait_ms"] is not None and r["wait_ms"] >= 1.0:
                queued += 1
                what = "queued, then served"
            else:
                admitted += 1
                what = "admitted at once"
            print("%-4d %-7s %-22s %10.1f %10.2f %8d" % (i, 200, what, r["wait_ms"] or 0,
                                                         r["total_s"], r["tokens"]))
        else:
            if rejected(r):
                n_rejected += 1
                what = "rejected"
            else:
                other += 1
                what = "failed" if r.get("reason") is None else "failed: " + r["reason"]
            print("%-4d %-7s %-22s %10s %10.3f   %s (Retry-After: %s)" % (
                i, r["status"], what, "-", r["total_s"], r.get("message"),
                r.get("retry_after")))
    print("\nadmitted at once: %d, queued then served: %d, rejected: %d, other: %d" % (
        admitted, queued, n_rejected, other))
    print("peak seen in /metrics: dynamo_engine_request %d, dynamo_request_queue %d\n" % (
        peak["engine"], peak["queue"]))
    if peak["load"]:
        ranks = json.loads(peak["load"])["ranks"]
        print("load message at the peak (what routers receive on the publisher):")
        for r in ranks:
            print("  kv_metrics " + json.dumps(r, separators=(",", ":")))
        print()
    text = scrape(maddr)
    for line in text.splitlines():
        if line.startswith(("dynamo_", "admitd_requests_total", "admitd_engine_request_limit",
                            "admitd_request_queue_limit", "admitd_queue_wait_seconds_count",
                            "admitd_queue_wait_seconds_sum")):
            print("  " + line)
    if other:
        print("burst: %d of %d requests failed (neither served nor rejected)" % (other, a.count),
              file=sys.stderr)
    return 0 if other == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
