"""The command line: --help, --version, and startup errors that exit 2 with a clear message."""

import os
import subprocess

from harness import ADMITD, MOCK, Admitd, Mock, Tap, request


# Should a bad value ever be accepted, the daemon that starts listens on loopback ports
# picked at run time, not on the defaults (0.0.0.0:8080, :9091, :5557), until the timeout.
LOOPBACK = {"--listen": "127.0.0.1:0", "--metrics-listen": "127.0.0.1:0",
            "--publish": "tcp://127.0.0.1:0"}


def run(argv, env=None):
    full = dict(os.environ)
    for k in ("DYN_ENGINE_REQUEST_LIMIT", "DYN_DYNAMO_REQUEST_QUEUE_LIMIT",
              "DYN_HTTP_OVERLOAD_STATUS_CODE"):
        full.pop(k, None)
    full.update(env or {})
    if argv[0] == ADMITD and not any(a in ("--help", "--version") for a in argv):
        argv = argv + ["%s=%s" % (k, v) for k, v in LOOPBACK.items()
                       if not any(a.startswith(k + "=") for a in argv)]
    p = subprocess.run(argv, env=full, capture_output=True, timeout=30)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_help_and_version():
    rc, out, err = run([ADMITD, "--help"])
    assert rc == 0, err
    for opt in ("--engine-request-limit", "DYN_ENGINE_REQUEST_LIMIT", "--request-queue-limit",
                "DYN_DYNAMO_REQUEST_QUEUE_LIMIT", "--overload-status-code",
                "DYN_HTTP_OVERLOAD_STATUS_CODE", "--upstream", "--listen", "--metrics-listen"):
        assert opt in out, opt
    rc, out, err = run([ADMITD, "--version"])
    assert rc == 0 and out.startswith("admitd "), out
    rc, out, err = run([MOCK, "--help"])
    assert rc == 0 and "--speedup-ratio" in out, out
    rc, out, err = run([MOCK, "--version"])
    assert rc == 0 and out.startswith("admit-mock-engine "), out


def test_bad_engine_limit_exits_2():
    for bad in ("0", "-1", "abc", "", "2.5"):
        rc, out, err = run([ADMITD, "--engine-request-limit=" + bad])
        assert rc == 2, (bad, rc, err)
        assert "must be a positive integer" in err and "--engine-request-limit" in err, err
        rc, out, err = run([ADMITD], env={"DYN_ENGINE_REQUEST_LIMIT": bad})
        assert rc == 2 and "DYN_ENGINE_REQUEST_LIMIT" in err, (bad, err)


def test_bad_queue_limit_exits_2():
    for bad in ("1", "0", "x"):
        rc, out, err = run([ADMITD, "--engine-request-limit=2"],
                           env={"DYN_DYNAMO_REQUEST_QUEUE_LIMIT": bad})
        assert rc == 2, (bad, rc, err)
        assert "DYN_DYNAMO_REQUEST_QUEUE_LIMIT" in err, err


def test_bad_role_exits_2():
    for bad in ("router", "", "Prefill", "prefill,decode"):
        rc, out, err = run([ADMITD, "--role=" + bad])
        assert rc == 2, (bad, rc, err)
        assert "--role" in err and "must be prefill, decode or both" in err, err
        rc, out, err = run([ADMITD], env={"ADMITD_ROLE": bad})
        assert rc == 2 and "ADMITD_ROLE" in err, (bad, err)
    rc, out, err = run([ADMITD, "--role=decode", "--check-config"])
    assert rc == 0, err


def test_other_startup_errors():
    for argv in (["--listen=nonsense"], ["--upstream=https://x:1"], ["--no-such-option"],
                 ["stray-argument"], ["--log-level=chatty"]):
        rc, out, err = run([ADMITD] + argv)
        assert rc == 2, (argv, rc, err)
        assert err.startswith("admitd: error:"), err
    rc, out, err = run([MOCK, "--block-size=zero"])
    assert rc == 2 and "--block-size" in err, err


def test_flag_wins_over_env_at_runtime():
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "3",
                env={"DYN_ENGINE_REQUEST_LIMIT": "9", "DYN_DYNAMO_REQUEST_QUEUE_LIMIT": "5"})
    m = ad.metrics()
    assert m["admitd_engine_request_limit"] == 3 and m["admitd_request_queue_limit"] == 5, m
    ad.stop()
    mock.stop()


def test_builtin_mock_engine():
    ad = Admitd("http://127.0.0.1:1", "--mock-engine", "--engine-request-limit", "2")
    status, _, body = request(ad.addr, "POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "hi"}],
                               "max_tokens": 2})
    assert status == 200, body
    ad.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("--help and --version", test_help_and_version)
    tap.run("a bad engine limit exits 2 naming the option", test_bad_engine_limit_exits_2)
    tap.run("a bad queue limit exits 2 naming the variable", test_bad_queue_limit_exits_2)
    tap.run("a bad role exits 2 naming the option", test_bad_role_exits_2)
    tap.run("other startup errors exit 2", test_other_startup_errors)
    tap.run("a flag wins over the environment", test_flag_wins_over_env_at_runtime)
    tap.run("--mock-engine runs the built-in engine", test_builtin_mock_engine)
    tap.done()
