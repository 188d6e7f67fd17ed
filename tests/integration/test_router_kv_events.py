"""admit-router indexes the engines' KV events that admitd relays (issue 26 items 3 and 5,
docs/router.md "KV events"): a request of token ids goes to the worker whose events say it
holds the prompt's prefix; removed and cleared take it away; a broken stream (a gap, a new
epoch) drops the rank's blocks and fetches the worker's dump (GET /admitd/kv_blocks), keeping
the live messages meanwhile and applying those after the dump's seq; an event worker's
decisions are held in the side table for --kv-predicted-ttl-ms only; hostile kv_events
messages are counted, never a crash; two routers over the same workers index the same events
and send a session's turns to the same worker.

The workers are FakeAdmitd: a publisher speaking nng's SP protocol over TCP (loadpub, docs/
load-message.md "On the wire, without nng") that sends kv_metrics heartbeats and the kv_events
messages each case makes (docs/load-message.md "The kv_events topic"), and an HTTP listener
that serves the dump and answers completions as an engine would (the client's marker echoed),
publishing the prompt's blocks as stored when it plays a caching engine. The keys are the
router's own exact keys of the prompts' token ids (kvk_keys, built beside the tests).
"""

import json
import os
import random
import shutil
import socket
import signal
import struct
import subprocess
import tempfile
import threading
import time

# First: test_mock_kv_events re-runs this script under Debian's /usr/bin/python3 when the
# python3 on PATH has no zmq or msgpack (test_raw_engine speaks ZMQ and msgpack).
from test_mock_kv_events import free_base

from harness import (Admitd, LoopbackServer, Mock, Tap, fake_reply_head, marker, own_completion,
                     own_request, request, wait_for)
from loadpub import LoadPub, load_message
from test_engine_replies import read_request
from test_router import MODEL, Router
from test_router_discovery import write

KVK_KEYS = os.environ.get("KVK_KEYS", "build/tests/integration/kvk_keys")
BLOCK = 16
STORED, REMOVED, CLEARED, SNAPSHOT = 1, 2, 3, 4
KEYS_MAX = (2048 - 40) // 8


def keys_of(ids):
    """The router's exact keys of a token-id prompt's full blocks (kvk_keys)."""
    line = "%s %d %s\n" % (MODEL, BLOCK, " ".join(map(str, ids)))
    out = subprocess.run([KVK_KEYS], input=line, capture_output=True, text=True,
                         check=True).stdout
    return [int(k) for k in out.split()]


def prompt(seed, blocks=8):
    """A prompt of token ids of its own, blocks full blocks long."""
    rnd = random.Random(seed)
    return [rnd.randrange(1, 50000) for _ in range(blocks * BLOCK)]


def kv_msg(op, keys, epoch, seq, rank=0, block_size=BLOCK, version=1, n=None):
    """One kv_events message (topic included); n: the count said, if not len(keys)."""
    return (b"kv_events " + struct.pack(">BBHHQQII", version, op, rank,
                                        len(keys) if n is None else n, epoch, seq,
                                        0 if op == CLEARED else block_size, 0) +
            b"".join(struct.pack(">Q", k) for k in keys))


class FakeAdmitd:
    """Plays admitd for the router. Its publisher sends a kv_metrics heartbeat as worker_id
    every 100 ms and the kv_events messages of publish() (epoch self.epoch, seq + 1 each);
    its HTTP listener answers GET /admitd/kv_blocks with its key set as a snapshot (after
    dump_delay s, or dump_status, or the bytes of dump_body) and every POST as an engine would,
    counting them (posts); with engine=True it then publishes the prompt's blocks as stored,
    as a caching engine's events would say."""

    def __init__(self, worker_id, engine=False):
        self.worker_id, self.engine = worker_id, engine
        self.lock = threading.Lock()
        self.epoch = random.getrandbits(63) | 1
        self.seq = 0
        self.held = {}  # key -> None, in the order stored
        self.dumps, self.posts = 0, 0
        self.dump_delay, self.dump_status, self.dump_body = 0, 200, None
        self.pub = LoadPub()
        self.pub.beat(lambda s: load_message(worker_id, seq=s, kv_total=4096), 100)
        self.server = LoopbackServer(self._serve)
        self.worker = (self.server.url, self.pub.url)

    def publish(self, op, keys=(), send=True):
        """Applies op to the key set and sends its message (send=False: lost on the way);
        returns the message."""
        with self.lock:
            if op == STORED:
                self.held.update((k, None) for k in keys)
            elif op == REMOVED:
                for k in keys:
                    self.held.pop(k, None)
            else:
                self.held.clear()
            self.seq += 1
            msg = kv_msg(op, list(keys), self.epoch, self.seq)
            if send:
                self.pub.send(msg)
        return msg

    def restart(self):
        """A new epoch (admitd restarted), its key set as it was."""
        with self.lock:
            self.epoch, self.seq = random.getrandbits(63) | 1, 0

    def snapshot(self):
        """The dump's body: records of KEYS_MAX keys at most, at least one."""
        with self.lock:
            keys, epoch, seq = list(self.held), self.epoch, self.seq
        out = b""
        for i in range(0, max(len(keys), 1), KEYS_MAX):
            m = kv_msg(SNAPSHOT, keys[i:i + KEYS_MAX], epoch, seq)
            out += struct.pack(">I", len(m)) + m
        return out

    def _serve(self, conn):
        buf = b""
        try:
            while True:
                got = read_request(conn, buf)
                if got is None:
                    return
                head, body, buf = got
                if head.startswith(b"GET /admitd/kv_blocks "):
                    data = self.dump_body if self.dump_body is not None else self.snapshot()
                    with self.lock:
                        self.dumps += 1  # after the snapshot: a test that saw it counted
                    time.sleep(self.dump_delay)
                    conn.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/octet-stream\r\n"
                                 b"Content-Length: %d\r\n\r\n" % (self.dump_status, len(data)) +
                                 data)
                    continue
                with self.lock:
                    self.posts += 1
                reply = ('{"id":"%s","object":"text_completion","choices":[{"index":0,'
                         '"text":"ok","finish_reason":"stop"}],"usage":{"prompt_tokens":1,'
                         '"completion_tokens":1,"total_tokens":2}}' %
                         own_completion(head, chat=False)).encode()
                if self.engine:
                    self.publish(STORED, keys_of(json.loads(body)["prompt"]))
                conn.sendall(("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                              "X-Served-By: %s\r\n%sContent-Length: %d\r\n\r\n" % (
                                  self.worker_id, fake_reply_head(head), len(reply))).encode() +
                             reply)
        except OSError:
            return

    def stop(self):
        self.pub.close()
        self.server.stop()


def fleet(n=2, engine=False, *router_args):
    fakes = [FakeAdmitd("w%d" % i, engine) for i in range(n)]
    rt = Router([f.worker for f in fakes], "--kv-block-size", str(BLOCK), *router_args)
    rt.wait_routable(n)
    return fakes, rt


def stop(fakes, *routers):
    for rt in routers:
        rt.stop()
    for f in fakes:
        f.stop()


def served_by(rt, ids, pin=None):
    """Sends one completion of token ids through rt (pinned to a worker id with pin), with a
    marker of its own; the worker id that answered."""
    status, hdrs, _ = own_request(rt.addr, "/v1/completions",
                                  {"model": MODEL, "prompt": ids, "max_tokens": 1}, marker(),
                                  extra="X-Admit-Worker: %s\r\n" % pin if pin else "")
    assert status == 200, status
    return hdrs["x-served-by"]


def metric(rt, name, label=None):
    return rt.metrics().get(name if label is None else "%s{%s}" % (name, label), 0)


def events_blocks(rt, url):
    """What /load says of the worker at url: (kv_events, kv_events_blocks)."""
    for w in rt.workers():
        if "http://" + w["url"] == url:
            return w["kv_events"], w["kv_events_blocks"]
    raise AssertionError("no worker %s in /load" % url)


def wait_blocks(rt, fake, n):
    wait_for(lambda: events_blocks(rt, fake.server.url) == (True, n), 10,
             "%s's events index at %d blocks" % (fake.worker_id, n))


def test_stored_routes_there():
    """A prompt whose blocks a worker's events say it holds goes there; the first message
    fetched the worker's dump, which had what it stored before the router heard it."""
    fakes, rt = fleet()
    try:
        a, b = prompt("a"), prompt("b")
        ka, kb = keys_of(a), keys_of(b)
        assert len(ka) == 8, ka
        fakes[1].publish(STORED, ka[:3], send=False)  # before: only in the dump
        fakes[1].publish(STORED, ka[3:])
        fakes[0].publish(STORED, kb)
        wait_for(lambda: metric(rt, "admit_router_kv_events_dumps_total", 'result="fetched"') >= 2,
                 10, "both dumps applied")
        # the kept first messages were in the dumps already: skipped, not a gap
        assert metric(rt, "admit_router_kv_events_gaps_total") == 0
        wait_blocks(rt, fakes[0], 8)
        wait_blocks(rt, fakes[1], 8)
        assert fakes[0].dumps == fakes[1].dumps == 1, (fakes[0].dumps, fakes[1].dumps)
        assert metric(rt, "admit_router_kv_events_workers") == 2
        for _ in range(3):
            assert served_by(rt, a + prompt("x", 2)) == "w1"
            assert served_by(rt, b) == "w0"
        m = rt.metrics()
        # each first message was in its dump already: skipped, not applied twice
        assert m['admit_router_kv_events_messages_total{op="stored"}'] == 0, m
        assert m['admit_router_kv_events_keys_total{op="snapshot"}'] == 16, m
        assert m["admit_router_kv_events_index_blocks"] == 16, m
        assert m["admit_router_kv_events_received_total"] == 2, m
        # the new families pass promtool's lint, as the others do (test_interop)
        if shutil.which("promtool"):
            _, _, text = request(rt.maddr, "GET", "/metrics")
            p = subprocess.run(["promtool", "check", "metrics"], input=text,
                               capture_output=True, timeout=60)
            assert p.returncode == 0, (p.stdout + p.stderr).decode()
    finally:
        stop(fakes, rt)


def test_removed_and_cleared_take_it_away():
    """The worker that held the whole prompt loses it by removed, then by cleared: the one
    that holds half of it wins."""
    fakes, rt = fleet()
    try:
        a = prompt("r")
        ka = keys_of(a)
        fakes[1].publish(STORED, ka)
        fakes[0].publish(STORED, ka[:4])
        wait_blocks(rt, fakes[1], 8)
        wait_blocks(rt, fakes[0], 4)
        assert served_by(rt, a) == "w1"
        fakes[1].publish(REMOVED, ka[2:])
        wait_for(lambda: metric(rt, "admit_router_kv_events_keys_total", 'op="removed"') == 6,
                 10, "the removal taken")
        assert events_blocks(rt, fakes[1].server.url) == (True, 2)
        assert served_by(rt, a) == "w0"
        fakes[1].publish(STORED, ka[2:])
        wait_blocks(rt, fakes[1], 8)
        assert served_by(rt, a) == "w1"
        fakes[1].publish(CLEARED)
        wait_for(lambda: metric(rt, "admit_router_kv_events_messages_total", 'op="cleared"') == 1,
                 10, "the clear taken")
        assert events_blocks(rt, fakes[1].server.url) == (True, 0)
        assert served_by(rt, a) == "w0"
        assert metric(rt, "admit_router_kv_events_gaps_total") == 0
    finally:
        stop(fakes, rt)


def test_gap_fetches_the_dump():
    """A lost message (seq not last + 1) and a new epoch each drop the rank's blocks and fetch
    the dump, which has what was lost; a failing dump is retried. (A short side table: the
    router's own guesses stay through a gap.)"""
    fakes, rt = fleet(2, False, "--kv-predicted-ttl-ms", "150")
    try:
        a, b = prompt("g"), prompt("h")
        ka, kb = keys_of(a), keys_of(b)
        fakes[0].publish(STORED, ka[:4])
        fakes[1].publish(STORED, ka[:2])
        wait_blocks(rt, fakes[0], 4)
        wait_blocks(rt, fakes[1], 2)
        fakes[1].publish(STORED, ka[2:], send=False)  # lost
        fakes[1].publish(STORED, kb)
        # 2 + 8 if the gap went unseen; with it, 0 until the dump, then all 16
        wait_for(lambda: events_blocks(rt, fakes[1].server.url)[1] in (10, 16), 10,
                 "the message after the gap taken")
        assert events_blocks(rt, fakes[1].server.url) == (True, 16)
        assert metric(rt, "admit_router_kv_events_gaps_total") == 1
        assert fakes[1].dumps == 2, fakes[1].dumps
        assert served_by(rt, a) == "w1"  # the lost message's blocks came with the dump
        # admitd restarted: a new epoch, and its first dump attempts fail
        fakes[1].dump_status = 503
        fakes[1].restart()
        fakes[1].publish(REMOVED, ka[1:])
        wait_for(lambda: metric(rt, "admit_router_kv_events_dumps_total", 'result="failed"') >= 2,
                 10, "failed dumps retried")
        assert events_blocks(rt, fakes[1].server.url) == (True, 0)
        time.sleep(0.2)
        assert served_by(rt, a) == "w0"
        fakes[1].dump_status = 200
        wait_blocks(rt, fakes[1], 1 + 8)
        assert metric(rt, "admit_router_kv_events_gaps_total") == 2
        time.sleep(0.2)
        assert served_by(rt, b) == "w1"
        assert served_by(rt, a) == "w0"  # w1 holds its first block only now
    finally:
        stop(fakes, rt)


def test_dump_keeps_live_messages():
    """Messages that come while the dump is fetched are kept and applied after it, those the
    dump has already skipped: no gap is seen."""
    fakes, rt = fleet()
    try:
        a = prompt("k")
        ka = keys_of(a)
        fakes[1].dump_delay = 0.5
        fakes[1].publish(STORED, ka[:2])  # the first: the dump is asked for
        wait_for(lambda: fakes[1].dumps == 1, 10, "the dump asked for")
        for i in range(2, 8):  # while it is fetched
            fakes[1].publish(STORED, ka[i:i + 1])
        fakes[1].publish(REMOVED, ka[7:])
        wait_for(lambda: events_blocks(rt, fakes[1].server.url) == (True, 7) or
                 metric(rt, "admit_router_kv_events_gaps_total") > 0, 10, "the kept messages")
        time.sleep(0.3)
        assert events_blocks(rt, fakes[1].server.url) == (True, 7)
        assert metric(rt, "admit_router_kv_events_gaps_total") == 0
        assert fakes[1].dumps == 1, fakes[1].dumps
        # a message the dump held, read after it (the stream and the dump race): not a loss
        fakes[1].pub.send(kv_msg(STORED, ka[3:4], fakes[1].epoch, fakes[1].seq - 1))
        fakes[1].publish(STORED, ka[7:])
        wait_for(lambda: events_blocks(rt, fakes[1].server.url)[1] == 8 or
                 metric(rt, "admit_router_kv_events_gaps_total") > 0, 10, "the next message")
        assert metric(rt, "admit_router_kv_events_gaps_total") == 0
        assert events_blocks(rt, fakes[1].server.url) == (True, 8)
        assert fakes[1].dumps == 1, fakes[1].dumps
        fakes[1].dump_delay = 0
    finally:
        stop(fakes, rt)


def test_dump_overflow():
    """More live messages than a rank keeps come while its dump is fetched: what was kept goes,
    the continuity check after the dump sees the hole, and a second dump catches up."""
    fakes, rt = fleet()
    try:
        f = fakes[1]
        ka = keys_of(prompt("v"))
        f.dump_delay = 1.0
        f.publish(STORED, ka[:1])  # the first: the dump is asked for
        wait_for(lambda: f.dumps == 1, 10, "the dump asked for")
        f.dump_delay = 0
        for i in range(3000):  # 6,000 messages of 52 bytes kept: over 256 KiB
            f.publish(STORED, ka[1:2])
            f.publish(REMOVED, ka[1:2])
        f.publish(STORED, ka[1:3])
        wait_for(lambda: f.dumps == 2, 10, "a second dump")
        wait_blocks(rt, f, 3)
        assert metric(rt, "admit_router_kv_events_overflows_total") >= 1
        assert metric(rt, "admit_router_kv_events_gaps_total") >= 1
        assert served_by(rt, prompt("v")) == "w1"
    finally:
        stop(fakes, rt)


def test_predicted_ttl():
    """An event worker's decision of token ids holds for --kv-predicted-ttl-ms only: after it,
    the worker whose events hold a part of the prompt wins."""
    fakes, rt = fleet(2, False, "--kv-predicted-ttl-ms", "400")
    try:
        other = keys_of(prompt("o"))
        fakes[0].publish(STORED, other)
        fakes[1].publish(STORED, other)
        wait_blocks(rt, fakes[0], 8)
        wait_blocks(rt, fakes[1], 8)
        a = prompt("p")
        first = served_by(rt, a)
        assert served_by(rt, a) == first  # the side table says so
        loser = fakes[1] if first == "w0" else fakes[0]
        loser.publish(STORED, keys_of(a)[:2])
        wait_blocks(rt, loser, 10)
        assert served_by(rt, a) == first  # 8 predicted blocks over 2 held
        time.sleep(0.6)
        assert served_by(rt, a) == loser.worker_id
    finally:
        stop(fakes, rt)


def test_hostile_messages():
    """Messages that do not decode, a snapshot on the live stream, another block size, a
    message split over many writes and a late one: counted (the late one skipped), the router
    serves on."""
    fakes, rt = fleet()
    try:
        f = fakes[1]
        ka = keys_of(prompt("z"))
        f.publish(STORED, ka[:4])
        wait_blocks(rt, f, 4)
        bad = [kv_msg(STORED, ka, f.epoch, 99)[:39],                      # short
               kv_msg(STORED, ka, f.epoch, 99, version=2),                # version
               kv_msg(7, ka, f.epoch, 99),                                # op
               kv_msg(STORED, ka[:2], f.epoch, 99, n=60000),              # huge n
               kv_msg(STORED, ka, f.epoch, 99) + b"\0",                   # length
               kv_msg(CLEARED, ka[:1], f.epoch, 99),                      # cleared with keys
               kv_msg(SNAPSHOT, ka, f.epoch, 99),                         # not live
               kv_msg(STORED, ka, f.epoch, 99, rank=200)]                 # rank
        for m in bad:
            f.pub.send(m)
        wait_for(lambda: metric(rt, "admit_router_kv_events_refused_total",
                                'reason="invalid"') == len(bad), 10, "refusals counted")
        # another block size: refused, but it is the stream's next message (no gap)
        with f.lock:
            f.seq += 1
            f.pub.send(kv_msg(STORED, ka[4:], f.epoch, f.seq, block_size=32))
        wait_for(lambda: metric(rt, "admit_router_kv_events_refused_total",
                                'reason="block_size"') == 1, 10, "block size refused")
        # the next message split into writes (in its length, its topic, its header), the
        # heartbeats held meanwhile
        m = f.publish(STORED, ka[4:6], send=False)
        frame = struct.pack(">Q", len(m)) + m
        with f.pub._lock:
            for a, b in ((0, 3), (3, 12), (12, 38), (38, 60), (60, len(frame))):
                for c in f.pub.conns:
                    c.sendall(frame[a:b])
                time.sleep(0.03)
        wait_blocks(rt, f, 6)
        assert metric(rt, "admit_router_kv_events_gaps_total") == 0
        # a late message (one of the past, as a stream racing its dump has them): skipped, not a
        # gap; the stream's next message is applied after it
        f.pub.send(kv_msg(STORED, ka[6:], f.epoch, 1))
        f.publish(REMOVED, ka[5:6])
        wait_blocks(rt, f, 5)
        assert metric(rt, "admit_router_kv_events_gaps_total") == 0
        assert f.dumps == 1, f.dumps
        f.publish(STORED, ka[5:6])
        wait_blocks(rt, f, 6)
        # a dump that does not parse: failed, retried
        f.dump_body = b"\0\0\0\x05kv_ev"
        f.restart()
        f.publish(STORED, ka[6:])
        wait_for(lambda: metric(rt, "admit_router_kv_events_dumps_total", 'result="failed"') >= 2,
                 10, "bad dumps failed")
        f.dump_body = None
        wait_blocks(rt, f, 8)
        assert served_by(rt, prompt("z")) == "w1"
        # a worker whose events are all of another block size is no event worker
        fakes[0].pub.send(kv_msg(STORED, ka, fakes[0].epoch, 1, block_size=32))
        wait_for(lambda: metric(rt, "admit_router_kv_events_refused_total",
                                'reason="block_size"') == 2, 10, "block size refused")
        assert events_blocks(rt, fakes[0].server.url) == (False, 0)
        assert rt.proc.alive()
    finally:
        stop(fakes, rt)


def test_retired_worker_blocks_go():
    """A worker that leaves the workers file loses its blocks from the events index at once."""
    fakes = [FakeAdmitd("w%d" % i) for i in range(2)]
    path = os.path.join(tempfile.mkdtemp(), "workers")
    write(path, "".join("%s=%s\n" % f.worker for f in fakes))
    rt = Router([], "--kv-block-size", str(BLOCK), "--workers-file", path)
    try:
        rt.wait_routable(2)
        ka = keys_of(prompt("q"))
        fakes[1].publish(STORED, ka)
        fakes[0].publish(STORED, ka[:1])
        wait_blocks(rt, fakes[1], 8)
        wait_blocks(rt, fakes[0], 1)
        write(path, "%s=%s\n" % fakes[0].worker)
        rt.proc.p.send_signal(signal.SIGHUP)
        rt.proc.wait_line(r"worker %s retired" % fakes[1].server.hostport, 10)
        assert metric(rt, "admit_router_kv_events_index_blocks") == 1
        assert metric(rt, "admit_router_kv_events_workers") == 1
    finally:
        stop(fakes, rt)


def test_two_routers_agree():
    """Two routers over the same caching workers: each session's first turn is pinned to a
    worker through one router, and its next turns, through either, go where its blocks are
    (Item 5)."""
    fakes = [FakeAdmitd("w%d" % i, engine=True) for i in range(2)]
    rts = [Router([f.worker for f in fakes], "--kv-block-size", str(BLOCK)) for _ in range(2)]
    try:
        for rt in rts:
            rt.wait_routable(2)
        held = [set(), set()]  # what each engine has stored
        for s in range(6):
            home = "w%d" % (s % 2)
            ids = prompt("session-%d" % s, 4)
            for t in range(5):
                # the first turn pinned through the first router, then either, unpinned
                assert served_by(rts[t % 2], ids, pin=None if t else home) == home, (s, t)
                held[s % 2].update(keys_of(ids))
                # each turn's blocks reach both routers from the engine's events
                for rt in rts:
                    wait_for(lambda: events_blocks(rt, fakes[s % 2].server.url) ==
                             (True, len(held[s % 2])), 10, "both routers heard the events")
                ids = ids + prompt("turn-%d-%d" % (s, t), 2)
        for rt in rts:
            assert metric(rt, "admit_router_kv_events_gaps_total") == 0
            assert metric(rt, "admit_router_kv_events_workers") == 2
    finally:
        stop(fakes, *rts)


def real_worker(i):
    """admit-mock-engine publishing its KV events (vLLM's format, ZMQ) and a real admitd
    relaying them (--engine-kv-events) as worker w<i>."""
    port = free_base(1)
    mock = Mock("--speedup-ratio", "0", "--block-size", str(BLOCK), "--kv-events-endpoint",
                "tcp://*:%d" % port, "--enable-prompt-tokens-details")
    ad = Admitd(mock.url, "--engine-kv-events", "tcp://127.0.0.1:%d" % port,
                "--engine-metrics-interval-ms", "50", "--heartbeat-ms", "100",
                "--worker-id", "w%d" % i)
    return mock, ad


def published_idle(rt, url):
    """Whether every rank of the worker at url publishes no prefill and no decode blocks."""
    for w in rt.workers():
        if "http://" + w["url"] == url:
            return all(r["published"] and r["published"]["active_prefill_tokens"] == 0 and
                       r["published"]["active_decode_blocks"] == 0 for r in w["ranks"])
    raise AssertionError("no worker %s in /load" % url)


def cached_via(addr, ids):
    """One completion of token ids at addr (a router or an admitd): its cached tokens."""
    status, _, data = own_request(addr, "/v1/completions",
                                  {"model": MODEL, "prompt": ids, "max_tokens": 1}, marker())
    assert status == 200, (status, data)
    return (json.loads(data)["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def test_real_admitd():
    """On real admitd relaying admit-mock-engine's events: a prompt an engine cached from a
    request the router never saw (sent to its admitd directly) is routed to that engine, and
    finds its prefix cached there."""
    pairs = [real_worker(i) for i in range(2)]
    rt = Router([("http://%s:%d" % ad.addr, ad.publish) for _, ad in pairs],
                "--kv-block-size", str(BLOCK))
    try:
        rt.wait_routable(2)
        # each engine's events reach the router (ZMQ's slow joiner, and the model list
        # admitd reads before it can key a block)
        for i, (_, ad) in enumerate(pairs):
            url = "http://%s:%d" % ad.addr
            for n in range(300):
                cached_via(ad.addr, prompt("warm-%d-%d" % (i, n), 1))
                if events_blocks(rt, url)[1] > 0:
                    break
                time.sleep(0.05)
            assert events_blocks(rt, url)[1] > 0, "no events of worker %d" % i
        for i, (_, ad) in enumerate(pairs):
            ids = prompt("real-%d" % i, 8)
            url = "http://%s:%d" % ad.addr
            before = events_blocks(rt, url)[1]
            assert cached_via(ad.addr, ids) == 0
            wait_for(lambda: events_blocks(rt, url)[1] >= before + 8, 10, "its blocks heard")
            # and its load back to nothing: the request the router did not see, published until
            # its end, weighs on that worker's cost
            wait_for(lambda: published_idle(rt, url), 10, "its load published idle")
            # through the router: to the engine that holds it, whose answer says so
            assert cached_via(rt.addr, ids + prompt("more-%d" % i, 2)) == 8 * BLOCK, i
        assert metric(rt, "admit_router_kv_events_gaps_total") == 0
        assert metric(rt, "admit_router_kv_events_dumps_total", 'result="failed"') == 0
    finally:
        rt.stop()
        for mock, ad in pairs:
            ad.stop()
            mock.stop()



def prompt_tokens(mock):
    return sum(v for k, v in mock.metrics().items() if k.startswith("vllm:prompt_tokens_total"))


def test_raw_engine():
    """Engines played by raw ZMQ PUBs, not our mock (vLLM's newer encoding: the batch and its
    events maps, hashes as bytes, unknown fields), relayed by real admitds in front of mocks
    that serve the requests: the router sends a prompt to the worker whose engine said it
    stored the prompt's prefix, and the other engine's word moves it back."""
    import msgpack  # here, not at the top: the other checks need neither
    import zmq

    ctx = zmq.Context.instance()
    pubs, pairs, rt = [], [], None
    try:
        for i in range(2):
            port = free_base(1)
            pub = ctx.socket(zmq.PUB)
            pub.setsockopt(zmq.LINGER, 0)
            pub.bind("tcp://127.0.0.1:%d" % port)
            pubs.append(pub)
            mock = Mock("--speedup-ratio", "0", "--block-size", str(BLOCK))
            pairs.append((mock, Admitd(mock.url, "--engine-kv-events", "tcp://127.0.0.1:%d" % port,
                                       "--heartbeat-ms", "100", "--worker-id", "w%d" % i)))
        rt = Router([("http://%s:%d" % ad.addr, ad.publish) for _, ad in pairs],
                    "--kv-block-size", str(BLOCK))
        rt.wait_routable(2)
        ids, seqs = prompt("raw", 8), [0, 0]

        def store(i, tag):
            """Engine i stores the prompt's 8 blocks, one chain, until the router has them."""
            url = "http://%s:%d" % pairs[i][1].addr
            hashes = [struct.pack(">Q", 0xfeed) + tag + struct.pack(">Q", b) for b in range(8)]
            for _ in range(200):
                ev = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None,
                      "token_ids": ids, "block_size": BLOCK, "medium": "GPU", "lora_name": None,
                      "a_field_of_tomorrow": [1, 2]}
                pubs[i].send_multipart([b"", struct.pack(">q", seqs[i]), msgpack.packb(
                    {"ts": time.time(), "events": [ev], "data_parallel_rank": 0})])
                seqs[i] += 1
                if events_blocks(rt, url)[1] >= 8:
                    return
                time.sleep(0.05)
            raise AssertionError("engine %d's blocks never reached the router" % i)

        def served_by_raw(tail):
            before = [prompt_tokens(m) for m, _ in pairs]
            status, _, data = own_request(rt.addr, "/v1/completions",
                                          {"model": MODEL, "prompt": ids + prompt(tail, 2),
                                           "max_tokens": 1}, marker())
            assert status == 200, (status, data)
            grew = [prompt_tokens(m) > b for (m, _), b in zip(pairs, before)]
            assert grew.count(True) == 1, grew
            return grew.index(True)

        store(1, b"\x01" * 8)
        assert served_by_raw("t1") == 1
        # engine 1 restarts (its sequence back to 0 on the same connection): its blocks go,
        # and engine 0 says it stored the prompt
        seqs[1] = 0
        pubs[1].send_multipart([b"", struct.pack(">q", 0), msgpack.packb(
            {"ts": time.time(), "events": [], "data_parallel_rank": 0})])
        wait_for(lambda: events_blocks(rt, "http://%s:%d" % pairs[1][1].addr)[1] == 0, 10,
                 "engine 1's blocks cleared")
        store(0, b"\x00" * 8)
        time.sleep(0.3)  # the load messages of the first request's end
        assert served_by_raw("t2") == 0
        assert metric(rt, "admit_router_kv_events_gaps_total") == 0
    finally:
        if rt is not None:
            rt.stop()
        for mock, ad in pairs:
            ad.stop()
            mock.stop()
        for pub in pubs:
            pub.close()

if __name__ == "__main__":
    t = Tap()
    t.run("stored blocks route there, the dump first", test_stored_routes_there)
    t.run("removed and cleared take them away", test_removed_and_cleared_take_it_away)
    t.run("a gap or a new epoch fetches the dump", test_gap_fetches_the_dump)
    t.run("live messages kept during the dump", test_dump_keeps_live_messages)
    t.run("more live messages than kept during the dump", test_dump_overflow)
    t.run("the side table holds for --kv-predicted-ttl-ms", test_predicted_ttl)
    t.run("hostile kv_events messages are counted", test_hostile_messages)
    t.run("a retired worker's blocks go", test_retired_worker_blocks_go)
    t.run("two routers agree", test_two_routers_agree)
    t.run("on real admitd and engines", test_real_admitd)
    t.run("on real admitd and a raw engine publisher (not our mock)", test_raw_engine)
    t.done()
