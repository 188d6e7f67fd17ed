"""admit-router's prefix-aware selection (issue 25): a conversation's turns go back to the
worker that holds its prefix while it has room; --kv-overlap-score-weight 0 is load only;
the answers' cached_tokens correct the index (an engine restarted empty); a hot shared
opening spreads once the worker that holds it is full; the policy-class queue judges a
request by its uncached tokens (its gate, its prompt_tokens rules and its cost)."""

import json
import os
import time

from harness import (Mock, RawClient, Tap, check_own, close_own, marker, own_request,
                     own_response, request, scrape, wait_for)
from test_router import MODEL, Router, worker
from test_router_classes import config as classes_file, dispatched, pending, wait_queued
from test_router_reload import config, hup, write

CHAT = "/v1/chat/completions"
BLOCK = 16


def opening(name):
    """A first user message of its own per session, many blocks long."""
    return ("Session %s. " % name) + " ".join("%s-word-%d" % (name, i) for i in range(120))


MOCK_ARGS = ("--block-size", str(BLOCK), "--num-gpu-blocks", "4096",
             "--enable-prompt-tokens-details")


def fleet(*router_args, n=2, mock_args=("--speedup-ratio", "0"), worker_args=()):
    """n mocks with a prefix cache (answers report cached_tokens), an admitd each (worker ids
    w0, w1, ...), a router."""
    mocks = [Mock(*MOCK_ARGS, *mock_args) for _ in range(n)]
    ads = [worker(m, "--block-size", str(BLOCK), "--worker-id", "w%d" % i, *worker_args)
           for i, m in enumerate(mocks)]
    rt = Router([w for _, w in ads], "--kv-block-size", str(BLOCK), *router_args)
    rt.wait_routable(n)
    return mocks, ads, rt


def stop(mocks, ads, rt):
    rt.stop()
    for ad, _ in ads:
        ad.stop()
    for m in mocks:
        m.stop()


def served(mocks):
    return [scrape(m.addr)["admit_mock_requests_total"] for m in mocks]


def answer_of(data, stream):
    """(text, usage) of an answer, or of a stream's events (its final usage chunk)."""
    if not stream:
        obj = json.loads(data)
        return obj["choices"][0]["message"]["content"], obj["usage"]
    text, usage = "", None
    for ev in data.split(b"\n\n"):
        if ev.startswith(b"data: {"):
            obj = json.loads(ev[6:])
            text += "".join(ch["delta"].get("content", "") for ch in obj["choices"])
            usage = obj.get("usage") or usage
    return text, usage


def cached_of(usage):
    """An answer's cached tokens (a missing or null prompt_tokens_details is 0, as vLLM's)."""
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def turn(rt, mocks, messages, stream=False, pin=None):
    """Sends one turn (pinned to a worker id with pin), with a marker of its own; returns
    (index of the mock that served it, answer text, cached)."""
    i, text, usage = said(rt, mocks, messages, pin, stream)
    return i, text, cached_of(usage)


def grow(msgs, answer, k, name):
    """The conversation after its turn k: the answer, then the next user message."""
    return msgs + [{"role": "assistant", "content": answer},
                   {"role": "user", "content": "Turn %d of %s: go on." % (k, name)}]


def sessions(rt, mocks, names, turns, stream=False):
    """Conversations of turns, taken in turn, each resending the whole of itself: for each,
    who served each of its turns, and what the engine found cached."""
    msgs = {n: [{"role": "user", "content": opening(n)}] for n in names}
    where = {n: [] for n in names}
    hits = {n: [] for n in names}
    for k in range(turns):
        for n in names:
            i, answer, cached = turn(rt, mocks, msgs[n], stream)
            where[n].append(i)
            hits[n].append(cached)
            msgs[n] = grow(msgs[n], answer, k, n)
            # Think time: the workers publish their load every 100 ms; a request just
            # answered would still count there, as large as the overlap the next turn has.
            time.sleep(0.25)
    return where, hits


def test_turns_stay_on_the_worker_that_holds_them():
    mocks, ads, rt = fleet()
    try:
        where, hits = sessions(rt, mocks, ["alpha", "beta", "delta"], 5)
        # Three interleaved on two workers, each keeps its own worker (idle workers taken in
        # turn would move each conversation at every turn).
        assert all(len(set(w)) == 1 for w in where.values()), where
        # The engine confirms: every turn after the first found its conversation cached.
        assert all(h > 0 for hs in hits.values() for h in hs[1:]), hits
        m = rt.metrics()
        assert m["admit_router_prefix_lookups_total"] == 15, m
        assert m["admit_router_prefix_matched_blocks_total"] > 0, m
        assert m["admit_router_prefix_index_blocks"] > 0, m
        assert 0 < m["admit_router_prefix_index_bytes"], m
        assert m["admit_router_prefix_predicted_cached_tokens_total"] > 0, m
        assert 0 < m["admit_router_prefix_confirmed_cached_tokens_total"] <= m[
            "admit_router_prefix_predicted_cached_tokens_total"], m
        # /load: the index's blocks per worker, all of it on the workers that served.
        held = [w["prefix_index_blocks"] for w in rt.workers()]
        assert sum(held) == m["admit_router_prefix_index_blocks"], (held, m)
    finally:
        stop(mocks, ads, rt)


def test_weight_zero_is_load_only():
    mocks, ads, rt = fleet("--kv-overlap-score-weight", "0")
    try:
        where, _ = sessions(rt, mocks, ["gamma"], 6)
        # Idle workers of equal load are taken in turn: the conversation is spread.
        assert len(set(where["gamma"])) == 2, where
        m = rt.metrics()
        assert m["admit_router_prefix_lookups_total"] == 0, m
        assert m["admit_router_prefix_index_bytes"] == 0, m
        assert all(w["prefix_index_blocks"] == 0 for w in rt.workers())
    finally:
        stop(mocks, ads, rt)


def test_correction_drops_what_the_engine_lacks():
    """An engine without a prefix cache answers cached_tokens 0: what the router predicted
    there is counted as unconfirmed and dropped after one answer."""
    mocks, ads, rt = fleet(n=1, mock_args=("--no-enable-prefix-caching",))
    corrected = 'admit_router_prefix_evictions_total{reason="corrected"}'
    try:
        where, hits = sessions(rt, mocks, ["epsilon"], 2)
        assert hits["epsilon"] == [0, 0], hits
        m = rt.metrics()
        assert m["admit_router_prefix_predicted_cached_tokens_total"] > 0, m
        assert m["admit_router_prefix_confirmed_cached_tokens_total"] == 0, m
        assert m[corrected] > 0, m
        # Streamed, with the final usage chunk: the same correction, from its last bytes.
        where, hits = sessions(rt, mocks, ["zeta"], 2, stream=True)
        assert hits["zeta"] == [0, 0], hits
        m2 = rt.metrics()
        assert (m2["admit_router_prefix_predicted_cached_tokens_total"] >
                m["admit_router_prefix_predicted_cached_tokens_total"]), (m, m2)
        assert m2["admit_router_prefix_confirmed_cached_tokens_total"] == 0, m2
        assert m2[corrected] > m[corrected], (m, m2)
    finally:
        stop(mocks, ads, rt)


def test_weight_changes_on_sighup():
    """The weight is live: 0 -> 1 starts an index (turns stick), 1 -> 0 drops it."""
    path = config("kv_overlap_score_weight: 0\n")
    mocks, ads, rt = fleet("--config", path)
    try:
        sessions(rt, mocks, ["theta"], 1)
        m = rt.metrics()
        assert m["admit_router_prefix_lookups_total"] == 0, m
        assert m["admit_router_prefix_index_bytes"] == 0, m
        write(path, "kv_overlap_score_weight: 1\n")
        hup(rt)
        assert rt.metrics()["admit_router_prefix_index_bytes"] > 0
        where, _ = sessions(rt, mocks, ["iota", "kappa", "lambda"], 3)
        assert all(len(set(w)) == 1 for w in where.values()), where
        assert rt.metrics()["admit_router_prefix_lookups_total"] == 9
        write(path, "kv_overlap_score_weight: 0\n")
        hup(rt)
        m = rt.metrics()
        assert m["admit_router_prefix_index_bytes"] == 0, m
        assert m["admit_router_prefix_index_blocks"] == 0, m
        assert m["admit_router_prefix_lookups_total"] == 9, m  # counters do not go back
    finally:
        stop(mocks, ads, rt)


# ---- the policy-class queue judges the uncached tokens ----------------------------------------

GATED = """
policy_classes:
  - name: interactive
    prefill_busy_threshold: 200
    quantum: 1000
    queue_policy: %s
"""


def class_fleet(classes, first_ms):
    """One mock with a prefix cache whose every token comes after first_ms (a prompt stays
    booked as prefill that long), its admitd, a prefix-aware router with the classes file."""
    path = classes_file(classes)
    mocks, ads, rt = fleet("--config", path, "--missed-heartbeats", "10", n=1,
                           mock_args=("--token-interval-ms", str(first_ms)))
    return path, mocks, ads, rt


def post(rt, messages):
    """A request held open on a client of its own (marker and secret: check_own), streamed:
    its head comes at once, its one token (the end) after the mock's token interval."""
    c = RawClient(rt.addr, marker=marker(), auth=True)
    c.post(CHAT, {"model": MODEL, "stream": True, "max_tokens": 1, "messages": messages})
    return c


def holder(rt, name):
    """A short request of its own text (about 100 tokens) that an idle rank takes at once and
    keeps in prefill until its token."""
    c = post(rt, [{"role": "user", "content": ("Holder %s. " % name) + "z" * 360}])
    assert head(c)[0] == 200
    return c


def first_turn(rt, name):
    """A session's opening, answered: the index holds it now. The second turn's messages."""
    msgs = [{"role": "user", "content": opening(name)}]
    status, _, data, _ = own_response(post(rt, msgs))
    assert status == 200, (status, data)
    answer, _ = answer_of(data, True)
    return msgs + [{"role": "assistant", "content": answer},
                   {"role": "user", "content": "Turn 0 of %s: go on." % name}]


def like(msgs, name):
    """msgs with another opening of the same length: the same prompt, nothing of it cached."""
    first = opening(name)
    assert len(first) == len(msgs[0]["content"])
    return [{"role": "user", "content": first}] + msgs[1:]


def went_at_once(rt):
    return rt.metrics()['admit_router_queue_wait_seconds_bucket{policy_class="interactive",'
                        'le="0.001"}']


def head(c):
    """c's status and headers, kept for finish()."""
    c.head = c.read_head()
    return c.head


def finish(clients):
    """Reads each client's answer to its end (the head too unless head() read it), then
    checks that each has its own."""
    for c in clients:
        if getattr(c, "head", None) is None:
            status, _, data, complete = own_response(c)
        else:
            status = c.head[0]
            data, complete = c.read_body(c.head[1])
        assert status == 200 and complete, (status, data)
    close_own(clients)


def test_class_gate_judges_the_uncached_part():
    """A class whose prefill threshold (200) a fresh long prompt (about 340 tokens) exceeds
    beside a request in prefill (100): it waits. The same prompt as a session's second turn,
    all but its last few dozen tokens cached where the first turn went, needs room for those
    only and goes at once."""
    path, mocks, ads, rt = class_fleet(GATED % "fcfs", 1500)
    try:
        turn2 = first_turn(rt, "mu")
        # A fresh opening: the whole prompt is prefill, 100 + 340 > 200, so it waits.
        hold = holder(rt, "a")
        gone = dispatched(rt, "interactive")
        fresh = post(rt, like(turn2, "nu"))
        wait_queued(rt, "interactive", 1, gone, "a fresh long prompt waits for room")
        status, hdrs = head(fresh)
        assert status == 200 and float(hdrs["x-admitd-queue-wait-ms"]) > 0, (status, hdrs)
        finish([hold, fresh])
        time.sleep(0.3)  # the worker's published load is back to idle
        # The second turn: only its uncached part is prefill, 100 + a few dozen <= 200.
        hold = holder(rt, "b")
        at_once = went_at_once(rt)
        second = post(rt, turn2)
        status, hdrs = head(second)
        assert status == 200 and "x-admitd-queue-wait-ms" not in hdrs, (status, hdrs)
        assert went_at_once(rt) == at_once + 1
        assert pending(rt, "interactive") == 0
        # Booked as the gate judged it: the holder and the uncached part.
        booked = sum(v for k, v in rt.metrics().items()
                     if k.startswith("admit_router_booked_prefill_tokens{"))
        assert 100 < booked <= 200, booked
        finish([hold, second])
    finally:
        stop(mocks, ads, rt)
        os.unlink(path)


def test_class_cost_is_the_uncached_part():
    """Shortest first (wspt) orders by the request's cost, its uncached tokens: a session's
    second turn (about 340 tokens, a few dozen uncached) queued behind a fresh prompt of about
    280 is the head at once, and goes (100 + a few dozen <= 200) while the fresh one waits for the
    request in prefill (100 + 280 > 200). Costed by the whole prompt, the second turn
    would wait behind the fresh one."""
    path, mocks, ads, rt = class_fleet(GATED % "wspt", 2000)
    try:
        turn2 = first_turn(rt, "xi")
        hold = holder(rt, "c")
        gone = dispatched(rt, "interactive")
        fresh = post(rt, [{"role": "user", "content": opening("pi")[:1100]}])
        wait_queued(rt, "interactive", 1, gone, "the fresh prompt waits")
        second = post(rt, turn2)
        s2, h2 = head(second)
        assert s2 == 200 and pending(rt, "interactive") == 1, (s2, h2)
        s1, h1 = head(fresh)
        assert s1 == 200, s1
        waited = (float(h2["x-admitd-queue-wait-ms"]), float(h1["x-admitd-queue-wait-ms"]))
        assert waited[0] + 500 < waited[1], waited
        finish([hold, fresh, second])
    finally:
        stop(mocks, ads, rt)
        os.unlink(path)


BUCKETS = """
policy_classes:
  - {name: cached, quantum: 1000}
  - {name: cold, quantum: 1000}
policy_class_rules:
  - {by: prompt_tokens, buckets: [{min_tokens: 0, class: cached}, {min_tokens: 200, class: cold}]}
"""


def test_class_buckets_count_the_uncached_part():
    """prompt_tokens rules bucket by the uncached tokens (Dynamo's uncached ISL): a fresh
    opening of about 370 tokens is cold, its second turn (a few dozen uncached) cached, the
    same prompt with a fresh opening cold."""
    path, mocks, ads, rt = class_fleet(BUCKETS, 1)
    try:
        def classes():
            return dispatched(rt, "cold"), dispatched(rt, "cached")

        turn2 = first_turn(rt, "rho")
        assert classes() == (1, 0), classes()
        finish([post(rt, turn2)])
        assert classes() == (1, 1), classes()
        finish([post(rt, like(turn2, "tau"))])
        assert classes() == (2, 1), classes()
    finally:
        stop(mocks, ads, rt)
        os.unlink(path)
PREDICTED = "admit_router_prefix_predicted_cached_tokens_total"
CONFIRMED = "admit_router_prefix_confirmed_cached_tokens_total"
CORRECTED = 'admit_router_prefix_evictions_total{reason="corrected"}'


def indexed(rt):
    """/load: the index's blocks per worker id."""
    return {w["worker_id"]: w["prefix_index_blocks"] for w in rt.workers()}


def moved(m0, m1, name):
    return m1.get(name, 0) - m0.get(name, 0)


def ours(*ms):
    """The prefix index's samples of metrics snapshots, for a failure's message."""
    return [{k: v for k, v in m.items() if k.startswith("admit_router_prefix_")} for m in ms]


def restart_empty(mocks, ads, i, mock_args=("--speedup-ratio", "0")):
    """Stops worker i's engine and starts a new one, empty, on the same port (its admitd
    stays); returns once admitd has scraped the new one twice."""
    port = mocks[i].addr[1]
    mocks[i].stop()
    mocks[i] = Mock(*MOCK_ARGS, *mock_args, "--listen", "127.0.0.1:%d" % port)
    assert mocks[i].addr[1] == port, mocks[i].addr
    ad = ads[i][0]

    def scrapes():
        return ad.metrics().get('admitd_engine_scrapes_total{result="ok"}', 0)

    first = scrapes()
    wait_for(lambda: scrapes() >= first + 2, 15, "two scrapes of the new engine")


def test_restarted_engine_corrected_after_one_answer():
    """The engine of the worker that holds a conversation restarts empty (its admitd stays):
    the next turn still goes there, the answer says nothing was cached, and that one answer
    drops what the index predicted; the turns after it are judged on what is true."""
    mocks, ads, rt = fleet()
    try:
        msgs = [{"role": "user", "content": opening("omega")}]
        where = []
        for k in range(3):
            i, answer, _ = turn(rt, mocks, msgs)
            where.append(i)
            msgs = grow(msgs, answer, k, "omega")
            time.sleep(0.25)
        assert len(set(where)) == 1, where
        a = where[0]
        wa, wb = "w%d" % a, "w%d" % (1 - a)
        before = indexed(rt)
        assert before[wa] > 0 and before[wb] == 0, before
        restart_empty(mocks, ads, a)
        rt.wait_routable(2)
        # The index still predicts the whole of the last turn's prompt on a: the turn goes
        # there, and the new engine has none of it.
        m0 = rt.metrics()
        i, answer, cached = turn(rt, mocks, msgs)
        m1 = rt.metrics()
        assert i == a, (i, a)
        assert cached == 0, cached
        assert moved(m0, m1, PREDICTED) == before[wa] * BLOCK, (before, ours(m0, m1))
        assert moved(m0, m1, CONFIRMED) == 0, ours(m0, m1)
        # One answer drops every block the index held on a (all of them predicted), and the
        # ones this turn added after them: a keeps no tail without its head.
        assert moved(m0, m1, CORRECTED) > before[wa], (before, ours(m0, m1))
        after = indexed(rt)
        assert after == {wa: 0, wb: 0}, (before, after)
        assert m1["admit_router_prefix_index_blocks"] == 0, ours(m1)
        msgs = grow(msgs, answer, 3, "omega")
        time.sleep(0.25)
        # The next turn: no holder predicted, so nothing to correct.
        i4, answer, _ = turn(rt, mocks, msgs)
        m2 = rt.metrics()
        assert moved(m1, m2, PREDICTED) == 0 and moved(m1, m2, CORRECTED) == 0, ours(m1, m2)
        msgs = grow(msgs, answer, 4, "omega")
        time.sleep(0.25)
        # And the one after: what the index predicts there, the engine confirms in full.
        i5, _, cached5 = turn(rt, mocks, msgs)
        m3 = rt.metrics()
        assert i5 == i4, (i4, i5)
        assert moved(m2, m3, PREDICTED) > 0, ours(m2, m3)
        assert moved(m2, m3, CONFIRMED) == moved(m2, m3, PREDICTED), ours(m2, m3)
        assert cached5 >= moved(m2, m3, PREDICTED), (cached5, ours(m2, m3))
        assert moved(m2, m3, CORRECTED) == 0, ours(m2, m3)
    finally:
        stop(mocks, ads, rt)


def test_corrected_worker_keeps_no_tail():
    """After a correction the worker keeps no blocks past what its engine confirmed: the
    index's walk takes a block held by as many holders as are still in it to be held by all
    of them, so a tail left behind would credit another holder of the same prefix with it."""
    mocks, ads, rt = fleet()
    try:
        msgs = [{"role": "user", "content": opening("sigma")}]
        for k in range(3):
            prompt = msgs
            _, answer, _ = turn(rt, mocks, msgs, pin="w0")
            msgs = grow(msgs, answer, k, "sigma")
        # w1 computes the last turn's prompt too: both hold the same prefix.
        turn(rt, mocks, prompt, pin="w1")
        held = indexed(rt)
        assert held["w0"] == held["w1"] > 0, held
        restart_empty(mocks, ads, 0)
        rt.wait_routable(2)
        m0 = rt.metrics()
        i, answer, cached = turn(rt, mocks, msgs, pin="w0")
        m1 = rt.metrics()
        assert (i, cached) == (0, 0), (i, cached)
        assert moved(m0, m1, CORRECTED) > held["w0"], (held, ours(m0, m1))
        assert indexed(rt) == {"w0": 0, "w1": held["w1"]}, (held, indexed(rt))
        msgs = grow(msgs, answer, 3, "sigma")
        # w1 is the one holder: it is predicted what it holds, no more, and its engine
        # confirms it all.
        i, _, cached = turn(rt, mocks, msgs)
        m2 = rt.metrics()
        assert i == 1, i
        assert moved(m1, m2, PREDICTED) == held["w1"] * BLOCK, (held, ours(m1, m2))
        assert moved(m1, m2, CONFIRMED) == moved(m1, m2, PREDICTED), ours(m1, m2)
        assert cached >= held["w1"] * BLOCK, (cached, held)
    finally:
        stop(mocks, ads, rt)


# A system prompt every session opens with: about 40 blocks of 16 tokens (the router's
# estimate, 4 bytes a token).
SHARED = "You are the assistant of the hot opening. " + " ".join(
    "Rule %03d: answer in full." % i for i in range(95))
SLOTS = 3  # requests a worker has room for, by the decode threshold below


def hot_body(s):
    return {"model": MODEL, "stream": True, "max_tokens": 80,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": SHARED},
                         {"role": "user", "content": "Session %d asks its own question." % s}]}


def test_hot_opening_spreads_once_its_worker_is_full():
    """Sessions that share one long opening, held open: the opening pulls them to the worker
    that holds it (a weight of 4) until its room is gone, then the next worker takes them, and
    it holds the opening from then on; each worker computes the opening once, and the router
    refuses (529) only once every worker is full."""
    n = 3
    # 400 KV blocks a rank, the threshold 0.375 of them: 150 blocks, three requests of 41
    # each fit and four do not (their 80 tokens of output, 5 blocks each, keep what the
    # engine publishes below it too). admitd's own cap is the same three (and two queue
    # places, never used).
    mocks, ads, rt = fleet(
        "--kv-overlap-score-weight", "4", "--active-decode-blocks-threshold", "0.375", n=n,
        mock_args=("--num-gpu-blocks", "400", "--token-interval-ms", "150"),
        worker_args=("--engine-request-limit", str(SLOTS), "--request-queue-limit", "2"))
    held = []
    try:
        order = []
        for s in range(n * SLOTS):
            before = served(mocks)
            c = RawClient(rt.addr, marker=marker(s))
            c.post(CHAT, hot_body(s))
            status, hdrs = c.read_head()
            assert status == 200, (s, status)
            # Its first token: its prefill is over, and once the router has heard so from the
            # worker too, the next request is judged on this one's decode blocks alone.
            held.append((c, hdrs, c.read_chunk()))
            wait_for(lambda: not any(rk["published"]["active_prefill_tokens"]
                                     for w in rt.workers() for rk in w["ranks"]),
                     what="no prefill published")
            after = served(mocks)
            took = [i for i in range(n) if after[i] > before[i]]
            assert len(took) == 1, (before, after)
            order.append(took[0])
        # Each worker took SLOTS in a row: the first holder until full, then the next, which
        # holds the opening from its first on.
        assert sorted(order) == sorted(list(range(n)) * SLOTS), order
        assert all(order[k] == order[k - k % SLOTS] for k in range(len(order))), order
        # Every worker full (each answer takes 12 s: all of them still run): the next is the
        # router's own 529, and reaches no engine.
        running = [rk["booked"]["requests"] for w in rt.workers() for rk in w["ranks"]]
        assert running == [SLOTS] * n, running
        before = served(mocks)
        c = RawClient(rt.addr, marker=marker())
        c.post(CHAT, hot_body(99))
        status, hdrs, body, complete = c.response()
        close_own([c])
        assert status == 529 and complete, (status, body)
        assert served(mocks) == before, (before, served(mocks))
        # Each answer is its own and complete; of each worker's SLOTS, the first computed the
        # opening and the others found it cached.
        hits = []
        for c, hdrs, first in held:
            body, complete = c.read_body(hdrs)
            assert complete, body[-200:]
            check_own(c)
            hits.append(cached_of(answer_of(first + body, True)[1]))
        colds = [order[k] for k in range(len(order)) if hits[k] == 0]
        assert sorted(colds) == list(range(n)), (order, hits)
        assert all(h >= 32 * BLOCK for h in hits if h), hits
        assert all(ad.metrics()["dynamo_rejection_request_total"] == 0 for ad, _ in ads)
        assert rt.metrics()[PREDICTED] > 0
    finally:
        close_own([c for c, _, _ in held])
        stop(mocks, ads, rt)


def test_cache_salt_keeps_tenants_apart():
    """vLLM's cache_salt: the engine never shares blocks across salts, so the router's keys
    are seeded with it. Identical text under another salt (or none) is predicted nothing and
    the engine finds nothing; the same salt again is predicted and confirmed."""
    mocks, ads, rt = fleet(n=1)
    msgs = [{"role": "user", "content": opening("shared")}]

    def send(salt):
        body = {"model": MODEL, "max_tokens": 12, "messages": msgs}
        if salt is not None:
            body["cache_salt"] = salt
        status, _, data = request(rt.addr, "POST", CHAT, body)
        assert status == 200, (status, data)
        usage = json.loads(data)["usage"]
        m = rt.metrics()
        return ((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
                m["admit_router_prefix_matched_blocks_total"],
                m["admit_router_prefix_predicted_cached_tokens_total"])

    try:
        assert send("tenant-a") == (0, 0, 0)
        assert send("tenant-b") == (0, 0, 0)
        assert send(None) == (0, 0, 0)
        cached, matched, predicted = send("tenant-a")
        assert cached > 0 and matched > 0 and predicted > 0, (cached, matched, predicted)
        assert rt.metrics()["admit_router_prefix_confirmed_cached_tokens_total"] > 0
    finally:
        stop(mocks, ads, rt)


# ---- answers that leave cached_tokens out when nothing was cached (vLLM, SGLang) -------------

VLLM = ("--speedup-ratio", "0", "--prompt-tokens-details-if-cached")
MATCHED = "admit_router_prefix_matched_blocks_total"


def said(rt, mocks, messages, pin=None, stream=False, include_usage=True):
    """turn(), a stream with or without usage: (index of the mock that served it, answer
    text, its usage or None)."""
    before = served(mocks)
    body = {"model": MODEL, "stream": stream, "max_tokens": 12, "messages": messages}
    if stream and include_usage:
        body["stream_options"] = {"include_usage": True}
    status, _, data = own_request(rt.addr, CHAT, body, marker(),
                                  extra="X-Admit-Worker: %s\r\n" % pin if pin else "")
    assert status == 200, (status, data)
    after = served(mocks)
    took = [i for i in range(len(mocks)) if after[i] > before[i]]
    assert len(took) == 1, (before, after)
    text, usage = answer_of(data, stream)
    return took[0], text, usage


def test_unsaid_cached_tokens_correct_as_zero():
    """Engines that answer as vLLM (details only when some of the prompt was cached): once a
    worker has reported a number, an answer whose usage leaves it out (null in a JSON answer,
    none in a stream's usage chunk) is 0 cached, and corrects the index as the restart test's
    answer did; a stream without usage says nothing and corrects nothing."""
    mocks, ads, rt = fleet(n=3, mock_args=VLLM)
    names = {"w0": "phi", "w1": "chi", "w2": "psi"}
    msgs = {w: [{"role": "user", "content": opening(n)}] for w, n in names.items()}
    try:
        for k in range(3):
            for w, name in names.items():
                i, answer, usage = said(rt, mocks, msgs[w], w)
                assert "w%d" % i == w, (i, w)
                # The first turn found nothing cached: its details are null. The next ones
                # report a number: the worker is known to report them from then on.
                if k == 0:
                    assert usage["prompt_tokens_details"] is None, usage
                else:
                    assert cached_of(usage) > 0, usage
                msgs[w] = grow(msgs[w], answer, k, name)
        before = indexed(rt)
        assert all(before[w] > 0 for w in names), before
        for i in range(3):
            restart_empty(mocks, ads, i, VLLM)
        rt.wait_routable(3)
        # A JSON answer with "prompt_tokens_details": null: every block predicted on w0 and
        # the ones this turn added are dropped.
        m0 = rt.metrics()
        _, _, usage = said(rt, mocks, msgs["w0"], "w0")
        m1 = rt.metrics()
        assert "prompt_tokens_details" in usage and usage["prompt_tokens_details"] is None, usage
        assert moved(m0, m1, PREDICTED) == before["w0"] * BLOCK, (before, ours(m0, m1))
        assert moved(m0, m1, CONFIRMED) == 0, ours(m0, m1)
        assert moved(m0, m1, CORRECTED) > before["w0"], (before, ours(m0, m1))
        assert indexed(rt)["w0"] == 0, (before, indexed(rt))
        # A stream whose usage chunk has no details: the same on w1.
        _, _, usage = said(rt, mocks, msgs["w1"], "w1", stream=True)
        m2 = rt.metrics()
        assert usage is not None and "prompt_tokens_details" not in usage, usage
        assert moved(m1, m2, PREDICTED) == before["w1"] * BLOCK, (before, ours(m1, m2))
        assert moved(m1, m2, CORRECTED) > before["w1"], (before, ours(m1, m2))
        assert indexed(rt)["w1"] == 0, (before, indexed(rt))
        # A stream without usage on w2, whose engine has none of it either: predicted all w2
        # held, nothing said, nothing corrected (nor counted); w2 keeps it and adds this turn.
        _, _, usage = said(rt, mocks, msgs["w2"], "w2", stream=True, include_usage=False)
        m3 = rt.metrics()
        assert usage is None
        assert moved(m2, m3, MATCHED) == before["w2"], (before, ours(m2, m3))
        assert moved(m2, m3, PREDICTED) == moved(m2, m3, CORRECTED) == 0, ours(m2, m3)
        assert indexed(rt)["w2"] > before["w2"], (before, indexed(rt))
        assert indexed(rt)["w0"] == indexed(rt)["w1"] == 0, indexed(rt)
    finally:
        stop(mocks, ads, rt)


def test_never_reported_never_corrected_to_zero():
    """A worker whose answers never gave a number (here an engine without a prefix cache that
    leaves the details out at 0, as vLLM's): an answer without them is not read as 0, since
    an engine started without the switch answers just so whatever it found. The index keeps
    what it predicted."""
    mocks, ads, rt = fleet(n=1, mock_args=VLLM + ("--no-enable-prefix-caching",))
    msgs = [{"role": "user", "content": opening("upsilon")}]
    try:
        m0 = rt.metrics()
        for k in range(3):
            _, answer, usage = said(rt, mocks, msgs, "w0", stream=k == 2)
            assert usage is not None and not usage.get("prompt_tokens_details"), usage
            msgs = grow(msgs, answer, k, "upsilon")
        m1 = rt.metrics()
        # Turns 2 and 3 were predicted what the turns before them left; no answer corrected
        # (nor counted) anything.
        assert moved(m0, m1, MATCHED) > 0, ours(m0, m1)
        assert moved(m0, m1, PREDICTED) == moved(m0, m1, CORRECTED) == 0, ours(m0, m1)
        assert indexed(rt)["w0"] > 0, indexed(rt)
    finally:
        stop(mocks, ads, rt)


if __name__ == "__main__":
    tap = Tap()
    tap.run("a session's turns stay on the worker that holds its prefix, and hit its cache",
            test_turns_stay_on_the_worker_that_holds_them)
    tap.run("--kv-overlap-score-weight 0 restores load-only routing: turns spread",
            test_weight_zero_is_load_only)
    tap.run("--kv-overlap-score-weight changes on SIGHUP: an index started, then dropped",
            test_weight_changes_on_sighup)
    tap.run("an answer's cached_tokens corrects the index: blocks the engine lacked are dropped",
            test_correction_drops_what_the_engine_lacks)
    tap.run("the class gate judges a mostly cached prompt by its uncached part: it goes at once",
            test_class_gate_judges_the_uncached_part)
    tap.run("the class queue's cost is the uncached part: shortest first takes the second turn",
            test_class_cost_is_the_uncached_part)
    tap.run("prompt_tokens rules bucket by the uncached tokens",
            test_class_buckets_count_the_uncached_part)
    tap.run("a worker whose engine restarted empty is corrected after one answer",
            test_restarted_engine_corrected_after_one_answer)
    tap.run("a corrected worker keeps no blocks past its confirmed prefix",
            test_corrected_worker_keeps_no_tail)
    tap.run("a hot shared opening spreads once its worker is full, and 529 only when all are",
            test_hot_opening_spreads_once_its_worker_is_full)
    tap.run("cache_salt keeps tenants apart: no prefix predicted or cached across salts",
            test_cache_salt_keeps_tenants_apart)
    tap.run("answers without cached_tokens correct as 0 once the worker has reported them",
            test_unsaid_cached_tokens_correct_as_zero)
    tap.run("a worker that never reported cached_tokens is never corrected to 0",
            test_never_reported_never_corrected_to_zero)
    tap.done()
