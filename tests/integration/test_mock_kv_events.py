"""The mock engine's KV events (issue 26): a real admit-mock-engine publishing what its prefix
cache stores and evicts in vLLM's format over ZMQ, read by Python's zmq and msgpack (Debian's
python3-zmq and python3-msgpack) and by our own decoder (kve_dump, lib/admission/kvevents)."""

import os
import sys

try:
    import msgpack
    import zmq
except ImportError:
    # Debian's python3-zmq and python3-msgpack load only in Debian's interpreter; python3 on
    # PATH may be another one (pyenv's).
    if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3" and \
            not os.environ.get("KV_EVENTS_REEXEC"):
        os.environ["KV_EVENTS_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

import json
import socket
import struct
import subprocess
import time

from harness import Mock, Tap, request
from test_mock_cache import completion

BLOCK = 16
KVE_DUMP = os.environ.get("KVE_DUMP", "build/tests/integration/kve_dump")
CTX = zmq.Context.instance()


def free_base(n):
    """A port p such that p .. p + n - 1 are all free on loopback (vLLM adds the rank)."""
    for _ in range(200):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        base = s.getsockname()[1]
        s.close()
        if base + n > 65535:
            continue
        held = []
        try:
            for i in range(n):
                t = socket.socket()
                held.append(t)
                t.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for t in held:
                t.close()
    raise RuntimeError("no %d consecutive free ports" % n)


def tokenize(mock, prompt):
    status, _, data = request(mock.addr, "POST", "/tokenize",
                              {"model": "mock-model", "prompt": prompt})
    assert status == 200, (status, data)
    return json.loads(data)["tokens"]


def complete(mock, prompt, max_tokens=1, **extra):
    """One token by default: a prompt of whole blocks plus a few stores no generated block."""
    return completion(mock, prompt, max_tokens, **extra)


def prompt_of(tag, blocks, extra=3):
    """A prompt of `blocks` full blocks plus `extra` tokens (the mock's tokenizer: one token
    per word and per punctuation mark, roughly; the test checks with /tokenize anyway)."""
    return " ".join("%s%d" % (tag, i) for i in range(blocks * BLOCK + extra))


def norm_hash(h):
    """A block hash as an int: the int form, or the bytes form read big-endian."""
    if isinstance(h, (bytes, bytearray)):
        return int.from_bytes(h, "big")
    return h


def norm_event(ev):
    """An event of either encoding as a dict keyed by field name, hashes as ints."""
    if isinstance(ev, dict):
        d = dict(ev)
    else:
        names = {"BlockStored": ["block_hashes", "parent_block_hash", "token_ids", "block_size",
                                 "lora_id", "medium", "lora_name", "extra_keys"],
                 "BlockRemoved": ["block_hashes", "medium"],
                 "AllBlocksCleared": []}[ev[0]]
        d = dict(zip(["type"] + names, ev))
    d["block_hashes"] = [norm_hash(h) for h in d.get("block_hashes", [])]
    if d.get("parent_block_hash") is not None:
        d["parent_block_hash"] = norm_hash(d["parent_block_hash"])
    return d


def decode(payload):
    """(rank, [events as dicts]) of one payload."""
    b = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    assert isinstance(b, list) and len(b) == 3, b
    assert isinstance(b[0], float), b
    return b[2], [norm_event(e) for e in b[1]]


class Sub:
    """A ZMQ SUB on one rank's publisher: every message checked for vLLM's framing."""

    def __init__(self, port, topic=b""):
        self.s = CTX.socket(zmq.SUB)
        self.s.setsockopt(zmq.LINGER, 0)
        self.s.setsockopt(zmq.SUBSCRIBE, topic)
        self.s.connect("tcp://127.0.0.1:%d" % port)
        self.topic = topic
        self.batches = []  # (seq, payload)

    def recv(self, timeout=5.0):
        if not self.s.poll(int(timeout * 1000)):
            return None
        frames = self.s.recv_multipart()
        assert len(frames) == 3, frames
        assert frames[0] == self.topic, frames[0]
        assert len(frames[1]) == 8, frames[1]
        seq = struct.unpack(">q", frames[1])[0]
        self.batches.append((seq, frames[2]))
        return seq, frames[2]

    def drain(self, quiet=0.3, first=2.0):
        """Every batch until none comes for `quiet` seconds (`first` for the first one: the
        HTTP answer can arrive before ZMQ's I/O thread has delivered the batches, which the
        mock sends before the answer's end, in order)."""
        got = []
        while True:
            m = self.recv(quiet if got else first)
            if m is None:
                return got
            got.append(m)

    def close(self):
        self.s.close()


def joined(mock, subs, tag="warm"):
    """Sends prompts until every SUB has a batch (ZMQ's slow joiner: a SUB hears nothing
    until its subscription reaches the PUB), then drops what they heard. With several ranks
    the mock's round robin sends one prompt to each in turn."""
    for i in range(100):
        complete(mock, prompt_of("%s%d" % (tag, i), 1))
        time.sleep(0.05)
        for s in subs:
            s.drain(0.05, 0.05)
        if all(s.batches for s in subs):
            for s in subs:
                s.drain(0.3, 0.3)
                s.batches = []
            return
    raise AssertionError("no KV events reached the subscribers")


def events_of(batches):
    out = []
    for _, payload in batches:
        out.extend(decode(payload)[1])
    return out


def start(*args, ranks=1, replay=False, encoding=None):
    port = free_base(2 * ranks)
    argv = ["--speedup-ratio", "0", "--block-size", str(BLOCK),
            "--kv-events-endpoint", "tcp://*:%d" % port]
    if replay:
        argv += ["--kv-events-replay-endpoint", "tcp://*:%d" % (port + ranks)]
    if encoding:
        argv += ["--kv-events-encoding", encoding]
    if ranks > 1:
        argv += ["--data-parallel-size", str(ranks)]
    return Mock(*(argv + list(args))), port


def test_stored_blocks_are_the_prompts_tokens():
    mock, port = start()
    sub = Sub(port)
    joined(mock, [sub])
    p1 = prompt_of("alpha", 3)
    ids = tokenize(mock, p1)
    n = len(ids) // BLOCK * BLOCK
    assert len(ids) % BLOCK not in (0, BLOCK - 1), len(ids)  # no generated block
    complete(mock, p1)
    evs = events_of(sub.drain())
    assert [e["type"] for e in evs] == ["BlockStored"], evs
    e = evs[0]
    # The prompt's full blocks, the ids /tokenize gives, a root chain.
    assert e["token_ids"] == ids[:n], (e["token_ids"], ids[:n])
    assert len(e["block_hashes"]) == n // BLOCK, e
    assert e["block_size"] == BLOCK and e["parent_block_hash"] is None, e
    assert e["medium"] == "GPU" and e["lora_id"] is None, e
    assert all(isinstance(h, int) and 0 <= h < 2 ** 64 for h in e["block_hashes"]), e
    assert len(set(e["block_hashes"])) == len(e["block_hashes"]), e
    # A prompt that extends p1 stores only its new blocks, chained to p1's last block.
    p2 = p1 + " " + " ".join("beta%d" % i for i in range(2 * BLOCK))
    ids2 = tokenize(mock, p2)
    assert ids2[:n] == ids[:n]
    complete(mock, p2)
    evs2 = events_of(sub.drain())
    assert [x["type"] for x in evs2] == ["BlockStored"], evs2
    assert evs2[0]["parent_block_hash"] == e["block_hashes"][-1], (evs2[0], e)
    n2 = len(ids2) // BLOCK * BLOCK
    assert evs2[0]["token_ids"] == ids2[n:n2], (evs2[0]["token_ids"], ids2[n:n2])
    # The same prompt again is all hits: nothing new is stored, no batch is sent.
    complete(mock, p1)
    assert sub.drain() == []
    # One sequence per batch, each the one before plus 1.
    seqs = [s for s, _ in sub.batches]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) and len(seqs) == 2, seqs
    assert "extra_keys" not in e, e
    # With a cache_salt the same prompt is another chain: new hashes, still a root, and the
    # first block's extra_keys say the hash covers more than the tokens (as vLLM's).
    complete(mock, p1, cache_salt="tenant-a")
    evs3 = events_of(sub.drain())
    assert [x["type"] for x in evs3] == ["BlockStored"], evs3
    s3 = evs3[0]
    assert s3["token_ids"] == ids[:n] and s3["parent_block_hash"] is None, s3
    assert not set(s3["block_hashes"]) & set(e["block_hashes"]), (s3, e)
    xk = s3["extra_keys"]
    assert len(xk) == n // BLOCK and xk[0] and all(k is None for k in xk[1:]), xk
    sub.close()
    mock.stop()


def test_generated_blocks_are_stored_too():
    mock, port = start()
    sub = Sub(port)
    joined(mock, [sub])
    p = prompt_of("gamma", 1, extra=0)
    ids = tokenize(mock, p)
    complete(mock, p, max_tokens=2 * BLOCK)
    evs = events_of(sub.drain())
    stored = [x for x in evs if x["type"] == "BlockStored"]
    assert stored, evs
    tokens = [t for x in stored for t in x["token_ids"]]
    full = (len(ids) + 2 * BLOCK) // BLOCK * BLOCK
    # The prompt's ids first, then the generated tokens' blocks, all one chain.
    assert len(tokens) >= full - BLOCK and tokens[:len(ids) // BLOCK * BLOCK] == \
        ids[:len(ids) // BLOCK * BLOCK], (len(tokens), full, len(ids))
    chain = [h for x in stored for h in x["block_hashes"]]
    for x in stored[1:]:
        assert x["parent_block_hash"] in chain, (x, chain)
    sub.close()
    mock.stop()


def test_ranks_publish_at_port_plus_rank():
    mock, port = start(ranks=2, replay=True)
    subs = [Sub(port), Sub(port + 1)]
    joined(mock, subs)
    for i in range(4):
        complete(mock, prompt_of("delta%d" % i, 2))
    for r, s in enumerate(subs):
        got = s.drain()
        assert len(got) == 2, (r, got)
        seqs = [q for q, _ in got]
        assert seqs[1] == seqs[0] + 1, seqs
        for _, payload in got:
            assert decode(payload)[0] == r, (r, decode(payload))
    # Each rank numbers its own batches from 0: replays from 0 begin there, and the two ranks'
    # counts are their own (the round robin gave each the same number of prompts here).
    for r in range(2):
        got, end = replay(port + 2 + r, 0)
        assert [q for q, _ in got] == list(range(len(got))), got
        assert end and got[-1][0] == subs[r].batches[-1][0], (got[-1][0], subs[r].batches)
        assert all(decode(p)[0] == r for _, p in got)
    for s in subs:
        s.close()
    mock.stop()


def test_eviction_publishes_exactly_the_evicted_blocks():
    mock, port = start("--num-gpu-blocks", "4")
    sub = Sub(port)
    joined(mock, [sub])  # its 1-block prompts fill part of the pool
    sub.batches = []
    pa, pb = prompt_of("eps", 4), prompt_of("zeta", 4)
    complete(mock, pa)
    a = events_of(sub.drain())
    assert [x["type"] for x in a] in (["BlockStored"], ["BlockRemoved", "BlockStored"]), a
    a_hashes = a[-1]["block_hashes"]
    assert len(a_hashes) == 4, a
    complete(mock, pb)
    b = events_of(sub.drain())
    # B's four blocks take the whole pool: A's four go, least recently used first (A released
    # its blocks last first), and then B's are stored.
    assert [x["type"] for x in b] == ["BlockRemoved", "BlockStored"], b
    assert b[0]["block_hashes"] == a_hashes[::-1], (b[0], a_hashes)
    assert b[0]["medium"] == "GPU", b[0]
    assert len(b[1]["block_hashes"]) == 4 and not set(b[1]["block_hashes"]) & set(a_hashes)
    sub.close()
    mock.stop()


def run_script(*args):
    """The same requests on a fresh mock with args: its payloads, all of them, read back
    through the replay socket (a SUB would miss the first ones, and warming it up with
    requests would change the cache)."""
    mock, port = start("--num-gpu-blocks", "6", *args, replay=True)
    p = prompt_of("eta", 3)
    complete(mock, p)
    complete(mock, p + " theta iota kappa " * 10, max_tokens=BLOCK + 2)
    complete(mock, prompt_of("lambda", 2))
    complete(mock, prompt_of("lambda", 2), cache_salt="s1")
    got, end = replay(port + 1, 0)
    mock.stop()
    assert end and [q for q, _ in got] == list(range(len(got))) and len(got) >= 4, got
    return [payload for _, payload in got]


def test_both_encodings_carry_the_same_events():
    runs = {}
    raw = {}
    for enc in ("positional", "map"):
        payloads = run_script("--kv-events-encoding", enc)
        runs[enc] = [decode(p)[1] for p in payloads]
        raw[enc] = [msgpack.unpackb(p, raw=False) for p in payloads]
    # Events as arrays with the tag first, or as maps keyed by name with the tag under "type".
    assert all(isinstance(e, list) and isinstance(e[0], str) for b in raw["positional"]
               for e in b[1]), raw["positional"]
    assert all(isinstance(e, dict) and "type" in e for b in raw["map"] for e in b[1]), raw["map"]
    kinds = {e["type"] for b in runs["map"] for e in b}
    assert kinds == {"BlockStored", "BlockRemoved"}, kinds
    assert runs["positional"] == runs["map"], (runs["positional"], runs["map"])


def replay(port, start_seq, timeout=3.0):
    """vLLM's replay: a DEALER sends ["", seq]; the batches come as [topic, seq, payload]
    and an end marker of seq -1. Returns ([(seq, payload)], whether the marker came)."""
    d = CTX.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.connect("tcp://127.0.0.1:%d" % port)
    try:
        d.send_multipart([b"", struct.pack(">q", start_seq)])
        got = []
        while d.poll(int(timeout * 1000)):
            frames = d.recv_multipart()
            assert frames[0] == b"" and len(frames) == 4, frames
            seq = struct.unpack(">q", frames[2])[0]
            if seq == -1:
                assert frames[3] == b"" and frames[2] == b"\xff" * 8, frames
                return got, True
            got.append((seq, frames[3]))
        return got, False
    finally:
        d.close()


def test_replay_returns_missed_batches_then_end():
    port = free_base(2)
    mock = Mock("--speedup-ratio", "0", "--block-size", str(BLOCK), "--kv-events-config",
                json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                            "endpoint": "tcp://*:%d" % port,
                            "replay_endpoint": "tcp://*:%d" % (port + 1),
                            "topic": "kv-events", "buffer_steps": 5}))
    sub = Sub(port, b"kv-events")
    joined(mock, [sub])
    for i in range(3):
        complete(mock, prompt_of("mu%d" % i, 1))
    live = sub.drain()
    assert len(live) == 3, live
    first = live[0][0]
    # A subscriber that missed the last two asks from the first it missed.
    got, end = replay(port + 1, first + 1)
    assert end, got
    assert got == live[1:], (got, live[1:])
    # From a sequence not yet sent: nothing but the end marker.
    assert replay(port + 1, live[-1][0] + 1) == ([], True)
    # The ring keeps buffer_steps (5) batches: from 0, only the last five come back.
    for i in range(6):
        complete(mock, prompt_of("nu%d" % i, 1))
    live = sub.drain()
    got, end = replay(port + 1, 0)
    assert end and [q for q, _ in got] == list(range(live[-1][0] - 4, live[-1][0] + 1)), got
    # A request of another shape (no start sequence) is ignored: no answer, the socket lives.
    d = CTX.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.connect("tcp://127.0.0.1:%d" % (port + 1))
    d.send_multipart([b"", b"abc"])
    assert not d.poll(500)
    d.close()
    assert replay(port + 1, live[-1][0])[0] == [live[-1]]
    sub.close()
    mock.stop()


def kve_dump(payloads):
    out = subprocess.run([KVE_DUMP], input="".join(p.hex() + "\n" for p in payloads),
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_our_decoder_reads_what_the_mock_sends():
    for args in (["--kv-events-encoding", "positional"], ["--kv-events-encoding", "map"],
                 ["--kv-events-hash-bytes"]):
        payloads = run_script(*args)
        if "--kv-events-hash-bytes" in args:
            b = msgpack.unpackb(payloads[0], raw=False)
            assert isinstance(b[1][0][1][0], bytes) and len(b[1][0][1][0]) == 8, b
        assert any(e.get("extra_keys") for p in payloads for e in decode(p)[1])
        ours = kve_dump(payloads)
        assert len(ours) == len(payloads), (ours, args)
        for mine, payload in zip(ours, payloads):
            rank, evs = decode(payload)
            assert "error" not in mine, (mine, args)
            assert mine["rank"] == rank, (mine, rank)
            want = []
            for e in evs:
                w = {"kind": e["type"], "hashes": e["block_hashes"]}
                if e["type"] == "BlockStored":
                    w.update(parent=e["parent_block_hash"], block_size=e["block_size"],
                             tokens=e["token_ids"],
                             extra=int(any(k is not None for k in e.get("extra_keys") or [])))
                want.append(w)
            assert mine["events"] == want, (mine, want, args)


def test_bad_options_and_busy_ports():
    mock_bin = os.environ.get("MOCK_ENGINE", "build/admit-mock-engine")
    for args, want in ((["--kv-events-endpoint", "tcp://*"], "--kv-events-endpoint"),
                       (["--kv-events-endpoint", "tcp://*:70000"], "--kv-events-endpoint"),
                       (["--kv-events-endpoint", "udp://x:1"], "--kv-events-endpoint"),
                       (["--kv-events-encoding", "cbor"], "positional or map"),
                       (["--kv-events-config", "[1]"], "--kv-events-config"),
                       (["--kv-events-config", '{"publisher": "kafka"}'], "publisher"),
                       (["--kv-events-buffer-steps", "0"], "--kv-events-buffer-steps")):
        p = subprocess.run([mock_bin, "--listen", "127.0.0.1:0"] + args, capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 2 and want in p.stderr, (args, p.returncode, p.stderr)
    # A port another process holds: the mock says so and exits 1 (rank 1's port here).
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    try:
        p = subprocess.run([mock_bin, "--listen", "127.0.0.1:0", "--data-parallel-size", "2",
                            "--kv-events-endpoint", "tcp://127.0.0.1:%d" % (port - 1),
                            "--kv-events-replay-endpoint", "tcp://127.0.0.1:%d" % port],
                           capture_output=True, text=True, timeout=30)
    finally:
        held.close()
    assert p.returncode == 1 and "cannot bind KV events endpoint" in p.stderr, (p.returncode,
                                                                                 p.stderr)


if __name__ == "__main__":
    tap = Tap()
    tap.run("stored blocks are the prompt's /tokenize ids, chained, one sequence per batch",
            test_stored_blocks_are_the_prompts_tokens)
    tap.run("full blocks of generated tokens are stored too", test_generated_blocks_are_stored_too)
    tap.run("rank r publishes at port + r with its own sequence from 0",
            test_ranks_publish_at_port_plus_rank)
    tap.run("an eviction publishes BlockRemoved of exactly the evicted blocks",
            test_eviction_publishes_exactly_the_evicted_blocks)
    tap.run("positional and map encodings carry the same events",
            test_both_encodings_carry_the_same_events)
    tap.run("replay (--kv-events-config) returns the missed batches, then -1",
            test_replay_returns_missed_batches_then_end)
    tap.run("our decoder (kvevents) reads both encodings and bytes hashes as Python does",
            test_our_decoder_reads_what_the_mock_sends)
    tap.run("bad --kv-events-* values exit 2, a busy port exits 1", test_bad_options_and_busy_ports)
    tap.done()
