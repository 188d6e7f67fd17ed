#!/usr/bin/python3
"""How far admitd's kv_events lag its engine's KV events (issue 26, item 6): p50 and p99.

    /usr/bin/python3 tests/bench/kv_lag.py --build build-bench [--rate 500] [--seconds 10]

An engine played by this script (a ZMQ PUB, as vLLM's, on loopback; Debian's python3-zmq and
python3-msgpack, so Debian's /usr/bin/python3) publishes --rate batches a second, each one
BlockStored of a new root block, to an admitd (--engine-kv-events) in front of an
admit-mock-engine (which gives admitd its model list, the keys' seed). A raw SP SUB0 on
admitd's publisher reads the kv_events messages: each batch gives one, of the same sequence.
The lag of a batch is the time from its send to its message's arrival, both read on this
process's monotonic clock by its two threads. The same run with a ZMQ SUB in place of admitd
(the script's own floor: Python's sends and receives and ZMQ's threads) is printed beside
it. Prints numbers and asserts nothing.
"""
import argparse
import os
import socket
import statistics
import struct
import sys
import threading
import time

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R  # noqa: E402  (Proc, start_mock, start_admitd, free_port)

SUB0_HELLO = b"\0SP\0\0\x21\0\0"
PUB0_HELLO = b"\0SP\0\0\x20\0\0"
BLOCK = 16


def batch(i):
    """Batch i: one root block of BLOCK token ids of its own."""
    ids = [(i * BLOCK + k) % 50000 + 1 for k in range(BLOCK)]
    return msgpack.packb([time.time(), [["BlockStored", [i + 1], None, ids, BLOCK, None, "GPU"]], 0])


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else float("nan")


def send_all(pub, n, rate, sent, seq0=0):
    """n batches at rate a second, the engine's sequence from seq0 on (one that went back would
    be an engine's restart to admitd, and relayed as `cleared`)."""
    t0 = time.perf_counter()
    for i in range(n):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sent[i] = time.perf_counter()
        pub.send_multipart([b"kv", struct.pack(">q", seq0 + i), batch(i)])


def via_admitd(a, ctx):
    port = R.free_port()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.bind("tcp://127.0.0.1:%d" % port)
    _, maddr = R.start_mock("lag")
    ad, _ = R.start_admitd("lag", maddr, 64, 16, "--engine-kv-events", "tcp://127.0.0.1:%d" % port,
                           "--engine-kv-events-topic", "kv")
    host, p = ad.publish[len("tcp://"):].rsplit(":", 1)
    sub = socket.create_connection((host, int(p)), timeout=10)
    sub.sendall(SUB0_HELLO)
    got, first = {}, []

    def exact(k):
        b = b""
        while len(b) < k:
            c = sub.recv(k - len(b))
            if not c:
                raise EOFError
            b += c
        return b

    if exact(8) != PUB0_HELLO:
        raise RuntimeError("not an SP PUB0 peer")

    def reader():
        try:
            while True:
                (k,) = struct.unpack(">Q", exact(8))
                body = exact(k)
                t = time.perf_counter()
                if body.startswith(b"kv_events ") and body[11] == 1:  # stored
                    seq = struct.unpack(">Q", body[24:32])[0]
                    got[seq] = t
        except (EOFError, OSError):
            pass

    threading.Thread(target=reader, daemon=True).start()
    # ZMQ's slow joiner: batches until admitd relays one (its seq 1), then the measured run
    i = 0
    while not got and i < 400:
        pub.send_multipart([b"kv", struct.pack(">q", i), batch(10 ** 6 + i)])
        i += 1
        time.sleep(0.05)
    if not got:
        raise RuntimeError("admitd relayed nothing")
    time.sleep(0.5)
    base = max(got)  # the relayed seq of the warm-up's last batch
    n = int(a.rate * a.seconds)
    sent = [0.0] * n
    send_all(pub, n, a.rate, sent, seq0=i)
    time.sleep(1.0)
    # batch j (of this run) is the engine's seq i + j, relayed as base + 1 + j: one block each
    lags = [(got[base + 1 + j] - sent[j]) * 1e6 for j in range(n) if base + 1 + j in got]
    sub.close()
    pub.close()
    R.stop_all()
    return lags, n


def floor(a, ctx):
    port = R.free_port()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.bind("tcp://127.0.0.1:%d" % port)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv")
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.connect("tcp://127.0.0.1:%d" % port)
    got = {}

    def reader():
        while True:
            f = sub.recv_multipart()
            t = time.perf_counter()
            seq = struct.unpack(">q", f[1])[0]
            if seq < 0:
                return
            got[seq] = t

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    while not got:  # the slow joiner
        pub.send_multipart([b"kv", struct.pack(">q", 10 ** 9), b""])
        time.sleep(0.05)
    n = int(a.rate * a.seconds)
    sent = [0.0] * n
    send_all(pub, n, a.rate, sent)
    time.sleep(0.5)
    pub.send_multipart([b"kv", struct.pack(">q", -1), b""])
    th.join(5)
    lags = [(got[j] - sent[j]) * 1e6 for j in range(n) if j in got]
    sub.close()
    pub.close()
    return lags, n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(R.ROOT, "build-bench"))
    ap.add_argument("--rate", type=float, default=500, help="batches per second")
    ap.add_argument("--seconds", type=float, default=10)
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    out = os.path.join(b, "bench")
    import types
    R.ARGS = types.SimpleNamespace(build=b, out=out, workdir=os.path.join(out, "work-kvlag"))
    os.makedirs(R.ARGS.workdir, exist_ok=True)
    ctx = zmq.Context()
    rows = []
    try:
        for name, fn in (("engine -> admitd -> kv_events reader", via_admitd),
                         ("engine -> ZMQ SUB (this script's floor)", floor)):
            lags, n = fn(a, ctx)
            rows.append([name, "%d of %d" % (len(lags), n), "%.0f" % pct(lags, 50),
                         "%.0f" % pct(lags, 99), "%.0f" % max(lags) if lags else "-",
                         "%.0f" % statistics.mean(lags) if lags else "-"])
    finally:
        R.stop_all()
    print(R.table(["path", "batches received", "p50 µs", "p99 µs", "max µs", "mean µs"], rows))
    print("\n%g batches a second for %g s, one BlockStored of one block each; loopback, %s."
          % (a.rate, a.seconds, R.machine()))


if __name__ == "__main__":
    main()
