"""admitd relays its engine's KV events to routers (issue 26, item 2): kv_events messages on
its publisher (docs/load-message.md, "The kv_events topic"), read here by a raw SP SUB0 (the
framing of wire/spframe.h) beside the load messages. The keys relayed for a prompt are the
keys a router computes from the prompt's token ids (kvk_keys, on lib/admission/kvkeys); the
engine's evictions are relayed as removals; an engine restart as `cleared`; each rank's
sequence rises by one under one epoch. On a real admit-mock-engine, with either publisher."""

import json
import os
import socket
import struct
import subprocess
import threading
import time

# First: test_mock_kv_events re-runs this script under Debian's /usr/bin/python3 when the
# python3 on PATH (pyenv's) has no zmq or msgpack.
from test_mock_kv_events import free_base, prompt_of, tokenize

from harness import Admitd, Mock, Tap, marker, own_request, request, wait_for

BLOCK = 16
MODEL = "mock-model"
KVK_KEYS = os.environ.get("KVK_KEYS", "build/tests/integration/kvk_keys")
SUB0_HELLO = b"\x00SP\x00\x00\x21\x00\x00"
PUB0_HELLO = b"\x00SP\x00\x00\x20\x00\x00"
OPS = {1: "stored", 2: "removed", 3: "cleared", 4: "snapshot"}


def router_keys(ids, model=MODEL, block=BLOCK):
    """What a router computes for these token ids: the keys of their full blocks."""
    p = subprocess.run([KVK_KEYS], input="%s %d %s\n" % (model, block, " ".join(map(str, ids))),
                       capture_output=True, text=True, timeout=30, check=True)
    return [int(k) for k in p.stdout.split()]


def decode(body):
    """One kv_events message as a dict (the layout of docs/load-message.md)."""
    assert body[:10] == b"kv_events ", body[:16]
    version, op, rank, n, epoch, seq, bs, _ = struct.unpack(">BBHHQQII", body[10:40])
    assert version == 1 and op in OPS and len(body) == 40 + 8 * n, (version, op, len(body), n)
    keys = list(struct.unpack(">%dQ" % n, body[40:]))
    return {"op": OPS[op], "rank": rank, "epoch": epoch, "seq": seq, "block_size": bs,
            "keys": keys}


class KvReader:
    """A raw SP SUB0 on admitd's publisher, in a thread: keeps every kv_events message and, per
    rank, the key set they imply; records every break of the rank's sequence (a seq that is
    not the last + 1, another epoch) in errors. `load` counts the load messages."""

    def __init__(self, url):
        host, port = url[len("tcp://"):].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.sock.sendall(SUB0_HELLO)
        assert self._exact(8) == PUB0_HELLO
        self.sock.settimeout(None)
        self.lock = threading.Lock()
        self.msgs, self.errors, self.load = [], [], 0
        self.keys, self.last = {}, {}
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _exact(self, n):
        b = b""
        while len(b) < n:
            c = self.sock.recv(n - len(b))
            if not c:
                raise EOFError
            b += c
        return b

    def _run(self):
        try:
            while True:
                (n,) = struct.unpack(">Q", self._exact(8))
                body = self._exact(n)
                with self.lock:
                    if body.startswith(b"kv_events "):
                        self._apply(decode(body))
                    else:
                        self.load += 1
        except (EOFError, OSError):
            pass

    def _apply(self, m):
        r = m["rank"]
        if r in self.last:
            epoch, seq = self.last[r]
            if m["epoch"] != epoch or m["seq"] != seq + 1:
                self.errors.append((epoch, seq, m["epoch"], m["seq"]))
        self.last[r] = (m["epoch"], m["seq"])
        self.msgs.append(m)
        s = self.keys.setdefault(r, set())
        if m["op"] == "stored":
            s.update(m["keys"])
        elif m["op"] == "removed":
            s.difference_update(m["keys"])
        elif m["op"] == "cleared":
            s.clear()

    def held(self, rank=0):
        with self.lock:
            return set(self.keys.get(rank, ()))

    def messages(self, op=None):
        with self.lock:
            return [m for m in self.msgs if op is None or m["op"] == op]

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.t.join(5)


def relay(adm, family, rank=0, **labels):
    """One admitd_kv_relay_* sample of a rank (0 when absent)."""
    extra = "".join(',%s="%s"' % kv for kv in sorted(labels.items()))
    return adm.metrics().get('admitd_kv_relay_%s{dp_rank="%d"%s}' % (family, rank, extra), 0)


def complete(adm, prompt):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1}
    status, _, data = own_request(adm.addr, "/v1/completions", body, marker())
    assert status == 200, (status, data)


def start(*mock_args, ranks=1, publisher="auto", port=None):
    port = port or free_base(ranks)
    argv = ["--speedup-ratio", "0", "--block-size", str(BLOCK),
            "--kv-events-endpoint", "tcp://*:%d" % port] + list(mock_args)
    if ranks > 1:
        argv += ["--data-parallel-size", str(ranks)]
    mock = Mock(*argv)
    adm = Admitd(mock.url, "--engine-kv-events", "tcp://127.0.0.1:%d" % port,
                 "--engine-metrics-interval-ms", "50", "--heartbeat-ms", "100",
                 "--publisher", publisher)
    return mock, adm, port


def joined(adm, reader, tag, ranks=1):
    """Our SUB gets load messages, then prompts until every rank relays a stored block (ZMQ's
    slow joiner, and the model list admitd reads from the engine before it can key)."""
    wait_for(lambda: reader.load > 0, 15, "a load message")
    for i in range(300):
        complete(adm, prompt_of("%s%d" % (tag, i), 1))
        if all(reader.held(r) for r in range(ranks)):
            return
        time.sleep(0.05)
    raise AssertionError("no stored block relayed")


def keys_of(mock, prompt):
    return router_keys(tokenize(mock, prompt))


def relayed_keys_are_router_keys(publisher):
    mock, adm, _ = start(publisher=publisher)
    reader = KvReader(adm.publish)
    try:
        joined(adm, reader, "warm" + publisher)
        p = prompt_of("relay" + publisher, 3)
        want = keys_of(mock, p)
        assert len(want) >= 3, want
        complete(adm, p)
        wait_for(lambda: set(want) <= reader.held(), 15, "the prompt's keys relayed")
        # In one stored message, in the chain's order, of the engine's block size.
        m = [m for m in reader.messages("stored") if want[0] in m["keys"]][0]
        i = m["keys"].index(want[0])
        assert m["keys"][i:i + len(want)] == want and m["block_size"] == BLOCK, (m, want)
        assert m["epoch"] != 0 and m["rank"] == 0, m
        # A prompt that extends it: only its new block is stored; the router's keys of the
        # longer prompt start with the shorter's.
        p2 = p + " more words to fill one more block of sixteen tokens at least, surely"
        want2 = keys_of(mock, p2)
        assert want2[:len(want)] == want and len(want2) > len(want), (want, want2)
        n = len(reader.messages("stored"))
        complete(adm, p2)
        wait_for(lambda: set(want2) <= reader.held(), 15, "the longer prompt's keys")
        new = [k for m in reader.messages("stored")[n:] for k in m["keys"]]
        assert new == want2[len(want):], (new, want2)
        assert reader.errors == [], reader.errors
        assert relay(adm, "keys_total", op="stored") == len(reader.held()), adm.metrics()
        assert relay(adm, "unkeyed_blocks_total") == 0
    finally:
        reader.close()
        adm.stop()
        mock.stop()


def test_keys_auto():
    relayed_keys_are_router_keys("auto")


def test_keys_nng():
    relayed_keys_are_router_keys("nng")


def test_evictions_relayed():
    ranks, gpu_blocks = 2, 8
    mock, adm, _ = start("--num-gpu-blocks", str(gpu_blocks), ranks=ranks)
    reader = KvReader(adm.publish)
    try:
        joined(adm, reader, "we", ranks)
        prompts = [prompt_of("ev%d" % i, 3) for i in range(8)]
        wants = [keys_of(mock, p) for p in prompts]
        for p in prompts:
            complete(adm, p)
        # The last prompt's blocks are held on whichever rank took it; every rank evicted.
        wait_for(lambda: any(set(wants[-1]) <= reader.held(r) for r in range(ranks)), 15,
                 "the last prompt's keys")
        wait_for(lambda: all(relay(adm, "keys_total", r, op="removed") > 0
                             for r in range(ranks)), 15, "removals on each rank")
        every = set(k for w in wants for k in w)
        for r in range(ranks):
            held = reader.held(r)
            # What a rank holds fits in it, and nothing of the first prompts is left (the
            # warm-up's one-block prompts aside).
            assert len(held) <= gpu_blocks, (r, len(held))
            assert not (set(wants[0]) & held), r
            removed = [k for m in reader.messages("removed") if m["rank"] == r
                       for k in m["keys"]]
            assert removed and set(removed) <= every | set(
                k for m in reader.messages("stored") if m["rank"] == r for k in m["keys"]), r
            stored = relay(adm, "keys_total", r, op="stored")
            assert stored - relay(adm, "keys_total", r, op="removed") == len(held), (
                r, stored, len(held))
            assert relay(adm, "messages_total", r, op="stored") == len(
                [m for m in reader.messages("stored") if m["rank"] == r])
        assert reader.errors == [], reader.errors
    finally:
        reader.close()
        adm.stop()
        mock.stop()


def test_engine_restart_clears():
    mock, adm, port = start()
    reader = KvReader(adm.publish)
    mock2 = None
    try:
        joined(adm, reader, "warmr")
        for i in range(6):
            complete(adm, prompt_of("before%d" % i, 2))
        wait_for(lambda: adm.metrics().get('admitd_engine_kv_events_last_seq{dp_rank="0"}', 0)
                 >= 6, what="seq 6")
        before = reader.held()
        assert before
        mock.stop()
        # A new engine on the same KV port: its sequence starts again from 0.
        mock2 = Mock("--speedup-ratio", "0", "--block-size", str(BLOCK),
                     "--kv-events-endpoint", "tcp://*:%d" % port)
        for i in range(100):
            body = {"model": MODEL, "prompt": prompt_of("after%d" % i, 1), "max_tokens": 1}
            assert request(mock2.addr, "POST", "/v1/completions", body)[0] == 200
            if relay(adm, "clears_total", reason="restart") >= 1:
                break
            time.sleep(0.05)
        assert relay(adm, "clears_total", reason="restart") == 1, adm.metrics()
        assert relay(adm, "clears_total", reason="gap") == 0
        cleared = reader.messages("cleared")
        wait_for(lambda: reader.messages("cleared"), 10, "a cleared message")
        cleared = reader.messages("cleared")
        assert len(cleared) == 1 and cleared[0]["keys"] == [] and cleared[0]["block_size"] == 0
        # Nothing from before the restart is held; what is, came after.
        wait_for(lambda: reader.held(), 10, "blocks stored after the restart")
        assert not (before & reader.held())
        assert reader.errors == [], reader.errors
    finally:
        reader.close()
        adm.stop()
        if mock2:
            mock2.stop()
        mock.stop()


def dump(adm):
    """GET /admitd/kv_blocks: {rank: (epoch, seq, block_size, set of keys)}, every record
    checked (op snapshot, one epoch and seq per rank)."""
    status, hdrs, body = request(adm.addr, "GET", "/admitd/kv_blocks")
    assert status == 200, (status, body[:200])
    assert hdrs.get("content-type") == "application/octet-stream", hdrs
    out, off = {}, 0
    while off < len(body):
        (n,) = struct.unpack(">I", body[off:off + 4])
        m = decode(body[off + 4:off + 4 + n])
        off += 4 + n
        assert m["op"] == "snapshot", m
        epoch, seq, bs, keys = out.setdefault(m["rank"], (m["epoch"], m["seq"], m["block_size"],
                                                          set()))
        assert (epoch, seq) == (m["epoch"], m["seq"]), (epoch, seq, m)
        keys.update(m["keys"])
    assert off == len(body)
    return out


def settled(adm, reader, ranks):
    """Until the reader has every message admitd counts as published, for every rank."""
    def done():
        for r in range(ranks):
            sent = sum(relay(adm, "messages_total", r, op=op) for op in ("stored", "removed",
                                                                          "cleared"))
            if sent != len([m for m in reader.messages() if m["rank"] == r]):
                return False
        return True
    wait_for(done, 15, "every published message read")


def test_dump():
    ranks = 2
    mock, adm, _ = start("--num-gpu-blocks", "12", ranks=ranks)
    reader = KvReader(adm.publish)
    try:
        joined(adm, reader, "wd", ranks)
        for i in range(6):
            complete(adm, prompt_of("dump%d" % i, 3))
        settled(adm, reader, ranks)
        d = dump(adm)
        assert sorted(d) == list(range(ranks)), d
        for r in range(ranks):
            epoch, seq, bs, keys = d[r]
            assert (epoch, seq) == reader.last[r], (r, epoch, seq, reader.last[r])
            assert bs == BLOCK and keys == reader.held(r), (r, bs, len(keys), len(reader.held(r)))
        # A router that starts now: the dump, then the messages after its seq (the first of
        # them its seq + 1), gives what the reader that saw everything holds.
        n = len(reader.messages())
        for i in range(6):
            complete(adm, prompt_of("later%d" % i, 3))
        settled(adm, reader, ranks)
        for r in range(ranks):
            epoch, seq, _, keys = d[r]
            late = [m for m in reader.messages()[n:] if m["rank"] == r]
            assert late and late[0]["seq"] == seq + 1 and late[0]["epoch"] == epoch, late[:1]
            for m in late:
                if m["op"] == "stored":
                    keys |= set(m["keys"])
                elif m["op"] == "removed":
                    keys -= set(m["keys"])
                else:
                    keys.clear()
            assert keys == reader.held(r), r
        # Only GET; the dump is admitd's own answer, never the engine's, outside the gate.
        status, _, body = request(adm.addr, "POST", "/admitd/kv_blocks", {})
        assert status == 405 and json.loads(body)["error"]["code"] == 405, (status, body)
        assert reader.errors == [], reader.errors
    finally:
        reader.close()
        adm.stop()
        mock.stop()


def test_dump_without_events():
    mock = Mock("--speedup-ratio", "0")
    adm = Admitd(mock.url)
    try:
        status, _, body = request(adm.addr, "GET", "/admitd/kv_blocks")
        assert status == 404 and "--engine-kv-events" in json.loads(body)["error"]["message"], (
            status, body)
    finally:
        adm.stop()
        mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("the relayed keys are the router's keys of the prompt's ids (our PUB)", test_keys_auto)
    tap.run("the same through nng's PUB", test_keys_nng)
    tap.run("evictions are relayed as removals, per rank", test_evictions_relayed)
    tap.run("an engine restart is relayed as cleared", test_engine_restart_clears)
    tap.run("GET /admitd/kv_blocks: the key set the messages imply, at the last seq",
            test_dump)
    tap.run("GET /admitd/kv_blocks without --engine-kv-events: 404", test_dump_without_events)
    tap.done()
