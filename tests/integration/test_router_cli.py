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
    "prefill-worker": "ADMIT_ROUTER_PREFILL_WORKER",
    "decode-worker": "ADMIT_ROUTER_DECODE_WORKER",
    "prefill-worker-dns": "ADMIT_ROUTER_PREFILL_WORKER_DNS",
    "decode-worker-dns": "ADMIT_ROUTER_DECODE_WORKER_DNS",
    "model": "ADMIT_ROUTER_MODEL",
    "listen": "ADMIT_ROUTER_LISTEN",
    "metrics-listen": "ADMIT_ROUTER_METRICS_LISTEN",
    "active-decode-blocks-threshold": "ADMIT_ROUTER_ACTIVE_DECODE_BLOCKS_THRESHOLD",
    "active-prefill-tokens-threshold": "ADMIT_ROUTER_ACTIVE_PREFILL_TOKENS_THRESHOLD",
    "active-prefill-tokens-threshold-frac": "ADMIT_ROUTER_ACTIVE_PREFILL_TOKENS_THRESHOLD_FRAC",
    "overload-status-code": "DYN_HTTP_OVERLOAD_STATUS_CODE",
    "missed-heartbeats": "ADMIT_ROUTER_MISSED_HEARTBEATS",
    "max-heartbeat-ms": "ADMIT_ROUTER_MAX_HEARTBEAT_MS",
    "upstream-timeout-ms": "ADMIT_ROUTER_UPSTREAM_TIMEOUT_MS",
    "client-timeout-ms": "ADMIT_ROUTER_CLIENT_TIMEOUT_MS",
    "client-header-timeout-ms": "ADMIT_ROUTER_CLIENT_HEADER_TIMEOUT_MS",
    "max-client-connections": "ADMIT_ROUTER_MAX_CLIENT_CONNECTIONS",
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


EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")

CLASSES = ("policy_classes:\n"
           "  - name: interactive\n"
           "    quantum: 4096\n"
           "    decode_busy_threshold: 0.8\n"
           "  - {name: batch, quantum: 1024, queue_policy: wspt}\n"
           "default_policy_class: batch\n"
           "policy_class_rules:\n"
           "  - by: header\n"
           "  - {by: prompt_tokens, buckets: [{min_tokens: 0, class: interactive},"
           " {min_tokens: 4096, class: batch}]}\n")


def test_check_config_classes():
    d = tempdir()
    try:
        example = os.path.join(EXAMPLES, "admit-router-classes.yaml")
        rc, out, err = run(["--check-config", "--config", example])
        assert rc == 0 and "configuration OK" in out, (rc, out, err)
        good = write(d, "good.yaml", 'worker: "%s"\n%s' % (WORKER, CLASSES))
        rc, out, err = run(["--check-config", "--config", good])
        assert rc == 0 and good in out, (rc, out, err)
        # Each bad file: exit 2, one line naming the file, line and column of the token.
        cases = [
            (CLASSES.replace("quantum: 4096", 'quantum: "4096"'),
             ":4:14: quantum: '4096' is a string (quoted or tagged): must be an integer"),
            (CLASSES.replace("quantum: 4096", "quantum: 4096\n    colour: red"),
             ":5:5: unknown key 'colour' in a policy class (name, quantum,"),
            (CLASSES.replace("name: batch", "name: interactive"),
             ":6:12: name: duplicate policy class 'interactive' (first at 3:11)"),
            (CLASSES.replace("default_policy_class: batch", "default_policy_class: bulk"),
             ":7:23: default_policy_class: unknown policy class 'bulk'"),
            (CLASSES.replace("min_tokens: 0,", "min_tokens: 1,"),
             ":10:48: min_tokens: the first bucket must start at 0, not 1"),
            (CLASSES.replace("  - by: header\n", "  - {by: header, class: batch}\n"),
             ":9:18: a header rule takes no 'class'"),
            ("default_policy_class: batch\n",
             ":2:1: default_policy_class needs at least one class in policy_classes"),
        ]
        for i, (text, want) in enumerate(cases):
            bad = write(d, "bad%d.yaml" % i, 'worker: "%s"\n%s' % (WORKER, text))
            for argv in (["--check-config", "--config", bad], ["--config", bad]):
                rc, out, err = run(argv)
                assert rc == 2 and err.startswith("admit-router: error: " + bad + want), \
                    (argv, rc, err, want)
                assert err.count("\n") == 1, err
    finally:
        shutil.rmtree(d)


def test_classes_only_in_the_file():
    rc, out, err = run(["--worker", WORKER, "--policy-classes=interactive"])
    assert rc == 2 and "--policy-classes: policy_classes can be set only in the config " \
        "file (--config FILE or ADMIT_ROUTER_CONFIG)" in err, err
    rc, out, err = run(["--worker", WORKER, "--policy-class-rules", "x"])
    assert rc == 2 and "--policy-class-rules: policy_class_rules can be set only" in err, err
    rc, out, err = run(["--worker", WORKER], env={"ADMIT_ROUTER_DEFAULT_POLICY_CLASS": "a"})
    assert rc == 2 and "ADMIT_ROUTER_DEFAULT_POLICY_CLASS: default_policy_class can be set " \
        "only in the config file" in err, err
    rc, out, err = run(["--help"])
    assert rc == 0 and "examples/admit-router-classes.yaml" in out, out


def test_router_with_classes_starts():
    d = tempdir()
    try:
        path = write(d, "router.yaml", 'worker: "%s"\nlisten: "127.0.0.1:0"\n'
                     'metrics_listen: "127.0.0.1:0"\nmodel: m\n%s' % (WORKER, CLASSES))
        rt = Router(["--config", path])
        assert rt.workers == 1, rt.workers
        rt.proc.wait_line(r"policy classes: 2, default batch, 2 rules", 10)
        assert [t["model"] for t in rt.thresholds()] == ["m"]
        # Not used yet: a request is routed (here: no worker is routable) as without classes.
        status, _, _ = request(rt.addr, "POST", "/v1/chat/completions",
                               {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                               headers={"x-admit-class": "interactive"})
        assert status == 503, status
        rt.stop()
        # The example of classes starts too, with its listeners moved to free ports.
        rt = Router(["--config", os.path.join(EXAMPLES, "admit-router-classes.yaml"),
                     "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        assert rt.workers == 2, rt.workers
        rt.proc.wait_line(r"policy classes: 2, default batch, 3 rules", 10)
        rt.stop()
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
    tap.run("--check-config checks the policy classes", test_check_config_classes)
    tap.run("policy classes are set only in the file", test_classes_only_in_the_file)
    tap.run("a router with policy classes starts", test_router_with_classes_starts)
    tap.run("the environment sets options", test_environment_sets_options)
    tap.run("flag > environment > file, lists replace", test_flag_beats_env_beats_file)
    tap.run("startup errors exit 2 naming the option", test_startup_errors_exit_2)
    tap.done()
