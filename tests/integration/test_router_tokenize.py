"""admit-router --tokenize (issue 26): a text request is keyed by the token ids its worker's
POST /tokenize gives (through admitd, outside its gate), so a chat request and the same
conversation sent as token ids meet on one worker and the exact keys hit; a tokenizer that
fails, answers late or never leaves the request keyed by its text; a client that hangs up
while its tokenizer is asked frees everything; concurrent clients each get their own answer."""

import json
import signal
import threading
import time

from harness import (RawClient, Tap, check_own, close_own, marker, own_request, request,
                     scrape, wait_for)
from test_router import MODEL
from test_router_prefix import BLOCK, CHAT, cached_of, opening, served, stop
from test_router_prefix import fleet as prefix_fleet

MATCHED = "admit_router_prefix_matched_blocks_total"
TOKENIZED = 'admit_router_tokenize_total{result="%s"}'


def fleet(*router_args, n=2, mock_args=("--speedup-ratio", "0")):
    """test_router_prefix's fleet (n mocks with a prefix cache, an admitd each), its router
    with --tokenize."""
    return prefix_fleet("--tokenize", *router_args, n=n, mock_args=mock_args)


def engine_ids(mock, messages):
    """The ids the engine's chat path sees for messages: its own /tokenize."""
    status, _, data = request(mock.addr, "POST", "/tokenize", {
        "model": MODEL, "messages": messages, "add_generation_prompt": True})
    assert status == 200, (status, data)
    return json.loads(data)["tokens"]


def send(rt, mocks, path, body, timeout=30):
    """One request with a marker of its own: (index of the mock that served it, the answer)."""
    before = served(mocks)
    status, _, data = own_request(rt.addr, path, body, marker(), timeout=timeout)
    assert status == 200, (status, data)
    after = served(mocks)
    took = [i for i in range(len(mocks)) if after[i] > before[i]]
    assert len(took) == 1, (before, after)
    return took[0], json.loads(data)


def tokenizer_calls(ads):
    return sum(ad.metrics()["admitd_tokenizer_requests_total"] for ad, _ in ads)


def test_text_and_ids_meet_on_one_worker():
    """Four sessions, each sent once as chat text and once as the engine's token ids (every
    other one ids first): both go to one worker, the second's exact keys match every full
    block of the first's, and the engine finds them cached."""
    mocks, ads, rt = fleet()
    try:
        for k, name in enumerate(["alpha", "beta", "gamma", "delta"]):
            msgs = [{"role": "user", "content": opening(name)}]
            ids = engine_ids(mocks[0], msgs)
            text = {"model": MODEL, "max_tokens": 4, "messages": msgs}
            exact = {"model": MODEL, "max_tokens": 4, "prompt": ids}
            first, second = ((CHAT, text), ("/v1/completions", exact)) if k % 2 == 0 else (
                ("/v1/completions", exact), (CHAT, text))
            i, _ = send(rt, mocks, *first)
            # Think time, as test_router_prefix's sessions: the workers publish their load
            # every 100 ms, and a request just answered would still count there.
            time.sleep(0.25)
            m0 = rt.metrics()[MATCHED]
            j, answer = send(rt, mocks, *second)
            assert i == j, (name, i, j)
            assert rt.metrics()[MATCHED] - m0 == len(ids) // BLOCK, (name, len(ids))
            assert cached_of(answer["usage"]) >= (len(ids) // BLOCK) * BLOCK, answer["usage"]
        m = rt.metrics()
        assert m[TOKENIZED % "ok"] == 4, m
        assert sum(m[TOKENIZED % r] for r in ("timeout", "failed", "status", "invalid")) == 0, m
        assert m["admit_router_tokenize_seconds_count"] == 4, m
        # Requests with ids of their own never ask: one /tokenize per text request, at admitd.
        assert tokenizer_calls(ads) == 4
        # A client's own /tokenize goes through the router as a GET does: to a worker,
        # neither booked nor tokenized first.
        msgs = [{"role": "user", "content": opening("own")}]
        status, _, data = own_request(rt.addr, "/tokenize", {"model": MODEL, "messages": msgs},
                                      marker())
        assert status == 200 and json.loads(data)["tokens"] == engine_ids(mocks[0], msgs), data
        m = rt.metrics()
        assert m["admitd_tokenizer_requests_total"] == 1 and m[TOKENIZED % "ok"] == 4, m
        assert tokenizer_calls(ads) == 5
    finally:
        stop(mocks, ads, rt)


def test_failing_tokenizer_falls_back_to_text_keys():
    """A tokenizer answering 500: the request goes on at once, keyed by its text (a second
    turn of the same text still meets the first on its worker)."""
    mocks, ads, rt = fleet(mock_args=("--speedup-ratio", "0", "--tokenize-status", "500"))
    try:
        msgs = [{"role": "user", "content": opening("failing")}]
        body = {"model": MODEL, "max_tokens": 4, "messages": msgs}
        i, _ = send(rt, mocks, CHAT, body, timeout=5)
        time.sleep(0.25)
        m0 = rt.metrics()[MATCHED]
        j, _ = send(rt, mocks, CHAT, body, timeout=5)
        m = rt.metrics()
        assert i == j and m[MATCHED] > m0, (i, j, m)
        assert m[TOKENIZED % "status"] == 2 and m[TOKENIZED % "ok"] == 0, m
        assert tokenizer_calls(ads) == 2
    finally:
        stop(mocks, ads, rt)


def test_silent_tokenizer_times_out_to_text_keys():
    """A tokenizer that never answers: after --tokenize-timeout-ms the request goes on."""
    mocks, ads, rt = fleet("--tokenize-timeout-ms", "100", n=1,
                           mock_args=("--speedup-ratio", "0", "--tokenize-hang"))
    try:
        body = {"model": MODEL, "max_tokens": 4,
                "messages": [{"role": "user", "content": opening("silent")}]}
        send(rt, mocks, CHAT, body, timeout=5)
        m = rt.metrics()
        assert m[TOKENIZED % "timeout"] == 1 and m[TOKENIZED % "ok"] == 0, m
        assert m["admit_router_tokenize_seconds_count"] == 1, m
        # It waited for the deadline (libevent's timer may fire a little early on our clock),
        # not ended at once.
        assert m["admit_router_tokenize_seconds_sum"] >= 0.05, m
        # The router closed its call: admitd let go of the engine's request too.
        ad = ads[0][0]
        wait_for(lambda: ad.metrics()["admitd_bypass_requests_in_flight"] == 0, 5,
                 "the tokenize call gone from admitd")
    finally:
        stop(mocks, ads, rt)


def test_hang_up_while_tokenizing():
    """A client that leaves while its tokenizer is asked: the call is cancelled (admitd sees
    its connection close), the request never reaches an engine, and the router serves on."""
    mocks, ads, rt = fleet("--tokenize-timeout-ms", "60000", n=1,
                           mock_args=("--speedup-ratio", "0", "--tokenize-hang"))
    ad = ads[0][0]
    try:
        c = RawClient(rt.addr, marker=marker())
        c.post(CHAT, {"model": MODEL, "max_tokens": 4,
                      "messages": [{"role": "user", "content": opening("leaving")}]})
        wait_for(lambda: ad.metrics()["admitd_bypass_requests_in_flight"] == 1, 5,
                 "the tokenize call at admitd")
        check_own(c)
        c.reset()
        wait_for(lambda: rt.metrics()[TOKENIZED % "cancelled"] == 1, 5, "the call cancelled")
        wait_for(lambda: ad.metrics()["admitd_bypass_requests_in_flight"] == 0, 5,
                 "the tokenize call gone from admitd")
        m = rt.metrics()
        assert m['admitd_requests_total{outcome="cancelled"}'] == 1, m
        assert m["admit_router_tokenize_seconds_count"] == 0, m
        assert scrape(mocks[0].addr)["admit_mock_requests_total"] == 0
        # Requests with token ids of their own do not ask, and go on as before.
        send(rt, mocks, "/v1/completions", {"model": MODEL, "max_tokens": 2,
                                            "prompt": list(range(40))}, timeout=5)
    finally:
        stop(mocks, ads, rt)


def test_drain_with_a_call_in_flight():
    """A router stopped (SIGTERM) while a request waits on its tokenizer: once
    --drain-timeout-ms runs out the request is answered as a held one is (503, the drain's),
    the call is ended, and the router exits 0 (no leak under ASan)."""
    mocks, ads, rt = fleet("--tokenize-timeout-ms", "60000", "--drain-timeout-ms", "300", n=1,
                           mock_args=("--speedup-ratio", "0", "--tokenize-hang"))
    ad = ads[0][0]
    try:
        c = RawClient(rt.addr, marker=marker())
        c.post(CHAT, {"model": MODEL, "max_tokens": 4,
                      "messages": [{"role": "user", "content": opening("draining")}]})
        wait_for(lambda: ad.metrics()["admitd_bypass_requests_in_flight"] == 1, 5,
                 "the tokenize call at admitd")
        rt.proc.p.send_signal(signal.SIGTERM)
        status, hdrs = c.read_head()
        assert status == 503 and hdrs.get("x-admitd-reason") == "draining", (status, hdrs)
        check_own(c)
        c.close()
        assert rt.proc.p.wait(30) == 0  # (stop() would signal it again)
        wait_for(lambda: ad.metrics()["admitd_bypass_requests_in_flight"] == 0, 5,
                 "the tokenize call gone from admitd")
        assert scrape(mocks[0].addr)["admit_mock_requests_total"] == 0
    finally:
        stop(mocks, ads, rt)


def test_concurrent_clients_get_their_own_answers():
    """Twelve text requests at once, each held on its own tokenize call: each client gets its
    own answer, and every call came back with ids."""
    mocks, ads, rt = fleet()
    n = 12
    clients = [RawClient(rt.addr, marker=marker(i)) for i in range(n)]
    results = [None] * n
    go = threading.Barrier(n)

    def one(i):
        go.wait()
        clients[i].post(CHAT, {"model": MODEL, "max_tokens": 4, "stream": i % 2 == 0,
                               "messages": [{"role": "user",
                                             "content": opening("client%d" % i)}]})
        results[i] = clients[i].response()[0]

    try:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        close_own(clients)
        assert results == [200] * n, results
        m = rt.metrics()
        assert m[TOKENIZED % "ok"] == n, m
        assert tokenizer_calls(ads) == n
    finally:
        for c in clients:
            c.close()
        stop(mocks, ads, rt)


if __name__ == "__main__":
    tap = Tap()
    tap.run("a chat request and its token ids meet on one worker; the exact keys hit",
            test_text_and_ids_meet_on_one_worker)
    tap.run("a tokenizer answering 500: the text keys, at once", test_failing_tokenizer_falls_back_to_text_keys)
    tap.run("a silent tokenizer: the text keys after --tokenize-timeout-ms",
            test_silent_tokenizer_times_out_to_text_keys)
    tap.run("a client that hangs up while its tokenizer is asked frees everything",
            test_hang_up_while_tokenizing)
    tap.run("a drain with a tokenize call in flight: 503 at its end, a clean exit",
            test_drain_with_a_call_in_flight)
    tap.run("concurrent text requests, each with its own tokenize call, get their own answers",
            test_concurrent_clients_get_their_own_answers)
    tap.done()
