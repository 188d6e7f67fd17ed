"""What a request's memory costs (README "Behaviour where the spec was silent": memory): a
body is read into a buffer that grows with the bytes that arrive, never to what its
Content-Length announces, and a request whose buffer cannot grow is refused alone (500)
while admitd serves the others.

Memory is limited the way each build allows: under ASan (which cannot run under an address
space limit) ASAN_OPTIONS makes any allocation over a size fail (allocator_may_return_null,
max_allocation_size_mb); without ASan admitd's address space is limited (RLIMIT_AS) a little
above what it uses at start. Either way, reserving an announced 32 MiB up front fails, and
before the fix that aborted the process with every request in flight.

Every client sends a marker of its own, and what each got back, an answer or nothing, is
checked to be its own (harness's check_own)."""

import json
import resource
import socket
import threading
import time

from harness import (ADMITD, Admitd, Mock, RawClient, Tap, chat_body, check_own, close_own,
                     error_message, marker, marker_fields, own_request, own_response,
                     read_to_close, request, wait_for)

MIB = 1024 * 1024
ANNOUNCED = 32 * MIB  # the default --max-body-bytes: the largest body a client may announce
SENT = 100 * 1024
CONNECTIONS = 300


def asan_build():
    with open(ADMITD, "rb") as f:
        return b"__asan_init" in f.read()


def limited_admitd(upstream, asan_mb, headroom, *args):
    """admitd whose allocations over asan_mb MiB fail (ASan), or whose address space may
    grow by headroom bytes from its start (without ASan)."""
    env = {}
    if asan_build():
        env["ASAN_OPTIONS"] = ("halt_on_error=1:detect_leaks=1:allocator_may_return_null=1:"
                               "max_allocation_size_mb=%d" % asan_mb)
    ad = Admitd(upstream, *args, env=env)
    if not asan_build():
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.prlimit(ad.proc.p.pid, resource.RLIMIT_AS,
                         (ad.proc.status_kb("VmSize") * 1024 + headroom, hard))
    return ad


def head(c, length):
    """The head of a POST from RawClient c (with its marker) announcing length bytes."""
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n%s\r\n" %
            (c.addr[0].encode(), c.addr[1], length, marker_fields(c.marker).encode()))


def test_announced_bodies_cost_what_arrives():
    mock = Mock("--speedup-ratio", "0")
    # A reservation of the announced 32 MiB (64 MiB, rounded up) fails, under ASan and
    # without it (300 of them would take 19 GB); what arrives fits many times over.
    ad = limited_admitd(mock.url, 40, 1024 * MIB)
    before = {f: ad.proc.status_kb(f) for f in ("VmSize", "VmRSS")}
    filler = b"x" * SENT
    clients = []
    for i in range(CONNECTIONS):
        c = RawClient(ad.addr, marker=marker(i))
        c.send(head(c, ANNOUNCED))
        if i % 3 == 1:  # varied timing: half now, the rest a moment later
            c.send(filler[:SENT // 2])
            clients.append((c, filler[SENT // 2:]))
        else:
            c.send(filler)
            clients.append((c, b""))
    time.sleep(0.2)
    for c, rest in clients:
        if rest:
            c.send(rest)
    # Every one of them is open and waiting for the rest of its body: admitd is alive,
    # serves another client, and its memory grew by what arrived, not what was announced.
    wait_for(lambda: ad.metrics()['admitd_connections{listener="client"}'] >= CONNECTIONS,
             what="%d connections open" % CONNECTIONS)
    assert own_request(ad.addr, "/v1/chat/completions", chat_body(max_tokens=1),
                       marker(CONNECTIONS))[0] == 200
    grown = {f: ad.proc.status_kb(f) - before[f] for f in before}
    print("# %d connections announcing %d MiB and sending %d KiB: VmSize grew %d MiB, "
          "VmRSS %d MiB" % (CONNECTIONS, ANNOUNCED // MIB, SENT // 1024, grown["VmSize"] // 1024,
                            grown["VmRSS"] // 1024))
    assert grown["VmRSS"] < 400 * 1024, grown
    if not asan_build():
        assert grown["VmSize"] < 400 * 1024, grown
    # They leave: a third with a FIN, a third with a reset, a third after more bytes and a
    # FIN. admitd closes every one, and none of their requests reached the engine.
    for c, _ in clients:
        check_own(c)  # nothing so far, or nothing of another's
    for i, (c, _) in enumerate(clients):
        if i % 3 == 0:
            c.s.shutdown(socket.SHUT_WR)
        elif i % 3 == 1:
            c.reset()
        else:
            c.send(filler)
            c.close()
    for i, (c, _) in enumerate(clients):
        if i % 3 == 0:
            data, _ = read_to_close(c)
            assert data == b"", data[:200]  # a client that left mid-body gets nothing
            close_own([c])
    wait_for(lambda: ad.metrics()['admitd_connections{listener="client"}'] == 0,
             what="every connection closed")
    m = ad.metrics()
    assert m['admitd_out_of_memory_refusals_total{listener="client"}'] == 0, m
    assert mock.metrics()["admit_mock_requests_total"] == 1
    assert request(ad.addr, "POST", "/v1/chat/completions", chat_body(max_tokens=1))[0] == 200
    ad.stop()
    mock.stop()


def test_request_without_memory_refused_alone():
    mock = Mock("--speedup-ratio", "0")
    # A 40 MiB body: its buffer cannot grow past 16 MiB (ASan), or past 24 MiB of address
    # space (without); small requests need far less.
    ad = limited_admitd(mock.url, 16, 24 * MIB, "--max-body-bytes", str(64 * MIB))
    big = RawClient(ad.addr, timeout=60, marker=marker(6))
    body = b"x" * (40 * MIB)
    sent = {"error": None}

    def upload():
        try:
            big.send(head(big, len(body)) + body)
        except OSError as e:  # the refusal closes the connection while it still sends
            sent["error"] = e

    results = []

    def small(i):
        results.append(own_request(ad.addr, "/v1/chat/completions",
                                   chat_body(max_tokens=2, content="client %d" % i), marker(i)))

    up = threading.Thread(target=upload)
    others = [threading.Thread(target=small, args=(i,)) for i in range(6)]
    for t in others[:3]:
        t.start()
    up.start()
    for t in others[3:]:
        t.start()
    status, hdrs, answer, complete = own_response(big)
    up.join(60)
    for t in others:
        t.join(60)
    print("# the 40 MiB body: %d %r (upload: %r)" % (status, answer[:120], sent["error"]))
    assert status == 500 and complete, (status, answer[:200])
    assert hdrs.get("connection", "").lower() == "close", hdrs
    err = json.loads(answer)["error"]
    assert err["type"] == "server_error" and err["code"] == 500, err
    assert error_message(answer).startswith("Server out of memory: "), answer
    close_own([big])
    # The others, before, during and after it, were served whole, each its own answer.
    assert len(results) == 6, results
    for i, (st, _, data) in enumerate(results):
        assert st == 200, (st, data[:200])
    m = ad.metrics()
    assert m['admitd_out_of_memory_refusals_total{listener="client"}'] == 1, m
    assert mock.metrics()["admit_mock_requests_total"] == 6
    assert request(ad.addr, "POST", "/v1/chat/completions", chat_body(max_tokens=1))[0] == 200
    ad.stop()
    mock.stop()


if __name__ == "__main__":
    tap = Tap()
    tap.run("%d bodies announcing 32 MiB and sending 100 KiB cost what arrived" % CONNECTIONS,
            test_announced_bodies_cost_what_arrives)
    tap.run("a request whose buffer cannot grow is refused alone, the others served",
            test_request_without_memory_refused_alone)
    tap.done()
