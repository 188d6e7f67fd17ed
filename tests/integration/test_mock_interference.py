"""The mock engine's --prefill-interference: a rank runs one batch a step, so another
request's long prefill on the same rank stalls a streaming request's next token; without the
option every request keeps its own clock, and a decode leg whose prompt's KV was transferred
computes no prefill, so it stalls no one. The three cases run at once, each on its own mock."""

import http.client
import json
import threading
import time

from harness import Mock, Tap

TOKEN_MS = 10  # --token-interval-ms: the victim's normal gap
VICTIM_TOKENS = 100
LONG = 8000  # prompt ids of the intruder: at --speedup-ratio 0.25, a prefill of about 0.66 s
BLOCK = 16


def intruder_body(first_id, decode_leg):
    body = {"model": "mock-model", "prompt": list(range(first_id, first_id + LONG)),
            "max_tokens": 1}
    if decode_leg:  # vLLM's decode leg: every block of the prompt already transferred
        body["kv_transfer_params"] = {"do_remote_prefill": True, "do_remote_decode": False,
                                      "remote_block_ids": list(range(LONG // BLOCK)),
                                      "remote_engine_id": "elsewhere",
                                      "remote_host": "127.0.0.1", "remote_port": 5600,
                                      "tp_size": 1}
    return body


def post(addr, body):
    c = http.client.HTTPConnection(addr[0], addr[1], timeout=30)
    try:
        c.request("POST", "/v1/completions", body=json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def scenario(interference, decode_leg, out):
    """Streams a victim, sends the intruder once the victim decodes, and records the
    victim's gaps between reads that brought tokens (s) and the intruder's answer."""
    args = ["--speedup-ratio", "0.25", "--token-interval-ms", str(TOKEN_MS),
            "--block-size", str(BLOCK)]
    mock = Mock(*(args + (["--prefill-interference"] if interference else [])))
    try:
        c = http.client.HTTPConnection(mock.addr[0], mock.addr[1], timeout=30)
        c.request("POST", "/v1/completions",
                  body=json.dumps({"model": "mock-model", "prompt": "short", "stream": True,
                                   "max_tokens": VICTIM_TOKENS}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, r.status
        tokens, times, buf, intruder = 0, [], b"", None
        answer = {}
        while True:
            data = r.read1(65536)
            if not data:
                break
            buf += data
            *events, buf = buf.split(b"\n\n")  # the last piece is not complete yet
            got = sum(1 for e in events if e.startswith(b"data: {") and b'"text":"tok' in e)
            if got:
                tokens += got
                times.append(time.monotonic())
            if intruder is None and tokens >= 5:  # the victim decodes: now the long prompt
                intruder = threading.Thread(target=lambda: answer.update(
                    zip(("status", "body"), post(mock.addr, intruder_body(10 ** 6, decode_leg)))))
                intruder.start()
        c.close()
        intruder.join(30)
        out["tokens"] = tokens
        out["gaps"] = [b - a for a, b in zip(times, times[1:])]
        out["intruder"] = answer
        m = mock.metrics()
        out["computed"] = m["admit_mock_prompt_tokens_computed_total"]
        rank = '{engine="0",model_name="mock-model"}'
        out["stalls"] = m["admit_mock_decode_stalls_total" + rank]
        out["stall_s"] = m["admit_mock_decode_stall_seconds_total" + rank]
    finally:
        mock.stop()


def run_all():
    cases = {"on": (True, False), "off": (False, False), "decode_leg": (True, True)}
    outs = {k: {} for k in cases}
    errors = {}

    def one(k):
        try:
            scenario(*cases[k], outs[k])
        except Exception as e:  # reported below, with the case's name
            errors[k] = e

    threads = [threading.Thread(target=one, args=(k,)) for k in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for k, o in outs.items():
        assert o["tokens"] == VICTIM_TOKENS, (k, o.get("tokens"))
        assert o["intruder"].get("status") == 200, (k, o["intruder"])
        assert json.loads(o["intruder"]["body"])["usage"]["prompt_tokens"] == LONG, k
    return outs


OUTS = {}


def outs():
    if not OUTS:
        OUTS.update(run_all())
    return OUTS


def median(xs):
    return sorted(xs)[len(xs) // 2]


def test_prefill_stalls_decode():
    o = outs()["on"]
    # The victim's short prompt and the intruder's whole prompt were computed.
    assert o["computed"] > LONG, o["computed"]
    normal, worst = median(o["gaps"]), max(o["gaps"])
    # The stall is the intruder's prefill, about 0.66 s, against gaps of 10 ms.
    assert worst > 0.4 and worst > 5 * normal, (worst, normal)
    # The mock counts it: one token of the victim waited (the intruder's own token came after
    # its prefill), nearly the whole prefill.
    assert o["stalls"] == 1 and 0.4 < o["stall_s"] < 0.7, (o["stalls"], o["stall_s"])


def test_no_stall_without_the_option():
    o = outs()["off"]
    assert o["computed"] > LONG, o["computed"]
    assert o["stalls"] == 0 and o["stall_s"] == 0, (o["stalls"], o["stall_s"])
    assert max(o["gaps"]) < 0.25, (max(o["gaps"]), median(o["gaps"]))


def test_decode_leg_stalls_no_one():
    o = outs()["decode_leg"]
    # The intruder computed nothing: its prompt's KV had been transferred.
    assert o["computed"] < LONG, o["computed"]
    assert o["stalls"] == 0 and o["stall_s"] == 0, (o["stalls"], o["stall_s"])
    assert max(o["gaps"]) < 0.25, (max(o["gaps"]), median(o["gaps"]))


if __name__ == "__main__":
    tap = Tap()
    tap.run("with --prefill-interference another request's prefill stalls a stream's tokens",
            test_prefill_stalls_decode)
    tap.run("without it the same prefill leaves the stream's pace alone",
            test_no_stall_without_the_option)
    tap.run("a decode leg with transferred KV prefills nothing and stalls no one",
            test_decode_leg_stalls_no_one)
    tap.done()
