#!/usr/bin/env python3
"""The TTFT admit-router --tokenize adds (issue 26, item 4): the round trip to a worker's
POST /tokenize before a text request is routed.

  meson setup build-rel --buildtype=release && ninja -C build-rel
  tests/bench/tokenize_ttft.py --build build-rel [--requests 400] [--prompt-chars 2000]

One admit-mock-engine (--speedup-ratio 0: it answers at once, so what is measured is the
path, not a model), one admitd in front of it, and two routers following that one worker:
one plain, one with --tokenize. Each request is a streaming chat request with an opening of
its own (--prompt-chars characters, so no two share a prefix), sent on a kept connection,
and its TTFT is the time from sending it to the first `data:` line; the two routers take the
requests in turns (one to each, then the next pair), so both see the same machine. Prints
the median and p99 of each, their differences, and the router's own
admit_router_tokenize_seconds (the time its calls held requests). Asserts nothing: a timing
on a shared machine is no test.
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def ttft(conn, body):
    """Sends one streaming request on conn; the seconds to its first data line."""
    data = json.dumps(body).encode()
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=data,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, r.status
    seen = b""
    while b"data:" not in seen:
        chunk = r.read1(65536)
        assert chunk, "the stream ended before its first event"
        seen += chunk
    t = time.perf_counter() - t0
    r.read()
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the meson build folder")
    ap.add_argument("--requests", type=int, default=400, help="requests to each router")
    ap.add_argument("--prompt-chars", type=int, default=2000, help="characters of each prompt")
    ap.add_argument("--warmup", type=int, default=20, help="requests to each first, unmeasured")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.environ.update(ADMITD=os.path.join(build, "admitd"),
                      MOCK_ENGINE=os.path.join(build, "admit-mock-engine"),
                      ADMIT_ROUTER=os.path.join(build, "admit-router"),
                      ADMIT_TOP=os.path.join(build, "admit-top"))
    sys.path.insert(0, os.path.join(HERE, "..", "integration"))
    from harness import Mock, scrape  # noqa: E402 (the environment first)
    from test_router import MODEL, Router, worker  # noqa: E402

    mock = Mock("--speedup-ratio", "0")
    ad, w = worker(mock)
    plain = Router([w])
    tok = Router([w], "--tokenize")
    plain.wait_routable(1)
    tok.wait_routable(1)
    conns = [http.client.HTTPConnection(*rt.addr, timeout=30) for rt in (plain, tok)]
    times = ([], [])
    filler = " ".join("word%d" % i for i in range(a.prompt_chars // 6 + 1))[:a.prompt_chars]
    try:
        for i in range(a.warmup + a.requests):
            for k in (0, 1):
                body = {"model": MODEL, "stream": True, "max_tokens": 1,
                        "messages": [{"role": "user", "content": "%d-%d %s" % (i, k, filler)}]}
                t = ttft(conns[k], body)
                if i >= a.warmup:
                    times[k].append(t)
        m = scrape(tok.maddr)
    finally:
        for c in conns:
            c.close()
        tok.stop()
        plain.stop()
        ad.stop()
        mock.stop()
    ms = lambda s: "%.3f ms" % (s * 1e3)  # noqa: E731
    print("%d requests each, prompts of %d characters, one worker (mock, no delay)" %
          (a.requests, a.prompt_chars))
    for name, ts in (("router", times[0]), ("router --tokenize", times[1])):
        print("  %-18s TTFT median %s  p99 %s" % (name, ms(statistics.median(ts)), ms(p99(ts))))
    print("  added by --tokenize: median %s  p99 %s" % (
        ms(statistics.median(times[1]) - statistics.median(times[0])),
        ms(p99(times[1]) - p99(times[0]))))
    n = m.get("admit_router_tokenize_seconds_count", 0)
    print("  the router's tokenize calls: %d ok of %d, mean %s" % (
        m.get('admit_router_tokenize_total{result="ok"}', 0), n,
        ms(m["admit_router_tokenize_seconds_sum"] / n) if n else "-"))


if __name__ == "__main__":
    main()
