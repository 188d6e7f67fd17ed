"""admitd fills a gap in its engine's KV events from the engine's replay socket (issue 26,
item 2: --engine-kv-events-replay). A forwarder of this test sits between admit-mock-engine's
PUB and admitd and drops batches on demand; admitd asks the mock's replay ROUTER for them
through a DEALER. Filled: every key stays, nothing is cleared. Not filled (the mock keeps too
few batches): `cleared`, then the live stream. Against a raw publisher and a raw ROUTER of
this test: a replay that never answers times out (cleared, then the batches held meanwhile in
order), and replies in vLLM's older two-frame form fill the gap."""

import struct
import threading
import time

# First: re-runs under Debian's /usr/bin/python3 when needed (python3-zmq, python3-msgpack).
from test_mock_kv_events import free_base, prompt_of

import msgpack
import zmq

from harness import Admitd, Mock, Tap, wait_for
from test_admitd_kv_relay import BLOCK, MODEL, KvReader, complete, keys_of, relay, router_keys

CTX = zmq.Context.instance()


class Forwarder:
    """SUB on the engine's PUB, PUB for admitd: passes every message on, but drops the next
    `drop` ones when told to."""

    def __init__(self, engine_port):
        self.sub = CTX.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect("tcp://127.0.0.1:%d" % engine_port)
        self.pub = CTX.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.lock = threading.Lock()
        self.to_drop, self.dropped, self.passed = 0, 0, 0
        self.running = True
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while self.running:
            if not self.sub.poll(50):
                continue
            frames = self.sub.recv_multipart()
            with self.lock:
                if self.to_drop > 0:
                    self.to_drop -= 1
                    self.dropped += 1
                    continue
                self.passed += 1
            self.pub.send_multipart(frames)

    def drop(self, n):
        with self.lock:
            self.to_drop = n

    def close(self):
        self.running = False
        self.t.join(5)
        self.sub.close()
        self.pub.close()


def start_forwarded(*mock_args):
    port = free_base(2)  # the events at port, the replay socket at port + 1
    mock = Mock("--speedup-ratio", "0", "--block-size", str(BLOCK),
                "--kv-events-endpoint", "tcp://*:%d" % port,
                "--kv-events-replay-endpoint", "tcp://*:%d" % (port + 1), *mock_args)
    fwd = Forwarder(port)
    adm = Admitd(mock.url, "--engine-kv-events", "tcp://127.0.0.1:%d" % fwd.port,
                 "--engine-kv-events-replay", "tcp://127.0.0.1:%d" % (port + 1),
                 "--heartbeat-ms", "100")
    return mock, fwd, adm


def warm(adm, reader, tag):
    wait_for(lambda: reader.load > 0, 15, "a load message")
    for i in range(300):
        complete(adm, prompt_of("%s%d" % (tag, i), 1))
        if reader.held():
            return
        time.sleep(0.05)
    raise AssertionError("no stored block relayed")


def test_gap_filled_from_the_mock():
    mock, fwd, adm = start_forwarded()
    reader = KvReader(adm.publish)
    try:
        warm(adm, reader, "wf")
        before = reader.held()
        fwd.drop(2)
        prompts = [prompt_of("fill%d" % i, 2) for i in range(4)]
        for p in prompts[:3]:
            complete(adm, p)
        wait_for(lambda: fwd.dropped == 2, 10, "two batches dropped")
        complete(adm, prompts[3])  # the live batch after the gap
        want = set(k for p in prompts for k in keys_of(mock, p))
        # (a `cleared` ends the wait too: the gap was not filled, and the check fails at once)
        wait_for(lambda: want <= reader.held() or reader.messages("cleared"), 15,
                 "every prompt's keys, the dropped ones too")
        assert reader.messages("cleared") == []
        assert before <= reader.held(), "keys from before the gap were lost"
        assert relay(adm, "clears_total", reason="gap") == 0
        m = adm.metrics()
        assert m['admitd_engine_kv_events_replays_total{dp_rank="0",result="filled"}'] == 1, m
        assert m['admitd_engine_kv_events_replayed_batches_total{dp_rank="0"}'] >= 2, m
        assert m['admitd_engine_kv_events_gaps_total{dp_rank="0"}'] == 1
        assert reader.errors == [], reader.errors
    finally:
        reader.close()
        adm.stop()
        fwd.close()
        mock.stop()


def test_gap_not_covered_is_cleared():
    # The mock keeps one batch: a replay from the gap's start cannot cover it.
    mock, fwd, adm = start_forwarded("--kv-events-buffer-steps", "1")
    reader = KvReader(adm.publish)
    try:
        warm(adm, reader, "wn")
        before = set(reader.held())
        fwd.drop(3)
        for i in range(3):
            complete(adm, prompt_of("lost%d" % i, 2))
        wait_for(lambda: fwd.dropped == 3, 10, "three batches dropped")
        last = prompt_of("after", 2)
        complete(adm, last)
        # the replay's end (any result) is when the clear is due: no waiting out a timeout
        wait_for(lambda: relay(adm, "clears_total", reason="gap") == 1 or any(
            adm.metrics().get('admitd_engine_kv_events_replays_total{dp_rank="0",result="%s"}'
                              % r) for r in ("filled", "unfilled")), 10, "the replay's end")
        assert relay(adm, "clears_total", reason="gap") == 1
        wait_for(lambda: set(keys_of(mock, last)) <= reader.held(), 10, "the live batch's keys")
        m = adm.metrics()
        assert m['admitd_engine_kv_events_replays_total{dp_rank="0",result="unfilled"}'] == 1, m
        assert len(reader.messages("cleared")) == 1
        # Nothing from before the clear is held: the warm-up's keys are gone. (A lost prompt's
        # blocks may be held too: the mock batches a step's stores, and on a busy machine the
        # last lost prompt's can share the batch after the gap.)
        held, lost = reader.held(), set()
        for i in range(3):
            lost |= set(keys_of(mock, prompt_of("lost%d" % i, 2)))
        assert before and held.isdisjoint(before), (held, before)
        assert set(keys_of(mock, last)) <= held <= set(keys_of(mock, last)) | lost, (held, lost)
        assert reader.errors == [], reader.errors
    finally:
        reader.close()
        adm.stop()
        fwd.close()
        mock.stop()


class RawEngine:
    """A raw PUB and a raw replay ROUTER: batches of one root store each (two blocks of
    BLOCK ids from `base`), kept for replay; the ROUTER answers in the two-frame form
    [seq, payload] (older vLLM) when `answer` is set, else never."""

    def __init__(self):
        self.pub = CTX.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.router = CTX.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.rport = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.kept, self.answer, self.asked = {}, False, []
        self.running = True
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    @staticmethod
    def ids(seq):
        return list(range(1000 * seq, 1000 * seq + 2 * BLOCK))

    def payload(self, seq):
        store = ["BlockStored", [seq * 10 + 1, seq * 10 + 2], None, self.ids(seq), BLOCK, None,
                 "GPU"]
        return msgpack.packb([time.time(), [store], 0])

    def make(self, seq, live=True):
        self.kept[seq] = self.payload(seq)
        if live:
            self.pub.send_multipart([b"kv", struct.pack(">q", seq), self.kept[seq]])

    def _serve(self):
        while self.running:
            if not self.router.poll(50):
                continue
            frames = self.router.recv_multipart()
            if len(frames) != 3:
                continue
            start = struct.unpack(">q", frames[2])[0]
            self.asked.append(start)
            if not self.answer:
                continue
            for s in sorted(self.kept):
                if s >= start:
                    self.router.send_multipart([frames[0], b"", struct.pack(">q", s),
                                                self.kept[s]])
            self.router.send_multipart([frames[0], b"", b"\xff" * 8, b""])

    def close(self):
        self.running = False
        self.t.join(5)
        self.pub.close()
        self.router.close()


def test_timeout_then_two_frame_replies():
    eng = RawEngine()
    mock = Mock("--speedup-ratio", "0")  # the model list only
    adm = Admitd(mock.url, "--engine-kv-events", "tcp://127.0.0.1:%d" % eng.port,
                 "--engine-kv-events-topic", "kv",
                 "--engine-kv-events-replay", "tcp://127.0.0.1:%d" % eng.rport,
                 "--heartbeat-ms", "100")
    reader = KvReader(adm.publish)
    try:
        wait_for(lambda: reader.load > 0, 15, "a load message")
        seq = 0
        for _ in range(300):  # ZMQ's slow joiner, and the model list
            eng.make(seq)
            seq += 1
            time.sleep(0.05)
            if reader.held():
                break
        wait_for(lambda: adm.metrics()['admitd_engine_kv_events_last_seq{dp_rank="0"}']
                 == seq - 1, 10, "the last warm-up batch")
        before = reader.held()
        assert set(router_keys(RawEngine.ids(seq - 1))) <= before
        # A gap the ROUTER will not answer: the batch after it, and one more, are held for
        # about 2 s, then relayed after `cleared`.
        eng.make(seq, live=False)
        t0 = time.monotonic()
        eng.make(seq + 1)
        eng.make(seq + 2)
        wait_for(lambda: reader.messages("cleared"), 10, "cleared after the timeout")
        waited = time.monotonic() - t0
        assert 1.5 <= waited <= 6, waited
        assert eng.asked == [seq], (eng.asked, seq)
        want = set(router_keys(RawEngine.ids(seq + 1)) + router_keys(RawEngine.ids(seq + 2)))
        wait_for(lambda: reader.held() == want, 10, "the held batches' keys, and only them")
        m = adm.metrics()
        assert m['admitd_engine_kv_events_replays_total{dp_rank="0",result="timeout"}'] == 1
        assert relay(adm, "clears_total", reason="gap") == 1
        # Now the ROUTER answers, in the two-frame form: a gap of two batches is filled.
        eng.answer = True
        seq += 3
        eng.make(seq, live=False)
        eng.make(seq + 1, live=False)
        eng.make(seq + 2)
        want |= set(k for s in (seq, seq + 1, seq + 2) for k in router_keys(RawEngine.ids(s)))
        wait_for(lambda: reader.held() == want, 10, "the replayed batches' keys")
        m = adm.metrics()
        assert m['admitd_engine_kv_events_replays_total{dp_rank="0",result="filled"}'] == 1, m
        assert m['admitd_engine_kv_events_replayed_batches_total{dp_rank="0"}'] == 2, m
        assert relay(adm, "clears_total", reason="gap") == 1
        assert eng.asked[-1] == seq, (eng.asked, seq)
        # The engine restarts while a replay waits: what was held is dropped, the rank
        # cleared, and the new engine's batch relayed.
        eng.answer = False
        eng.make(seq + 4)  # seq + 3 lost: a replay that will not be answered
        wait_for(lambda: len(eng.asked) == 3, 10, "the third replay asked")
        eng.make(2)  # the new engine's third batch
        wait_for(lambda: relay(adm, "clears_total", reason="restart") == 1, 10,
                 "a clear for the restart")
        wait_for(lambda: reader.held() == set(router_keys(RawEngine.ids(2))), 10,
                 "only the new engine's batch")
        m = adm.metrics()
        assert m['admitd_engine_kv_events_replays_total{dp_rank="0",result="restart"}'] == 1, m
        assert m['admitd_engine_kv_events_restarts_total{dp_rank="0"}'] == 1, m
        assert relay(adm, "clears_total", reason="gap") == 1
        assert reader.errors == [], reader.errors
    finally:
        reader.close()
        adm.stop()
        mock.stop()
        eng.close()


if __name__ == "__main__":
    tap = Tap()
    tap.run("a gap filled from the mock's replay socket: nothing lost, nothing cleared",
            test_gap_filled_from_the_mock)
    tap.run("a gap the replay no longer covers: cleared, then the live stream",
            test_gap_not_covered_is_cleared)
    tap.run("a replay that times out: cleared, then the held batches; two-frame replies "
            "fill; an engine restart during a replay clears",
            test_timeout_then_two_frame_replies)
    tap.done()
