"""admit-router's prefix-aware selection (issue 25): a conversation's turns go back to the
worker that holds its prefix while it has room; --kv-overlap-score-weight 0 is load only."""

import json

from harness import Mock, Tap, request, scrape
from test_router import MODEL, Router, worker

CHAT = "/v1/chat/completions"
BLOCK = 16


def opening(name):
    """A first user message of its own per session, many blocks long."""
    return ("Session %s. " % name) + " ".join("%s-word-%d" % (name, i) for i in range(120))


def fleet(*router_args):
    """Two mocks with a prefix cache (answers report cached_tokens), an admitd each, a router."""
    mocks = [Mock("--speedup-ratio", "0", "--block-size", str(BLOCK), "--num-gpu-blocks", "4096",
                  "--enable-prompt-tokens-details") for _ in range(2)]
    ads = [worker(m, "--block-size", str(BLOCK)) for m in mocks]
    rt = Router([w for _, w in ads], "--kv-block-size", str(BLOCK), *router_args)
    rt.wait_routable(2)
    return mocks, ads, rt


def stop(mocks, ads, rt):
    rt.stop()
    for ad, _ in ads:
        ad.stop()
    for m in mocks:
        m.stop()


def served(mocks):
    return [scrape(m.addr)["admit_mock_requests_total"] for m in mocks]


def turn(rt, mocks, messages):
    """Sends one turn; returns (index of the mock that served it, answer text, cached)."""
    before = served(mocks)
    status, _, data = request(rt.addr, "POST", CHAT, {"model": MODEL, "stream": False,
                                                      "max_tokens": 12, "messages": messages})
    assert status == 200, (status, data)
    after = served(mocks)
    took = [i for i in range(len(mocks)) if after[i] > before[i]]
    assert len(took) == 1, (before, after)
    obj = json.loads(data)
    usage = obj["usage"]
    return (took[0], obj["choices"][0]["message"]["content"],
            (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))


def sessions(rt, mocks, names, turns):
    """Conversations of turns, taken in turn, each resending the whole of itself: for each,
    who served each of its turns, and what the engine found cached."""
    msgs = {n: [{"role": "user", "content": opening(n)}] for n in names}
    where = {n: [] for n in names}
    hits = {n: [] for n in names}
    for k in range(turns):
        for n in names:
            i, answer, cached = turn(rt, mocks, msgs[n])
            where[n].append(i)
            hits[n].append(cached)
            msgs[n] = msgs[n] + [{"role": "assistant", "content": answer},
                                 {"role": "user", "content": "Turn %d of %s: go on." % (k, n)}]
    return where, hits


def test_turns_stay_on_the_worker_that_holds_them():
    mocks, ads, rt = fleet()
    try:
        where, hits = sessions(rt, mocks, ["alpha", "beta"], 5)
        # Interleaved, each keeps its own worker (the load alone would take them in turn).
        assert all(len(set(w)) == 1 for w in where.values()), where
        # The engine confirms: every turn after the first found its conversation cached.
        assert all(h > 0 for hs in hits.values() for h in hs[1:]), hits
    finally:
        stop(mocks, ads, rt)


def test_weight_zero_is_load_only():
    mocks, ads, rt = fleet("--kv-overlap-score-weight", "0")
    try:
        where, _ = sessions(rt, mocks, ["gamma"], 6)
        # Idle workers of equal load are taken in turn: the conversation is spread.
        assert len(set(where["gamma"])) == 2, where
    finally:
        stop(mocks, ads, rt)


if __name__ == "__main__":
    tap = Tap()
    tap.run("a session's turns stay on the worker that holds its prefix, and hit its cache",
            test_turns_stay_on_the_worker_that_holds_them)
    tap.run("--kv-overlap-score-weight 0 restores load-only routing: turns spread",
            test_weight_zero_is_load_only)
    tap.done()
