"""admitd reads its engine's KV events (issue 26, item 1): --engine-kv-events on a real
admit-mock-engine publishing over ZMQ (both encodings, two data-parallel ranks, evictions, a
restart), and on a raw ZMQ PUB of this test (Debian's python3-zmq) that sends a gap and
garbage. What admitd counts is read from its /metrics; requests go through admitd meanwhile,
each checking its own answer."""

import json
import shutil
import struct
import subprocess
import time

# First: test_mock_kv_events re-runs this script under Debian's /usr/bin/python3 when the
# python3 on PATH (pyenv's) has no zmq or msgpack.
from test_mock_kv_events import free_base, prompt_of

import msgpack
import zmq

from harness import ADMITD, Admitd, Mock, Tap, marker, own_request, request, wait_for

BLOCK = 16
CTX = zmq.Context.instance()


def kv(adm, family, rank, **labels):
    """One admitd_engine_kv_events_* sample of a rank (0 when absent)."""
    extra = "".join(',%s="%s"' % kv for kv in sorted(labels.items()))
    key = 'admitd_engine_kv_events_%s{dp_rank="%d"%s}' % (family, rank, extra)
    return adm.metrics().get(key, 0)


def ok_batches(adm, ranks):
    return sum(kv(adm, "batches_total", r, result="ok") for r in range(ranks))


def complete(adm, prompt):
    """One token through admitd, the answer the client's own: a prompt of n full blocks
    plus a few tokens stores n blocks and no generated one."""
    body = {"model": "mock-model", "prompt": prompt, "max_tokens": 1}
    status, _, data = own_request(adm.addr, "/v1/completions", body, marker())
    assert status == 200, (status, data)
    return json.loads(data)["usage"]


def full_blocks(mock, prompt):
    status, _, data = request(mock.addr, "POST", "/tokenize",
                              {"model": "mock-model", "prompt": prompt})
    assert status == 200, (status, data)
    return len(json.loads(data)["tokens"]) // BLOCK


def joined(adm, ranks, tag):
    """Prompts until every rank's SUB has a decoded batch (ZMQ's slow joiner: nothing comes
    until the subscription reaches the PUB); the mock's round robin feeds each in turn."""
    for i in range(200):
        complete(adm, prompt_of("%s%d" % (tag, i), 1))
        if all(kv(adm, "batches_total", r, result="ok") > 0 for r in range(ranks)):
            return
        time.sleep(0.05)
    raise AssertionError("no KV events reached admitd")


def stored(adm, ranks):
    return sum(kv(adm, "blocks_total", r, op="stored") for r in range(ranks))


def start(ranks, *args, encoding=None):
    port = free_base(ranks)
    # As vLLM, the mock's PUB binds a wildcard and connects to a host; admitd does the
    # opposite. The map encoding runs the other way round: admitd binds, the engine connects.
    engine_ep, admitd_ep = "tcp://*:%d" % port, "tcp://127.0.0.1:%d" % port
    if encoding == "map":
        engine_ep, admitd_ep = admitd_ep, engine_ep
    argv = ["--speedup-ratio", "0", "--block-size", str(BLOCK),
            "--kv-events-endpoint", engine_ep]
    if encoding:
        argv += ["--kv-events-encoding", encoding]
    if ranks > 1:
        argv += ["--data-parallel-size", str(ranks)]
    mock = Mock(*(argv + list(args)))
    # No --data-parallel-size for admitd: it reads the ranks the engine's metrics report.
    adm = Admitd(mock.url, "--engine-kv-events", admitd_ep, "--engine-metrics-interval-ms", "50")
    return mock, adm, port


def stored_and_removed(encoding):
    ranks, gpu_blocks = 2, 8
    mock, adm, _ = start(ranks, "--num-gpu-blocks", str(gpu_blocks), encoding=encoding)
    try:
        joined(adm, ranks, "w" + encoding[0])
        before = stored(adm, ranks)
        want = 0
        for i in range(8):
            p = prompt_of("%s%d" % (encoding[0], i), 3)
            want += full_blocks(mock, p)
            complete(adm, p)
        wait_for(lambda: stored(adm, ranks) - before == want,
                 what="%d stored blocks counted" % want)
        time.sleep(0.3)
        assert stored(adm, ranks) - before == want, (stored(adm, ranks), before, want)
        for r in range(ranks):
            s = kv(adm, "blocks_total", r, op="stored")
            rm = kv(adm, "blocks_total", r, op="removed")
            # 8 prompts of 3 blocks over 2 ranks of 8 blocks: each rank evicts, and never
            # holds more than it has.
            assert rm > 0 and 0 <= s - rm <= gpu_blocks, (r, s, rm)
            assert kv(adm, "batches_total", r, result="malformed") == 0, r
            assert kv(adm, "gaps_total", r) == 0 and kv(adm, "restarts_total", r) == 0, r
            assert kv(adm, "last_seq", r) >= 0, r
        # The new families pass promtool's lint, as admitd's others do (test_interop).
        if shutil.which("promtool"):
            _, _, text = request(adm.maddr, "GET", "/metrics")
            assert b"admitd_engine_kv_events_gaps_total" in text
            p = subprocess.run(["promtool", "check", "metrics"], input=text,
                               capture_output=True, timeout=60)
            assert p.returncode == 0, (p.stdout + p.stderr).decode()
    finally:
        adm.stop()
        mock.stop()


def test_positional():
    stored_and_removed("positional")


def test_map():
    stored_and_removed("map")


def test_engine_restart_counted():
    mock, adm, port = start(1)
    try:
        joined(adm, 1, "warmr")
        for i in range(6):
            complete(adm, prompt_of("before%d" % i, 1))
        wait_for(lambda: kv(adm, "last_seq", 0) >= 6, what="seq 6")
        mock.stop()
        # A new engine on the same KV port: ZMQ reconnects by itself, the sequence starts
        # again from 0, below where it was.
        mock2 = Mock("--speedup-ratio", "0", "--block-size", str(BLOCK),
                     "--kv-events-endpoint", "tcp://*:%d" % port)
        try:
            for i in range(100):
                body = {"model": "mock-model", "prompt": prompt_of("after%d" % i, 1),
                        "max_tokens": 1}
                assert request(mock2.addr, "POST", "/v1/completions", body)[0] == 200
                if kv(adm, "restarts_total", 0) >= 1:
                    break
                time.sleep(0.05)
            assert kv(adm, "restarts_total", 0) == 1, adm.metrics()
            assert kv(adm, "gaps_total", 0) == 0
            assert kv(adm, "last_seq", 0) < 6
        finally:
            mock2.stop()
    finally:
        adm.stop()
        mock.stop()


def batch(*events):
    return msgpack.packb([time.time(), list(events), 0])


STORE = ["BlockStored", [11, 12], None, list(range(2 * BLOCK)), BLOCK, None, "GPU"]


def test_gap_and_garbage_from_a_raw_publisher():
    port = free_base(1)
    pub = CTX.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind("tcp://127.0.0.1:%d" % port)
    mock = Mock("--speedup-ratio", "0")
    adm = Admitd(mock.url, "--engine-kv-events", "tcp://127.0.0.1:%d" % port,
                 "--engine-kv-events-topic", "kv")
    try:
        def send(seq, payload, topic=b"kv"):
            pub.send_multipart([topic, struct.pack(">q", seq), payload])

        seq = 0
        for _ in range(200):  # the slow joiner: until one batch is in
            send(seq, batch(STORE))
            seq += 1
            time.sleep(0.05)
            if kv(adm, "batches_total", 0, result="ok") > 0:
                break
        wait_for(lambda: kv(adm, "last_seq", 0) == seq - 1, what="the last batch read")
        ok0 = kv(adm, "batches_total", 0, result="ok")
        send(seq, batch(["BlockRemoved", [11], "GPU"], ["AllBlocksCleared"]))
        send(seq + 4, batch(STORE))  # three batches lost
        send(seq + 5, batch(["BlockStored", [13], None, list(range(BLOCK)), BLOCK, None,
                             "CPU"]))
        send(seq + 6, b"\xc1")  # never msgpack
        send(seq + 7, msgpack.packb({"ts": 1.0, "events": 5}))
        send(seq + 8, b"\x91" * 64)  # nested deeper than 32
        send(seq + 9, batch(STORE)[:-3])  # truncated
        pub.send_multipart([b"kv", b"\0\0\0\1", batch(STORE)])  # a 4-byte sequence
        pub.send_multipart([b"kv", struct.pack(">q", seq + 10)])  # no payload
        send(-1, batch(STORE))  # the replay socket's end marker, never a live batch
        send(seq + 11, batch(STORE), topic=b"other")  # not subscribed
        send(seq + 12, batch(STORE))
        wait_for(lambda: kv(adm, "last_seq", 0) == seq + 12, what="the batch after the junk")
        assert kv(adm, "batches_total", 0, result="ok") == ok0 + 4
        assert kv(adm, "batches_total", 0, result="malformed") == 4
        assert kv(adm, "batches_total", 0, result="bad_frames") == 3
        # seq+1 .. seq+3 missed; the junk's sequences did not count; seq+12 after seq+5 is
        # a second gap.
        assert kv(adm, "gaps_total", 0) == 2 and kv(adm, "missed_batches_total", 0) == 3 + 6
        assert kv(adm, "restarts_total", 0) == 0
        # Relayed to routers as cleared (no replay socket): each gap, and AllBlocksCleared.
        relay = adm.metrics()
        assert relay['admitd_kv_relay_clears_total{dp_rank="0",reason="gap"}'] == 2, relay
        assert relay['admitd_kv_relay_clears_total{dp_rank="0",reason="engine"}'] == 1, relay
        assert relay['admitd_kv_relay_clears_total{dp_rank="0",reason="restart"}'] == 0, relay
        assert kv(adm, "total", 0, type="removed") == 1
        assert kv(adm, "total", 0, type="cleared") == 1
        assert kv(adm, "total", 0, type="other_medium") == 1
        assert kv(adm, "blocks_total", 0, op="other_medium") == 1
        assert kv(adm, "blocks_total", 0, op="removed") == 1
        assert kv(adm, "blocks_total", 0, op="stored") == 2 * (ok0 + 2)
        # A batch larger than the decoder's first arrays (4,096 ids): they grow, it is read.
        big = ["BlockStored", list(range(100, 400)), 12, list(range(300 * BLOCK)), BLOCK]
        send(seq + 13, batch(big))
        wait_for(lambda: kv(adm, "last_seq", 0) == seq + 13, what="the large batch")
        assert kv(adm, "blocks_total", 0, op="stored") == 2 * (ok0 + 2) + 300
        assert kv(adm, "batches_total", 0, result="malformed") == 4
        # vLLM's newer encoding from the same publisher: the batch a map, its events maps by
        # "type", a bytes hash (the digest's last 8 bytes are the int form's) with a parent
        stored = kv(adm, "blocks_total", 0, op="stored")
        mapped = msgpack.packb({"ts": time.time(), "data_parallel_rank": 0, "events": [
            {"type": "BlockStored", "block_hashes": [b"\x07" * 24 + struct.pack(">Q", 21)],
             "parent_block_hash": 12, "token_ids": list(range(BLOCK)), "block_size": BLOCK,
             "medium": "GPU", "lora_name": None, "unknown_later_field": 1},
            {"type": "BlockRemoved", "block_hashes": [21], "medium": "GPU"}]})
        send(seq + 14, mapped)
        wait_for(lambda: kv(adm, "last_seq", 0) == seq + 14, what="the map-encoded batch")
        assert kv(adm, "blocks_total", 0, op="stored") == stored + 1
        assert kv(adm, "total", 0, type="removed") == 2
        assert kv(adm, "batches_total", 0, result="malformed") == 4
        complete(adm, "still serving")
        assert adm.proc.alive()
    finally:
        adm.stop()
        mock.stop()
        pub.close()


def bind_pub(port):
    """A raw PUB on port, bound again as soon as the last one's close lets go of it."""
    for _ in range(100):
        pub = CTX.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        try:
            pub.bind("tcp://127.0.0.1:%d" % port)
            return pub
        except zmq.ZMQError:
            pub.close()
            time.sleep(0.05)
    raise AssertionError("port %d not free again" % port)


def test_new_connection_is_a_restart():
    """An engine that restarted and got past its old sequence before admitd reads it: only the
    new connection tells. It is counted as a restart (not a gap) and relayed as cleared."""
    port = free_base(1)
    pub = bind_pub(port)
    mock = Mock("--speedup-ratio", "0")
    adm = Admitd(mock.url, "--engine-kv-events", "tcp://127.0.0.1:%d" % port)
    try:
        def send(p, seq):
            p.send_multipart([b"", struct.pack(">q", seq), batch(STORE)])

        seq = 0
        for _ in range(200):
            send(pub, seq)
            seq += 1
            time.sleep(0.05)
            if kv(adm, "batches_total", 0, result="ok") > 0:
                break
        wait_for(lambda: kv(adm, "last_seq", 0) == seq - 1, what="the last batch read")
        pub.close()
        pub = bind_pub(port)
        ahead = seq + 100
        for i in range(200):  # until admitd is connected again and reads one
            send(pub, ahead + i)
            time.sleep(0.05)
            if kv(adm, "last_seq", 0) >= ahead:
                break
        assert kv(adm, "last_seq", 0) >= ahead, adm.metrics()
        assert kv(adm, "restarts_total", 0) == 1 and kv(adm, "gaps_total", 0) == 0, adm.metrics()
        m = adm.metrics()
        assert m['admitd_kv_relay_clears_total{dp_rank="0",reason="restart"}'] == 1, m
        assert m['admitd_kv_relay_clears_total{dp_rank="0",reason="gap"}'] == 0, m
    finally:
        adm.stop()
        mock.stop()
        pub.close()


def test_sequence_back_is_a_restart():
    """The sequence goes back on the same connection (an engine restarted behind something that
    kept the connection): a restart, not a gap."""
    port = free_base(1)
    pub = CTX.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind("tcp://127.0.0.1:%d" % port)
    mock = Mock("--speedup-ratio", "0")
    adm = Admitd(mock.url, "--engine-kv-events", "tcp://127.0.0.1:%d" % port)
    try:
        seq = 10
        for _ in range(200):  # the slow joiner: until one batch is in
            pub.send_multipart([b"", struct.pack(">q", seq), batch(STORE)])
            seq += 1
            time.sleep(0.05)
            if kv(adm, "batches_total", 0, result="ok") > 0:
                break
        wait_for(lambda: kv(adm, "last_seq", 0) == seq - 1, what="the last batch read")
        pub.send_multipart([b"", struct.pack(">q", 2), batch(STORE)])
        wait_for(lambda: kv(adm, "last_seq", 0) == 2, what="the batch of the lower sequence")
        assert kv(adm, "restarts_total", 0) == 1
        assert kv(adm, "gaps_total", 0) == 0
    finally:
        adm.stop()
        mock.stop()
        pub.close()


def test_bad_endpoint_refused():
    p = subprocess.run([ADMITD, "--engine-kv-events", "udp://1.2.3.4:5", "--check-config"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--engine-kv-events" in p.stderr, (p.returncode, p.stderr)


if __name__ == "__main__":
    tap = Tap()
    tap.run("positional: stored blocks are the prompts' full blocks, evictions counted",
            test_positional)
    tap.run("map encoding: the same counts", test_map)
    tap.run("an engine restart (sequence back) is counted", test_engine_restart_counted)
    tap.run("a raw publisher's gap and junk are counted, admitd keeps serving",
            test_gap_and_garbage_from_a_raw_publisher)
    tap.run("a new connection is an engine restart, whatever its sequence",
            test_new_connection_is_a_restart)
    tap.run("a sequence that goes back on one connection is a restart",
            test_sequence_back_is_a_restart)
    tap.run("a bad --engine-kv-events exits 2", test_bad_endpoint_refused)
    tap.done()
