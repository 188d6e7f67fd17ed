"""Several admit-routers in front of the same admitd workers, under a load above the fleet's
capacity (issue 15, item 5).

Three admitd workers, each in front of its own admit-mock-engine with a cap of N engine
slots and a queue of Q, and three admit-routers that all route to all three, none knowing of
the others. Client threads send requests to the routers in turn, more at once than the fleet
holds (3 x (N + Q)), and retry shortly after an overload answer. The same load runs twice:

  with signals     the routers have a decode-blocks threshold that a worker crosses when
                   its N slots are taken (each request books ceil(64 / 16) = 4 of the
                   engine's 16 blocks; 3 x 4 / 16 = 0.75 > 0.7, 2 x 4 / 16 = 0.5 is not), so
                   they skip a worker by what it publishes and by what they booked themselves;
  without signals  the routers have no threshold: they send everything on, and only the
                   workers' own 529s (and the overload marks these leave) stop anything.

What it proves, end to end: no engine ever had more than N requests (the mock's own
admit_mock_requests_in_flight_max, running and waiting together, never above N: admitd's cap
holds whatever the number of routers in front), and that the routers shed the overload
themselves when they use the workers' signals: the share of 529s that came from a worker
(admitd's dynamo_rejection_request_total, over that plus the routers'
admit_router_rejections_total{reason="all_busy"}) is lower with the signals than without.
The figures are printed side by side as TAP comments; the README quotes a run.
"""

import threading
import time

from harness import Admitd, Mock, RawClient, Tap, marker, own_response, wait_for
from test_router import MODEL
from test_router_booking import CHAT, Router, content

N = 3          # engine slots per worker (--engine-request-limit)
Q = 2          # queue per worker (--request-queue-limit)
WORKERS = 3
ROUTERS = 3
CLIENTS = 36   # at once: above 3 x (N + Q) = 15
SECONDS = 6.0
BACKOFF_S = 0.02  # a client waits this long after an overload answer
PROMPT_TOKENS = 64  # 4 blocks of 16
MAX_TOKENS = 8
TOKEN_MS = 30   # the mock's gap between tokens: a request holds its slot ~240 ms
SIGNALS = ("--active-decode-blocks-threshold", "0.7")


class Fleet:
    def __init__(self, router_args):
        self.mocks, self.workers = [], []
        pairs = []
        for i in range(WORKERS):
            mock = Mock("--speedup-ratio", "0", "--token-interval-ms", str(TOKEN_MS),
                        "--block-size", "16", "--num-gpu-blocks", "16")
            ad = Admitd(mock.url, "--engine-request-limit", str(N), "--request-queue-limit",
                        str(Q), "--heartbeat-ms", "100", "--engine-metrics-interval-ms", "50",
                        "--worker-id", "w%d" % i)
            self.mocks.append(mock)
            self.workers.append(ad)
            pairs.append(("http://%s:%d" % ad.addr, ad.publish))
        self.routers = [Router(pairs, *router_args) for _ in range(ROUTERS)]
        for rt in self.routers:
            rt.wait_routable(WORKERS)

    def stop(self):
        for p in self.routers + self.workers + self.mocks:
            p.stop()


def load(fleet):
    """CLIENTS threads, each sending one request at a time to the routers in turn for
    SECONDS. Returns {status: count} and {X-Admitd-Reason of a 529: count}."""
    statuses, reasons, lock = {}, {}, threading.Lock()
    deadline = time.monotonic() + SECONDS
    body = {"model": MODEL, "stream": False, "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": content(PROMPT_TOKENS)}]}

    def client(k):
        i = k
        while time.monotonic() < deadline:
            rt = fleet.routers[i % ROUTERS]
            i += 1
            try:
                # Each request with a marker and a secret of its own: its answer must be its own.
                c = RawClient(rt.addr, marker=marker(k * 100000 + i), auth=True)
                c.post(CHAT, body)
                status, hdrs, _, _ = own_response(c)
                c.close()
            except (OSError, EOFError) as e:
                status, hdrs = "error: %s" % type(e).__name__, {}
            except AssertionError as e:  # counted as a status: check_run shows it
                status, hdrs = "not its own answer: %s" % e, {}
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                if status == 529:
                    why = hdrs.get("x-admitd-reason", "-")
                    reasons[why] = reasons.get(why, 0) + 1
            if status != 200:
                time.sleep(BACKOFF_S)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses, reasons


def run(router_args):
    fleet = Fleet(router_args)
    try:
        statuses, reasons = load(fleet)
        for ad in fleet.workers:
            ad.wait_idle()
        worker_529 = sum(ad.metrics()["dynamo_rejection_request_total"] for ad in fleet.workers)
        router_529 = sum(rt.metrics()['admit_router_rejections_total{reason="all_busy"}']
                         for rt in fleet.routers)
        peaks = [(m.metrics()["admit_mock_requests_in_flight_max"],
                  m.metrics()["admit_mock_requests_running_peak"]) for m in fleet.mocks]
    finally:
        fleet.stop()
    return {"statuses": statuses, "reasons": reasons, "worker_529": worker_529,
            "router_529": router_529, "peaks": peaks}


results = {}


def check_run(name, router_args):
    r = run(router_args)
    results[name] = r
    print("# %s: statuses %r, 529 reasons %r, engine peaks (in flight, running) %r" %
          (name, r["statuses"], r["reasons"], r["peaks"]), flush=True)
    # No engine ever had more than N requests, running and waiting together.
    for in_flight, running in r["peaks"]:
        assert in_flight <= N and running <= N, r["peaks"]
    # The load reached the cap: the proof is not vacuous.
    assert max(p[0] for p in r["peaks"]) == N, r["peaks"]
    assert r["statuses"].get(200, 0) > 0, r["statuses"]
    assert r["worker_529"] + r["router_529"] > 0, "no overload at all: the load is too light"
    # Overload answers and successes only: no 5xx of another kind, no broken connection.
    assert set(r["statuses"]) <= {200, 529}, r["statuses"]


def test_with_signals():
    check_run("with signals", SIGNALS)


def test_without_signals():
    check_run("without signals", ())


def share(r):
    return r["worker_529"] / (r["worker_529"] + r["router_529"])


def test_routers_shed_most_themselves():
    w, wo = results["with signals"], results["without signals"]
    print("# %-16s %12s %12s %14s %10s %10s" % ("routers", "worker 529s", "router 529s",
                                               "worker share", "200s", "clients' 529s"))
    for name, r in (("with signals", w), ("without signals", wo)):
        print("# %-16s %12d %12d %13.1f%% %10d %10d" % (
            name, r["worker_529"], r["router_529"], 100 * share(r), r["statuses"].get(200, 0),
            r["statuses"].get(529, 0)), flush=True)
    assert share(w) < share(wo), (share(w), share(wo))


if __name__ == "__main__":
    tap = Tap()
    tap.run("3 routers, 3 workers, with the workers' signals: no engine above N", test_with_signals)
    tap.run("3 routers, 3 workers, without the signals: no engine above N", test_without_signals)
    if len(results) == 2:
        tap.run("the routers shed most of the overload themselves with the signals",
                test_routers_shed_most_themselves)
    else:
        tap.skip("the routers shed most of the overload themselves with the signals",
                 "a run above failed")
    tap.done()
