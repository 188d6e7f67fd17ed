"""Load publishing end to end: admitd's publisher (its own PUB, and nng's with
--publisher=nng), read by admit-top, nngcat and /load."""

import json
import os
import socket
import subprocess
import threading
import time

from harness import (ADMITD, Admitd, Mock, Proc, RawClient, Tap, chat_body, close_own, marker,
                     request, scrape, wait_for)

TOP = os.environ.get("ADMIT_TOP", "build/admit-top")


class Subscriber(Proc):
    """admit-top --json on a publisher URL; collects (arrival time, message). A harness Proc:
    killed with its group when a check fails, like every other process of the test."""

    def __init__(self, url):
        self.msgs = []
        self.lock = threading.Lock()
        super().__init__([TOP, "--json", url], name="admit-top")

    def _drain_stdout(self):
        # Instead of Proc's read at exit: one JSON line per message, as it arrives.
        for line in self.p.stdout:
            m = json.loads(line)
            with self.lock:
                self.msgs.append((time.monotonic(), m))
        self.stdout = b""

    def snapshot(self):
        with self.lock:
            return list(self.msgs)

    def wait(self, pred, what, timeout=15, since=None):
        """The first message for which pred holds, after any seen so far (or after the first
        `since` messages: a count taken before the change that the message should show)."""
        start = len(self.snapshot()) if since is None else since

        def find():
            for t, m in self.snapshot()[start:]:
                if pred(m):
                    return (t, m)
            return None

        return wait_for(find, timeout, what)

    def latest(self, rank=0):
        for _, m in reversed(self.snapshot()):
            if m["dp_rank"] == rank:
                return m
        return None

    def close(self):
        """SIGTERM; admit-top must exit 0 (under ASan: without leaks)."""
        self.stop_clean()


def subscribed(sub, ad):
    """Waits until sub receives messages: nng gives no sign that a subscription is up, so
    changes are made (one short request each) until one of them arrives, then until the idle
    state after them does. With a long heartbeat nothing else would be sent."""
    def probe():
        if not sub.snapshot():
            assert request(ad.addr, "POST", "/v1/chat/completions",
                           chat_body(max_tokens=1))[0] == 200
        return sub.snapshot()

    wait_for(probe, 30, "a first message")
    wait_for(lambda: (lambda m: m is not None and m["engine_requests"] == 0 and
                      m["queued_requests"] == 0)(sub.latest()), 15, "the idle state")


def check_seq(sub):
    seqs = [m["seq"] for _, m in sub.snapshot()]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs


def test_messages_follow_the_gate():
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--request-queue-limit", "2",
                "--heartbeat-ms", "60000")
    sub = Subscriber(ad.publish)
    subscribed(sub, ad)
    t0 = time.monotonic()
    holders = ad.fill(4, queued=2, max_tokens=200)
    t, m = sub.wait(lambda m: m["engine_requests"] == 2 and m["queued_requests"] == 2,
                    "a message showing 2 in slots and 2 queued")
    # Heartbeats are a minute apart, so this message was sent because the load changed.
    print("# change to message: %.1f ms (includes the requests' own arrival)" %
          ((t - t0) * 1000))
    metrics = ad.metrics()
    assert metrics["dynamo_engine_request"] == m["engine_requests"], (metrics, m)
    assert metrics["dynamo_request_queue"] == m["queued_requests"], (metrics, m)
    assert m["engine_request_limit"] == 2 and m["request_queue_limit"] == 2, m
    assert m["v"] == 1 and m["state"] == "serving" and m["heartbeat_ms"] == 60000, m
    assert m["active_decode_blocks"] > 0, m
    since = len(sub.snapshot())
    close_own(holders)
    # A request's booking is released in the same step as its slot or place (admission's
    # on_finish): the message that shows no request must show nothing booked either.
    m = sub.wait(lambda m: m["engine_requests"] == 0 and m["queued_requests"] == 0,
                 "a message showing the worker idle again", since=since)[1]
    assert m["active_decode_blocks"] == 0 and m["active_prefill_tokens"] == 0, m
    check_seq(sub)
    sub.close()
    ad.stop()
    mock.stop()


def test_kv_blocks_follow_the_engine():
    # Token ids count exactly on both sides, and 390 of them fill 25 blocks of 16 with room
    # for 10 tokens more: with a token every 2 s the engine's KV use and admitd's booking
    # stay still for 20 s, long enough to compare them. The two requests send the same
    # prompt: the engine (as vLLM) holds its 24 full blocks once, for both, and each its own
    # partial last block; admitd cannot see the sharing and books each request's 25 blocks.
    prompt, block = 390, 16
    mock = Mock("--token-interval-ms", "2000", "--num-gpu-blocks", "1000",
                "--block-size", str(block))
    ad = Admitd(mock.url, "--engine-request-limit", "4", "--heartbeat-ms", "100",
                "--engine-metrics-interval-ms", "50")
    sub = Subscriber(ad.publish)
    clients = []
    for _ in range(2):
        c = RawClient(ad.addr, marker=marker())
        c.post("/v1/completions", {"model": "m", "prompt": list(range(1, prompt + 1)),
                                   "max_tokens": 100, "stream": True})
        clients.append(c)
    key = '{engine="0",model_name="mock-model"}'
    em = wait_for(lambda: (lambda em: em if em["vllm:num_requests_running" + key] == 2 else None)(
        mock.metrics()), 15, "both requests running in the engine")
    engine_blocks = round(em["vllm:kv_cache_usage_perc" + key] * 1000)
    assert engine_blocks == prompt // block + 2, (engine_blocks, em)
    # The next message that has read the engine since: it says what the engine said.
    t, m = sub.wait(lambda m: m["kv_used_blocks"] == engine_blocks, "kv_used_blocks %d" %
                    engine_blocks)
    assert m["kv_total_blocks"] == 1000 and m["engine_requests"] == 2, m
    assert m["kv_block_size"] == block, m  # the block size those blocks are counted in
    # admitd's own booking of the same two requests: each one's whole context, exactly
    # (before the mock counted a shared block once, both numbers were 50).
    assert m["active_decode_blocks"] == 2 * -(-prompt // block), m
    close_own(clients)
    sub.wait(lambda m: m["kv_used_blocks"] == 0 and m["active_decode_blocks"] == 0, "KV back to 0")
    sub.close()
    ad.stop()
    mock.stop()


def test_prefill_tokens_booked_until_first_byte():
    # Prefill of 500 tokens at 1/100 speed takes about 2.4 s: long enough to see it booked;
    # then 30 tokens 200 ms apart, long enough to see it unbooked while the stream runs.
    mock = Mock("--speedup-ratio", "0.01", "--max-num-seqs", "8", "--token-interval-ms", "200")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--heartbeat-ms", "100")
    sub = Subscriber(ad.publish)
    sub.wait(lambda m: True, "a first heartbeat")  # subscribed before the request
    c = RawClient(ad.addr)
    c.post("/v1/completions", {"model": "m", "prompt": list(range(1, 501)), "max_tokens": 30,
                               "stream": True})
    sub.wait(lambda m: m["active_prefill_tokens"] == 500, "500 exact prefill tokens booked")
    firsts = []

    def on_data(piece, t):
        if not firsts:
            # The first output byte ends prefill: the prompt leaves active_prefill_tokens at
            # once, while the request still runs (and still holds its decode blocks).
            firsts.append(t)
            # admitd books the first byte before it passes it on: /load says so already.
            r = json.loads(request(ad.maddr, "GET", "/load")[2])["ranks"][0]
            assert r["active_prefill_tokens"] == 0 and r["active_decode_blocks"] > 0, r
            sub.wait(lambda m: m["active_prefill_tokens"] == 0 and m["engine_requests"] == 1
                     and m["active_decode_blocks"] > 0, "prefill ended by the first byte")

    status, _, body, complete = c.response(on_data)
    assert status == 200 and complete and firsts
    sub.wait(lambda m: m["active_prefill_tokens"] == 0 and m["engine_requests"] == 0,
             "prefill released")
    c.close()
    sub.close()
    ad.stop()
    mock.stop()


def test_kv_block_size_is_the_engines_else_the_flag():
    # The engine reports 32 (vllm:cache_config_info{block_size}); --block-size 8 is only the
    # fallback, and admitd's default is 16: a message saying 32 says the engine's.
    mock = Mock("--speedup-ratio", "0", "--block-size", "32")
    ad = Admitd(mock.url, "--heartbeat-ms", "100", "--engine-metrics-interval-ms", "50",
                "--block-size", "8")
    sub = Subscriber(ad.publish)
    m = sub.wait(lambda m: m["kv_total_blocks"] == 16384, "a message after a scrape")[1]
    assert m["kv_block_size"] == 32, m
    # GET /load shows the same objects.
    load = json.loads(request(ad.maddr, "GET", "/load")[2])
    assert load["ranks"][0]["kv_block_size"] == 32, load
    sub.close()
    ad.stop()
    mock.stop()
    # The engine's metrics are not available (the path answers 404): --block-size, in every
    # message, and the engine's own fields null.
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--heartbeat-ms", "100", "--engine-metrics-interval-ms", "50",
                "--engine-metrics-url", mock.url + "/no-metrics-here", "--block-size", "8")
    sub = Subscriber(ad.publish)
    wait_for(lambda: ad.metrics()['admitd_engine_scrapes_total{result="failed"}'] >= 2, 15,
             "failed scrapes")
    sub.wait(lambda m: True, "a message after failed scrapes")
    assert ad.metrics()['admitd_engine_scrapes_total{result="ok"}'] == 0
    msgs = [m for _, m in sub.snapshot()]
    assert msgs and all(m["kv_block_size"] == 8 and m["kv_total_blocks"] is None
                        for m in msgs), msgs
    load = json.loads(request(ad.maddr, "GET", "/load")[2])
    assert load["ranks"][0]["kv_block_size"] == 8, load
    sub.close()
    ad.stop()
    mock.stop()


def test_heartbeats_when_idle():
    heartbeat_ms = 100
    wall_before = time.time()
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--heartbeat-ms", str(heartbeat_ms))
    sub = Subscriber(ad.publish)
    wait_for(lambda: len(sub.snapshot()) >= 6, 15, "six heartbeats")
    msgs = [m for _, m in sub.snapshot()]
    wall_after = time.time()
    check_seq(sub)
    # The last four say the same: nothing changed, so they are heartbeats.
    strip = [{k: v for k, v in m.items() if k not in ("seq", "ts_ms")} for m in msgs[-4:]]
    assert all(s == strip[0] for s in strip), strip
    assert all(m["heartbeat_ms"] == heartbeat_ms for m in msgs), msgs
    # Stamped in Unix milliseconds when sent (1 ms of rounding either way).
    assert all(wall_before * 1000 - 1 <= m["ts_ms"] <= wall_after * 1000 + 1 for m in msgs), (
        wall_before, wall_after, msgs)
    # Sent every heartbeat_ms, not at some other period: their mean gap is far below 5
    # periods (libevent keeps the timer on its grid, so one late heartbeat does not shift the
    # next ones).
    mean_gap = (msgs[-1]["ts_ms"] - msgs[-4]["ts_ms"]) / 3.0
    assert mean_gap < 5 * heartbeat_ms, [m["ts_ms"] for m in msgs]
    sub.close()
    ad.stop()
    mock.stop()


def test_engine_killed_turns_engine_fields_null():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--heartbeat-ms", "100",
                "--engine-metrics-interval-ms", "50")
    sub = Subscriber(ad.publish)
    sub.wait(lambda m: m["kv_total_blocks"] == 16384, "engine fields known")
    mock.proc.kill()
    m = sub.wait(lambda m: m["kv_total_blocks"] is None, "engine fields null")[1]
    assert m["kv_used_blocks"] is None and m["max_num_batched_tokens"] is None, m
    # The block size is admitd's booking's, not an engine reading: it stays known.
    assert m["kv_block_size"] == 16, m
    # Admission data stays known, and the proxy goes on serving.
    assert m["engine_request_limit"] == 2 and m["engine_requests"] == 0, m
    status, _, _ = request(ad.addr, "POST", "/v1/chat/completions", chat_body())
    assert status == 503
    load = json.loads(request(ad.maddr, "GET", "/load")[2])
    assert load["ranks"][0]["kv_total_blocks"] is None, load
    assert ad.metrics()['admitd_engine_scrapes_total{result="failed"}'] > 0
    sub.close()
    ad.stop()


def test_nngcat_and_admit_top_read_it():
    mock = Mock("--speedup-ratio", "0", "--data-parallel-size", "2")
    ad = Admitd(mock.url, "--engine-request-limit", "3", "--heartbeat-ms", "100",
                "--worker-id", "gpu-test-1")
    p = subprocess.run(["nngcat", "--sub", "--dial=" + ad.publish, "--subscribe=kv_metrics",
                        "--quoted", "--count=4"], capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.decode().strip().splitlines()
    assert len(lines) == 4, lines
    ranks = set()
    for line in lines:
        text = json.loads(line)  # --quoted prints a JSON string literal per message
        assert text.startswith("kv_metrics {"), text
        msg = json.loads(text[len("kv_metrics "):])
        assert msg["v"] == 1 and msg["worker_id"] == "gpu-test-1", msg
        ranks.add(msg["dp_rank"])
    assert ranks == {0, 1}, ranks
    p = subprocess.run([TOP, "--iterations=2", "--refresh-ms=300", ad.publish],
                       capture_output=True, timeout=30)
    out = p.stdout.decode()
    assert p.returncode == 0, p.stderr
    assert "WORKER" in out and "gpu-test-1" in out and "0/3" in out, out
    # ROOM: "-" without thresholds; with one, the router's room rule on what each rank
    # publishes (an idle rank has room). A bad threshold is refused as the router refuses it.
    def rooms(text):
        return {line.split()[9] for line in text.splitlines() if line.startswith("gpu-test-1")}

    assert rooms(out) == {"-"}, out
    p = subprocess.run([TOP, "--iterations=1", "--refresh-ms=300",
                        "--active-decode-blocks-threshold=0.5", ad.publish],
                       capture_output=True, timeout=30)
    assert p.returncode == 0 and rooms(p.stdout.decode()) == {"yes"}, (p.stdout, p.stderr)
    p = subprocess.run([TOP, "--active-decode-blocks-threshold=1.5", ad.publish],
                       capture_output=True, timeout=30)
    assert p.returncode == 2 and b"between 0.0 and 1.0" in p.stderr, p.stderr
    # --stamp: each line starts with the receive time on CLOCK_MONOTONIC, in microseconds.
    before = time.monotonic()
    p = subprocess.run([TOP, "--json", "--stamp", "--count=2", ad.publish], capture_output=True,
                       timeout=30)
    after = time.monotonic()
    assert p.returncode == 0, p.stderr
    lines = p.stdout.decode().strip().splitlines()
    assert len(lines) == 2, (lines, p.stderr)
    for line in lines:
        stamp, doc = line.split(" ", 1)
        assert before <= int(stamp) / 1e6 <= after, (stamp, before, after)
        assert json.loads(doc)["worker_id"] == "gpu-test-1", doc
    load = json.loads(request(ad.maddr, "GET", "/load")[2])
    assert load["worker_id"] == "gpu-test-1" and len(load["ranks"]) == 2, load
    assert load["publish"] == ad.publish, load
    ad.stop()
    mock.stop()


def raw_messages(ad, count):
    """count load messages as they are on the wire (nngcat: nng's own SUB), as text."""
    p = subprocess.run(["nngcat", "--sub", "--dial=" + ad.publish, "--subscribe=kv_metrics",
                        "--quoted", "--count=%d" % count], capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.decode().strip().splitlines()]
    assert len(lines) == count and all(t.startswith("kv_metrics {") for t in lines), lines
    return lines


def test_role():
    """--role prefill: every message ends with "role":"prefill", /load and the ready line say
    it, and admitd_build_info has it as a label. Without --role: no role key at all (an
    aggregated worker's messages are what they were before the field), role=both elsewhere."""
    for role in ("prefill", "decode", None):
        args = ["--mock-engine", "--heartbeat-ms", "100", "--worker-id", "gpu-role"]
        if role is not None:
            args += ["--role", role]
        ad = Admitd("http://127.0.0.1:1", *args)
        for text in raw_messages(ad, 3):
            msg = json.loads(text[len("kv_metrics "):])
            assert msg["worker_id"] == "gpu-role", msg
            if role is None:
                assert "role" not in msg and '"role"' not in text, text
            else:
                assert text.endswith(',"role":"%s"}' % role) and msg["role"] == role, text
        shown = role or "both"
        assert " role=%s " % shown in ad.proc.match.string, ad.proc.match.string
        load = json.loads(request(ad.maddr, "GET", "/load")[2])
        assert [r.get("role") for r in load["ranks"]] == [role], load
        info = [k for k in ad.metrics() if k.startswith("admitd_build_info{")]
        assert len(info) == 1 and 'role="%s"' % shown in info[0], info
        ad.stop()


def test_either_publisher_and_its_subscribers():
    """The same messages from either PUB: nngcat (nng's SUB) reads both. Ours adds no thread
    to admitd's one, nng's does. Our own counts its
    subscribers in /metrics while they are connected, and a connection that is no SUB0 peer
    as a bad one; nng's PUB shows none of these."""
    mock = Mock("--speedup-ratio", "0")
    for via in ("auto", "nng"):
        ad = Admitd(mock.url, "--engine-request-limit", "2", "--heartbeat-ms", "50",
                    "--worker-id", "gpu-" + via, "--publisher", via)
        p = subprocess.run(["nngcat", "--sub", "--dial=" + ad.publish, "--subscribe=kv_metrics",
                            "--quoted", "--count=2"], capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        msgs = [json.loads(json.loads(line)[len("kv_metrics "):])
                for line in p.stdout.decode().strip().splitlines()]
        assert [m["worker_id"] for m in msgs] == ["gpu-" + via] * 2, msgs
        # Our PUB runs on admitd's one thread; nng's brings its own.
        threads = len(os.listdir("/proc/%d/task" % ad.proc.p.pid))
        assert (threads == 1) == (via == "auto"), (via, threads)
        if via == "nng":
            assert "admitd_load_subscribers" not in ad.metrics()
            ad.stop()
            continue
        subs = [Subscriber(ad.publish), Subscriber(ad.publish)]
        for sub in subs:
            sub.wait(lambda m: True, "a message")
        wait_for(lambda: ad.metrics()["admitd_load_subscribers"] == 2, 10, "2 subscribers")
        host, port = ad.publish[len("tcp://"):].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as bad:
            bad.sendall(b"GET / HTTP/1.1\r\n\r\n")
            hello = bad.recv(8)
            assert hello == b"\x00SP\x00\x00\x20\x00\x00", hello  # PUB0's header, at once
            try:  # closed after the wrong header; with our bytes unread: a reset
                rest = bad.recv(64)
            except ConnectionResetError:
                rest = b""
            assert rest == b"", rest
        wait_for(lambda: ad.metrics()["admitd_load_bad_subscribers_total"] == 1, 10,
                 "one bad subscriber")
        for sub in subs:
            sub.close()
        wait_for(lambda: ad.metrics()["admitd_load_subscribers"] == 0, 10, "none left")
        assert ad.metrics()["admitd_load_dropped_total"] == 0
        ad.stop()
    mock.stop()


def test_publish_errors():
    p = subprocess.run([ADMITD, "--publish=udp://x:1"], capture_output=True, timeout=30)
    assert p.returncode == 2 and b"--publish" in p.stderr, p.stderr
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        p = subprocess.run([ADMITD, "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                            "--publish=tcp://127.0.0.1:%d" % port], capture_output=True,
                           timeout=30)
        assert p.returncode == 1 and b"cannot publish" in p.stderr, p.stderr
    finally:
        s.close()
    # --publish none: no publisher, /load still answers.
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--publish", "none")
    assert ad.publish == "none"
    assert json.loads(request(ad.maddr, "GET", "/load")[2])["publish"] is None
    ad.stop()
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("messages follow the gate and match /metrics", test_messages_follow_the_gate)
    tap.run("kv_used_blocks follows the engine's KV usage", test_kv_blocks_follow_the_engine)
    tap.run("prompt tokens are booked until the first byte",
            test_prefill_tokens_booked_until_first_byte)
    tap.run("kv_block_size is the engine's, else --block-size",
            test_kv_block_size_is_the_engines_else_the_flag)
    tap.run("heartbeats arrive when idle", test_heartbeats_when_idle)
    tap.run("a killed engine turns the engine fields null, the proxy goes on",
            test_engine_killed_turns_engine_fields_null)
    tap.run("nngcat and admit-top read the messages", test_nngcat_and_admit_top_read_it)
    tap.run("--role in every message, absent without it", test_role)
    tap.run("either publisher, its subscribers counted",
            test_either_publisher_and_its_subscribers)
    tap.run("publisher errors and --publish none", test_publish_errors)
    tap.done()
