"""Models learned from the workers (README "Models learned from the workers"): admitd reads
its engine's GET /v1/models and sends the names in its load messages; admit-router, without
--model, sends a request for a model only to the workers that serve it, answers 404 in
OpenAI's shape for a model nobody serves, sends a request without a model anywhere, and
follows a worker whose engine comes back serving another model."""

import json
import time

from harness import Admitd, Mock, Proc, Tap, hostport, request, wait_for
from test_router import ROUTER
from test_router import Router as _Router

INTERVAL_MS = "200"


class Router(_Router):
    """admit-router without --model (test_router's Router passes one)."""

    def __init__(self, workers, *args):  # noqa: super's __init__ is replaced, not extended
        argv = [ROUTER, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"] + [
            "--worker=%s=%s" % w for w in workers] + list(args)
        self.proc = Proc(argv, ready=r"ready listen=(\S+) metrics=(\S+)", name="router")
        self.addr = hostport(self.proc.match.group(1))
        self.maddr = hostport(self.proc.match.group(2))


READ = ("--engine-models-interval-ms", INTERVAL_MS)


def worker(mock, *args):
    ad = Admitd(mock.url, "--heartbeat-ms", "100", *(args or READ))
    return ad, ("http://%s:%d" % ad.addr, ad.publish)


def fleet(*specs):
    """One mock (its args) and one admitd (its args, else READ) a spec, and a router without
    --model in front of them all, every worker routable. Returns (router, mocks, admitds)."""
    mocks = [Mock("--speedup-ratio", "0", *mock_args) for mock_args, _ in specs]
    ads = [worker(m, *ad_args)[0] for m, (_, ad_args) in zip(mocks, specs)]
    rt = Router([("http://%s:%d" % ad.addr, ad.publish) for ad in ads])
    rt.wait_routable(len(ads))
    return rt, mocks, ads


def stop(rt, mocks, ads):
    for p in [rt] + ads + mocks:
        p.stop()


def admitd_models(ad):
    return json.loads(request(ad.maddr, "GET", "/load")[2])["ranks"][0]["models"]


def router_models(rt, ad):
    url = "%s:%d" % ad.addr
    return [w["models"] for w in rt.workers() if w["url"] == url][0]


def served(mock):
    return mock.metrics()["admit_mock_requests_total"]


def chat(rt, model=None):
    body = {"stream": False, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    if model is not None:
        body["model"] = model
    return request(rt.addr, "POST", "/v1/chat/completions", body)


def not_found(name):
    return {"error": {"message": "The model `%s` does not exist." % name,
                      "type": "invalid_request_error", "param": "model",
                      "code": "model_not_found"}}


def test_admitd_sends_its_engines_models():
    mock = Mock("--speedup-ratio", "0", "--model-name", "alpha", "--served-model-name",
                "alpha-lora")
    ad, _ = worker(mock)
    wait_for(lambda: admitd_models(ad) == ["alpha", "alpha-lora"], 15, "admitd's /load models")
    assert ad.metrics()['admitd_engine_models_scrapes_total{result="ok"}'] >= 1
    # Never read (interval 0): unknown, null, as an older admitd's absent key means.
    off = Admitd(mock.url, "--engine-models-interval-ms", "0")
    time.sleep(0.5)
    assert admitd_models(off) is None, admitd_models(off)
    assert off.metrics()['admitd_engine_models_scrapes_total{result="ok"}'] == 0
    # The engine gone: the last list stays (it is logged once), the failures are counted.
    mock.stop()
    wait_for(lambda: ad.metrics()['admitd_engine_models_scrapes_total{result="failed"}'] >= 2,
             15, "failed /v1/models reads")
    assert admitd_models(ad) == ["alpha", "alpha-lora"], admitd_models(ad)
    assert sum("engine models at" in line for line in ad.proc.lines) == 1, ad.proc.lines
    off.stop()
    ad.stop()


def test_router_routes_by_model():
    rt, mocks, ads = fleet((("--model-name", "A"), ()),
                           (("--model-name", "B", "--served-model-name", "B-lora"), ()))
    (ma, mb), (ada, adb) = mocks, ads
    wait_for(lambda: router_models(rt, ada) == ["A"] and router_models(rt, adb) == ["B", "B-lora"],
             15, "the router to hear both lists")
    # Each model goes only where it is served.
    for model, mock, other in (("A", ma, mb), ("B", mb, ma), ("B-lora", mb, ma)):
        before, before_other = served(mock), served(other)
        for _ in range(6):
            status, _, body = chat(rt, model)
            assert status == 200, (model, status, body)
            assert json.loads(body)["model"] == model
        assert served(mock) == before + 6, (model, served(mock), before)
        assert served(other) == before_other, (model, served(other), before_other)
    # A model nobody serves: 404, OpenAI's shape, counted; the engines see nothing.
    before = served(ma) + served(mb)
    status, hdrs, body = chat(rt, "C")
    assert status == 404, (status, body)
    assert json.loads(body) == not_found("C"), body
    assert hdrs.get("content-type", "").startswith("application/json"), hdrs
    assert served(ma) + served(mb) == before
    assert rt.metrics()['admit_router_rejections_total{reason="model_not_found"}'] == 1
    # No model: either worker, in turn.
    a0, b0 = served(ma), served(mb)
    for _ in range(10):
        status, _, body = chat(rt)
        assert status == 200, (status, body)
    assert served(ma) > a0 and served(mb) > b0, (served(ma) - a0, served(mb) - b0)
    assert served(ma) - a0 + served(mb) - b0 == 10
    # A pin names the worker: its engine decides (the mock serves any name).
    status, _, body = request(rt.addr, "POST", "/v1/chat/completions",
                              {"model": "C", "max_tokens": 1,
                               "messages": [{"role": "user", "content": "hi"}]},
                              headers={"X-Admit-Worker": "%s:%d" % ada.addr})
    assert status == 200, (status, body)
    # Learned models are /busy_threshold's: their thresholds can be set.
    status, _, body = request(rt.addr, "GET", "/busy_threshold")
    names = [t["model"] for t in json.loads(body)["thresholds"]]
    assert status == 200 and {"A", "B", "B-lora"} <= set(names), (status, body)
    status, _, body = request(rt.addr, "POST", "/busy_threshold",
                              {"model": "B-lora", "active_decode_blocks_threshold": 0.5})
    assert status == 200, (status, body)
    assert json.loads(body)["active_decode_blocks_threshold"] == 0.5, body
    stop(rt, mocks, ads)


def test_unknown_list_takes_any_model():
    # One worker whose list is unknown (its admitd does not read /v1/models, as an older
    # admitd sends no list): it takes every model, so nothing is 404.
    rt, mocks, ads = fleet((("--model-name", "A"), ()),
                           (("--model-name", "U"), ("--engine-models-interval-ms", "0")))
    (ma, mu), (ada, adu) = mocks, ads
    wait_for(lambda: router_models(rt, ada) == ["A"], 15, "the router to hear A's list")
    assert router_models(rt, adu) is None
    u0, a0 = served(mu), served(ma)
    for _ in range(4):
        assert chat(rt, "C")[0] == 200
    assert served(mu) == u0 + 4 and served(ma) == a0
    # Both take A. Ties go in turn, but a load message heard mid-way can make one the
    # cheaper for a while: send until both have had one, within a bound.
    for _ in range(40):
        assert chat(rt, "A")[0] == 200
        if served(ma) > a0 and served(mu) > u0 + 4:
            break
    assert served(ma) > a0 and served(mu) > u0 + 4, (served(ma) - a0, served(mu) - u0)
    stop(rt, mocks, ads)


def test_router_follows_a_changed_engine():
    rt, mocks, ads = fleet((("--model-name", "A"), ()), (("--model-name", "B"), ()))
    adb = ads[1]
    wait_for(lambda: router_models(rt, adb) == ["B"], 15, "the router to hear B's list")
    # B's engine restarts on the same port serving another model.
    port = mocks[1].addr[1]
    mocks[1].stop()
    mb = mocks[1] = wait_for(lambda: _restart(port, "B2"), 15, "the mock back on port %d" % port)
    wait_for(lambda: router_models(rt, adb) == ["B2"], 15, "the router to follow B2")
    status, _, body = chat(rt, "B")
    assert status == 404 and json.loads(body) == not_found("B"), (status, body)
    before = served(mb)
    for _ in range(3):
        status, _, body = chat(rt, "B2")
        assert status == 200, (status, body)
    assert served(mb) == before + 3
    stop(rt, mocks, ads)


def test_retired_worker_serves_nothing():
    # B's only worker leaves the workers file: B is 404 at once (not 503), and it is routed
    # again when the worker comes back.
    import os
    import signal
    import tempfile
    mocks = [Mock("--speedup-ratio", "0", "--model-name", n) for n in ("A", "B")]
    ads = [worker(m)[0] for m in mocks]
    entries = ["http://%s:%d=%s" % (ad.addr + (ad.publish,)) for ad in ads]
    path = os.path.join(tempfile.mkdtemp(), "workers")

    def write(text):
        with open(path + ".new", "w") as f:
            f.write(text)
        os.replace(path + ".new", path)

    write("\n".join(entries) + "\n")
    argv = [ROUTER, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
            "--workers-file", path]
    rt = _Router.__new__(Router)
    rt.proc = Proc(argv, ready=r"ready listen=(\S+) metrics=(\S+)", name="router")
    rt.addr = hostport(rt.proc.match.group(1))
    rt.maddr = hostport(rt.proc.match.group(2))
    rt.wait_routable(2)
    wait_for(lambda: router_models(rt, ads[1]) == ["B"], 15, "the router to hear B's list")
    assert chat(rt, "B")[0] == 200
    write(entries[0] + "\n")
    rt.proc.p.send_signal(signal.SIGHUP)
    wait_for(lambda: len(rt.workers()) == 1, 15, "B's worker gone")
    status, _, body = chat(rt, "B")
    assert status == 404 and json.loads(body) == not_found("B"), (status, body)
    assert chat(rt, "A")[0] == 200
    write("\n".join(entries) + "\n")
    rt.proc.p.send_signal(signal.SIGHUP)
    wait_for(lambda: chat(rt, "B")[0] == 200, 15, "B routed again")
    stop(rt, mocks, ads)


def _restart(port, name):
    try:
        return Mock("--speedup-ratio", "0", "--listen", "127.0.0.1:%d" % port,
                    "--model-name", name)
    except Exception:  # noqa: BLE001 - the port may linger a moment: try again
        return None


if __name__ == "__main__":
    tap = Tap()
    tap.run("admitd sends its engine's /v1/models names; keeps them when the engine is gone",
            test_admitd_sends_its_engines_models)
    tap.run("router without --model: each model to its workers, 404 for none, no model anywhere",
            test_router_routes_by_model)
    tap.run("a worker whose list is unknown takes any model", test_unknown_list_takes_any_model)
    tap.run("a worker whose engine comes back with another model is followed",
            test_router_follows_a_changed_engine)
    tap.run("a retired worker serves nothing: its model is 404 until it is back",
            test_retired_worker_serves_nothing)
    tap.done()
