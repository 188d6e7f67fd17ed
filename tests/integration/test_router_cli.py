"""admit-router's command line: --help, --check-config, the environment, precedence, and
startup errors that exit 2, on the same option engine as admitd's."""

import json
import os
import re
import shutil
import subprocess
import tempfile

from harness import Proc, Tap, hostport, request

ROUTER = os.environ.get("ADMIT_ROUTER", "build/admit-router")
READY = r"ready listen=(\S+) metrics=(\S+) workers=(\d+)"
# Nothing listens there: the router starts and subscribes all the same (it retries).
WORKER = "http://127.0.0.1:1=tcp://127.0.0.1:1"
WORKER2 = "http://127.0.0.1:2=tcp://127.0.0.1:2"

# Every option and its variable: the help must show each one.
OPTIONS = {
    "worker": "ADMIT_ROUTER_WORKER",
    "model": "ADMIT_ROUTER_MODEL",
    "listen": "ADMIT_ROUTER_LISTEN",
    "metrics-listen": "ADMIT_ROUTER_METRICS_LISTEN",
    "active-decode-blocks-threshold": "ADMIT_ROUTER_ACTIVE_DECODE_BLOCKS_THRESHOLD",
    "active-prefill-tokens-threshold": "ADMIT_ROUTER_ACTIVE_PREFILL_TOKENS_THRESHOLD",
    "active-prefill-tokens-threshold-frac": "ADMIT_ROUTER_ACTIVE_PREFILL_TOKENS_THRESHOLD_FRAC",
    "overload-status-code": "DYN_HTTP_OVERLOAD_STATUS_CODE",
    "missed-heartbeats": "ADMIT_ROUTER_MISSED_HEARTBEATS",
    "upstream-timeout-ms": "ADMIT_ROUTER_UPSTREAM_TIMEOUT_MS",
    "client-timeout-ms": "ADMIT_ROUTER_CLIENT_TIMEOUT_MS",
    "max-header-bytes": "ADMIT_ROUTER_MAX_HEADER_BYTES",
    "max-body-bytes": "ADMIT_ROUTER_MAX_BODY_BYTES",
    "upstream-keepalive": "ADMIT_ROUTER_UPSTREAM_KEEPALIVE",
    "stream-buffer-bytes": "ADMIT_ROUTER_STREAM_BUFFER_BYTES",
    "retry-after": "ADMIT_ROUTER_RETRY_AFTER",
    "drain-timeout-ms": "ADMIT_ROUTER_DRAIN_TIMEOUT_MS",
    "admin-token": "ADMIT_ROUTER_ADMIN_TOKEN",
    "log-level": "ADMIT_ROUTER_LOG_LEVEL",
    "log-format": "ADMIT_ROUTER_LOG_FORMAT",
    "access-log": "ADMIT_ROUTER_ACCESS_LOG",
    "config": "ADMIT_ROUTER_CONFIG",
}


def clean_env(extra=None):
    """The environment without any of the router's variables, plus extra."""
    env = {k: v for k, v in os.environ.items() if k not in OPTIONS.values()}
    env.update(extra or {})
    return env


def run(argv, env=None):
    p = subprocess.run([ROUTER] + argv, env=clean_env(env), capture_output=True, timeout=30)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


class Router:
    """admit-router started with argv and only the router variables of env."""

    def __init__(self, argv, env=None):
        # env(1) unsets the router variables the caller's environment may hold (other than
        # those of env), then runs the router itself in the same process.
        unset = [a for k in OPTIONS.values() if k not in (env or {}) for a in ("-u", k)]
        self.proc = Proc(["env"] + unset + [ROUTER] + argv, env=env, ready=READY, name="router")
        self.addr = hostport(self.proc.match.group(1))
        self.maddr = hostport(self.proc.match.group(2))
        self.workers = int(self.proc.match.group(3))

    def thresholds(self):
        status, _, body = request(self.addr, "GET", "/busy_threshold")
        assert status == 200, (status, body)
        return json.loads(body)["thresholds"]

    def stop(self):
        self.proc.stop_clean()


def tempdir():
    return tempfile.mkdtemp(prefix="router-cli-")


def write(d, name, text):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_help_lists_every_option():
    rc, out, err = run(["--help"])
    assert rc == 0, err
    for flag, env in OPTIONS.items():
        assert re.search(r"^  --%s(=|\s|$)" % re.escape(flag), out, re.M), flag
        assert "env " + env in out, env
    for default in ("0.0.0.0:8090", "0.0.0.0:9092", "default None", "default 529"):
        assert default in out, default
    assert "--check-config" in out and "examples/admit-router.yaml" in out, out
    rc, out, err = run(["--version"])
    assert rc == 0 and out.startswith("admit-router "), out


def test_check_config():
    d = tempdir()
    try:
        good = write(d, "good.yaml", 'worker: "%s,%s"\nmodel: m\nlisten: "127.0.0.1:0"\n'
                     % (WORKER, WORKER2))
        rc, out, err = run(["--check-config", "--config", good])
        assert rc == 0 and "configuration OK" in out and good in out, (rc, out, err)
        # The file named by the environment, too.
        rc, out, err = run(["--check-config"], env={"ADMIT_ROUTER_CONFIG": good})
        assert rc == 0, (rc, err)
        bad = write(d, "bad.yaml", 'worker: "%s"\nretry_after: 0\n' % WORKER)
        rc, out, err = run(["--check-config", "--config", bad])
        assert rc == 2 and "%s:2:14: retry_after: '0' must be auto or seconds" % bad in err, err
        bad = write(d, "bad2.yaml", 'worker: "%s"\n  nested: 1\n' % WORKER)
        rc, out, err = run(["--check-config", "--config", bad])
        assert rc == 2 and re.search(re.escape(bad) + r":\d+:\d+: ", err), err
        worker = write(d, "worker.yaml", 'worker: "http://127.0.0.1:1"\n')
        rc, out, err = run(["--check-config", "--config", worker])
        want = ":1:9: worker: 'http://127.0.0.1:1' must be PROXY_URL=PUB_URL"
        assert rc == 2 and want in err, err
        # No worker at all is caught without starting anything.
        rc, out, err = run(["--check-config"])
        assert rc == 2 and "no worker" in err, err
        rc, out, err = run(["--check-config", "--worker", WORKER,
                            "--active-decode-blocks-threshold", "1.5"])
        assert rc == 2 and "between 0" in err, err
    finally:
        shutil.rmtree(d)


def test_environment_sets_options():
    env = {"ADMIT_ROUTER_LISTEN": "127.0.0.1:0", "ADMIT_ROUTER_METRICS_LISTEN": "127.0.0.1:0",
           "ADMIT_ROUTER_WORKER": WORKER + "," + WORKER2, "ADMIT_ROUTER_MODEL": "m1,m2",
           "ADMIT_ROUTER_ACTIVE_DECODE_BLOCKS_THRESHOLD": "0.25",
           "ADMIT_ROUTER_ACTIVE_PREFILL_TOKENS_THRESHOLD": "123",
           "ADMIT_ROUTER_ACCESS_LOG": "1", "ADMIT_ROUTER_LOG_FORMAT": "json"}
    rt = Router([], env)
    assert rt.addr[0] == "127.0.0.1" and rt.addr[1] > 0, rt.addr
    assert rt.maddr[0] == "127.0.0.1" and rt.maddr[1] > 0, rt.maddr
    assert rt.workers == 2, rt.workers
    got = rt.thresholds()
    assert [t["model"] for t in got] == ["m1", "m2"], got
    assert got[0]["active_decode_blocks_threshold"] == 0.25, got
    assert got[0]["active_prefill_tokens_threshold"] == 123, got
    # No worker is routable: 503, and the access log line for it, as JSON.
    status, _, _ = request(rt.addr, "POST", "/v1/chat/completions",
                           {"model": "m1", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 503, status
    line = rt.proc.wait_line(r"access method=POST", 10).string
    assert json.loads(line)["msg"].startswith("access method=POST"), line
    rt.stop()


def test_flag_beats_env_beats_file():
    d = tempdir()
    try:
        path = write(d, "router.yaml",
                     'worker: "%s"\nmodel: "file-a,file-b"\nlisten: "127.0.0.1:0"\n'
                     'metrics_listen: "127.0.0.1:0"\nactive_decode_blocks_threshold: 0.3\n'
                     'active_prefill_tokens_threshold: 300\n'
                     'active_prefill_tokens_threshold_frac: 3\n' % WORKER)
        env = {"ADMIT_ROUTER_CONFIG": path, "ADMIT_ROUTER_MODEL": "env-m",
               "ADMIT_ROUTER_ACTIVE_DECODE_BLOCKS_THRESHOLD": "0.5",
               "ADMIT_ROUTER_ACTIVE_PREFILL_TOKENS_THRESHOLD": "500"}
        rt = Router(["--active-decode-blocks-threshold", "0.7"], env)
        got = rt.thresholds()
        assert [t["model"] for t in got] == ["env-m"], got  # env's list replaces the file's
        t = got[0]
        assert t["active_decode_blocks_threshold"] == 0.7, t    # flag over env
        assert t["active_prefill_tokens_threshold"] == 500, t   # env over file
        assert t["active_prefill_tokens_threshold_frac"] == 3, t  # file over default
        assert rt.workers == 1
        rt.stop()
        # Repeated flags replace the lower lists and append among themselves.
        rt = Router(["--model", "flag-1", "--model=flag-2", "--worker", WORKER2,
                     "--worker", WORKER], env)
        assert [t["model"] for t in rt.thresholds()] == ["flag-1", "flag-2"]
        assert rt.workers == 2
        rt.stop()
    finally:
        shutil.rmtree(d)


def test_startup_errors_exit_2():
    rc, out, err = run(["--worker", WORKER, "--no-such-option"])
    assert rc == 2 and "unknown option '--no-such-option'" in err, err
    assert err.startswith("admit-router: error:"), err
    rc, out, err = run(["--worker", WORKER, "--listen"])
    assert rc == 2 and "--listen" in err and "needs a value" in err, err
    rc, out, err = run(["--worker", WORKER], env={"ADMIT_ROUTER_MISSED_HEARTBEATS": "0"})
    assert rc == 2 and "ADMIT_ROUTER_MISSED_HEARTBEATS: '0'" in err, err
    rc, out, err = run(["--worker", WORKER, "--upstream-timeout-ms=0"])
    assert rc == 2 and "--upstream-timeout-ms: '0' must be an integer from 1" in err, err
    rc, out, err = run(["--worker", "http://127.0.0.1:1=udp://x"])
    assert rc == 2 and "--worker: " in err and "tcp://HOST:PORT" in err, err
    rc, out, err = run([], env={"ADMIT_ROUTER_WORKER": "nonsense"})
    assert rc == 2 and "ADMIT_ROUTER_WORKER: 'nonsense' must be PROXY_URL=PUB_URL" in err, err
    rc, out, err = run(["--worker", WORKER, "stray"])
    assert rc == 2 and "unexpected argument 'stray'" in err, err


if __name__ == "__main__":
    tap = Tap()
    tap.run("--help lists every option with its variable", test_help_lists_every_option)
    tap.run("--check-config exits 0 or 2 with file:line:column", test_check_config)
    tap.run("the environment sets options", test_environment_sets_options)
    tap.run("flag > environment > file, lists replace", test_flag_beats_env_beats_file)
    tap.run("startup errors exit 2 naming the option", test_startup_errors_exit_2)
    tap.done()
