"""Each client of admit-router gets its own answer, never a piece of another's exchange
(issue 23, item 1).

The scenario that leaked: one policy class whose thresholds hold requests in its queue
(prefill_busy_threshold 30 and a decode threshold), several clients at once, each with its own
Authorization, each request on a fresh connection. A reply on its way out let the router
dispatch a queued request, whose request head was built into the buffer the reply head was
still waiting in: clients got another client's `POST ... Authorization: Bearer <their
secret> ... Host: <worker>` where their status line belonged. Every client here sends its own
marker (X-Request-Id, which the mock engine echoes) and a secret made from it; check_own()
fails on any foreign byte, marker or request field in what a client reads. Before the fix,
three of the four clients failed so in each variant, every run.

The worker is a real admitd in front of admit-mock-engine; everything on loopback ports
picked at run time.
"""

import os
import tempfile
import threading

from harness import Mock, Tap, marker, own_request, wait_for
from test_router import worker
from test_router_booking import CHAT, Router, body

CLASS = """
policy_classes:
  - name: only
    quantum: 1000
    prefill_busy_threshold: 30
    decode_busy_threshold: 0.5
"""
CLIENTS = 4
ROUNDS = 8


def crosstalk(stream):
    fd, path = tempfile.mkstemp(prefix="admit-router-crosstalk-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(CLASS)
    try:
        run(path, stream)
    finally:
        os.unlink(path)


def run(path, stream):
    # Streams: no prefill time, so a reply's head and first token (which ends its booked
    # prefill and lets a queued request go) come together. Plain: a short prefill.
    mock = Mock("--speedup-ratio", "0" if stream else "4")
    ad, w = worker(mock)
    rt = Router([w], "--config", path)
    rt.wait_routable(1)
    errors, statuses, waited = [], [], []
    lock = threading.Lock()

    def client(i):
        try:
            for k in range(ROUNDS):
                m = marker(i * ROUNDS + k)
                # A prompt of 20 tokens: two at once are over the class's 30, so requests
                # wait in its queue while others' replies go out.
                status, hdrs, data = own_request(rt.addr, CHAT, body(20, 8, stream), m,
                                                 auth=True)
                with lock:
                    statuses.append(status)
                    waited.append("x-admitd-queue-wait-ms" in hdrs)
                assert status == 200, (m, status, data[:300])
        except Exception as e:  # noqa: BLE001 - reported below, with every client's
            with lock:
                errors.append("client %d: %s: %s" % (i, type(e).__name__, e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a client hung (its answer never parsed)"
    assert not errors, "%d of %d clients failed:\n%s" % (len(errors), CLIENTS,
                                                          "\n".join(errors))
    assert statuses == [200] * CLIENTS * ROUNDS, statuses
    # Requests did wait in the class queue (the router says how long in the reply head of
    # those), else this proved nothing about a dispatch while a reply goes out.
    assert any(waited), "no request went through the class queue"
    wait_for(lambda: ad.metrics()["dynamo_engine_request"] == 0, what="the worker idle")
    rt.stop()
    ad.stop()
    mock.stop()


def test_plain_requests_get_their_own_answer():
    crosstalk(stream=False)


def test_streams_get_their_own_answer():
    crosstalk(stream=True)


if __name__ == "__main__":
    tap = Tap()
    tap.run("four clients with their own Authorization, a class queue, non-streaming: each "
            "gets its own answer", test_plain_requests_get_their_own_answer)
    tap.run("the same with streams", test_streams_get_their_own_answer)
    tap.done()
