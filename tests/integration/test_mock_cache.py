"""The mock engine's prefix cache (issue 25): a real admit-mock-engine, driven over HTTP."""

import json
import time

from harness import Mock, RawClient, Tap, close_own, marker, request, wait_for

KEY = '{engine="%d",model_name="mock-model"}'
SYSTEM = "You are a terse assistant that answers in one line. " * 8


def chat(mock, messages, max_tokens=20, stream=False, usage=True):
    body = {"model": "mock-model", "messages": messages, "max_tokens": max_tokens,
            "stream": stream}
    if stream and usage:
        body["stream_options"] = {"include_usage": True}
    status, _, data = request(mock.addr, "POST", "/v1/chat/completions", body)
    assert status == 200, (status, data)
    if not stream:
        obj = json.loads(data)
        return obj["choices"][0]["message"]["content"], obj["usage"]
    text, last = "", None
    for ev in data.split(b"\n\n"):
        if not ev.startswith(b"data: {"):
            continue
        obj = json.loads(ev[6:])
        for ch in obj["choices"]:
            text += ch["delta"].get("content", "")
        if obj.get("usage"):
            last = obj["usage"]
    return text, last


def tokenize(mock, body):
    status, _, data = request(mock.addr, "POST", "/tokenize", body)
    assert status == 200, (status, data)
    return json.loads(data)


def cached(usage):
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def completion(mock, prompt, max_tokens=3, **extra):
    body = {"model": "mock-model", "prompt": prompt, "max_tokens": max_tokens}
    body.update(extra)
    status, _, data = request(mock.addr, "POST", "/v1/completions", body)
    assert status == 200, (status, data)
    return json.loads(data)["usage"]


def test_second_turn_hits_first_turns_blocks():
    block = 16
    mock = Mock("--speedup-ratio", "0", "--block-size", str(block),
                "--enable-prompt-tokens-details")
    turn1 = [{"role": "system", "content": SYSTEM},
             {"role": "user", "content": "What does a KV cache hold?"}]
    answer, u1 = chat(mock, turn1, max_tokens=37)
    assert u1["completion_tokens"] == 37 and cached(u1) == 0, u1
    turn2 = turn1 + [{"role": "assistant", "content": answer},
                     {"role": "user", "content": "And how big is a block?"}]
    # The rendered turn 2 begins with turn 1's prompt ids and then the answer's ids: the
    # answer's text tokenizes back to one id per generated token.
    t1 = tokenize(mock, {"model": "mock-model", "messages": turn1})
    t2 = tokenize(mock, {"model": "mock-model", "messages": turn2})
    assert t1["count"] == u1["prompt_tokens"] == len(t1["tokens"]), (t1["count"], u1)
    assert t2["tokens"][:t1["count"]] == t1["tokens"]
    done = u1["prompt_tokens"] + u1["completion_tokens"]
    # Turn 2, streamed: the final usage chunk says what was cached: every full block of
    # turn 1's prompt and answer.
    _, u2 = chat(mock, turn2, max_tokens=5, stream=True)
    assert u2["prompt_tokens"] == t2["count"], (u2, t2["count"])
    assert cached(u2) == done // block * block, (u2, done)
    m = mock.metrics()
    assert m["vllm:prefix_cache_queries_total" + KEY % 0] == u1["prompt_tokens"] + u2[
        "prompt_tokens"], m
    assert m["vllm:prefix_cache_hits_total" + KEY % 0] == cached(u2), m
    # A stream that did not ask for usage gets none.
    _, none = chat(mock, turn2, max_tokens=2, stream=True, usage=False)
    assert none is None
    mock.stop()


def test_no_prefix_caching_caches_nothing():
    mock = Mock("--speedup-ratio", "0", "--no-enable-prefix-caching",
                "--enable-prompt-tokens-details")
    msgs = [{"role": "user", "content": SYSTEM}]
    for _ in range(2):
        _, u = chat(mock, msgs)
        assert "prompt_tokens_details" in u and cached(u) == 0, u
    m = mock.metrics()
    assert m["vllm:prefix_cache_queries_total" + KEY % 0] == 0, m
    assert m["vllm:prefix_cache_hits_total" + KEY % 0] == 0, m
    mock.stop()
    # Without --enable-prompt-tokens-details the usage has no details, as vLLM's.
    mock = Mock("--speedup-ratio", "0")
    _, u = chat(mock, msgs)
    _, u = chat(mock, msgs)
    assert "prompt_tokens_details" not in u, u
    assert mock.metrics()["vllm:prefix_cache_hits_total" + KEY % 0] > 0
    mock.stop()


def test_tokenize_shapes():
    mock = Mock("--speedup-ratio", "0", "--block-size", "8", "--num-gpu-blocks", "100")
    t = tokenize(mock, {"model": "mock-model", "prompt": "abcdefghi"})
    assert sorted(t) == ["count", "max_model_len", "tokens"], t
    assert t["count"] == 3 and len(t["tokens"]) == 3 and t["max_model_len"] == 800, t
    assert all(isinstance(x, int) for x in t["tokens"]), t
    msgs = [{"role": "user", "content": "hello"}]
    gen = tokenize(mock, {"model": "mock-model", "messages": msgs})
    bare = tokenize(mock, {"model": "mock-model", "messages": msgs,
                           "add_generation_prompt": False})
    assert gen["count"] == bare["count"] + 3 and gen["tokens"][:bare["count"]] == bare["tokens"]
    # The count a generation request reports is /tokenize's.
    _, u = chat(mock, msgs)
    assert u["prompt_tokens"] == gen["count"], (u, gen)
    status, _, data = request(mock.addr, "POST", "/tokenize", {"model": "mock-model"})
    assert status == 400 and b"prompt" in data, (status, data)
    mock.stop()


def test_small_cache_evicts_least_recently_used():
    # Blocks of 4, room for 6: a conversation of 9 prompt ids and 3 generated holds 3 full
    # blocks, so two conversations fill the pool and a third pushes out the oldest.
    mock = Mock("--speedup-ratio", "0", "--block-size", "4", "--num-gpu-blocks", "6",
                "--enable-prompt-tokens-details")
    a, b, c = ([base + i for i in range(9)] for base in (1000, 2000, 3000))
    for p in (a, b, c):
        assert cached(completion(mock, p)) == 0
    assert mock.metrics()["admit_mock_prefix_cache_evictions_total" + KEY % 0] == 3
    assert cached(completion(mock, b)) == 8  # B stayed
    assert cached(completion(mock, c)) == 8  # C too
    assert cached(completion(mock, a)) == 0  # A, the oldest, went
    mock.stop()


def test_one_cache_per_rank():
    mock = Mock("--speedup-ratio", "0", "--block-size", "4", "--data-parallel-size", "2",
                "--enable-prompt-tokens-details")
    p = list(range(1, 30))
    # Round robin: rank 0, rank 1 (its own, cold cache), rank 0 again.
    assert [cached(completion(mock, p)) for _ in range(3)] == [0, 0, 28]
    m = mock.metrics()
    assert m["vllm:prefix_cache_hits_total" + KEY % 0] == 28, m
    assert m["vllm:prefix_cache_hits_total" + KEY % 1] == 0, m
    mock.stop()


def test_cached_prompt_prefills_faster():
    # About 4,100 prompt tokens at 1/20 speed: a cold prefill takes about 1.8 s; the second
    # turn computes only its few new tokens, about 0.35 s (the model's constant term). The
    # second turn is longer than the first, so the comparison only favours the cold one.
    mock = Mock("--speedup-ratio", "0.05", "--token-interval-ms", "1",
                "--enable-prompt-tokens-details")
    turn1 = [{"role": "user", "content": "Lorem ipsum dolor sit amet. " * 585}]
    t0 = time.monotonic()
    answer, u1 = chat(mock, turn1, max_tokens=1)
    cold = time.monotonic() - t0
    turn2 = turn1 + [{"role": "assistant", "content": answer},
                     {"role": "user", "content": "Go on."}]
    t0 = time.monotonic()
    _, u2 = chat(mock, turn2, max_tokens=1)
    warm = time.monotonic() - t0
    assert u2["prompt_tokens"] > u1["prompt_tokens"] > 4000, (u1, u2)
    assert u2["prompt_tokens"] - cached(u2) < 32, u2
    assert warm < 0.5 * cold, (warm, cold)
    mock.stop()


def test_kv_usage_counts_a_shared_block_once():
    # Blocks of 16, 1000 of them, a token every 2 s: the contexts stay still long enough to
    # read. Two ranks, requests go round robin: A and B (rank 0) share an opening of 10
    # blocks, X and Y (rank 1) share nothing. Each prompt is 180 ids: the 10 blocks of its
    # opening (shared or not), one full block of its own and a partial one of 4 ids.
    block, opening = 16, 160
    shared = list(range(1, opening + 1))
    prompts = [shared + list(range(5000, 5020)),                      # A, rank 0
               list(range(10001, 10181)),                             # X, rank 1
               shared + list(range(6000, 6020)),                      # B, rank 0
               list(range(20001, 20181))]                             # Y, rank 1
    own = -(-180 // block)  # 12 blocks of context per request
    for caching in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
        mock = Mock("--token-interval-ms", "2000", "--num-gpu-blocks", "1000", "--block-size",
                    str(block), "--data-parallel-size", "2", caching)
        clients = []
        for i, p in enumerate(prompts):
            c = RawClient(mock.addr, marker=marker())
            c.post("/v1/completions", {"model": "mock-model", "prompt": p, "max_tokens": 10,
                                       "stream": True})
            clients.append(c)
            # in order, so that B finds A's blocks
            wait_for(lambda: mock.metrics()["admit_mock_requests_running_peak"] == i + 1, 15,
                     "request %d running" % i)
        m = mock.metrics()
        used = [round(m["vllm:kv_cache_usage_perc" + KEY % r] * 1000) for r in (0, 1)]
        if caching == "--enable-prefix-caching":
            # vLLM's usage: blocks held by running requests, each block once. Rank 0: the
            # 10 shared blocks once, and A's and B's own 2 each.
            assert used == [opening // block + 2 * (own - opening // block), 2 * own], (used, m)
        else:
            # No cache, nothing shared: each request's own blocks.
            assert used == [2 * own, 2 * own], (used, m)
        close_own(clients)
        # Blocks that no running request holds are free (evictable), not in use: once no
        # request runs (waited for), the usage is 0 at once.
        wait_for(lambda: all(mock.metrics()["vllm:num_requests_running" + KEY % r] == 0
                             for r in (0, 1)), 15, "no request running")
        m = mock.metrics()
        assert all(m["vllm:kv_cache_usage_perc" + KEY % r] == 0 for r in (0, 1)), m
        cached_blocks = mock.metrics()["admit_mock_prefix_cache_blocks" + KEY % 0]
        assert cached_blocks == (12 if caching == "--enable-prefix-caching" else 0), cached_blocks
        mock.stop()


def test_cache_salt_isolates():
    # vLLM's cache_salt goes into the first block's hash: the same prompt under another salt
    # finds nothing, under the same salt all but its last block; no salt (or null) shares
    # with no salt only.
    mock = Mock("--speedup-ratio", "0", "--block-size", "4", "--enable-prompt-tokens-details")
    p = list(range(1, 30))  # 7 full blocks
    assert cached(completion(mock, p, cache_salt="tenant-a")) == 0
    assert cached(completion(mock, p, cache_salt="tenant-a")) == 28
    assert cached(completion(mock, p, cache_salt="tenant-b")) == 0
    assert cached(completion(mock, p)) == 0
    assert cached(completion(mock, p, cache_salt=None)) == 28
    assert cached(completion(mock, p, cache_salt="tenant-b")) == 28
    # A chat too: the salt is a top-level field of either API.
    msgs = [{"role": "user", "content": SYSTEM}]
    body = {"model": "mock-model", "messages": msgs, "max_tokens": 2, "cache_salt": "s1"}
    hits = []
    for salt in ("s1", "s1", "s2"):
        body["cache_salt"] = salt
        status, _, data = request(mock.addr, "POST", "/v1/chat/completions", body)
        assert status == 200, (status, data)
        hits.append(cached(json.loads(data)["usage"]))
    assert hits[0] == 0 and hits[1] > 0 and hits[2] == 0, hits
    # vLLM's rule: a non-empty string if given.
    for bad in ("", 7, ["a"]):
        status, _, data = request(mock.addr, "POST", "/v1/completions",
                                  {"model": "mock-model", "prompt": "hi", "cache_salt": bad})
        assert status == 400 and b"cache_salt" in data, (bad, status, data)
    mock.stop()


def test_details_if_cached():
    # vLLM's way: the details only when some of the prompt was cached; at 0 a JSON answer
    # has "prompt_tokens_details": null and a stream's usage chunk none.
    mock = Mock("--speedup-ratio", "0", "--block-size", "4", "--prompt-tokens-details-if-cached")
    msgs = [{"role": "user", "content": SYSTEM}]
    _, u = chat(mock, msgs)
    assert "prompt_tokens_details" in u and u["prompt_tokens_details"] is None, u
    _, u = chat(mock, msgs)
    assert u["prompt_tokens_details"]["cached_tokens"] > 0, u
    _, u = chat(mock, msgs, stream=True)
    assert u["prompt_tokens_details"]["cached_tokens"] > 0, u
    _, u = chat(mock, [{"role": "user", "content": "Nothing of this was sent before."}],
                stream=True)
    assert u["prompt_tokens"] > 0 and "prompt_tokens_details" not in u, u
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("turn 2 reports turn 1's full blocks as cached", test_second_turn_hits_first_turns_blocks)
    tap.run("--no-enable-prefix-caching caches nothing", test_no_prefix_caching_caches_nothing)
    tap.run("/tokenize has vLLM's shapes and the engine's counts", test_tokenize_shapes)
    tap.run("a full cache evicts the least recently used blocks",
            test_small_cache_evicts_least_recently_used)
    tap.run("each data-parallel rank has a cache of its own", test_one_cache_per_rank)
    tap.run("a cached prompt prefills faster than a cold one", test_cached_prompt_prefills_faster)
    tap.run("KV usage counts a block shared by running requests once",
            test_kv_usage_counts_a_shared_block_once)
    tap.run("cache_salt isolates prefix cache blocks", test_cache_salt_isolates)
    tap.run("--prompt-tokens-details-if-cached: details only above 0 cached, as vLLM's",
            test_details_if_cached)
    tap.done()
