"""The mock engine as both legs of vLLM's disaggregated prefill/decode (issue 27): the
prefill leg's kv_transfer_params, the terminal case, the decode leg's skipped prefill, the
400s, and concurrent clients through a prefill mock and a decode mock."""

import json
import threading
import time

from harness import Mock, Tap, request

PROXY_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                "remote_block_ids": None, "remote_host": None, "remote_port": None}
PARAM_KEYS = {"do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id",
              "remote_host", "remote_port", "tp_size", "remote_request_id"}


def post(mock, path, body, rid=None):
    """(status, headers, parsed JSON or the raw SSE bytes)."""
    status, h, data = request(mock.addr, "POST", path, body,
                              headers={"X-Request-Id": rid} if rid else None)
    if body.get("stream") and status == 200:
        return status, h, data
    return status, h, json.loads(data)


def prefill_body(prompt, **extra):
    """What the toy proxy sends the prefill leg: max_tokens 1, no stream."""
    body = {"model": "mock-model", "prompt": prompt, "max_tokens": 1, "stream": False,
            "kv_transfer_params": dict(PROXY_PARAMS)}
    body.update(extra)
    return body


def stream_tokens(data):
    """The text pieces and the finish_reason of an SSE completion stream."""
    pieces, finish = [], None
    events = [e for e in data.split(b"\n\n") if e.startswith(b"data: ")]
    assert events and events[-1] == b"data: [DONE]", data[-200:]
    for ev in events[:-1]:
        obj = json.loads(ev[6:])
        assert "kv_transfer_params" not in obj, obj
        for ch in obj["choices"]:
            piece = ch.get("text", ch.get("delta", {}).get("content", ""))
            if piece:
                pieces.append(piece)
            finish = ch["finish_reason"] or finish
    return pieces, finish


def metric(mock, name, **labels):
    key = name + ("{" + ",".join('%s="%s"' % kv for kv in labels.items()) + "}" if labels else "")
    return mock.metrics()[key]


def test_prefill_leg_answers_params():
    block = 16
    mock = Mock("--speedup-ratio", "0", "--block-size", str(block), "--data-parallel-size", "2")
    prompt = list(range(1000, 1100))  # 100 ids: 6 full blocks and a partial one
    answers = []
    for i in range(3):  # round robin: ranks 0, 1, 0
        status, h, obj = post(mock, "/v1/completions", prefill_body(prompt), rid="pd-%d" % i)
        assert status == 200, (status, obj)
        assert h.get("x-request-id") == "pd-%d" % i and obj["id"] == "cmpl-pd-%d" % i, (h, obj)
        ch = obj["choices"][0]
        assert ch["finish_reason"] == "length" and ch["text"] == "tok0", obj
        assert obj["usage"]["completion_tokens"] == 1 and obj["usage"]["prompt_tokens"] == 100
        kv = obj["kv_transfer_params"]
        assert set(kv) == PARAM_KEYS, kv
        assert kv["do_remote_prefill"] is True and kv["do_remote_decode"] is False, kv
        assert kv["remote_engine_id"] == "mock-127.0.0.1:%d" % mock.addr[1], kv
        assert kv["remote_host"] == "127.0.0.1" and kv["tp_size"] == 1, kv
        assert kv["remote_port"] == 5600 + i % 2, kv
        assert kv["remote_request_id"] == "pd-%d" % i, kv
        ids = kv["remote_block_ids"]
        assert len(ids) == -(-100 // block) and len(set(ids)) == len(ids), ids
        assert all(isinstance(x, int) and x >= 0 for x in ids), ids
        answers.append(kv)
    # Rank 0 met the prompt twice: its full blocks are the prefix cache's, the same blocks.
    assert answers[2]["remote_block_ids"][:6] == answers[0]["remote_block_ids"][:6], answers
    assert answers[2]["remote_block_ids"][6] != answers[0]["remote_block_ids"][6], answers
    # A chat prefill without X-Request-Id names the mock's own id, the completion id's tail.
    status, h, obj = post(mock, "/v1/chat/completions", {
        "model": "mock-model", "max_tokens": 1, "kv_transfer_params": dict(PROXY_PARAMS),
        "messages": [{"role": "user", "content": "Summarise the plot of Hamlet."}]})
    assert status == 200 and obj["choices"][0]["finish_reason"] == "length", obj
    assert obj["choices"][0]["message"]["content"] == "tok0", obj
    assert obj["id"] == "chatcmpl-" + obj["kv_transfer_params"]["remote_request_id"], obj
    chat = obj["usage"]["prompt_tokens"]
    # max_tokens is the request's: a prefill leg of 3 makes 3, and still offers its blocks.
    status, h, obj = post(mock, "/v1/completions", prefill_body(prompt, max_tokens=3))
    assert obj["usage"]["completion_tokens"] == 3 and obj["kv_transfer_params"], obj
    # A whole request has no kv_transfer_params; one with an empty object gets null.
    status, h, obj = post(mock, "/v1/completions", {"model": "mock-model", "prompt": prompt,
                                                     "max_tokens": 1})
    assert status == 200 and "kv_transfer_params" not in obj, obj
    status, h, obj = post(mock, "/v1/completions", {"model": "mock-model", "prompt": prompt,
                                                     "max_tokens": 1, "kv_transfer_params": {}})
    assert status == 200 and obj["kv_transfer_params"] is None, obj
    assert metric(mock, "admit_mock_kv_transfers_total", side="prefill") == 5
    assert metric(mock, "admit_mock_kv_transfer_tokens_total", side="prefill") == 4 * 100 + chat
    assert metric(mock, "admit_mock_kv_transfers_total", side="decode") == 0
    assert metric(mock, "admit_mock_role_info", role="both") == 1
    mock.stop()


def test_terminal_prefill_has_null_params():
    # --stop-after 1: the first token ends every request, before the length cap.
    mock = Mock("--speedup-ratio", "0", "--stop-after", "1")
    status, _, obj = post(mock, "/v1/completions", prefill_body("The end."))
    assert status == 200, obj
    assert obj["choices"][0]["finish_reason"] == "stop", obj
    assert "kv_transfer_params" in obj and obj["kv_transfer_params"] is None, obj
    assert obj["usage"]["completion_tokens"] == 1, obj
    # The same for a whole request, streamed or not: it ends at its first token.
    status, _, obj = post(mock, "/v1/completions", {"model": "mock-model", "prompt": "x",
                                                     "max_tokens": 9})
    assert obj["choices"][0]["finish_reason"] == "stop" and obj["usage"]["completion_tokens"] == 1
    status, _, data = post(mock, "/v1/chat/completions", {
        "model": "mock-model", "max_tokens": 9, "stream": True,
        "messages": [{"role": "user", "content": "x"}]})
    assert stream_tokens(data) == (["tok0"], "stop"), data
    assert metric(mock, "admit_mock_kv_transfers_total", side="prefill") == 0
    mock.stop()
    # --stop-after past max_tokens: the length cap comes first, and the params are there.
    mock = Mock("--speedup-ratio", "0", "--stop-after", "3")
    status, _, obj = post(mock, "/v1/completions", prefill_body("Go on."))
    assert obj["choices"][0]["finish_reason"] == "length", obj
    assert obj["kv_transfer_params"]["do_remote_prefill"] is True, obj
    status, _, obj = post(mock, "/v1/completions", {"model": "mock-model", "prompt": "x",
                                                     "max_tokens": 9})
    assert obj["choices"][0]["finish_reason"] == "stop" and obj["usage"]["completion_tokens"] == 3
    assert obj["choices"][0]["text"] == "tok0tok1tok2", obj
    assert metric(mock, "admit_mock_kv_transfers_total", side="prefill") == 1
    mock.stop()


def decode_body(prompt, blocks, max_tokens=2, stream=False):
    return {"model": "mock-model", "prompt": prompt, "max_tokens": max_tokens, "stream": stream,
            "kv_transfer_params": {"do_remote_prefill": True, "do_remote_decode": False,
                                   "remote_block_ids": list(range(blocks)),
                                   "remote_engine_id": "elsewhere", "remote_host": "127.0.0.1",
                                   "remote_port": 5600, "tp_size": 1}}


def test_decode_leg_skips_prefill():
    # 8,000 prompt ids at 1/5 speed: a prefill of about 0.85 s. A decode leg that received all
    # of them computes none; one that received 100 blocks of 16 computes 6,400. Each prompt is
    # new to the cache, so nothing else shortens it.
    n, block = 8000, 16
    mock = Mock("--speedup-ratio", "0.2", "--token-interval-ms", "5", "--block-size", str(block),
                "--role", "decode")
    computed = "admit_mock_prompt_tokens_computed_total"

    def timed(body):
        before = mock.metrics()[computed]
        t0 = time.monotonic()
        status, _, out = post(mock, "/v1/completions", body)
        took = time.monotonic() - t0
        assert status == 200, out
        return took, mock.metrics()[computed] - before, out

    whole, whole_computed, obj = timed({"model": "mock-model", "prompt": list(range(n)),
                                        "max_tokens": 2})
    assert whole_computed == n and obj["usage"]["completion_tokens"] == 2, (whole_computed, obj)
    assert "kv_transfer_params" not in obj, obj
    # The decode leg streams, as the client asked, and says nothing of kv_transfer_params.
    fast, fast_computed, data = timed(decode_body(list(range(n, 2 * n)), n // block, stream=True))
    assert fast_computed == 0, fast_computed
    assert stream_tokens(data) == (["tok0", "tok1"], "length"), data
    assert metric(mock, "admit_mock_kv_transfers_total", side="decode") == 1
    assert metric(mock, "admit_mock_kv_transfer_tokens_total", side="decode") == n
    assert whole > 0.5 and fast < whole / 3, (whole, fast)
    # A non-streamed decode leg answers null params; 100 blocks spare 1,600 tokens.
    _, part_computed, obj = timed(decode_body(list(range(2 * n, 3 * n)), 100))
    assert part_computed == n - 100 * block, part_computed
    assert obj["kv_transfer_params"] is None and obj["usage"]["prompt_tokens"] == n, obj
    assert metric(mock, "admit_mock_kv_transfer_tokens_total", side="decode") == n + 100 * block
    assert metric(mock, "admit_mock_kv_transfers_total", side="decode") == 2
    assert metric(mock, "admit_mock_kv_transfers_total", side="prefill") == 0
    assert metric(mock, "admit_mock_role_info", role="decode") == 1
    mock.stop()


def test_malformed_params_are_400():
    mock = Mock("--speedup-ratio", "0")
    cases = [
        ([1], "kv_transfer_params"),
        ("yes", "kv_transfer_params"),
        ({"do_remote_decode": "true"}, "do_remote_decode"),
        ({"do_remote_prefill": 1, "remote_block_ids": [1]}, "do_remote_prefill"),
        ({"do_remote_prefill": True}, "remote_block_ids"),
        ({"do_remote_prefill": True, "remote_block_ids": "0,1"}, "remote_block_ids"),
        ({"do_remote_prefill": True, "remote_block_ids": [0, -3]}, "remote_block_ids"),
        ({"do_remote_prefill": True, "remote_block_ids": [0, 1.5]}, "remote_block_ids"),
        ({"do_remote_prefill": True, "do_remote_decode": True, "remote_block_ids": []},
         "kv_transfer_params"),
    ]
    for path in ("/v1/completions", "/v1/chat/completions"):
        for i, (kv, field) in enumerate(cases):
            body = {"model": "mock-model", "max_tokens": 2, "kv_transfer_params": kv,
                    "prompt": "p", "messages": [{"role": "user", "content": "p"}]}
            status, h, obj = post(mock, path, body, rid="bad-%d" % i)
            assert status == 400, (path, kv, status, obj)
            assert h.get("x-request-id") == "bad-%d" % i, h
            err = obj["error"]
            assert err["type"] == "invalid_request_error" and err["code"] == 400, obj
            assert err["param"] == field and field in err["message"], (kv, obj)
    assert metric(mock, "admit_mock_kv_transfers_total", side="decode") == 0
    # Still serving.
    status, _, obj = post(mock, "/v1/completions", decode_body("p", 1))
    assert status == 200 and obj["kv_transfer_params"] is None, obj
    assert metric(mock, "admit_mock_kv_transfers_total", side="decode") == 1
    mock.stop()


def test_concurrent_clients_through_prefill_and_decode():
    # A prefill mock and a decode mock, as the toy proxy drives them: each client its own
    # X-Request-Id and prompt; the prefill's params, copied into the decode leg, come back
    # with that client's id, and the decode leg answers that client's max_tokens.
    clients, block = 12, 16
    pre = Mock("--speedup-ratio", "1", "--block-size", str(block), "--role", "prefill")
    dec = Mock("--speedup-ratio", "1", "--token-interval-ms", "3", "--block-size", str(block),
               "--role", "decode")
    results, errors = {}, []
    start = threading.Barrier(clients, timeout=30)

    def client(i):
        try:
            rid = "client-%d" % i
            prompt = "Client %d asks about topic %d. " % (i, i) * (20 + 7 * i)
            start.wait()
            status, h, p = post(pre, "/v1/completions", prefill_body(prompt), rid=rid)
            assert status == 200 and h.get("x-request-id") == rid, (status, h, p)
            assert p["id"] == "cmpl-" + rid, p
            kv = p["kv_transfer_params"]
            assert kv["remote_request_id"] == rid, kv
            body = {"model": "mock-model", "prompt": prompt, "max_tokens": 2 + i,
                    "stream": i % 2 == 1, "kv_transfer_params": kv}
            status, h, d = post(dec, "/v1/completions", body, rid=rid)
            assert status == 200 and h.get("x-request-id") == rid, (status, h)
            if i % 2:
                pieces, finish = stream_tokens(d)
                assert d.count(b'"id":"cmpl-%s"' % rid.encode()) == len(pieces) + 1, d
            else:
                assert d["id"] == "cmpl-" + rid and d["kv_transfer_params"] is None, d
                pieces = [d["choices"][0]["text"][k:k + 4]
                          for k in range(0, len(d["choices"][0]["text"]), 4)]
                finish = d["choices"][0]["finish_reason"]
            assert len(pieces) == 2 + i and finish == "length", (i, pieces, finish)
            results[i] = (p["usage"]["prompt_tokens"], kv["remote_block_ids"])
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == clients, errors
    all_ids = [x for _, ids in results.values() for x in ids]
    # Each prefill's blocks are its own: no id is offered twice.
    assert len(set(all_ids)) == len(all_ids), sorted(all_ids)
    for tokens, ids in results.values():
        assert len(ids) == -(-tokens // block), (tokens, ids)
    prompt_total = sum(t for t, _ in results.values())
    assert metric(pre, "admit_mock_kv_transfers_total", side="prefill") == clients
    assert metric(pre, "admit_mock_kv_transfer_tokens_total", side="prefill") == prompt_total
    assert metric(dec, "admit_mock_kv_transfers_total", side="decode") == clients
    assert metric(dec, "admit_mock_kv_transfer_tokens_total", side="decode") == prompt_total
    assert metric(dec, "admit_mock_prompt_tokens_computed_total") == 0
    assert metric(pre, "admit_mock_prompt_tokens_computed_total") == prompt_total
    assert metric(pre, "admit_mock_role_info", role="prefill") == 1
    pre.stop()
    dec.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("a prefill leg answers vLLM's kv_transfer_params, finish_reason length",
            test_prefill_leg_answers_params)
    tap.run("a prefill leg that stops at its token answers kv_transfer_params null",
            test_terminal_prefill_has_null_params)
    tap.run("a decode leg skips the prefill of the tokens it received",
            test_decode_leg_skips_prefill)
    tap.run("malformed kv_transfer_params are a 400 naming the field",
            test_malformed_params_are_400)
    tap.run("concurrent clients through a prefill and a decode mock each get their own answer",
            test_concurrent_clients_through_prefill_and_decode)
    tap.done()
