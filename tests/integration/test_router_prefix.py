"""admit-router's prefix-aware selection (issue 25): a conversation's turns go back to the
worker that holds its prefix while it has room; --kv-overlap-score-weight 0 is load only."""

import json
import time

from harness import Mock, Tap, request, scrape
from test_router import MODEL, Router, worker
from test_router_reload import config, hup, write

CHAT = "/v1/chat/completions"
BLOCK = 16


def opening(name):
    """A first user message of its own per session, many blocks long."""
    return ("Session %s. " % name) + " ".join("%s-word-%d" % (name, i) for i in range(120))


def fleet(*router_args, n=2, mock_args=()):
    """n mocks with a prefix cache (answers report cached_tokens), an admitd each, a router."""
    mocks = [Mock("--speedup-ratio", "0", "--block-size", str(BLOCK), "--num-gpu-blocks", "4096",
                  "--enable-prompt-tokens-details", *mock_args) for _ in range(n)]
    ads = [worker(m, "--block-size", str(BLOCK)) for m in mocks]
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


def turn(rt, mocks, messages, stream=False):
    """Sends one turn; returns (index of the mock that served it, answer text, cached)."""
    before = served(mocks)
    body = {"model": MODEL, "stream": stream, "max_tokens": 12, "messages": messages}
    if stream:
        body["stream_options"] = {"include_usage": True}
    status, _, data = request(rt.addr, "POST", CHAT, body)
    assert status == 200, (status, data)
    after = served(mocks)
    took = [i for i in range(len(mocks)) if after[i] > before[i]]
    assert len(took) == 1, (before, after)
    text, usage = answer_of(data, stream)
    return took[0], text, (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


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
            msgs[n] = msgs[n] + [{"role": "assistant", "content": answer},
                                 {"role": "user", "content": "Turn %d of %s: go on." % (k, n)}]
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
    tap.run("cache_salt keeps tenants apart: no prefix predicted or cached across salts",
            test_cache_salt_keeps_tenants_apart)
    tap.done()
