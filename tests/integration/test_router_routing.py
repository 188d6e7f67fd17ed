"""admit-router's routing promises (README "admit-router: route around busy workers"): no
worker, draining workers, a worker's 529 retried once and skipped for about 1 s, the worker
metrics in a known state, /ready, and the second signal."""

import json
import signal
import subprocess
import tempfile
import time

import harness
from harness import (Admitd, Mock, Tap, _procs, chat_body, close_own, error_message, marker,
                     own_request, request, wait_for)
from test_router import PROMPT, Router, router_with_streams, stream_to, wait_heard, worker


class Skip(Exception):
    """A check that could not be decided here; reported as a TAP SKIP with its reason."""


class RoutingTap(Tap):
    """Tap whose checks may raise Skip: "ok N - name # SKIP reason"."""

    def run(self, name, fn, *args):
        failure = []
        harness._running_check = fn.__name__  # for marker(): Tap.run sees only `outcome`
        try:
            fn(*args)
        except Skip as e:
            for pr in list(_procs):
                pr.kill()
            self.skip(name, str(e))
            return
        except Exception as e:  # noqa: BLE001 - Tap.run reports it, traceback and all
            failure.append(e)

        def outcome():
            if failure:
                raise failure[0]

        super().run(name, outcome)


def url_of(ad):
    return "%s:%d" % ad.addr


def routable(rt, ad):
    return [w["routable"] for w in rt.workers() if w["url"] == url_of(ad)][0]


def rejected(ad):
    return ad.metrics()["dynamo_rejection_request_total"]


def mock_requests(mock):
    return mock.metrics()["admit_mock_requests_total"]


def chat(addr, max_tokens=1):
    """A request with a marker and a secret of its own; the answer must be its own."""
    return own_request(addr, "/v1/chat/completions", chat_body(max_tokens=max_tokens,
                                                              stream=False), marker(), auth=True)


def test_no_worker_503_and_ready():
    # A worker the router cannot hear: stopped (SIGSTOP) before the router starts, so it
    # sends nothing until it is continued, on the same addresses.
    mock = Mock("--speedup-ratio", "0")
    ad, w = worker(mock)
    ad.proc.p.send_signal(signal.SIGSTOP)
    try:
        rt = Router([w])
        status, _, _ = request(rt.maddr, "GET", "/ready")
        assert status == 503, status
        status, hdrs, body = chat(rt.addr)
        assert status == 503, (status, body)
        assert json.loads(body) == {"error": {
            "message": "Server unavailable: no worker available", "type": "unavailable_error",
            "param": None, "code": 503}}, body
        assert hdrs.get("retry-after") == "1", hdrs
        # It speaks: /ready follows, and requests go through.
        ad.proc.p.send_signal(signal.SIGCONT)
        wait_for(lambda: request(rt.maddr, "GET", "/ready")[0] == 200, 15, "/ready 200")
        assert chat(rt.addr)[0] == 200
        # It falls silent: /ready 503 again once it has missed its heartbeats; no worker: 503.
        ad.proc.p.send_signal(signal.SIGSTOP)
        wait_for(lambda: request(rt.maddr, "GET", "/ready")[0] == 503, 15, "/ready 503")
        status, _, body = chat(rt.addr)
        assert status == 503, (status, body)
        assert error_message(body) == "Server unavailable: no worker available", body
    finally:
        ad.proc.p.send_signal(signal.SIGCONT)
    rt.stop()
    ad.stop()
    mock.stop()


def test_draining_worker_excluded():
    # "leaving" holds one stream, "staying" two: least-loaded choice takes "leaving", until it
    # drains. The router counts a worker silent only after 1000 heartbeats (100 s), so only its
    # "draining" can take it out.
    mocks = [Mock("--token-interval-ms", "200"), Mock("--token-interval-ms", "50")]
    leaving, wl = worker(mocks[0], "--worker-id", "leaving")
    staying, ws = worker(mocks[1], "--worker-id", "staying")
    rt = Router([wl, ws], "--missed-heartbeats", "1000")
    rt.wait_routable(2)
    held = [stream_to(leaving.addr)] + [stream_to(staying.addr, max_tokens=2000)
                                        for _ in range(2)]
    wait_for(lambda: staying.metrics()["dynamo_engine_request"] == 2, what="staying's requests")
    wait_for(lambda: leaving.metrics()["dynamo_engine_request"] == 1, what="leaving's request")
    wait_heard(rt, staying, "staying")
    # Before the drain the next request goes to "leaving".
    assert chat(rt.addr)[0] == 200
    assert [mock_requests(m) for m in mocks] == [2, 2]
    leaving.proc.p.send_signal(signal.SIGTERM)
    leaving.proc.wait_line("draining: 1 request in flight", 10)
    wait_for(lambda: not routable(rt, leaving), 15, "the router to drop the draining worker")
    assert routable(rt, staying)
    for _ in range(3):
        assert chat(rt.addr)[0] == 200
    assert [mock_requests(m) for m in mocks] == [2, 5]
    assert leaving.metrics()['admitd_requests_total{outcome="draining"}'] == 0
    # Its stream finishes: then it exits 0 by itself.
    close_own(held[:1])
    assert leaving.proc.p.wait(20) == 0
    close_own(held[1:])
    rt.stop()
    staying.stop()
    for m in mocks:
        m.stop()


def quiet_full_worker(i):
    """An admitd with its one slot and two-place queue taken for minutes, that publishes only
    on a change (heartbeat 60 s) and never times its queue out: once full it sends nothing,
    so no load message can end a router's mark early."""
    # KV blocks of 4096 tokens: the running request's KV (and so the scraped usage) does
    # not change while it generates.
    mock = Mock("--token-interval-ms", "50", "--block-size", "4096")
    ad = Admitd(mock.url, "--heartbeat-ms", "60000", "--worker-id", "full%d" % i,
                "--engine-request-limit", "1", "--request-queue-limit", "2",
                "--queue-timeout-ms", "0")
    return mock, ad


def quiet_since(rt, ads, t0):
    """True when the router has heard none of ads since t0 (time.monotonic, the router's clock
    too). The router computed each age before now, so now - age is no earlier than the
    message; 5 ms cover its whole-millisecond arithmetic."""
    ages = {w["url"]: w["age_ms"] for w in rt.workers()}
    now = time.monotonic()
    return all(ages[url_of(a)] is not None and now - ages[url_of(a)] / 1000.0 + 0.005 < t0
               for a in ads)


def test_refusal_retried_once_then_skipped():
    fulls = [quiet_full_worker(i) for i in range(2)]
    fads = [ad for _, ad in fulls]
    rmock = Mock("--token-interval-ms", "50")
    roomy, wr = worker(rmock, "--engine-request-limit", "10", "--worker-id", "roomy")
    rt = Router([("http://" + url_of(ad), ad.publish) for ad in fads] + [wr])
    # A quiet worker is heard only when it changes: a short request changes it (a slot taken
    # and given back) until the router has heard it.
    for ad in fads:
        wait_for(lambda ad=ad: chat(ad.addr)[0] == 200 and routable(rt, ad), 30,
                 "the router to hear %s" % url_of(ad))
    wait_for(lambda: routable(rt, roomy), 15, "the router to hear roomy")
    # Load 3 (1 running + 2 queued, no room) on each full worker, 5 running on roomy: the
    # full ones are always tried first.
    held = []
    for ad in fads:
        # Not streamed: no first token, no output counted, so nothing it books changes.
        held += [stream_to(ad.addr, max_tokens=3000, stream=False) for _ in range(3)]
        wait_for(lambda ad=ad: ad.metrics()["dynamo_request_queue"] == 2, what="queue full")
    held += [stream_to(roomy.addr, max_tokens=2000) for _ in range(5)]
    wait_for(lambda: roomy.metrics()["dynamo_engine_request"] == 5, what="roomy's requests")
    wait_heard(rt, roomy, "roomy")
    # The engine's KV as admitd scrapes it (100 ms apart) is in the message too: the second
    # scrape after the fill started after it, and the ones after it find the same.
    def scrapes(ad):
        return ad.metrics()['admitd_engine_scrapes_total{result="ok"}']

    for ad in fads:
        first = scrapes(ad)
        wait_for(lambda ad=ad: scrapes(ad) >= first + 2, what="two scrapes of a full engine")

    def rejections():
        return sum(v for k, v in rt.metrics().items()
                   if k.startswith("dynamo_frontend_model_rejection_total"))

    window_checked = expiry_checked = False
    for rnd in range(1, 7):
        wait_for(lambda: all(routable(rt, ad) for ad in fads), 15, "earlier marks over")
        before, served, rej = [rejected(ad) for ad in fads], mock_requests(rmock), rejections()
        # Both full workers refuse: the client gets the second refusal, and roomy, which
        # would take a third attempt, sees nothing.
        t0 = time.monotonic()
        status, hdrs, body = chat(rt.addr)
        t0r = time.monotonic()
        assert status == 529, (status, body)
        assert error_message(body) == "Server overloaded: worker at capacity", body
        assert hdrs.get("x-admitd-reason") == "queue-full", hdrs
        assert [rejected(ad) - b for ad, b in zip(fads, before)] == [1, 1]
        assert mock_requests(rmock) == served
        assert rejections() == rej + 1
        # For the next half second both are skipped: requests go to roomy.
        window = []
        while not window or time.monotonic() < t0 + 0.5:
            st = chat(rt.addr)[0]
            window.append((st, time.monotonic()))
        hits = sum(rejected(ad) - b - 1 for ad, b in zip(fads, before))
        # Both marks end about 1 s after they were set (between t0 and t0r).
        seen = []
        while True:
            sent = time.monotonic()
            back = all(routable(rt, ad) for ad in fads)
            seen.append((sent, time.monotonic(), back))
            if back or sent > t0r + 10:
                break
            time.sleep(0.01)
        quiet = quiet_since(rt, fads, t0)
        if quiet and window[-1][1] < t0 + 0.98:
            # Decided: every window request was answered before any mark could end.
            assert hits == 0, "refusing workers asked %d times within their 1 s" % hits
            assert {st for st, _ in window} == {200}, window
            window_checked = True
        if hits == 0:
            # Nothing renewed a mark: both are over 1 s after they were set, at the latest.
            late = [s for s, _, b in seen if s > t0r + 1.01 and not b]
            assert not late, "still skipped %.3f s after the refusal" % (late[-1] - t0r)
            if quiet:
                # ... and not before (no load message ended them early).
                early = [r for _, r, b in seen if b and r < t0 + 0.98]
                assert not early, "skipped only %.3f s" % (early[0] - t0)
                expiry_checked = True
        if window_checked and expiry_checked:
            print("# decided in round %d" % rnd, flush=True)
            break
    close_own(held)
    if not (window_checked and expiry_checked):
        raise Skip("6 rounds too slow or disturbed by a load message (window %s, expiry %s)"
                   % (window_checked, expiry_checked))
    rt.stop()
    for mock, ad in fulls:
        ad.stop()
        mock.stop()
    roomy.stop()
    rmock.stop()


def test_lone_refusal_nowhere_to_retry():
    # The only worker refuses: the retry finds none left (it is excluded, and skipped). It is
    # alive but full, so the router answers with the overload status itself (README).
    mock = Mock("--token-interval-ms", "50")
    full, w = worker(mock, "--engine-request-limit", "1", "--request-queue-limit", "2")
    rt = Router([w])
    rt.wait_routable(1)
    held = full.fill(3, queued=2, max_tokens=2000)
    for n in (1, 2):
        status, _, body = chat(rt.addr)
        assert status == 529, (status, body)
        assert error_message(body) == "All workers are busy, please retry later", body
        if n == 1:
            assert rejected(full) == 1  # asked once
    close_own(held)
    rt.stop()  # exit 0: under ASan, nothing freed was touched
    full.stop()
    mock.stop()


def gauge_of(samples, what, wid, rank):
    return samples['dynamo_frontend_worker_active_%s{worker_id="%s",dp_rank="%d",'
                   'worker_type="decode"}' % (what, wid, rank)]


def test_worker_metrics_known_state():
    # "busy": one request in a prefill of minutes, prompt over the 100-token threshold.
    # "free": two data-parallel ranks, one request on each that never gets a token.
    # "never": a worker whose publisher does not exist.
    slow = Mock("--speedup-ratio", "0.0001")
    idle = Mock("--speedup-ratio", "0", "--token-interval-ms", "600000",
                "--data-parallel-size", "2", "--num-gpu-blocks", "64")
    busy, wb = worker(slow, "--worker-id", "busy")
    free, wf = worker(idle, "--worker-id", "free")
    never = ("http://127.0.0.1:9", "ipc://%s/none.ipc" % tempfile.mkdtemp())
    rt = Router([wb, wf, never], "--active-prefill-tokens-threshold", "100")

    def states():
        m = rt.metrics()
        return tuple(m['admit_router_workers{state="%s"}' % s]
                     for s in ("configured", "routable", "busy"))

    wait_for(lambda: states()[1] == 2, 15, "two routable workers")
    assert states() == (3, 2, 0), states()
    wait_for(lambda: 'admitd_active_decode_blocks{dp_rank="1"}' in free.metrics(),
             what="free's second rank")
    held = [stream_to(busy.addr, content=PROMPT)] + [stream_to(free.addr) for _ in range(2)]
    wait_for(lambda: busy.metrics()["dynamo_engine_request"] == 1, what="busy's request")
    wait_for(lambda: free.metrics()["dynamo_engine_request"] == 2, what="free's requests")
    # One more straight to free's engine: its KV in use is then more than admitd booked, and
    # the decode gauge is the booked one.
    held.append(stream_to(idle.addr))
    wait_for(lambda: idle.metrics()["admit_mock_requests_total"] == 3, what="the engine's own")
    fams = ("dynamo_frontend_worker_active_decode_blocks",
            "dynamo_frontend_worker_active_prefill_tokens")
    own = {"dynamo_frontend_worker_active_decode_blocks": "admitd_active_decode_blocks",
           "dynamo_frontend_worker_active_prefill_tokens": "admitd_active_prefill_tokens"}

    def expected():
        want = {}
        for ad, wid in ((busy, "busy"), (free, "free")):
            m = ad.metrics()
            for f in fams:
                for rank in (0, 1):
                    k = '%s{dp_rank="%d"}' % (own[f], rank)
                    if k in m:
                        want['%s{worker_id="%s",dp_rank="%d",worker_type="decode"}' %
                             (f, wid, rank)] = m[k]
        return want

    want = expected()
    # The known state: each of free's ranks holds one request, busy's one rank is over.
    assert len(want) == 6, want
    assert want['dynamo_frontend_worker_active_prefill_tokens{worker_id="busy",dp_rank="0",'
                'worker_type="decode"}'] > 100, want
    for rank in (0, 1):
        assert 0 < gauge_of(want, "prefill_tokens", "free", rank) <= 100, want
        assert gauge_of(want, "decode_blocks", "free", rank) > 0, want

    def got():
        m = rt.metrics()
        return {k: v for k, v in m.items() if k.startswith(fams)}

    try:
        wait_for(lambda: got() == want, 15, "the router's per-worker gauges to be admitd's")
    except AssertionError:
        raise AssertionError("router's gauges %r, admitd's %r" % (got(), want))
    # (the decode blocks booked are not the engine's KV in use: its own request is not in them)
    booked = sum(gauge_of(want, "decode_blocks", "free", r) for r in (0, 1))

    def kv():
        ranks = json.loads(request(free.maddr, "GET", "/load")[2])["ranks"]
        return sum(r["kv_used_blocks"] or 0 for r in ranks)

    wait_for(lambda: kv() > booked, what="free's engine KV above its booked blocks")
    assert got() == want
    assert states() == (3, 2, 1), states()
    assert expected() == want  # nothing moved meanwhile
    text = request(rt.maddr, "GET", "/metrics")[2].decode()
    for f in fams + ("admit_router_workers",):
        assert "# TYPE %s gauge\n" % f in text, f
    close_own(held)
    rt.stop()
    for ad in (busy, free):
        ad.stop()
    for mk in (slow, idle):
        mk.stop()


def test_second_signal_exits_at_once():
    # A drain that would last a minute (the stream: 1000 tokens 100 ms apart).
    mock, ad, rt, (h,) = router_with_streams(100, 60000, 1, 1000)
    status, hdrs = h.read_head()
    assert status == 200, (status, hdrs)
    rt.proc.p.send_signal(signal.SIGTERM)
    rt.proc.wait_line("draining: 1 request in flight", 10)
    rt.proc.p.send_signal(signal.SIGTERM)
    try:
        rc = rt.proc.p.wait(20)
    except subprocess.TimeoutExpired:
        raise AssertionError("the router still runs 20 s after the second signal")
    assert rc == 0, (rc, rt.proc.lines[-5:])
    rt.proc.wait_line("second signal: exiting now", 10)
    body, complete = h.read_body(hdrs)
    assert not complete, "the stream was cut, it must not end cleanly"
    close_own([h])
    wait_for(lambda: ad.metrics()["dynamo_engine_request"] == 0, what="worker slot freed")
    ad.stop()
    mock.stop()


if __name__ == "__main__":
    tap = RoutingTap()
    tap.run("no routable worker: 503 no worker available; /ready follows the workers",
            test_no_worker_503_and_ready)
    tap.run("a draining worker gets no request while another serves",
            test_draining_worker_excluded)
    tap.run("a 529 is retried once; both refusing workers are skipped for about 1 s",
            test_refusal_retried_once_then_skipped)
    tap.run("a lone worker's 529 with nowhere to retry: 529 all workers are busy",
            test_lone_refusal_nowhere_to_retry)
    tap.run("worker gauges and admit_router_workers in a known state",
            test_worker_metrics_known_state)
    tap.run("a second SIGTERM during a drain exits at once, with 0",
            test_second_signal_exits_at_once)
    tap.done()
