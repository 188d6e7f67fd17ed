"""admit-router in front of disaggregated prefill and decode pools (issue 27; docs/router.md,
"Disaggregated prefill and decode"): vLLM's NIXL proxy flow on mock engines playing both roles,
admission on both pools (Dynamo's test_mocker_disagg_router_overload_529 cases), the answers
naming the pool, and every failure giving back both bookings.

Each worker is a real admitd in front of admit-mock-engine (which answers a prefill leg with
kv_transfer_params and skips the prefill of a decode leg's transferred tokens), all on loopback
ports picked at run time; the router is told the roles by --prefill-worker and --decode-worker.
"""

import json
import os
import socket
import threading
import time

from harness import (LoopbackServer, Mock, RawClient, Tap, close_own, error_message, marker,
                     own_request, own_response, request, wait_for)
from test_router import MODEL, worker
from test_router import Router as _Router
from test_router_booking import content, load_rank, nothing_booked, wait_unbooked
from test_router_classes import config, dispatched, pending

CHAT = "/v1/chat/completions"


def Router(prefill, decode, *args, both=()):
    argv = ["--missed-heartbeats", "10"]
    argv += ["--prefill-worker=%s=%s" % w for w in prefill]
    argv += ["--decode-worker=%s=%s" % w for w in decode]
    return _Router(list(both), *argv, *args)


def body(tokens=40, max_tokens=8, stream=True, usage=False):
    b = {"model": MODEL, "stream": stream, "max_tokens": max_tokens,
         "messages": [{"role": "user", "content": content(tokens)}]}
    if usage:
        b["stream_options"] = {"include_usage": True}
    return b


def transfers(mock, side):
    return mock.metrics().get('admit_mock_kv_transfers_total{side="%s"}' % side, 0)


def disagg(rt, result):
    return rt.metrics().get('admit_router_disagg_total{result="%s"}' % result, 0)


def pair(*mock_args, p_args=(), d_args=()):
    """A prefill worker and a decode worker (mock + admitd each)."""
    pm = Mock("--role", "prefill", *mock_args, *p_args)
    dm = Mock("--role", "decode", *mock_args, *d_args)
    pa, pw = worker(pm)
    da, dw = worker(dm)
    return pm, dm, pa, da, pw, dw


def sse_events(data):
    out = []
    for ev in data.split(b"\n\n"):
        for line in ev.split(b"\n"):
            if line.startswith(b"data: ") and line[6:] != b"[DONE]":
                out.append(json.loads(line[6:]))
    return out


def test_handoff():
    """Prefill with max_tokens 1 and no stream, then the decode leg streams the answer; each of
    eight concurrent clients gets its own; both bookings end."""
    pm, dm, pa, da, pw, dw = pair()
    rt = Router([pw], [dw])
    try:
        rt.wait_routable(2)
        results = [None] * 8

        def one(i):
            results[i] = own_request(rt.addr, CHAT, body(tokens=60 + i, max_tokens=6), marker(i),
                                     auth=True)

        ts = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        for status, hdrs, data in results:
            assert status == 200, (status, data[:300])
            evs = sse_events(data)
            text = "".join(e["choices"][0]["delta"].get("content") or "" for e in evs
                           if e.get("choices"))
            assert len(evs) >= 6 and text, data[:300]
        assert transfers(pm, "prefill") == 8, pm.metrics()
        assert transfers(dm, "decode") == 8, dm.metrics()
        assert disagg(rt, "handoff") == 8
        # The decode leg skipped its prompt's prefill: it computed (almost) none of it.
        assert dm.metrics()["admit_mock_prompt_tokens_computed_total"] < 8 * 16, dm.metrics()
        # A non-streaming client gets the decode worker's JSON.
        status, _, data = own_request(rt.addr, CHAT, body(max_tokens=5, stream=False), marker())
        assert status == 200 and json.loads(data)["choices"][0]["finish_reason"] == "length"
        # One token asked for: the prefill leg is the answer, and asks for no transfer.
        served = dm.metrics()["admit_mock_requests_total"]
        status, _, data = own_request(rt.addr, CHAT, body(max_tokens=1), marker())
        assert status == 200 and data.endswith(b"data: [DONE]\n\n"), data[-200:]
        assert transfers(pm, "prefill") == 9, pm.metrics()
        assert dm.metrics()["admit_mock_requests_total"] == served
        assert disagg(rt, "done") == 1
        wait_unbooked(rt, "the handoffs", [pm, dm])
    finally:
        rt.stop()
        for p in (pa, da, pm, dm):
            p.stop()


def test_prefill_answers():
    """A prefill whose one token ends the request (the client's max_tokens is 1, or a stop) is
    the client's answer, JSON or SSE as asked; no decode leg is sent."""
    pm, dm, pa, da, pw, dw = pair(p_args=("--stop-after", "1"))
    rt = Router([pw], [dw])
    try:
        rt.wait_routable(2)
        status, hdrs, data = own_request(rt.addr, CHAT, body(max_tokens=20, stream=False),
                                         marker())
        assert status == 200, data
        assert json.loads(data)["choices"][0]["finish_reason"] == "stop"
        status, hdrs, data = own_request(rt.addr, CHAT, body(max_tokens=20, usage=True), marker())
        assert status == 200 and hdrs["content-type"].startswith("text/event-stream"), hdrs
        evs = sse_events(data)
        assert evs[0]["object"] == "chat.completion.chunk" and evs[-1].get("usage"), evs
        assert data.endswith(b"data: [DONE]\n\n"), data[-40:]
        assert dm.metrics()["admit_mock_requests_total"] == 0
        assert disagg(rt, "done") == 2
        wait_unbooked(rt, "answers from the prefill", [pm, dm])
    finally:
        rt.stop()
        for p in (pa, da, pm, dm):
            p.stop()


def overload_case(max_tokens, slow, thresholds, reason):
    """Dynamo's disaggregated overload case: 1 prefill + 1 decode mock, block size 4, 64
    blocks, only the gated stage slowed; requests 0.1 s apart, held open, until a 529 that
    names the gated pool."""
    fast = ("--block-size", "4", "--num-gpu-blocks", "64")
    pm, dm, pa, da, pw, dw = pair(*fast, p_args=slow[0], d_args=slow[1])
    rt = Router([pw], [dw], "--kv-block-size", "4", *thresholds)
    held = []
    try:
        rt.wait_routable(2)
        got = None
        for i in range(40):
            c = RawClient(rt.addr, marker=marker(i))
            c.post(CHAT, body(tokens=40, max_tokens=max_tokens))
            c.s.settimeout(0.1 if max_tokens > 1 else 0.05)
            try:
                status, hdrs = c.read_head()
            except (socket.timeout, TimeoutError):
                held.append(c)  # still in its prefill (or streaming, unread)
                continue
            c.s.settimeout(30)
            if status == 200:
                held.append(c)
                continue
            data, _ = c.read_body(hdrs)
            got = (status, hdrs, data)
            close_own([c])
            break
        assert got is not None, "no overload answer in 40 requests"
        status, hdrs, data = got
        assert status == 529, (status, data)
        assert hdrs.get("x-admitd-reason") == reason, hdrs
        assert reason.split("-")[0] in error_message(data), data
        assert len(held) >= 1, "the first request was refused"
    finally:
        for c in held:
            c.close()
        try:
            wait_unbooked(rt, "the held clients left")
        finally:
            rt.stop()
            for p in (pa, da, pm, dm):
                p.stop()


def test_overload_prefill_tokens():
    """--active-prefill-tokens-threshold 1 gates the prefill pool (Dynamo PR #10631's guard)."""
    overload_case(1, (("--speedup-ratio", "0.01"), ()),
                  ("--active-prefill-tokens-threshold", "1"), "prefill-busy")


def test_overload_decode_blocks():
    """--active-decode-blocks-threshold 0.2 gates the decode pool."""
    overload_case(50, ((), ("--speedup-ratio", "0.01")),
                  ("--active-decode-blocks-threshold", "0.2"), "decode-busy")


def test_pool_without_worker():
    """A model with prefill workers and no decode worker: 503 naming the empty pool; with an
    aggregated worker too, that worker takes the request whole."""
    pm = Mock("--role", "prefill")
    am = Mock()
    pa, pw = worker(pm)
    aa, aw = worker(am)
    rt = Router([pw], [])
    rt2 = Router([pw], [], both=[aw])
    try:
        rt.wait_routable(1)
        status, hdrs, data = own_request(rt.addr, CHAT, body(stream=False), marker())
        assert status == 503 and hdrs.get("x-admitd-reason") == "no-decode-worker", (status, hdrs)
        assert "no decode worker" in error_message(data), data
        rt2.wait_routable(2)
        status, hdrs, data = own_request(rt2.addr, CHAT, body(stream=False), marker())
        assert status == 200, data
        assert am.metrics()["admit_mock_requests_total"] == 1
        assert transfers(pm, "prefill") == 0
        assert disagg(rt2, "aggregated") == 1
        wait_unbooked(rt2, "the aggregated request")
    finally:
        rt.stop()
        rt2.stop()
        for p in (pa, aa, pm, am):
            p.stop()


def never_answers(conn):
    try:
        while conn.recv(65536):
            pass
    except OSError:
        pass


def closes_at_once(conn):
    try:
        conn.recv(65536)
    except OSError:
        pass
    conn.close()


def prefill_fails(serve, status, reason, timeout):
    srv = LoopbackServer(serve)
    dm = Mock("--role", "decode")
    da, dw = worker(dm)
    pa, pw = worker(type("M", (), {"url": srv.url})())
    rt = Router([pw], [dw], "--upstream-timeout-ms", timeout)
    try:
        rt.wait_routable(2)
        st, hdrs, data = own_request(rt.addr, CHAT, body(stream=False), marker())
        assert st == status and hdrs.get("x-admitd-reason") == reason, (st, hdrs, data)
        assert dm.metrics()["admit_mock_requests_total"] == 0
        assert disagg(rt, reason.replace("-", "_")) == 1
        wait_unbooked(rt, "a prefill that " + reason)
    finally:
        rt.stop()
        for p in (pa, da, dm):
            p.stop()
        srv.stop()


def test_prefill_closes():
    """A prefill worker that closes before answering: 502 once, both bookings back."""
    prefill_fails(closes_at_once, 502, "prefill-failed", "30000")


def test_prefill_timeout():
    """A prefill worker that never answers: 504 after the upstream timeout, both back."""
    prefill_fails(never_answers, 504, "prefill-timeout", "700")


def test_client_leaves_prefill():
    """A client that leaves while its (slow) prefill runs: the prefill is cancelled (its
    connection closed: the engine stops), nothing reaches the decode worker, both back."""
    pm, dm, pa, da, pw, dw = pair(p_args=("--speedup-ratio", "0.001"))
    rt = Router([pw], [dw])
    try:
        rt.wait_routable(2)
        c = RawClient(rt.addr, marker=marker())
        c.post(CHAT, body(tokens=400, stream=False))
        wait_for(lambda: pm.metrics()["admit_mock_requests_in_flight"] == 1, 10,
                 "the prefill running")
        assert nothing_booked(rt) is not True, "nothing booked during the prefill"
        c.reset()
        wait_for(lambda: disagg(rt, "cancelled") == 1, 10, "the prefill cancelled")
        wait_unbooked(rt, "a client left during its prefill", [pm, dm])
        assert pm.metrics()["admit_mock_requests_cancelled_total"] == 1
        assert dm.metrics()["admit_mock_requests_total"] == 0
    finally:
        rt.stop()
        for p in (pa, da, pm, dm):
            p.stop()


def test_bookings_per_leg():
    """Both legs booked at dispatch: during the prefill, the prefill worker its prompt's tokens
    and the decode worker its blocks; the prefill's answer gives the prefill booking back while
    the decode leg streams; the end gives back the rest."""
    pm, dm, pa, da, pw, dw = pair(p_args=("--speedup-ratio", "0.04"),
                                  d_args=("--token-interval-ms", "100"))
    rt = Router([pw], [dw], "--kv-overlap-score-weight", "0")
    purl, durl = pw[0][len("http://"):], dw[0][len("http://"):]
    c = None
    try:
        rt.wait_routable(2)
        c = RawClient(rt.addr, marker=marker())
        c.post(CHAT, body(tokens=400, max_tokens=100))
        wait_for(lambda: pm.metrics()["admit_mock_requests_in_flight"] == 1, 10,
                 "the prefill running")
        p, d = load_rank(rt, purl)["booked"], load_rank(rt, durl)["booked"]
        assert p["prefill_tokens"] == 400 and p["requests"] == 1, p
        assert d["prefill_tokens"] == 0 and d["decode_blocks"] == 25 and d["requests"] == 1, d
        status, hdrs = c.read_head()
        assert status == 200, status
        wait_for(lambda: dm.metrics()["admit_mock_requests_in_flight"] == 1, 10,
                 "the decode leg running")
        p, d = load_rank(rt, purl)["booked"], load_rank(rt, durl)["booked"]
        assert p == {"prefill_tokens": 0, "decode_blocks": 0, "requests": 0}, p
        assert d["decode_blocks"] == 25 and d["requests"] == 1, d
        c.close()
        c = None
        wait_unbooked(rt, "the stream's client left", [pm, dm])
    finally:
        if c is not None:
            c.close()
        rt.stop()
        for x in (pa, da, pm, dm):
            x.stop()


CLASSES = """
policy_classes:
  - name: interactive
    prefill_busy_threshold: 150
    decode_busy_threshold: 0.9
    quantum: 1000
default_policy_class: interactive
"""


def test_class_waits_for_both_pools():
    """A policy class holds a request until a prefill worker and a decode worker both have
    room under the class's thresholds (the prefill pool by its tokens): the second request of
    100 tokens waits while the first is in its prefill, and goes when that prefill answered."""
    pm, dm, pa, da, pw, dw = pair(p_args=("--speedup-ratio", "0.02"))
    path = config(CLASSES)
    rt = Router([pw], [dw], "--config", path, "--kv-overlap-score-weight", "0")
    clients = []
    try:
        rt.wait_routable(2)
        for i in range(2):
            c = RawClient(rt.addr, marker=marker(i))
            c.post(CHAT, body(tokens=100, max_tokens=4))
            clients.append(c)
            if i == 0:
                wait_for(lambda: pm.metrics()["admit_mock_requests_in_flight"] == 1, 10,
                         "the first prefill running")
        # Either it waits, or (wrongly) its prefill starts: whichever comes first decides.
        wait_for(lambda: pending(rt, "interactive") == 1 or
                 pm.metrics()["admit_mock_requests_total"] >= 2, 10, "the second request held")
        assert pm.metrics()["admit_mock_requests_total"] == 1, "the second prefill started"
        assert pending(rt, "interactive") == 1
        for c in clients:
            status, _, data, complete = own_response(c)
            assert status == 200 and complete, (status, data[:200])
        assert dispatched(rt, "interactive") == 2
        assert transfers(dm, "decode") == 2
        wait_unbooked(rt, "the queued pair", [pm, dm])
    finally:
        close_own(clients)
        rt.stop()
        os.unlink(path)
        for x in (pa, da, pm, dm):
            x.stop()


def test_roles_published():
    """Roles from admitd's --role, the router told only --worker; one fleet, two models: the
    aggregated model's requests go whole to its worker, the other's are disaggregated."""
    pm = Mock("--role", "prefill", "--model-name", "pd-model")
    dm = Mock("--role", "decode", "--model-name", "pd-model")
    am = Mock()
    pa, pw = worker(pm, "--role", "prefill")
    da, dw = worker(dm, "--role", "decode")
    aa, aw = worker(am)
    rt = _Router([pw, dw, aw])
    try:
        wait_for(lambda: sorted(w["role"] for w in rt.workers()) == ["both", "decode", "prefill"],
                 15, "the published roles")
        rt.wait_routable(3)
        b = body(max_tokens=4)
        b["model"] = "pd-model"
        status, _, _ = own_request(rt.addr, CHAT, b, marker())
        assert status == 200
        status, _, _ = own_request(rt.addr, CHAT, body(max_tokens=4), marker())
        assert status == 200
        assert transfers(pm, "prefill") == 1 and transfers(dm, "decode") == 1
        assert am.metrics()["admit_mock_requests_total"] == 1
        wait_unbooked(rt, "two models' requests")
    finally:
        rt.stop()
        for x in (pa, da, aa, pm, dm, am):
            x.stop()


def test_prefill_refused_goes_elsewhere():
    """A prefill worker whose admitd answers its overload status (its own cap, another
    router's traffic): the prefill leg goes, once, to another prefill worker; with none, the
    client gets the overload status naming the prefill pool. Both bookings back each time."""
    seen = []

    def refuse(conn):
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                seen.append(data)
                body = b'{"error":{"message":"Server overloaded: worker at capacity"}}'
                conn.sendall(b"HTTP/1.1 529 Site Overloaded\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        except OSError:
            pass

    srv = LoopbackServer(refuse)
    pm, dm, pa, da, pw, dw = pair()
    # The refusing worker's load comes from a real admitd's publisher (its HTTP side is srv).
    fm = Mock("--role", "prefill")
    fa, fw = worker(fm)
    full = (srv.url, fw[1])
    rt = Router([full, pw], [dw])
    rt1 = Router([full], [dw])
    try:
        rt.wait_routable(3)
        for i in range(4):
            status, _, data = own_request(rt.addr, CHAT, body(max_tokens=3), marker())
            assert status == 200, (status, data[:200])
        assert seen, "the refusing prefill worker was never tried"
        assert transfers(pm, "prefill") == 4 and transfers(dm, "decode") == 4
        assert disagg(rt, "handoff") == 4 and disagg(rt, "prefill_busy") == 0
        wait_unbooked(rt, "prefill legs that went elsewhere")
        rt1.wait_routable(2)
        status, hdrs, data = own_request(rt1.addr, CHAT, body(max_tokens=3), marker())
        assert status == 529 and hdrs.get("x-admitd-reason") == "prefill-busy", (status, hdrs)
        assert dm.metrics()["admit_mock_requests_total"] == 4
        wait_unbooked(rt1, "a prefill leg refused everywhere")
    finally:
        rt.stop()
        rt1.stop()
        for x in (pa, da, fa, pm, dm, fm):
            x.stop()
        srv.stop()


def test_decode_retry():
    """A decode worker that refuses the connection before any byte: the decode leg goes to
    another decode worker with the same transfer parameters."""
    pm, dm, pa, da, pw, dw = pair()
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # nothing listens there: connections are refused
    dm2 = Mock("--role", "decode")
    # A worker whose admitd URL refuses, but whose load messages come (its publisher is live).
    da2, dw2 = worker(dm2)
    rt = Router([pw], [("http://127.0.0.1:%d" % dead_port, dw2[1]), dw])
    try:
        rt.wait_routable(3)
        for i in range(4):
            status, _, data = own_request(rt.addr, CHAT, body(max_tokens=4), marker())
            assert status == 200, (status, data[:200])
        assert transfers(dm, "decode") == 4, dm.metrics()
        wait_unbooked(rt, "the retried decode legs")
    finally:
        rt.stop()
        for p in (pa, da, da2, pm, dm, dm2):
            p.stop()


def test_prefix_on_prefill_pool():
    """Prefix-aware selection in the prefill pool: three conversations interleaved on two
    prefill workers each keep theirs (idle workers taken in turn would move them at every
    turn), and the prefill answers' cached_tokens confirm the index's predictions."""
    pms = [Mock("--role", "prefill", "--enable-prompt-tokens-details") for _ in range(2)]
    dm = Mock("--role", "decode")
    ws = [worker(m) for m in pms]
    da, dw = worker(dm)
    rt = Router([w for _, w in ws], [dw])
    try:
        rt.wait_routable(3)
        msgs = {n: [{"role": "user", "content": "%s opens: %s" % (n, "context " * 200)}]
                for n in ("alpha", "beta", "delta")}
        where = {n: [] for n in msgs}
        for k in range(3):
            for n in msgs:
                before = [transfers(m, "prefill") for m in pms]
                b = {"model": MODEL, "stream": False, "max_tokens": 4, "messages": msgs[n]}
                status, _, data = own_request(rt.addr, CHAT, b, marker())
                assert status == 200, data[:200]
                after = [transfers(m, "prefill") for m in pms]
                where[n].append([i for i in range(2) if after[i] > before[i]])
                answer = json.loads(data)["choices"][0]["message"]["content"]
                msgs[n] = msgs[n] + [{"role": "assistant", "content": answer},
                                     {"role": "user", "content": "turn %d of %s" % (k, n)}]
                time.sleep(0.25)  # the workers' load messages catch up (100 ms heartbeats)
        assert all(len(w) == 1 for ws_ in where.values() for w in ws_), where
        assert all(len(set(w[0] for w in ws_)) == 1 for ws_ in where.values()), where
        m = rt.metrics()
        assert m["admit_router_prefix_confirmed_cached_tokens_total"] > 0, m
        wait_unbooked(rt, "the conversations")
    finally:
        rt.stop()
        for a, _ in ws:
            a.stop()
        for x in [da, dm] + pms:
            x.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("prefill then decode: the transfer's params handed on, each client its own",
            test_handoff)
    tap.run("a prefill that finished the request is the client's answer, JSON or SSE",
            test_prefill_answers)
    tap.run("Dynamo's disagg overload case: prefill tokens gate the prefill pool",
            test_overload_prefill_tokens)
    tap.run("Dynamo's disagg overload case: decode blocks gate the decode pool",
            test_overload_decode_blocks)
    tap.run("a pool with no worker: 503 naming it, or the aggregated workers take it",
            test_pool_without_worker)
    tap.run("a prefill worker closing before its answer: 502 once, both bookings back",
            test_prefill_closes)
    tap.run("a prefill worker that never answers: 504 after the timeout, both back",
            test_prefill_timeout)
    tap.run("a client leaving during its prefill cancels it, both bookings back",
            test_client_leaves_prefill)
    tap.run("both legs booked at dispatch; the prefill's released at its answer",
            test_bookings_per_leg)
    tap.run("a policy class waits until both pools have room", test_class_waits_for_both_pools)
    tap.run("roles published by admitd; an aggregated model beside a disaggregated one",
            test_roles_published)
    tap.run("the prefill pool is prefix-aware: each conversation keeps its prefill worker",
            test_prefix_on_prefill_pool)
    tap.run("a prefill worker's admitd refusing: another prefill worker, else 529 naming it",
            test_prefill_refused_goes_elsewhere)
    tap.run("a decode worker refusing before any byte: another decode worker, same params",
            test_decode_retry)
    tap.done()
