"""admit-router end to end: Dynamo's mocker overload cases ported onto admit-mock-engine +
admitd + admit-router, two-worker routing, migration of a worker's 529, worker loss."""

import json
import os
import random
import signal
import time

from harness import (Admitd, Mock, Proc, RawClient, Tap, chat_body, close_own,
                     error_message, hostport, marker, own_request, request, scrape, wait_for)

ROUTER = os.environ.get("ADMIT_ROUTER", "build/admit-router")
MODEL = "mock-model"
PROMPT = ("In a quiet meadow tucked between rolling hills, a plump gray rabbit nibbled on "
          "clover beneath the shade of a towering oak tree. The afternoon sun cast dappled "
          "light across the grass, and a gentle breeze carried the sweet scent of wildflowers. "
          "Nearby, a family of sparrows chirped merrily from their nest while a curious fox "
          "watched from the edge of the forest, its amber eyes gleaming with interest as the "
          "rabbit hopped from one patch of clover to the next, blissfully unaware.")


class Router:
    def __init__(self, workers, *args):
        argv = [ROUTER, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                "--model", MODEL] + ["--worker=%s=%s" % w for w in workers] + list(args)
        self.proc = Proc(argv, ready=r"ready listen=(\S+) metrics=(\S+)", name="router")
        self.addr = hostport(self.proc.match.group(1))
        self.maddr = hostport(self.proc.match.group(2))

    def metrics(self):
        return scrape(self.maddr)

    def workers(self):
        return json.loads(request(self.maddr, "GET", "/load")[2])["workers"]

    def wait_routable(self, n):
        wait_for(lambda: sum(w["routable"] for w in self.workers()) == n, 15,
                 "%d routable workers" % n)

    def stop(self):
        self.proc.stop_clean()


def worker(mock, *args):
    ad = Admitd(mock.url, "--heartbeat-ms", "100", *args)
    return ad, ("http://%s:%d" % ad.addr, ad.publish)


def rejections(rt):
    return sum(v for k, v in rt.metrics().items()
               if k.startswith("dynamo_frontend_model_rejection_total"))


def overload_case(max_tokens, *thresholds):
    """Dynamo's _test_router_overload_5xx: requests 0.1 s apart, held open, until a 529."""
    mock = Mock("--speedup-ratio", "0.01", "--block-size", "4", "--num-gpu-blocks", "64")
    ad, w = worker(mock, "--block-size", "4")
    rt = Router([w], *thresholds)
    rt.wait_routable(1)
    held, statuses = [], []
    for i in range(50):
        words = PROMPT.split()
        random.shuffle(words)
        c = RawClient(rt.addr, marker=marker(i), auth=i % 2 == 0)
        c.post("/v1/chat/completions", {"model": MODEL, "stream": True, "max_tokens": max_tokens,
                                        "messages": [{"role": "user", "content": " ".join(words)}]})
        status, hdrs = c.read_head()
        statuses.append(status)
        if status == 200:
            held.append(c)  # keep the stream open and unread
        else:
            body, _ = c.read_body(hdrs)
            assert status != 529 or b"All workers are busy" in body, body
            close_own([c])
            break
        time.sleep(0.1)
    other = [s for s in statuses if s not in (200, 529)]
    assert not other, statuses
    assert statuses.count(529) >= 1 and statuses.count(200) >= 1, statuses
    assert rejections(rt) == statuses.count(529), (rt.metrics(), statuses)
    close_own(held)
    rt.stop()
    ad.stop()
    mock.stop()


def test_overload_decode_blocks():
    overload_case(50, "--active-decode-blocks-threshold", "0.2")


def test_overload_prefill_tokens():
    overload_case(1, "--active-decode-blocks-threshold", "None",
                  "--active-prefill-tokens-threshold", "1",
                  "--active-prefill-tokens-threshold-frac", "None")


def test_thresholds_none_disable_rejection():
    mock = Mock("--speedup-ratio", "0.01", "--block-size", "4", "--num-gpu-blocks", "64")
    ad, w = worker(mock, "--worker-id", "w")
    rt = Router([w], "--active-decode-blocks-threshold", "None",
                "--active-prefill-tokens-threshold", "None",
                "--active-prefill-tokens-threshold-frac", "None")
    rt.wait_routable(1)
    status, _, body = request(rt.addr, "POST", "/busy_threshold", {"model": MODEL})
    got = json.loads(body)
    assert status == 200 and got["active_decode_blocks_threshold"] is None, got
    assert got["active_prefill_tokens_threshold"] is None, got
    assert got["active_prefill_tokens_threshold_frac"] is None, got
    # Each request goes in only once the router has heard the load of those before it (from
    # the first on, over half the KV blocks and 100 prompt tokens in prefill): a threshold
    # that None failed to unset would reject it.
    held = []
    for i in range(4):
        c = RawClient(rt.addr, marker=marker(i), auth=True)
        c.post("/v1/chat/completions", chat_body(max_tokens=50, content=PROMPT))
        assert c.read_head()[0] == 200
        held.append(c)
        wait_heard(rt, ad, "w")
    assert rejections(rt) == 0
    close_own(held)
    rt.stop()
    ad.stop()
    mock.stop()


def test_busy_threshold_endpoint():
    mock = Mock("--speedup-ratio", "0")
    ad, w = worker(mock)
    rt = Router([w], "--active-decode-blocks-threshold", "0.9",
                "--active-prefill-tokens-threshold", "1000")

    def post(body, ct="application/json"):
        data = json.dumps(body).encode()
        status, _, out = request(rt.addr, "POST", "/busy_threshold", data,
                                 headers={"Content-Type": ct})
        return status, json.loads(out)

    status, _, out = request(rt.addr, "GET", "/busy_threshold")
    assert status == 200 and "thresholds" in json.loads(out)
    s, o = post({"model": MODEL})
    assert s == 200 and o["active_decode_blocks_threshold"] == 0.9, o
    assert o["active_prefill_tokens_threshold"] == 1000, o
    s, o = post({"model": MODEL, "active_decode_blocks_threshold": 0.75})
    assert s == 200 and o["model"] == MODEL and o["active_decode_blocks_threshold"] == 0.75
    s, o = post({"model": MODEL, "active_prefill_tokens_threshold": 2000})
    assert s == 200 and o["active_prefill_tokens_threshold"] == 2000
    s, o = post({"model": MODEL, "active_decode_blocks_threshold": 0.5,
                 "active_prefill_tokens_threshold": 1200})
    assert s == 200 and (o["active_decode_blocks_threshold"], o["active_prefill_tokens_threshold"]) == (0.5, 1200)
    entry = [t for t in json.loads(request(rt.addr, "GET", "/busy_threshold")[2])["thresholds"]
             if t["model"] == MODEL][0]
    assert (entry["active_decode_blocks_threshold"], entry["active_prefill_tokens_threshold"]) == (0.5, 1200)
    assert post({"model": MODEL, "active_decode_blocks_threshold": 1.5})[0] == 400
    assert post({"model": MODEL, "active_prefill_tokens_threshold": 5000})[0] == 200
    assert post({"model": MODEL, "active_prefill_tokens_threshold": -1.0})[0] == 422
    s, o = post({"model": MODEL, "active_prefill_tokens_threshold_frac": 0.8})
    assert s == 200 and o["active_prefill_tokens_threshold_frac"] == 0.8
    assert post({"model": MODEL}, ct="text/plain")[0] == 415
    assert request(rt.addr, "POST", "/busy_threshold", b"{nope",
                   headers={"Content-Type": "application/json"})[0] == 400

    def sized(n):
        """A read of MODEL's thresholds, padded with JSON whitespace to exactly n bytes."""
        head = json.dumps({"model": MODEL}).encode()
        return head[:-1] + b" " * (n - len(head)) + b"}"

    status, _, out = request(rt.addr, "POST", "/busy_threshold", sized(64 * 1024),
                             headers={"Content-Type": "application/json"})
    assert status == 200 and json.loads(out)["active_prefill_tokens_threshold_frac"] == 0.8, out
    status, _, out = request(rt.addr, "POST", "/busy_threshold", sized(64 * 1024 + 1),
                             headers={"Content-Type": "application/json"})
    assert status == 413 and list(json.loads(out)) == ["error"], (status, out)
    assert "larger than 65536 bytes" in json.loads(out)["error"], out
    # A set for a model not named with --model: 404, and the known one is untouched.
    s, o = post({"model": "no-such-model", "active_decode_blocks_threshold": 0.3})
    assert s == 404 and list(o) == ["error"] and "'no-such-model' not found" in o["error"], o
    s, o = post({"model": MODEL})
    assert s == 200 and o["active_decode_blocks_threshold"] == 0.5, o
    rt.stop()
    ad.stop()
    mock.stop()


def stream_to(addr, content="hello there", max_tokens=1000, stream=True, auth=False):
    """A request (streaming by default) held open on a raw connection (close it to let go),
    with a marker of its own (and, with auth, an Authorization made from it): check_own()."""
    c = RawClient(addr, marker=marker(), auth=auth)
    c.post("/v1/chat/completions", chat_body(max_tokens=max_tokens, content=content,
                                             stream=stream))
    return c


def gauge(rt, family, worker_id, rank=0):
    return rt.metrics().get('%s{worker_id="%s",dp_rank="%d",worker_type="decode"}' %
                            (family, worker_id, rank))


def wait_heard(rt, ad, worker_id):
    """Waits until the router's view of ad includes every request ad holds now (all of them
    running on): the KV blocks booked for running requests only grow, so a router value at
    least ad's own comes from a message sent after the last of them was admitted."""
    want = ad.metrics()['admitd_active_decode_blocks{dp_rank="0"}']
    assert want > 0, "nothing booked on %s" % worker_id
    wait_for(lambda: (gauge(rt, "dynamo_frontend_worker_active_decode_blocks", worker_id) or 0)
             >= want, 15, "the router to hear %s's %d blocks" % (worker_id, want))


def test_two_workers_busy_one_avoided():
    # The busy worker must be the one least-loaded choice would take: it holds one request,
    # the other two. "busy" has one request in a prefill that lasts minutes (speedup 0.0001),
    # its prompt over the threshold of 100 tokens; "free" has two requests that never get a
    # token (10 min apart), with short prompts, in prefill too but far under the threshold.
    slow = Mock("--speedup-ratio", "0.0001")
    idle = Mock("--speedup-ratio", "0", "--token-interval-ms", "600000")
    busy, wb = worker(slow, "--worker-id", "busy")
    free, wf = worker(idle, "--worker-id", "free")
    rt = Router([wb, wf], "--active-prefill-tokens-threshold", "100")
    rt.wait_routable(2)
    held = [stream_to(busy.addr, content=PROMPT)] + [stream_to(free.addr) for _ in range(2)]
    wait_for(lambda: busy.metrics()["dynamo_engine_request"] == 1, what="busy's request")
    wait_for(lambda: free.metrics()["dynamo_engine_request"] == 2, what="free's requests")
    prefill = busy.metrics()['admitd_active_prefill_tokens{dp_rank="0"}']
    assert prefill > 100, prefill
    wait_for(lambda: rt.metrics()['admit_router_workers{state="busy"}'] == 1, 15,
             "the router to judge one worker busy")
    wait_heard(rt, free, "free")
    # Four at once: "busy" (load 1 against 2 and more) would get all of them if its being
    # over the threshold were ignored.
    sent = [stream_to(rt.addr, max_tokens=1, auth=True) for _ in range(4)]
    assert [c.read_head()[0] for c in sent] == [200] * 4

    def counts():
        return [m.metrics()["admit_mock_requests_total"] for m in (slow, idle)]

    wait_for(lambda: sum(counts()) == 7, what="the 4 requests at an engine")
    assert counts() == [1, 6], counts()
    assert free.metrics()['admitd_active_prefill_tokens{dp_rank="0"}'] <= 100  # still free
    close_own(held + sent)
    rt.stop()
    for ad in (busy, free):
        ad.stop()
    for m in (slow, idle):
        m.stop()


def test_worker_529_migrates():
    mocks = [Mock("--token-interval-ms", "50"), Mock("--token-interval-ms", "50")]
    full, wf = worker(mocks[0], "--engine-request-limit", "1", "--request-queue-limit", "2")
    roomy, wr = worker(mocks[1], "--engine-request-limit", "10")
    # full: 1 running + 2 queued = load 3, and no room; roomy: 5 running, load 5, room.
    fill = full.fill(3, queued=2, max_tokens=400)
    held = roomy.fill(5, queued=0, max_tokens=400)
    wait_for(lambda: roomy.metrics()["dynamo_engine_request"] == 5, what="roomy busy")
    rt = Router([wf, wr])
    rt.wait_routable(2)
    status, _, body = own_request(rt.addr, "/v1/chat/completions", chat_body(max_tokens=2),
                                  marker(), auth=True)
    assert status == 200, body
    assert full.metrics()["dynamo_rejection_request_total"] == 1  # it was asked first
    # Logged before the retry; the line may reach our reader after the answer does.
    rt.proc.wait_line("answered overloaded", 10)
    close_own(fill + held)
    rt.stop()
    full.stop()
    roomy.stop()
    for m in mocks:
        m.stop()


def test_killed_worker_drops_out_and_comes_back():
    mocks = [Mock("--speedup-ratio", "0"), Mock("--speedup-ratio", "0")]
    ads = [worker(m) for m in mocks]
    rt = Router([w for _, w in ads])
    rt.wait_routable(2)
    victim, (url, pub) = ads[0]
    listen = "%s:%d" % victim.addr
    victim.proc.kill()
    rt.wait_routable(1)
    for _ in range(6):
        assert request(rt.addr, "POST", "/v1/chat/completions", chat_body(max_tokens=1))[0] == 200
    # Back on the same addresses: routable again once it speaks.
    back = Admitd(mocks[0].url, "--heartbeat-ms", "100", "--listen", listen,
                  "--publish", pub)
    rt.wait_routable(2)
    back.stop()
    rt.stop()
    ads[1][0].stop()
    for m in mocks:
        m.stop()


def test_router_config_file():
    import subprocess
    import tempfile
    mock = Mock("--speedup-ratio", "0")
    ad, (url, pub) = worker(mock)
    path = os.path.join(tempfile.mkdtemp(), "router.yaml")
    with open(path, "w") as f:
        f.write("listen: \"127.0.0.1:0\"\nmetrics_listen: \"127.0.0.1:0\"\n"
                "worker: \"%s=%s\"\nmodel: \"mock-model,other\"\n"
                "active_prefill_tokens_threshold: 5000\n" % (url, pub))
    rt = Proc([ROUTER, "--config", path], ready=r"ready listen=(\S+) metrics=(\S+)",
              name="router")
    raddr = hostport(rt.match.group(1))
    wait_for(lambda: request(raddr, "POST", "/v1/chat/completions",
                             chat_body(max_tokens=1))[0] == 200, 15, "routed")
    got = json.loads(request(raddr, "GET", "/busy_threshold")[2])["thresholds"]
    assert [t["model"] for t in got] == ["mock-model", "other"], got
    assert got[0]["active_prefill_tokens_threshold"] == 5000, got
    rt.stop_clean()
    with open(path, "w") as f:
        f.write("worker: \"%s=%s\"\nbogus: 1\n" % (url, pub))
    p = subprocess.run([ROUTER, "--config", path], capture_output=True, timeout=30)
    assert p.returncode == 2 and ":2:1: unknown setting 'bogus'" in p.stderr.decode(), p.stderr
    p = subprocess.run([ROUTER, "--active-decode-blocks-threshold=1.5", "--worker=%s=%s" % (url, pub)],
                       capture_output=True, timeout=30)
    assert p.returncode == 2 and b"between 0" in p.stderr, p.stderr
    # The commented example loads as documented (flags move its listeners to free ports).
    example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                           "admit-router.yaml")
    rt = Proc([ROUTER, "--config", example, "--listen", "127.0.0.1:0", "--metrics-listen",
               "127.0.0.1:0"], ready=r"ready listen=(\S+) metrics=(\S+)", name="router")
    maddr = hostport(rt.match.group(2))
    ws = json.loads(request(maddr, "GET", "/load")[2])["workers"]
    assert [w["url"] for w in ws] == ["gpu1:8080", "gpu2:8080"], ws
    got = json.loads(request(hostport(rt.match.group(1)), "GET", "/busy_threshold")[2])
    assert got["thresholds"][0]["active_decode_blocks_threshold"] == 0.85, got
    rt.stop_clean()
    ad.stop()
    mock.stop()


def test_busy_threshold_token():
    mock = Mock("--speedup-ratio", "0")
    ad, w = worker(mock)
    token = "router-token-0123456789"
    rt = Router([w], "--admin-token", token)
    body = json.dumps({"model": MODEL, "active_decode_blocks_threshold": 0.5}).encode()
    hdrs = {"Content-Type": "application/json"}
    status, _, out = request(rt.addr, "POST", "/busy_threshold", body, headers=hdrs)
    assert status == 401 and "Bearer" in json.loads(out)["error"], (status, out)
    hdrs["Authorization"] = "Bearer " + token[:-1] + "X"
    assert request(rt.addr, "POST", "/busy_threshold", body, headers=hdrs)[0] == 401
    assert request(rt.addr, "GET", "/busy_threshold")[0] == 200  # reads stay open
    hdrs["Authorization"] = "Bearer " + token
    status, _, out = request(rt.addr, "POST", "/busy_threshold", body, headers=hdrs)
    assert status == 200 and json.loads(out)["active_decode_blocks_threshold"] == 0.5, out
    rt.stop()
    # The environment sets it too; a token that is too short is a startup error.
    import subprocess
    env = dict(os.environ, ADMIT_ROUTER_ADMIN_TOKEN="short")
    p = subprocess.run([ROUTER, "--worker=%s=%s" % w], env=env, capture_output=True, timeout=30)
    assert p.returncode == 2 and b"ADMIT_ROUTER_ADMIN_TOKEN must be 16" in p.stderr, p.stderr
    env["ADMIT_ROUTER_ADMIN_TOKEN"] = token
    rt = Proc([ROUTER, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
               "--model", MODEL, "--worker=%s=%s" % w], env=env,
              ready=r"ready listen=(\S+) metrics=(\S+)", name="router")
    raddr = hostport(rt.match.group(1))
    del hdrs["Authorization"]
    assert request(raddr, "POST", "/busy_threshold", body, headers=hdrs)[0] == 401
    rt.stop_clean()
    ad.stop()
    mock.stop()


def router_with_streams(gap_ms, drain_ms, count, max_tokens):
    """A mock, one worker and a router with count streams running through it."""
    mock = Mock("--token-interval-ms", str(gap_ms))
    ad, w = worker(mock, "--engine-request-limit", "4")
    rt = Router([w], "--drain-timeout-ms", str(drain_ms))
    rt.wait_routable(1)
    holders = [RawClient(rt.addr, marker=marker(), auth=True) for _ in range(count)]
    for h in holders:
        h.post("/v1/chat/completions", chat_body(max_tokens=max_tokens))
    wait_for(lambda: ad.metrics()["dynamo_engine_request"] == count,
             what="%d streams running" % count)
    return mock, ad, rt, holders


def test_router_drains_on_sigterm():
    mock, ad, rt, holders = router_with_streams(30, 60000, 2, 30)
    rt.proc.p.send_signal(signal.SIGTERM)
    rt.proc.wait_line("draining: 2 requests in flight", 10)
    assert request(rt.maddr, "GET", "/ready")[0] == 503
    status, hdrs, body = own_request(rt.addr, "/v1/chat/completions", chat_body(), marker(),
                                     auth=True)
    assert status == 503 and error_message(body) == "Server unavailable: router draining", body
    assert hdrs.get("connection", "").lower() == "close", hdrs
    # The streams in flight end normally, and then the router exits 0 by itself.
    results = [h.response() for h in holders]
    assert [r[0] for r in results] == [200, 200] and all(r[3] for r in results), results
    close_own(holders)
    assert rt.proc.p.wait(20) == 0
    rt.proc.wait_line("drained: nothing in flight", 10)  # the reader may lag behind the exit
    ad.stop()
    mock.stop()


def test_router_drain_timeout_cancels():
    mock, ad, rt, (h,) = router_with_streams(50, 300, 1, 1000)
    # The stream is under way at the client before the signal, so what follows can only be
    # a cut, never a missing answer (on a loaded machine the head may take a while).
    status, hdrs = h.read_head()
    assert status == 200, (status, hdrs)
    rt.proc.p.send_signal(signal.SIGTERM)
    assert rt.proc.p.wait(20) == 0
    rt.proc.wait_line("cancelled 1 request", 10)
    body, complete = h.read_body(hdrs)
    assert not complete, "a cancelled stream must not end cleanly"
    close_own([h])
    # The worker sees the cancellation too: its slot comes back.
    wait_for(lambda: ad.metrics()["dynamo_engine_request"] == 0, what="worker slot freed")
    ad.stop()
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("overload with a decode-blocks threshold of 0.2 (Dynamo's mocker case)",
            test_overload_decode_blocks)
    tap.run("overload with a prefill-tokens threshold of 1 (Dynamo's mocker case)",
            test_overload_prefill_tokens)
    tap.run("thresholds None: no rejection", test_thresholds_none_disable_rejection)
    tap.run("the /busy_threshold sequence", test_busy_threshold_endpoint)
    tap.run("two workers: the busy one is avoided", test_two_workers_busy_one_avoided)
    tap.run("a worker's 529 migrates to the other worker", test_worker_529_migrates)
    tap.run("a killed worker drops out and comes back", test_killed_worker_drops_out_and_comes_back)
    tap.run("the router's config file, and its errors", test_router_config_file)
    tap.run("an admin token guards POST /busy_threshold", test_busy_threshold_token)
    tap.run("SIGTERM drains: new requests 503, streams in flight finish", test_router_drains_on_sigterm)
    tap.run("the drain timeout cancels what is left", test_router_drain_timeout_cancels)
    tap.done()
