"""admit-router's view of which workers are alive (README "admit-router", "Liveness"):
a worker killed with SIGKILL costs no request while another has room (its publisher's
connection ends: lost at once; a refused connect goes to another worker, once), is skipped
until it publishes again, and is used again when it is back; the log says lost and back.
A heartbeat claimed by a message counts for at most --max-heartbeat-ms; a rank that falls
silent is dropped from its worker's view, so its last idle numbers do not keep a full worker
open.

The workers are admitd processes with a 100 ms heartbeat in front of mock engines that do not
read their model lists (so any model goes anywhere): each client sends a marker of its own and
its own secret, which the mock echoes, so every answer is checked to be its client's own
(harness's check_own). The misbehaving publishers are loadpub's."""

import re
import threading

from harness import Admitd, LoopbackServer, Mock, Tap, marker, own_request, wait_for
from loadpub import LoadPub, dead_port, load_message
from test_router import MODEL, Router

NO_MODELS = ("--engine-models-interval-ms", "0")


def worker(mock, *args):
    ad = Admitd(mock.url, "--heartbeat-ms", "100", *(NO_MODELS + args))
    return ad, ("http://%s:%d" % ad.addr, ad.publish)


def chat(rt, m=None, timeout=30):
    """One request on a new connection with marker m (a new one by default) and its own
    secret; its answer must be its own (own_request): (marker, status, body)."""
    m = m or marker()
    body = {"model": MODEL, "stream": False, "max_tokens": 1,
            "messages": [{"role": "user", "content": "hi"}]}
    status, _, out = own_request(rt.addr, "/v1/chat/completions", body, m, auth=True,
                                 timeout=timeout)
    return m, status, out


def burst(rt, n):
    """n requests at once, each with its own marker: [(marker, status, body)] (None for a
    client whose answer was not its own: its traceback is above)."""
    out = [None] * n

    def one(i):
        out[i] = chat(rt, marker(i))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def assert_all_ok(answers):
    bad = [a for a in answers if a is None or a[1] != 200]
    assert not bad, "answers not 200 or not the client's own: %r" % bad[:5]


def routable_of(rt, url):
    hp = url.split("//", 1)[1]
    return [w["routable"] for w in rt.workers() if w["url"] == hp][0]


def models_of(rt, url):
    """The model list a worker's newest message gave (None: unknown)."""
    hp = url.split("//", 1)[1]
    return [w for w in rt.workers() if w["url"] == hp][0].get("models")


def served(mock):
    return mock.metrics()["admit_mock_requests_total"]


def test_killed_worker_costs_no_request(via):
    """SIGKILL one of two workers, then requests at once and in a row: every one 200 and its
    client's own, none 503, although the heartbeats alone would keep the dead one for 3 s
    (30 missed). With spsub the publisher's connection ends and the worker is lost at once;
    with nng's SUB, which does not say, the first refused connect marks it, and the request
    goes to the other worker."""
    mocks = [Mock("--speedup-ratio", "0"), Mock("--speedup-ratio", "0")]
    ads = [worker(m) for m in mocks]
    rt = Router([w for _, w in ads], "--subscriber=" + via, "--missed-heartbeats", "30")
    rt.wait_routable(2)
    assert_all_ok(burst(rt, 8))  # connections to both, pooled
    assert served(mocks[0]) > 0 and served(mocks[1]) > 0
    victim, (url, pub) = ads[0]
    listen = "%s:%d" % victim.addr
    victim.proc.kill()
    assert_all_ok(burst(rt, 16))
    for _ in range(16):
        m, status, body = chat(rt)
        assert status == 200, (m, status, body)
    rt.proc.wait_line(r"worker %s lost: " % re.escape(listen), 10)
    assert not routable_of(rt, url)  # skipped: it has not published since
    # (Once, or again if a message it sent before it died was read after a refusal.)
    assert rt.metrics()['admit_router_worker_changes_total{change="lost"}'] >= 1, rt.metrics()
    # Back on the same addresses: routable once it publishes, and used again.
    back = Admitd(mocks[0].url, "--heartbeat-ms", "100", "--listen", listen, "--publish", pub,
                  *NO_MODELS)
    rt.wait_routable(2)
    rt.proc.wait_line(r"worker %s back: it publishes again" % re.escape(listen), 10)
    before = served(mocks[0])
    assert_all_ok(burst(rt, 8))
    assert served(mocks[0]) > before, "the worker back took none of 8 requests"
    assert rt.metrics()['admit_router_worker_changes_total{change="back"}'] >= 1, rt.metrics()
    rt.stop()
    back.stop()
    ads[1][0].stop()
    for m in mocks:
        m.stop()


def test_refusing_worker_retried_and_skipped():
    """A worker whose publisher speaks but whose port refuses (its admitd gone, a wrong
    port): each request sent its way goes on to the other worker, once, and the worker is
    skipped until its next message, then tried again."""
    mock = Mock("--speedup-ratio", "0")
    good, wg = worker(mock)
    pub = LoadPub()
    ghost_url = "http://127.0.0.1:%d" % dead_port()
    rt = Router([(ghost_url, pub.url), wg], "--missed-heartbeats", "30")
    wait_for(lambda: pub.subscribers() == 1, what="the router to subscribe")
    pub.beat(lambda seq: load_message("ghost", seq=seq), 100)
    rt.wait_routable(2)
    for _ in range(12):
        m, status, body = chat(rt)
        assert status == 200, (m, status, body)
    assert_all_ok(burst(rt, 12))
    hp = ghost_url.split("//", 1)[1]
    rt.proc.wait_line(r"worker %s lost: its engine's port refused a connection" %
                      re.escape(hp), 10)
    assert served(mock) == 24  # every one by the good worker, none lost
    # One message more, then silence, within its window (30 x 100 ms): once refused, it
    # stays out.
    pub.stop_beat()
    # Marked (it lists the model; the beats' list is unknown, and neither weighs in the
    # choice), so that the wait below ends only once every beat sent before it has been read
    # too: messages are read in order, and a beat still on its way would make the ghost
    # routable again after the refusal below.
    pub.send(load_message("ghost", seq=pub.next_seq(), models=[MODEL]))
    wait_for(lambda: routable_of(rt, ghost_url) and models_of(rt, ghost_url) == [MODEL], 10,
             "the ghost routable after its last message")
    lost = rt.metrics()['admit_router_worker_changes_total{change="lost"}']
    for i in range(4):  # ties go round: the ghost's turn comes within two
        m, status, body = chat(rt)
        assert status == 200, (m, status, body)
        if rt.metrics()['admit_router_worker_changes_total{change="lost"}'] > lost:
            break
    assert rt.metrics()['admit_router_worker_changes_total{change="lost"}'] == lost + 1
    for _ in range(10):
        assert not routable_of(rt, ghost_url), "skipped until it publishes again"
    pub.send(load_message("ghost", seq=pub.next_seq()))
    wait_for(lambda: routable_of(rt, ghost_url), 10, "the ghost routable again")
    rt.proc.wait_line(r"worker %s back: it publishes again" % re.escape(hp), 10)
    rt.stop()
    pub.close()
    good.stop()
    mock.stop()


def test_publisher_close_loses_worker(reset):
    """The publisher's connection ends (a FIN, or a reset) while its window (300 x 100 ms)
    would keep the worker for 30 s: the worker is lost at once, with no request to tell, and
    back at its next message on the connection the router makes again."""
    pub = LoadPub()
    url = "http://127.0.0.1:%d" % dead_port()
    rt = Router([(url, pub.url)], "--missed-heartbeats", "300")
    wait_for(lambda: pub.subscribers() == 1, what="the router to subscribe")
    pub.send(load_message("w", seq=pub.next_seq()))
    rt.wait_routable(1)
    pub.close_all(reset=reset)
    rt.wait_routable(0)
    line = rt.proc.wait_line(r"worker 127\.0\.0\.1:\d+ lost: its load publisher's connection "
                             r"ended \((.*)\)", 10)
    assert ("reset" if reset else "closed the connection") in line.group(1), line.string
    assert rt.metrics()['admit_router_worker_changes_total{change="lost"}'] == 1
    assert rt.workers()[0]["alive"] is False
    wait_for(lambda: pub.subscribers() == 1, what="the router to connect again")
    pub.send(load_message("w", seq=pub.next_seq()))
    rt.wait_routable(1)
    rt.proc.wait_line(r"worker 127\.0\.0\.1:\d+ back: it publishes again", 10)
    assert rt.metrics()['admit_router_worker_changes_total{change="back"}'] == 1
    rt.stop()
    pub.close()


def test_written_request_not_retried():
    """A worker that reads the whole request and closes without a word: the request was
    written, so it is not sent again (a POST must not run twice): 503, and the other worker
    never sees it. Nor is that worker lost: it took the connection."""
    taken = []

    def read_then_close(conn):
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = [int(ln.split(b":")[1]) for ln in head.split(b"\r\n")
                  if ln.lower().startswith(b"content-length:")][0]
        while len(body) < length:
            body += conn.recv(65536)
        taken.append(len(body))
        conn.close()

    closer = LoopbackServer(read_then_close)
    mock = Mock("--speedup-ratio", "0")
    good, wg = worker(mock)
    pub = LoadPub()
    rt = Router([(closer.url, pub.url), wg])
    wait_for(lambda: pub.subscribers() == 1, what="the router to subscribe")
    pub.beat(lambda seq: load_message("closer", seq=seq), 100)
    rt.wait_routable(2)
    answers = [chat(rt) for _ in range(8)]
    broken = [a for a in answers if a[1] == 503]
    assert len(broken) == len(taken) > 0, (answers, taken)
    assert all(b"closed the connection before answering" in a[2] for a in broken), broken
    assert served(mock) == 8 - len(taken), (served(mock), taken)
    assert rt.metrics()['admit_router_worker_changes_total{change="lost"}'] == 0
    rt.stop()
    pub.close()
    closer.stop()
    good.stop()
    mock.stop()


def test_heartbeat_claim_bounded():
    """One message that claims a heartbeat of 2^53-1 ms, then silence on a connection held
    open: the worker is routable for --missed-heartbeats x --max-heartbeat-ms, not for ever."""
    pub = LoadPub()
    url = "http://127.0.0.1:%d" % dead_port()
    rt = Router([(url, pub.url)], "--missed-heartbeats", "3", "--max-heartbeat-ms", "1000")
    wait_for(lambda: pub.subscribers() == 1, what="the router to subscribe")
    pub.send(load_message("forever", heartbeat_ms=2**53 - 1))
    wait_for(lambda: rt.workers()[0]["alive"], 10, "the message to make it alive")
    wait_for(lambda: not rt.workers()[0]["alive"], 15, "the silent worker to drop out")
    assert pub.subscribers() == 1  # its connection is up all along: silence alone did it
    _, status, body = chat(rt)
    assert status == 503, (status, body)
    rt.stop()
    pub.close()


def test_silent_ranks_dropped():
    """Ranks 0-3 idle, then rank 0 alone at 99 % of its KV blocks: once ranks 1-3 are
    silent for their missed heartbeats the worker is busy (the overload answer), not kept
    open by their last idle numbers; a rank that speaks again is back."""
    pub = LoadPub()
    url = "http://127.0.0.1:%d" % dead_port()
    rt = Router([(url, pub.url)], "--active-decode-blocks-threshold", "0.9",
                "--missed-heartbeats", "3")
    wait_for(lambda: pub.subscribers() == 1, what="the router to subscribe")
    pub.beat(lambda seq: [load_message("dp4", dp_rank=r, seq=seq * 4 + r) for r in range(4)], 100)
    rt.wait_routable(1)
    wait_for(lambda: len(rt.workers()[0]["ranks"]) == 4, what="four ranks")
    assert rt.metrics()['admit_router_workers{state="busy"}'] == 0
    pub.beat(lambda seq: load_message("dp4", dp_rank=0, seq=seq * 4, kv_used=99), 100)
    wait_for(lambda: rt.metrics()['admit_router_workers{state="busy"}'] == 1, 10,
             "the worker busy once its silent ranks are dropped")
    ranks = rt.workers()[0]["ranks"]
    assert [r["alive"] for r in ranks] == [True, False, False, False], ranks
    _, status, body = chat(rt)
    assert status == 529 and b"All workers are busy" in body, (status, body)
    # Rank 2 speaks again, idle: it takes requests again (here: the worker is not busy).
    pub.beat(lambda seq: [load_message("dp4", dp_rank=0, seq=seq * 4, kv_used=99),
                          load_message("dp4", dp_rank=2, seq=seq * 4 + 2)], 100)
    wait_for(lambda: rt.metrics()['admit_router_workers{state="busy"}'] == 0, 10,
             "rank 2 back")
    rt.stop()
    pub.close()


if __name__ == "__main__":
    tap = Tap()
    tap.run("a killed worker costs no request (spsub: lost at once), skipped, used when back",
            test_killed_worker_costs_no_request, "auto")
    tap.run("a killed worker costs no request (nng: a refused connect goes elsewhere)",
            test_killed_worker_costs_no_request, "nng")
    tap.run("a refusing worker: retried on another, skipped until it publishes again",
            test_refusing_worker_retried_and_skipped)
    tap.run("a publisher's close loses its worker at once; back at its next message",
            test_publisher_close_loses_worker, False)
    tap.run("a publisher's reset loses its worker at once; back at its next message",
            test_publisher_close_loses_worker, True)
    tap.run("a request written to a worker that closes is not sent again",
            test_written_request_not_retried)
    tap.run("a heartbeat of 2^53-1 ms counts for --max-heartbeat-ms", test_heartbeat_claim_bounded)
    tap.run("silent ranks are dropped: a full rank 0 makes its worker busy",
            test_silent_ranks_dropped)
    tap.done()
