"""Real clients and tools against admitd: the official OpenAI SDK for Node.js, promtool and
curl. (nngcat is exercised in test_load_publish.py.) A tool that is missing is reported as a
TAP SKIP with the reason, which the CI's closing line counts, never as a quiet pass."""

import os
import re
import shutil
import subprocess
import time

from harness import Admitd, Mock, Tap, chat_body, request, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
INTEROP_SRC = os.path.join(HERE, "..", "interop")
INTEROP_DIR = os.environ.get("INTEROP_DIR", os.path.join("build", "interop"))


def npm_install():
    """Installs the pinned SDK (package-lock.json) into the build folder once."""
    os.makedirs(INTEROP_DIR, exist_ok=True)
    for f in ("package.json", "package-lock.json", "openai_sdk.mjs"):
        shutil.copy(os.path.join(INTEROP_SRC, f), INTEROP_DIR)
    if not os.path.isdir(os.path.join(INTEROP_DIR, "node_modules", "openai")):
        p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                           cwd=INTEROP_DIR, capture_output=True, timeout=600)
        if p.returncode != 0:
            raise AssertionError("npm ci failed: %s" % p.stderr.decode()[-2000:])


def run_sdk(tap):
    """Runs openai_sdk.mjs and relays its checks as our own TAP lines."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        # One SKIP per check the script would have made, named as it names them.
        why = "node or npm is not installed (scripts/install-deps.sh test installs nodejs)"
        with open(os.path.join(INTEROP_SRC, "openai_sdk.mjs")) as f:
            names = [m.group(2) for m in re.finditer(r"""await check\((['"])(.*?)\1""", f.read())]
        assert names, "no check found in openai_sdk.mjs"
        tap.skip("npm installs the pinned openai SDK", why)
        for name in names:
            tap.skip("openai SDK: " + name, why)
        return
    tap.run("npm installs the pinned openai SDK", npm_install)
    n, q, retry_after = 2, 2, 2
    mock = Mock("--token-interval-ms", "50")
    ad = Admitd(mock.url, "--engine-request-limit", str(n), "--request-queue-limit", str(q),
                "--retry-after", str(retry_after))
    env = dict(os.environ, ADMITD_URL="http://%s:%d" % ad.addr,
               ADMITD_METRICS="http://%s:%d" % ad.maddr, N=str(n), Q=str(q),
               RETRY_AFTER=str(retry_after))
    try:
        p = subprocess.run(["node", "openai_sdk.mjs"], cwd=INTEROP_DIR, env=env,
                           capture_output=True, timeout=240)
    except subprocess.TimeoutExpired as e:  # node is killed; its output so far is the report
        tap.report(False, "openai SDK script did not finish within 240 s")
        for line in ((e.stdout or b"") + (e.stderr or b"")).decode().splitlines()[-40:]:
            print("# " + line, flush=True)
        ad.stop()
        mock.stop()
        return
    out = p.stdout.decode()
    seen = 0
    for line in out.splitlines():
        m = re.match(r"^(ok|not ok) \d+ - (.*)$", line)
        if m:
            seen += 1
            tap.report(m.group(1) == "ok", "openai SDK: " + m.group(2))
        elif line.startswith("#"):
            print(line, flush=True)
    if p.returncode != 0 or seen == 0:
        tap.report(False, "openai SDK script exited %d after %d checks: %s" % (
            p.returncode, seen, p.stderr.decode()[-1500:].replace("\n", " | ")))
    ad.stop()
    mock.stop()


def check_promtool():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2")
    # Some traffic first, so that every family has samples.
    status, _, body = request(ad.addr, "POST", "/v1/chat/completions", chat_body(max_tokens=2))
    assert status == 200, (status, body)
    metrics = subprocess.run(["curl", "-sf", "http://%s:%d/metrics" % ad.maddr],
                             capture_output=True, timeout=30).stdout
    p = subprocess.run(["promtool", "check", "metrics"], input=metrics, capture_output=True,
                       timeout=60)
    assert p.returncode == 0, (p.stdout + p.stderr).decode()
    assert b"dynamo_rejection_request_total" in metrics
    # admit-router's /metrics too, after it routed a request.
    from harness import Proc, hostport
    router = Proc([os.environ.get("ADMIT_ROUTER", "build/admit-router"), "--listen=127.0.0.1:0",
                   "--metrics-listen=127.0.0.1:0", "--model=mock-model",
                   "--active-prefill-tokens-threshold=0",
                   "--worker=http://%s:%d=%s" % (ad.addr[0], ad.addr[1], ad.publish)],
                  ready=r"ready listen=(\S+) metrics=(\S+)", name="router")
    raddr, rmaddr = hostport(router.match.group(1)), hostport(router.match.group(2))
    # Ready once the worker's load messages have arrived and it is routable.
    wait_for(lambda: request(rmaddr, "GET", "/ready")[0] == 200, 30, "the router ready")
    status, _, body = request(raddr, "POST", "/v1/chat/completions", chat_body(max_tokens=2))
    assert status == 200, (status, body)
    metrics = subprocess.run(["curl", "-sf", "http://%s:%d/metrics" % rmaddr],
                             capture_output=True, timeout=30).stdout
    p = subprocess.run(["promtool", "check", "metrics"], input=metrics, capture_output=True,
                       timeout=60)
    assert p.returncode == 0, (p.stdout + p.stderr).decode()
    assert b"dynamo_frontend_model_rejection_total" in metrics
    router.stop_clean()
    ad.stop()
    mock.stop()


def check_examples_with_promtool():
    ex = os.path.join(HERE, "..", "..", "examples")
    for argv in (["check", "rules", "admitd-alerts.yml"], ["check", "config", "prometheus.yml"]):
        p = subprocess.run(["promtool"] + argv, cwd=ex, capture_output=True, timeout=60)
        assert p.returncode == 0, (argv, (p.stdout + p.stderr).decode())


def check_curl_streams():
    gap_ms, tokens = 100, 8
    mock = Mock("--token-interval-ms", str(gap_ms), "--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2")
    import json
    # --max-time bounds the read loop below; the finally kills curl whatever happens.
    p = subprocess.Popen(["curl", "-N", "-s", "--max-time", "60",
                          "http://%s:%d/v1/chat/completions" % ad.addr,
                          "-H", "Content-Type: application/json",
                          "-d", json.dumps(chat_body(max_tokens=tokens))],
                         stdout=subprocess.PIPE)
    arrivals = []
    try:
        for line in p.stdout:
            if line.startswith(b"data: "):
                arrivals.append((time.monotonic(), line.strip()))
        assert p.wait(30) == 0, p.returncode
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    assert arrivals and arrivals[-1][1] == b"data: [DONE]", arrivals
    token_times = [t for t, line in arrivals if b'"content":' in line]
    assert len(token_times) == tokens, arrivals
    spread = token_times[-1] - token_times[0]
    assert spread >= (tokens - 2) * gap_ms / 1000.0 * 0.8, spread
    ad.stop()
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    run_sdk(tap)
    if shutil.which("promtool"):
        tap.run("promtool check metrics accepts admitd's and admit-router's /metrics",
                check_promtool)
        tap.run("promtool accepts the example scrape config and alert rules",
                check_examples_with_promtool)
    else:
        why = ("promtool is not installed (Debian package prometheus; scripts/install-deps.sh "
               "test installs it)")
        tap.skip("promtool check metrics accepts admitd's and admit-router's /metrics", why)
        tap.skip("promtool accepts the example scrape config and alert rules", why)
    tap.run("curl -N shows SSE events as they are generated", check_curl_streams)
    tap.done()
