"""A smoke run of admitd under valgrind (memcheck), on a build without sanitizers.

ASan cannot see into Debian's uninstrumented libevent and nng; valgrind can. Each check
exercises one path through those libraries, and admitd must exit 0 under
--error-exitcode=99: any invalid access, use of uninitialised memory or definite leak fails
the test."""

import json
import os
import signal

from harness import (Admitd, Mock, RawClient, Tap, chat_body, check_own, marker, own_request,
                     own_response, request, wait_for)

os.environ.setdefault("ADMITD_WRAP", "valgrind --quiet --error-exitcode=99 --leak-check=full "
                      "--errors-for-leak-kinds=definite --show-leak-kinds=definite "
                      "--track-fds=no")


def test_admission_paths():
    mock = Mock("--token-interval-ms", "20")
    ad = Admitd(mock.url, "--engine-request-limit", "1", "--request-queue-limit", "2")
    holders = ad.fill(3, queued=2, max_tokens=40)
    status, _, body = own_request(ad.addr, "/v1/chat/completions", chat_body(), marker())
    assert status == 529, status
    for h in holders:
        check_own(h)
    holders[2].reset()  # a queued client leaves with an RST
    holders[0].close()  # the running one leaves mid-stream: the engine request is cancelled
    assert own_response(holders[1])[0] == 200
    assert request(ad.addr, "GET", "/v1/models")[0] == 200
    ad.wait_idle()
    ad.stop()
    mock.stop()


def test_failure_and_publish_paths():
    mock = Mock("--token-interval-ms", "20")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--heartbeat-ms", "50",
                "--access-log", "--log-format", "json")
    c = RawClient(ad.addr)
    c.post("/v1/chat/completions", chat_body(max_tokens=200))
    assert c.read_head()[0] == 200
    mock.proc.kill()  # the engine dies mid-stream
    body, complete = c.read_body({"transfer-encoding": "chunked"})
    assert not complete
    assert request(ad.addr, "POST", "/v1/chat/completions", chat_body())[0] == 503
    assert json.loads(request(ad.maddr, "GET", "/load")[2])["ranks"]
    status, _, _ = request(ad.maddr, "POST", "/admission", b'{"engine_request_limit":3}',
                           headers={"Content-Type": "application/json"})
    assert status == 200
    ad.wait_idle()
    ad.proc.p.send_signal(signal.SIGHUP)
    ad.proc.wait_line("configuration reloaded", 60)
    ad.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("admission, rejection, queue hang-ups and cancels under valgrind",
            test_admission_paths)
    tap.run("engine failure, /load, /admission, reload and drain under valgrind",
            test_failure_and_publish_paths)
    tap.done()
