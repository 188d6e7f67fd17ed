"""admit-router's own booking (src/router/select.h): what it books on dispatch, when it lets
go, and how the reject thresholds judge it.

On dispatch the router books the request's prompt tokens (lib/admission/tokcount, 4 bytes of text a
token) as prefill on the chosen worker rank, plus ceil(prompt / block size) decode blocks.
Prefill is released at the first body byte from the worker (not at its headers), the blocks
at completion, error, cancel or migration. The thresholds judge each rank on its booked load
projected with the request (strict >); a rank with nothing booked by this router takes any
one request. Separately, a worker whose every rank is over the thresholds by its published
load is skipped (the monitor), which covers other routers' traffic.

Every prompt here is one chat message of known length: 4 tokens for the message plus
ceil(bytes / 4), the same count in admitd, the router and the mock engine, so a prompt of P
tokens is exact. Workers are real admitd processes in front of admit-mock-engine, all on
loopback ports picked at run time; the harness kills whatever is left when a check fails.
"""

import json
import select
import socket
import time

from harness import (Mock, RawClient, Tap, check_own, close_own, error_message, marker,
                     marker_fields, own_response, raw_request_bytes, request, wait_for)
from test_router import MODEL, worker
from test_router import Router as _Router

CHAT = "/v1/chat/completions"
# A mock whose requests start (and send their stream's headers) at once but produce no token
# for minutes: their prompts stay in prefill for the whole test.
NO_TOKEN = ("--speedup-ratio", "0", "--token-interval-ms", "600000")


def Router(workers, *args):
    """A router that counts a worker gone after 10 of its 100 ms heartbeats (not 3), so that
    a loaded machine's late load message does not take a worker away mid-check. Load only
    (--kv-overlap-score-weight 0): these checks send the same prompt again and again and judge
    its whole booking, which prefix-aware selection would book as mostly cached
    (test_router_prefix.py checks that)."""
    return _Router(workers, "--missed-heartbeats", "10", "--kv-overlap-score-weight", "0", *args)


def content(tokens):
    """A message text whose chat request counts exactly `tokens` prompt tokens."""
    assert tokens >= 5
    return "x" * (4 * (tokens - 4))


def blocks(tokens, bs=16):
    return -(-tokens // bs)


def body(tokens, max_tokens=1000, stream=True):
    return {"model": MODEL, "stream": stream, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": content(tokens)}]}


def pin(name):
    return "X-Admit-Worker: %s\r\n" % name


def open_stream(addr, tokens, max_tokens=1000, stream=True, extra=""):
    """A request held open, with a marker and a secret of its own (check_own)."""
    c = RawClient(addr, marker=marker(), auth=True)
    c.post(CHAT, body(tokens, max_tokens, stream), extra)
    return c


def marked(addr, count, data_of):
    """count clients with markers and secrets of their own, and the bytes each is to send
    (data_of(extra): a request whose head has the extra lines), made before any is sent."""
    clients = [RawClient(addr, marker=marker(), auth=True) for _ in range(count)]
    return clients, [data_of(marker_fields(c.marker, c.auth)) for c in clients]


def url_of(ad):
    return "%s:%d" % ad.addr


def mock_count(mock):
    return mock.metrics()["admit_mock_requests_total"]


def mock_in_flight(mock):
    return mock.metrics()["admit_mock_requests_in_flight"]


def booked(rt, wid, rank=0):
    """(prefill tokens, decode blocks) the router's gauges show for one worker rank."""
    m = rt.metrics()
    lab = '{worker_id="%s",dp_rank="%d"}' % (wid, rank)
    return (m["admit_router_booked_prefill_tokens" + lab],
            m["admit_router_booked_decode_blocks" + lab])


def load_rank(rt, url, rank=0):
    """/load's entry for rank `rank` of the worker at url (host:port)."""
    w = [w for w in rt.workers() if w["url"] == url]
    assert len(w) == 1, rt.workers()
    return w[0]["ranks"][rank]


def nothing_booked(rt):
    """True when every booked gauge of every worker and rank is 0 and /load books no request
    anywhere; else what is still booked."""
    m = rt.metrics()
    rows = {k: v for k, v in m.items() if k.startswith(("admit_router_booked_prefill_tokens",
                                                         "admit_router_booked_decode_blocks"))}
    assert rows, "no booked gauges at all"
    left = {k: v for k, v in rows.items() if v != 0}
    for w in rt.workers():
        for r in w["ranks"]:
            if r["booked"] != {"prefill_tokens": 0, "decode_blocks": 0, "requests": 0}:
                left["%s/%d" % (w["url"], r["dp_rank"])] = r["booked"]
    return left or True


def wait_unbooked(rt, what, engines=None):
    """Waits until nothing is booked, and checks that it stays so. With engines (mocks): the
    requests went away through a cancel, and the router lets go of a booking in the same turn
    of its loop in which it cancels the request upstream (on_finish, after the upstream is
    closed), before an engine can hear of it. So it waits for those engines to hold no
    request, then nothing may be booked at once: a leaked booking fails at first sight
    instead of after the timeout. Without engines: polled, 15 s at most."""
    if engines:
        for m in engines:
            wait_for(lambda m=m: mock_in_flight(m) == 0, 15, "the engine idle after " + what)
        assert nothing_booked(rt) is True, "still booked after %s, with the engines idle: %r" % (
            what, nothing_booked(rt))
    else:
        try:
            wait_for(lambda: nothing_booked(rt) is True, 15, "nothing booked after " + what)
        except AssertionError:
            raise AssertionError("still booked after %s: %r" % (what, nothing_booked(rt)))
    # Stays so (nothing is released twice, nothing released late goes below 0).
    time.sleep(0.05)
    assert nothing_booked(rt) is True, nothing_booked(rt)


def arrivals(mocks, before, want, what):
    """Waits until the engines (mocks) have seen as many requests more than `before` (their
    counts) as `want` adds up to, then requires that they went where `want` says: a request
    sent to the wrong engine fails at once, not after a timeout."""
    wait_for(lambda: sum(map(mock_count, mocks)) >= sum(before) + sum(want), what=what)
    got = tuple(map(mock_count, mocks))
    assert got == tuple(b + w for b, w in zip(before, want)), (what, before, got)


def rejections(rt):
    m = rt.metrics()
    return (m['admit_router_rejections_total{reason="all_busy"}'],
            m['admit_router_rejections_total{reason="no_worker"}'])


def pending(c):
    """True when bytes wait on c's socket (or in its buffer) right now."""
    return bool(c.buf) or bool(select.select([c.s], [], [], 0)[0])


def ready_chunks(c):
    """Reads the whole chunks that have already arrived on c, without waiting; how many."""
    n = 0
    c.s.setblocking(False)
    try:
        while True:
            try:
                c._fill()
            except (BlockingIOError, InterruptedError):
                break
    finally:
        c.s.setblocking(True)
        c.s.settimeout(30)
    while True:
        head, sep, rest = c.buf.partition(b"\r\n")
        if not sep:
            return n
        size = int(head.split(b";")[0], 16)
        if size == 0 or len(rest) < size + 2:
            return n
        c.buf = rest[size + 2:]
        n += 1


def expect_busy(c):
    status, hdrs, data, complete = own_response(c)
    assert status == 529 and complete, (status, data)
    assert error_message(data) == "All workers are busy, please retry later", data
    return hdrs


def hear(rt, ad, pred, what):
    """Waits until the router's /load shows the published load of ad's rank 0 meeting pred."""
    wait_for(lambda: (lambda p: p is not None and pred(p))(load_rank(rt, url_of(ad))["published"]),
             15, what)


# ---- 1. freshness: the router's own booking judges a burst the workers have not published ----

def burst(rt, count, tokens):
    """count requests of `tokens` prompt tokens on connections opened beforehand, all their
    bytes sent in one tight loop. Returns (statuses, held clients, seconds the loop took)."""
    clients, datas = marked(rt.addr, count,
                            lambda extra: raw_request_bytes(rt.addr, CHAT, body(tokens), extra))
    t0 = time.monotonic()
    for c, data in zip(clients, datas):
        c.s.sendall(data)
    took = time.monotonic() - t0
    statuses, held = [], []
    for c in clients:
        status, hdrs = c.read_head()
        statuses.append(status)
        if status == 200:
            held.append(c)
        else:
            data_, _ = c.read_body(hdrs)
            assert status == 529 and b"All workers are busy" in data_, (status, data_)
            close_own([c])
    return statuses, held, took


def test_burst_judged_on_booking():
    # Why this needs the router's booking: the K requests reach the router within about a
    # millisecond, so it picks for them before the load message that reflects even the
    # first can arrive (admitd publishes a change at once, but it must first receive the
    # forwarded request). Judged only on what the worker
    # publishes, the burst would find an idle worker K times and all K would go in; and
    # whatever admitd publishes mid-burst cannot stop it early either, since its prefill is
    # over T only once more than floor(T / P) requests are in, so the count admitted would
    # be above the expected one. The mock gives no token for minutes, so no prefill is
    # released during the burst. Run with sel_book() patched to book nothing, the first
    # burst has all 8 go in, and the check fails.
    P, K = 100, 8
    mock = Mock(*NO_TOKEN)
    ad, w = worker(mock, "--worker-id", "w")
    rt = Router([w], "--active-prefill-tokens-threshold", "300",
                "--active-prefill-tokens-threshold-frac", "None",
                "--active-decode-blocks-threshold", "None")
    rt.wait_routable(1)
    seen = 0
    # T = 300 takes exactly 3 (300 is not > 300), T = 250 takes 2, and T = 50, below even
    # one prompt, takes 1 (the idle rank's one); the rest are refused by the router itself.
    for T in (300, 250, 50):
        if T != 300:
            status, _, out = request(rt.addr, "POST", "/busy_threshold",
                                     {"model": MODEL, "active_prefill_tokens_threshold": T})
            assert status == 200 and json.loads(out)["active_prefill_tokens_threshold"] == T
        expected = max(1, T // P)
        before = rejections(rt)[0]
        statuses, held, took = burst(rt, K, P)
        print("# T=%d: %d requests sent in %.2f ms: %s" % (T, K, took * 1000, statuses),
              flush=True)
        assert statuses.count(200) == expected, (T, statuses)
        assert statuses.count(529) == K - expected, (T, statuses)
        assert rejections(rt)[0] == before + K - expected
        # Booked as counted: P tokens and ceil(P / 16) blocks for each one let in.
        assert booked(rt, "w") == (expected * P, expected * blocks(P)), booked(rt, "w")
        seen += expected
        wait_for(lambda: mock_count(mock) == seen, what="%d requests at the engine" % seen)
        time.sleep(0.1)  # none of the refused ones arrives late
        assert mock_count(mock) == seen
        close_own(held)
        wait_unbooked(rt, "the burst's streams closed", [mock])
        # The worker's published prefill back to 0 too, or the next burst meets the monitor.
        hear(rt, ad, lambda p: p["active_prefill_tokens"] == 0, "the worker idle again")
    rt.stop()
    ad.stop()
    mock.stop()


# ---- 2. every fault gives back what was booked ----------------------------------------------

def test_faults_release_booking():
    P = 100
    # d: the first token 1.5 s after the stream's headers; s: a token every 100 ms;
    # k1, k2: the same, to lose their engine and their admitd.
    mocks = {"d": Mock("--speedup-ratio", "0", "--token-interval-ms", "1500"),
             "s": Mock("--speedup-ratio", "0", "--token-interval-ms", "100"),
             "k1": Mock("--speedup-ratio", "0", "--token-interval-ms", "100"),
             "k2": Mock("--speedup-ratio", "0", "--token-interval-ms", "100")}
    ads = {}
    for wid, m in mocks.items():
        ads[wid] = worker(m, "--worker-id", wid)
    rt = Router([w for _, w in ads.values()])
    rt.wait_routable(4)
    wait_for(lambda: all(w["worker_id"] for w in rt.workers()), what="every worker_id")

    # Prefill is held until the first body byte, not the headers; the blocks until the end.
    c = open_stream(rt.addr, P, max_tokens=2, extra=pin("d"))
    status, hdrs = c.read_head()
    t_head = time.monotonic()
    assert status == 200, (status, hdrs)
    samples = 0
    while time.monotonic() < t_head + 0.6:
        got = booked(rt, "d")
        assert not pending(c), "the first token came early"
        assert got == (P, blocks(P)), got
        samples += 1
    assert time.monotonic() < t_head + 1.4, "too slow to decide before the first token"
    assert samples >= 3, samples
    first = c.read_chunk()
    assert b"tok0" in first, first
    # The router released the prefill before it passed that byte on: no wait needed.
    assert booked(rt, "d") == (0, blocks(P)), booked(rt, "d")
    assert load_rank(rt, url_of(ads["d"][0]))["booked"] == {
        "prefill_tokens": 0, "decode_blocks": blocks(P), "requests": 1}
    time.sleep(0.5)
    assert not pending(c) and booked(rt, "d") == (0, blocks(P)), booked(rt, "d")
    _, complete = c.read_body(hdrs)
    assert complete
    check_own(c)
    wait_unbooked(rt, "a stream that completed")

    s = mocks["s"]
    # A client reset (RST) while it waits for the headers: a non-streamed request has none
    # until it ends (1000 tokens, 100 s).
    c = open_stream(rt.addr, P, stream=False, extra=pin("s"))
    wait_for(lambda: booked(rt, "s") == (P, blocks(P)), what="the request booked on s")
    wait_for(lambda: mock_in_flight(s) == 1, what="the request at s's engine")
    assert not pending(c)
    c.reset()
    wait_unbooked(rt, "a reset while waiting for headers", [s])

    # Hostile: resets at once, some probably before the router has read the request, some
    # while it forwards it, plus non-streamed ones reset a little later.
    fast, datas = marked(rt.addr, 12, lambda extra: raw_request_bytes(
        rt.addr, CHAT, body(P, stream=False), pin("s") + extra))
    for i, (c, data) in enumerate(zip(fast, datas)):
        c.s.sendall(data)
        if i % 2 == 0:
            c.reset()
    time.sleep(0.01)
    for c in fast[1::2]:
        check_own(c)
        c.reset()
    wait_unbooked(rt, "12 resets racing the dispatch")
    wait_for(lambda: mock_in_flight(s) == 0, what="s's engine idle after the resets")

    # A reset and a close (FIN) mid-stream, after the first token.
    for how in ("reset", "close"):
        cs = [open_stream(rt.addr, P, extra=pin("s")) for _ in range(3)]
        for i, c in enumerate(cs):
            assert c.read_head()[0] == 200
            for _ in range(1 + i):
                c.read_chunk()
        assert booked(rt, "s")[1] == 3 * blocks(P), booked(rt, "s")
        for c in cs:
            check_own(c)
            getattr(c, how)()
        wait_unbooked(rt, "a client %s mid-stream" % how, [s])

    # The worker lost mid-stream: its engine (k1), then its admitd (k2), 3 streams each.
    for wid, victim in (("k1", mocks["k1"].proc), ("k2", ads["k2"][0].proc)):
        cs = [open_stream(rt.addr, P, extra=pin(wid)) for _ in range(3)]
        for c in cs:
            assert c.read_head()[0] == 200
            c.read_chunk()
        # ... and one not streamed, that has no headers yet.
        quiet = open_stream(rt.addr, P, stream=False, extra=pin(wid))
        wait_for(lambda: booked(rt, wid) == (P, 4 * blocks(P)), what="4 requests on " + wid)
        victim.kill()
        for c in cs:
            _, complete = c.read_body({"transfer-encoding": "chunked"})
            assert not complete, "a stream cut by a dead %s must not end cleanly" % wid
            check_own(c)
        status, _, data, _ = own_response(quiet)
        assert status in (502, 503), (status, data)
        wait_unbooked(rt, "%s lost mid-stream" % wid)
    rt.stop()  # exit 0 (and, under ASan, nothing leaked)
    for wid in ("d", "s", "k1"):
        ads[wid][0].stop()
    for wid in ("d", "s", "k2"):
        mocks[wid].stop()


def test_migration_moves_booking():
    # full: 1 running + 2 queued and no room; roomy: 5 running, the costlier by what both
    # publish, so the router asks full first, which refuses with 529; the retry goes to roomy.
    P = 100
    mocks = [Mock("--token-interval-ms", "50"), Mock("--token-interval-ms", "50")]
    full, wf = worker(mocks[0], "--worker-id", "full", "--engine-request-limit", "1",
                      "--request-queue-limit", "2")
    roomy, wr = worker(mocks[1], "--worker-id", "roomy", "--engine-request-limit", "10")
    fill = full.fill(3, queued=2, max_tokens=400)
    held = roomy.fill(5, queued=0, max_tokens=400)
    wait_for(lambda: roomy.metrics()["dynamo_engine_request"] == 5, what="roomy busy")
    rt = Router([wf, wr])
    rt.wait_routable(2)
    wait_for(lambda: all(w["worker_id"] for w in rt.workers()), what="both worker_ids")
    c = open_stream(rt.addr, P, max_tokens=10)
    status, hdrs = c.read_head()
    assert status == 200, (status, hdrs)
    assert full.metrics()["dynamo_rejection_request_total"] == 1  # it was asked first
    c.read_chunk()
    check_own(c)
    # Nothing left on the worker it left; the blocks (no prefill: a token came) on roomy.
    assert booked(rt, "full") == (0, 0), booked(rt, "full")
    assert booked(rt, "roomy") == (0, blocks(P)), booked(rt, "roomy")
    assert load_rank(rt, url_of(full))["booked"]["requests"] == 0
    _, complete = c.read_body(hdrs)
    assert complete
    check_own(c)
    wait_unbooked(rt, "a migrated stream that completed")
    # Pinned to full: it refuses, and the retry has nowhere to go (the pinned worker is the
    # one it leaves): the router's own 529, and nothing stays booked.
    rejected = full.metrics()["dynamo_rejection_request_total"]
    c = open_stream(rt.addr, P, max_tokens=10, extra=pin("full"))
    expect_busy(c)
    assert full.metrics()["dynamo_rejection_request_total"] == rejected + 1
    assert rejections(rt) == (1, 0), rejections(rt)
    # The router's own 529 (proxy_answer) finishes the request, and so lets go of its
    # booking, before it writes a byte of that answer: nothing to wait for.
    assert nothing_booked(rt) is True, nothing_booked(rt)
    close_own(fill + held)
    rt.stop()
    full.stop()
    roomy.stop()
    for m in mocks:
        m.stop()


# ---- 3. output blocks --------------------------------------------------------------------

def test_track_output_blocks():
    # Blocks of 4 tokens, published by the worker (the router's own default stays 16); a
    # 10-token prompt is 3 blocks, and its output crosses into a new block at tokens 3, 7, 11.
    P, N, bs = 10, 12, 4
    mock = Mock("--speedup-ratio", "0", "--token-interval-ms", "200", "--block-size", "4")
    ad, w = worker(mock, "--block-size", "4", "--worker-id", "w")
    tracking = Router([w], "--router-track-output-blocks")
    plain = Router([w])
    for rt in (tracking, plain):
        rt.wait_routable(1)
        wait_for(lambda rt=rt: load_rank(rt, url_of(ad))["block_size"] == bs, what="block size 4")
    for rt, track in ((tracking, True), (plain, False)):
        c = open_stream(rt.addr, P, max_tokens=1000)
        assert c.read_head()[0] == 200
        got = booked(rt, "w")
        assert got == (P, blocks(P, bs)), got
        n, seen = 0, []
        while n < N:
            c.read_chunk()
            n += 1
            prefill, dec = booked(rt, "w")
            # Tokens that reached us meanwhile; the router counts each before passing it on,
            # and one more may be on its way.
            later = n + ready_chunks(c)
            assert prefill == 0, (n, prefill)
            if track:
                ok = (blocks(P + n, bs), blocks(P + later + 1, bs))
                assert ok[0] <= dec <= ok[1], (n, later, dec, ok)
            else:
                assert dec == blocks(P, bs), (n, dec)
            seen.append(dec)
            n = later
        if track:
            assert seen == sorted(seen), seen
        print("# %s: decode blocks %s" % ("tracking" if track else "plain", seen), flush=True)
        c.close()
        wait_unbooked(rt, "the stream closed", [mock])
    tracking.stop()
    plain.stop()
    ad.stop()
    mock.stop()


# ---- 4. two routers: B avoids what A filled, through the published load --------------------

def test_two_routers_published_load():
    # Decode threshold 0.5: worker 1 (20 KV blocks) is over above 10 blocks, worker 2 (200)
    # above 100. Prompts of 100 tokens are 7 blocks of 16. The mocks give no token.
    P = 100
    m1 = Mock("--num-gpu-blocks", "20", *NO_TOKEN)
    m2 = Mock("--num-gpu-blocks", "200", *NO_TOKEN)
    ad1, w1 = worker(m1, "--worker-id", "w1")
    ad2, w2 = worker(m2, "--worker-id", "w2")
    # A: no thresholds, it only brings traffic; B: the one judged.
    a = Router([w1, w2])
    b = Router([w1, w2], "--active-decode-blocks-threshold", "0.5")
    for rt in (a, b):
        rt.wait_routable(2)
    held = [open_stream(a.addr, P, extra=pin("w1")) for _ in range(3)]  # 21 blocks > 10
    assert [c.read_head()[0] for c in held] == [200] * 3
    hear(b, ad1, lambda p: max(p["active_decode_blocks"], p["kv_used_blocks"]) >= 21,
         "B to hear worker 1 full")
    assert load_rank(b, url_of(ad1))["room"]["published"] is False
    # A burst through B: by cost alone (worker 1's published prefill 300 and 21 blocks
    # against what B books on worker 2, 100 tokens and 7 blocks a request) the fifth would go
    # to worker 1; B never booked worker 1, it avoids it through what worker 1 publishes.
    bs, datas = marked(b.addr, 8, lambda extra: raw_request_bytes(b.addr, CHAT, body(P), extra))
    for c, data in zip(bs, datas):
        c.s.sendall(data)
    assert [c.read_head()[0] for c in bs] == [200] * 8
    assert booked(b, "w1") == (0, 0), booked(b, "w1")
    assert booked(b, "w2") == (8 * P, 8 * blocks(P)), booked(b, "w2")
    wait_for(lambda: mock_count(m2) == 8, what="B's 8 requests at worker 2")
    assert mock_count(m1) == 3, mock_count(m1)  # A's only
    close_own(bs)
    wait_unbooked(b, "B's streams closed", [m2])
    # Worker 2 filled through A too (one prompt of 1700 tokens: 107 blocks > 100): B has
    # booked nothing anywhere, and still answers 529 by the published load alone.
    held.append(open_stream(a.addr, 1700, extra=pin("w2")))
    assert held[-1].read_head()[0] == 200
    hear(b, ad2, lambda p: max(p["active_decode_blocks"], p["kv_used_blocks"]) >= 107,
         "B to hear worker 2 full")
    assert rejections(b) == (0, 0)
    for _ in range(3):
        c = open_stream(b.addr, P)
        expect_busy(c)
        c.close()
    assert rejections(b) == (3, 0), rejections(b)
    assert nothing_booked(b) is True
    assert (mock_count(m1), mock_count(m2)) == (3, 9), (mock_count(m1), mock_count(m2))
    assert b.metrics()['admit_router_workers{state="busy"}'] == 2, b.metrics()
    close_own(held)
    for rt in (a, b):
        rt.stop()
    for x in (ad1, ad2, m1, m2):
        x.stop()


# ---- 5. pinning ----------------------------------------------------------------------------

def test_pinning():
    P = 100
    m1, m2 = Mock(*NO_TOKEN), Mock(*NO_TOKEN)
    ad1, w1 = worker(m1, "--worker-id", "w1")
    ad2, w2 = worker(m2, "--worker-id", "w2")
    rt = Router([w1, w2], "--active-prefill-tokens-threshold", "150")
    rt.wait_routable(2)
    # w2 carries one stream of its own (published prefill 100, not over 150): w1 is cheaper.
    # (Its headers read: the engine counted it, before the counts below are taken.)
    held = [open_stream(ad2.addr, P)]
    assert held[0].read_head()[0] == 200
    hear(rt, ad2, lambda p: p["active_prefill_tokens"] == P, "the router to hear w2's stream")
    for name in ("w2", url_of(ad2)):  # by worker_id, and by host:port
        before = (mock_count(m1), mock_count(m2))
        held.append(open_stream(rt.addr, 20, extra=pin(name)))
        assert held[-1].read_head()[0] == 200
        arrivals((m1, m2), before, (0, 1), "the pinned one at w2")
    assert (booked(rt, "w1"), booked(rt, "w2")) == ((0, 0), (40, 4)), rt.metrics()
    # Unpinned, the same request goes to the cheaper w1.
    before = (mock_count(m1), mock_count(m2))
    held.append(open_stream(rt.addr, 20))
    assert held[-1].read_head()[0] == 200
    arrivals((m1, m2), before, (1, 0), "the unpinned one at w1")
    assert mock_count(m1) == 1
    assert booked(rt, "w1") == (20, 2)
    # w2 over the threshold by what it publishes (a second stream of its own: 200 > 150).
    held.append(open_stream(ad2.addr, P))
    assert held[-1].read_head()[0] == 200
    hear(rt, ad2, lambda p: p["active_prefill_tokens"] == 2 * P + 40,
         "the router to hear w2 full")
    for name in ("w2", url_of(ad2)):
        c = open_stream(rt.addr, 20, extra=pin(name))
        expect_busy(c)
        c.close()
    # ... while w1, which has room, takes that same request unpinned, and pinned.
    before = (mock_count(m1), mock_count(m2))
    for extra in ("", pin("w1")):
        held.append(open_stream(rt.addr, 20, extra=extra))
        assert held[-1].read_head()[0] == 200
    arrivals((m1, m2), before, (2, 0), "two more at w1")
    assert mock_count(m2) == 4, mock_count(m2)
    # A name no worker has: 503, and nothing booked for it.
    c = open_stream(rt.addr, 20, extra=pin("nobody"))
    status, hdrs, data, _ = own_response(c)
    assert status == 503, (status, data)
    assert error_message(data) == "Server unavailable: no worker named nobody", data
    assert rejections(rt) == (2, 1), rejections(rt)
    assert (booked(rt, "w1"), booked(rt, "w2")) == ((60, 6), (40, 4)), rt.metrics()
    assert (mock_count(m1), mock_count(m2)) == (3, 4), (mock_count(m1), mock_count(m2))
    close_own(held)
    wait_unbooked(rt, "the pinned streams closed", [m1, m2])
    rt.stop()
    for x in (ad1, ad2, m1, m2):
        x.stop()


# ---- 6. /load and the rejection counters ---------------------------------------------------

def test_load_shape_and_rejections():
    P = 100
    mock = Mock("--num-gpu-blocks", "64", *NO_TOKEN)
    ad, w = worker(mock, "--worker-id", "live")
    # A worker that never speaks: its publisher does not exist.
    never_sock = socket.socket()
    never_sock.bind(("127.0.0.1", 0))  # a port no one listens on, held for the test
    never = ("http://127.0.0.1:%d" % never_sock.getsockname()[1],
             "tcp://127.0.0.1:%d" % never_sock.getsockname()[1])
    rt = Router([w, never], "--active-prefill-tokens-threshold", "50", "--kv-block-size", "8")
    rt.wait_routable(1)
    ws = rt.workers()
    worker_keys = {"url", "publish", "state", "in_flight", "worker_id", "role", "alive", "routable",
                   "busy", "age_ms", "models", "prefix_index_blocks", "kv_events",
                   "kv_events_blocks", "ranks"}
    rank_keys = {"dp_rank", "alive", "booked", "published", "capacity", "block_size", "room"}
    assert [set(x) for x in ws] == [worker_keys] * 2, ws
    live, dead = ws
    assert (live["url"], live["publish"], live["worker_id"]) == (url_of(ad), ad.publish, "live")
    assert (live["alive"], live["routable"], live["busy"]) == (True, True, False), live
    assert (live["state"], live["in_flight"], dead["state"]) == ("active", 0, "active"), ws
    assert (live["role"], dead["role"]) == ("both", "both"), ws  # --worker: as published
    assert isinstance(live["age_ms"], int) and 0 <= live["age_ms"] < 1000, live
    assert [r["dp_rank"] for r in live["ranks"]] == [0] and set(live["ranks"][0]) == rank_keys
    r = live["ranks"][0]
    assert r["alive"] is True, r
    assert r["booked"] == {"prefill_tokens": 0, "decode_blocks": 0, "requests": 0}, r
    assert set(r["published"]) == {"active_prefill_tokens", "active_decode_blocks",
                                   "kv_used_blocks"}, r
    assert r["capacity"] == {"max_num_batched_tokens": 8192, "kv_total_blocks": 64,
                             "kv_block_size": 16}, r
    assert r["block_size"] == 16 and r["room"] == {"booked": True, "published": True}, r
    assert (dead["url"], dead["publish"]) == (never[0][7:], never[1]), dead
    assert (dead["worker_id"], dead["alive"], dead["routable"], dead["busy"],
            dead["age_ms"], dead["models"]) == (None, False, False, False, None, None), dead
    d = dead["ranks"]
    assert len(d) == 1 and set(d[0]) == rank_keys and d[0]["published"] is None, d
    assert d[0]["capacity"] == {"max_num_batched_tokens": None, "kv_total_blocks": None,
                                "kv_block_size": None}, d
    assert d[0]["block_size"] == 8, d  # the router's --kv-block-size for a silent worker
    assert rejections(rt) == (0, 0)

    # One request over the threshold goes in (the idle rank's one) and is booked.
    held = open_stream(rt.addr, P)
    assert held.read_head()[0] == 200
    r = load_rank(rt, url_of(ad))
    assert r["booked"] == {"prefill_tokens": P, "decode_blocks": blocks(P), "requests": 1}, r
    assert r["room"]["booked"] is False, r
    hear(rt, ad, lambda p: p["active_prefill_tokens"] == P, "the router to hear it")
    r = load_rank(rt, url_of(ad))
    assert r["room"] == {"booked": False, "published": False}, r
    assert [x["busy"] for x in rt.workers()] == [True, False]
    # all_busy: unpinned, and pinned to the full worker.
    for extra in ("", pin("live")):
        c = open_stream(rt.addr, 10, extra=extra)
        expect_busy(c)
        c.close()
    assert rejections(rt) == (2, 0), rejections(rt)
    # no_worker: pinned to the silent worker (known, not alive), and to an unknown name.
    for name, msg in ((never[0][7:], "Server unavailable: no worker available"),
                      ("ghost", "Server unavailable: no worker named ghost")):
        c = open_stream(rt.addr, 10, extra=pin(name))
        status, _, data, _ = own_response(c)
        assert status == 503 and error_message(data) == msg, (status, data)
        c.close()
    assert rejections(rt) == (2, 2), rejections(rt)
    m = rt.metrics()
    assert m['dynamo_frontend_model_rejection_total{model="mock-model",'
             'endpoint="chat_completions"}'] == 2, m
    # No live worker at all: the live one's admitd dies; once it has missed its heartbeats,
    # a request is answered 503, counted as no_worker.
    ad.proc.kill()
    _, complete = held.read_body({"transfer-encoding": "chunked"})
    assert not complete
    check_own(held)
    wait_for(lambda: not rt.workers()[0]["alive"], 15, "the dead worker not alive")
    c = open_stream(rt.addr, 10)
    status, _, data, _ = own_response(c)
    assert status == 503 and error_message(data) == "Server unavailable: no worker available"
    assert rejections(rt) == (2, 3), rejections(rt)
    wait_unbooked(rt, "the worker died")
    text = request(rt.maddr, "GET", "/metrics")[2].decode()
    assert "# TYPE admit_router_rejections_total counter\n" in text
    for f in ("admit_router_booked_prefill_tokens", "admit_router_booked_decode_blocks"):
        assert "# TYPE %s gauge\n" % f in text, f
    rt.stop()
    never_sock.close()
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("a burst within a millisecond: exactly the requests whose booked projection fits",
            test_burst_judged_on_booking)
    tap.run("prefill held to the first body byte; every fault gives the booking back",
            test_faults_release_booking)
    tap.run("a worker's 529: the booking moves with the request, and ends with it",
            test_migration_moves_booking)
    tap.run("--router-track-output-blocks books a block per block boundary crossed",
            test_track_output_blocks)
    tap.run("two routers: B avoids what A filled through the published load, then 529",
            test_two_routers_published_load)
    tap.run("X-Admit-Worker pins: cheaper or not, busy or not; unknown names 503",
            test_pinning)
    tap.run("/load's shape and admit_router_rejections_total by reason",
            test_load_shape_and_rejections)
    tap.done()
