"""admit-router's workers from DNS (--worker-dns) and from a workers file (--workers-file,
re-read on SIGHUP), end to end: workers that come, workers that go while a stream runs
through them, lookups that fail or come back empty, a workers file edited and a bad one.

The DNS server is this file's own (DnsServer, the socket module alone), on 127.0.0.1 at a UDP
port picked at run time; what it answers is a dict the checks change as they go. The workers
it names are real admitd processes on 127.0.0.2, 127.0.0.3, ..., all on the same two ports
(a --worker-dns name gives one HTTP port and one publisher port for all its addresses), each
in front of its own admit-mock-engine on 127.0.0.1, so the mocks' counters say which worker
a request reached. Everything is loopback; the harness kills what is left when a check fails.
"""

import json
import os
import signal
import socket
import struct
import tempfile
import threading
import time

from harness import (Admitd, Mock, RawClient, Tap, chat_body, close_own, marker, own_request,
                     request, wait_for)
from loadpub import dead_port
from test_router import MODEL, worker
from test_router import Router as _Router

NAME = "fleet.test"
ADDRS = ["127.0.0.%d" % i for i in range(2, 6)]


def Router(*args):
    """A router with no static worker; a worker counts as gone after 10 of its 100 ms
    heartbeats (not 3), so that a loaded machine's late message takes none away mid-check."""
    return _Router([], "--missed-heartbeats", "10", *args)


class DnsServer:
    """A DNS server on 127.0.0.1 that answers A queries from self.records ({name: [IPv4]}).
    self.mode: "answer" (NXDOMAIN for a name it does not know), "silent" (no reply at all),
    "nxdomain", "servfail" or "empty" (NOERROR with no record)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.records = {}   # name -> IPv4 addresses (A)
        self.records6 = {}  # name -> IPv6 addresses (AAAA)
        self.mode = "answer"
        self.queries = 0
        self._stop = False
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self):
        while not self._stop:
            try:
                data, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            reply = self._answer(data)
            if reply is not None:
                self.sock.sendto(reply, peer)

    def _answer(self, q):
        if len(q) < 12:
            return None
        qid, flags, qdcount = struct.unpack("!HHH", q[:6])
        if flags & 0x8000 or qdcount != 1:
            return None  # a reply, or more than one question: not ours
        # The question: labels up to the empty one, then QTYPE and QCLASS.
        at, labels = 12, []
        while at < len(q) and q[at] != 0:
            n = q[at]
            labels.append(q[at + 1:at + 1 + n].decode("ascii", "replace"))
            at += 1 + n
        end = at + 5
        if end > len(q):
            return None
        qtype, = struct.unpack("!H", q[at + 1:at + 3])
        # evdns randomises the name's case (0x20): matched without case, echoed as asked.
        name = ".".join(labels).lower()
        self.queries += 1
        mode = self.mode
        rcode, answers = 0, []
        if mode == "silent":
            return None
        if mode == "servfail":
            rcode = 2
        elif mode == "nxdomain" or (mode == "answer" and name not in self.records and
                                    name not in self.records6):
            rcode = 3
        elif mode == "answer" and qtype == 1:
            answers = list(self.records.get(name, []))
        elif mode == "answer" and qtype == 28:
            answers = list(self.records6.get(name, []))
        head = struct.pack("!HHHHHH", qid, 0x8180 | (flags & 0x0100) | rcode, 1, len(answers),
                           0, 0)
        out = head + q[12:end]
        for a in answers:
            # The name as a pointer to the question's, type A (or AAAA), class IN, TTL 1 s.
            if qtype == 28:
                out += struct.pack("!HHHIH", 0xC00C, 28, 1, 1, 16) + socket.inet_pton(
                    socket.AF_INET6, a)
            else:
                out += struct.pack("!HHHIH", 0xC00C, 1, 1, 1, 4) + socket.inet_aton(a)
        return out

    def stop(self):
        self._stop = True
        self._t.join(5)
        self.sock.close()


def free_ports(addrs, n=2):
    """n TCP ports free on every address in addrs (bound and released: the window until the
    workers bind them is short, and a clash fails the worker's start loudly)."""
    ports = []
    def family(a):
        return socket.AF_INET6 if ":" in a else socket.AF_INET

    while len(ports) < n:
        s = socket.socket(family(addrs[0]))
        s.bind((addrs[0], 0))
        p = s.getsockname()[1]
        ok = p not in ports
        for a in addrs[1:]:
            t = socket.socket(family(a))
            try:
                t.bind((a, p))
            except OSError:
                ok = False
            t.close()
        s.close()
        if ok:
            ports.append(p)
    return ports


def dns_worker(addr, http_port, pub_port, *mock_args):
    """A mock engine and admitd in front of it, on addr's ports. Its worker id is its
    address: admitd's default, hostname:port, is one for every address of this host, and
    the router refuses a worker_id another live worker holds."""
    mock = Mock(*mock_args)
    ad = Admitd(mock.url, "--heartbeat-ms", "100", "--listen", "%s:%d" % (addr, http_port),
                "--publish", "tcp://%s:%d" % (addr, pub_port),
                "--worker-id", "%s:%d" % (addr, http_port))
    return mock, ad


def served(mock):
    return mock.metrics()["admit_mock_requests_total"]


def by_url(rt):
    return {w["url"]: w for w in rt.workers()}


def lookups(rt, result):
    return rt.metrics().get('admit_router_dns_lookups_total{name="%s",result="%s"}' %
                            (NAME, result), 0)


def short_request(rt):
    """A request with a marker and a secret of its own; its answer must be its own."""
    status, _, body = own_request(rt.addr, "/v1/chat/completions", chat_body(max_tokens=1),
                                  marker(), auth=True)
    assert status == 200, (status, body)


def test_dns_discovery():
    http_port, pub_port = free_ports(ADDRS)
    dns = DnsServer()
    dns.records[NAME] = ADDRS[:2]
    # The third worker streams slowly: 100 tokens 100 ms apart, 10 s, so that it is still
    # running when its address leaves the answer and the router has seen that.
    fleet = [dns_worker(ADDRS[0], http_port, pub_port, "--speedup-ratio", "0"),
             dns_worker(ADDRS[1], http_port, pub_port, "--token-interval-ms", "100")]
    mocks = [m for m, _ in fleet]
    rt = Router("--worker-dns", "%s:%d:%d" % (NAME, http_port, pub_port),
                "--dns-nameserver", "127.0.0.1:%d" % dns.port, "--dns-interval-ms", "300")
    rt.wait_routable(2)
    assert sorted(by_url(rt)) == ["%s:%d" % (a, http_port) for a in ADDRS[:2]], rt.workers()
    assert all(w["state"] == "active" for w in rt.workers()), rt.workers()
    # Requests reach both (equal costs go in turn).
    for _ in range(8):
        short_request(rt)
    assert all(served(m) > 0 for m in mocks), [served(m) for m in mocks]
    # A third address: its worker is followed and gets requests.
    fleet.append(dns_worker(ADDRS[2], http_port, pub_port, "--speedup-ratio", "0"))
    mocks.append(fleet[2][0])
    dns.records[NAME] = ADDRS[:3]
    rt.wait_routable(3)
    for _ in range(12):
        short_request(rt)
    assert served(mocks[2]) > 0, [served(m) for m in mocks]
    m = rt.metrics()
    assert m['admit_router_workers{state="configured"}'] == 3, m
    assert m['admit_router_dns_workers{name="%s"}' % NAME] == 3, m
    # A stream through the second worker (pinned there), then its address leaves the answer.
    victim = "%s:%d" % (ADDRS[1], http_port)
    c = RawClient(rt.addr, marker=marker(), auth=True)
    c.post("/v1/chat/completions", chat_body(max_tokens=100), "X-Admit-Worker: %s\r\n" % victim)
    status, hdrs = c.read_head()
    assert status == 200, (status, hdrs)
    dns.records[NAME] = [ADDRS[0], ADDRS[2]]
    wait_for(lambda: by_url(rt).get(victim, {}).get("state") == "retired", 15,
             "the worker retired")
    w = by_url(rt)[victim]
    assert w["in_flight"] == 1 and not w["routable"], w
    assert w["ranks"][0]["booked"]["requests"] == 1, w
    assert rt.metrics()['admit_router_workers{state="retired"}'] == 1
    # New requests avoid it; a request pinned to it is answered 503 (no such worker now).
    before = served(mocks[1])
    for _ in range(6):
        short_request(rt)
    assert served(mocks[1]) == before, (before, served(mocks[1]))
    status, _, body = own_request(rt.addr, "/v1/chat/completions", chat_body(max_tokens=1),
                                  marker(), auth=True, extra="X-Admit-Worker: %s\r\n" % victim)
    assert status == 503 and b"no worker named" in body, (status, body)
    # The stream finishes whole; then the worker holds nothing and leaves /load.
    body, complete = c.read_body(hdrs)
    assert complete and b"[DONE]" in body, body[-200:]
    close_own([c])
    wait_for(lambda: victim not in by_url(rt), 15, "the retired worker removed")
    m = rt.metrics()
    assert m['admit_router_worker_changes_total{change="retired"}'] == 1, m
    assert m['admit_router_worker_changes_total{change="removed"}'] == 1, m
    assert m['admit_router_workers{state="retired"}'] == 0, m
    assert not any(ADDRS[1] in k for k in m if k.startswith("admit_router_booked")), m
    assert sum(w["ranks"][0]["booked"]["requests"] for w in rt.workers()) == 0, rt.workers()
    rt.wait_routable(2)
    # The second address back in the answer: a new worker there.
    dns.records[NAME] = ADDRS[:3]
    rt.wait_routable(3)
    m = rt.metrics()
    assert m['admit_router_worker_changes_total{change="added"}'] == 4, m
    rt.stop()
    for mock, ad in fleet:
        ad.stop()
        mock.stop()
    dns.stop()


def test_dns_families():
    """--dns-family: AAAA records make workers at [ADDR] (one on ::1 takes requests); the
    family changes on SIGHUP (v4: the name has no A record, its worker stays, as after any
    empty answer); the preferred families ask for the other kind only when the name has none
    of the first, so a dual-stack name is followed by one family, never both."""
    http_port, pub_port = free_ports(["127.0.0.1", "::1"])
    dns = DnsServer()
    dns.records6["six.test"] = ["::1"]
    dns.records["dual.test"] = ["127.0.0.1"]
    dns.records6["dual.test"] = ["::1"]
    mock, ad = dns_worker("[::1]", http_port, pub_port, "--speedup-ratio", "0")
    six = "[::1]:%d" % http_port
    cfg = os.path.join(tempfile.mkdtemp(), "router.yaml")

    def config(family):
        write(cfg, "worker_dns: \"six.test:%d:%d\"\ndns_family: %s\n"
              "dns_nameserver: \"127.0.0.1:%d\"\ndns_interval_ms: 300\n" %
              (http_port, pub_port, family, dns.port))

    def six_lookups(result):
        return rt.metrics().get('admit_router_dns_lookups_total{name="six.test",result="%s"}'
                                % result, 0)

    config("v6")
    rt = Router("--config", cfg)
    rt.wait_routable(1)
    assert list(by_url(rt)) == [six], rt.workers()
    short_request(rt)
    assert served(mock) == 1
    empty = six_lookups("empty")
    config("v4")
    rt.proc.p.send_signal(signal.SIGHUP)
    wait_for(lambda: six_lookups("empty") >= empty + 2, 10, "lookups of A records, empty")
    assert list(by_url(rt)) == [six] and rt.workers()[0]["state"] == "active", rt.workers()
    config("v6-preferred")
    rt.proc.p.send_signal(signal.SIGHUP)
    ok = six_lookups("ok")
    wait_for(lambda: six_lookups("ok") >= ok + 2, 10, "AAAA lookups again")
    rt.stop()
    # v4-preferred: six.test has no A record, so its AAAA is taken; dual.test has both: its
    # A alone (no worker listens there: it is followed, never routable).
    rt = Router("--worker-dns", "six.test:%d:%d" % (http_port, pub_port),
                "--worker-dns", "dual.test:%d:%d" % (http_port + 1, pub_port + 1),
                "--dns-family", "v4-preferred", "--dns-nameserver", "127.0.0.1:%d" % dns.port,
                "--dns-interval-ms", "300")
    rt.wait_routable(1)
    want = sorted([six, "127.0.0.1:%d" % (http_port + 1)])
    wait_for(lambda: sorted(by_url(rt)) == want, 10, "one worker per name")
    time.sleep(1)  # three more rounds of lookups: still one family each
    assert sorted(by_url(rt)) == want, rt.workers()
    rt.stop()
    dns.stop()
    ad.stop()
    mock.stop()


def test_dns_bad_lookups():
    """Lookups that come back empty (NXDOMAIN, no record) or fail (a silent server) keep the
    workers of the last answer; a good answer after them is followed again."""
    http_port, pub_port = free_ports(ADDRS[:3])
    dns = DnsServer()
    dns.records[NAME] = ADDRS[:2]
    fleet = [dns_worker(a, http_port, pub_port, "--speedup-ratio", "0") for a in ADDRS[:2]]
    rt = Router("--worker-dns", "%s:%d:%d" % (NAME, http_port, pub_port),
                "--dns-nameserver", "127.0.0.1:%d" % dns.port, "--dns-interval-ms", "300")
    rt.wait_routable(2)
    kept = ["%s:%d" % (a, http_port) for a in ADDRS[:2]]

    def still_kept(what):
        ws = rt.workers()
        assert sorted(w["url"] for w in ws) == kept and all(
            w["state"] == "active" for w in ws), (what, ws)

    # NXDOMAIN, and an answer with no record: "empty", the workers stay (the counter and
    # what is kept change in the same step: no wait for the workers).
    for mode in ("nxdomain", "empty"):
        empty = lookups(rt, "empty")
        dns.mode = mode
        wait_for(lambda: lookups(rt, "empty") > empty, 20, "an empty answer counted (%s)" % mode)
        still_kept(mode)
        why = r"no such name \(NXDOMAIN\)" if mode == "nxdomain" else "no A record"
        rt.proc.wait_line(r"dns %s: %s; keeping the 2 workers" % (NAME, why), 10)
    rt.wait_routable(2)
    short_request(rt)
    # The server goes silent: lookups time out, the workers stay.
    failed = lookups(rt, "failed")
    dns.mode = "silent"
    wait_for(lambda: lookups(rt, "failed") > failed, 20, "a failed lookup counted")
    rt.proc.wait_line(r"dns %s: lookup failed" % NAME, 10)
    still_kept("silent")
    short_request(rt)
    # It answers again, with a third address: followed again, a new worker there.
    fleet.append(dns_worker(ADDRS[2], http_port, pub_port, "--speedup-ratio", "0"))
    ok = lookups(rt, "ok")
    dns.records[NAME] = ADDRS[:3]
    dns.mode = "answer"
    wait_for(lambda: lookups(rt, "ok") > ok, 20, "a good lookup again")
    rt.wait_routable(3)
    rt.proc.wait_line(r"dns %s: resolves again" % NAME, 10)
    m = rt.metrics()
    assert m['admit_router_worker_changes_total{change="added"}'] == 3, m
    assert m.get('admit_router_worker_changes_total{change="retired"}', 0) == 0, m
    rt.stop()
    for mock, ad in fleet:
        ad.stop()
        mock.stop()
    dns.stop()


def test_dns_revive():
    """An address that leaves the answer and comes back while a request still runs there is
    revived in place: its booking is still counted, and it is routable again."""
    http_port, pub_port = free_ports(ADDRS[:2])
    dns = DnsServer()
    dns.records[NAME] = ADDRS[:2]
    fleet = [dns_worker(ADDRS[0], http_port, pub_port, "--speedup-ratio", "0"),
             dns_worker(ADDRS[1], http_port, pub_port, "--speedup-ratio", "0",
                        "--token-interval-ms", "600000")]
    rt = Router("--worker-dns", "%s:%d:%d" % (NAME, http_port, pub_port),
                "--dns-nameserver", "127.0.0.1:%d" % dns.port, "--dns-interval-ms", "200")
    rt.wait_routable(2)
    target = "%s:%d" % (ADDRS[1], http_port)
    c = RawClient(rt.addr)  # a stream that never gets a token: in flight until we hang up
    c.post("/v1/chat/completions", chat_body(max_tokens=10), "X-Admit-Worker: %s\r\n" % target)
    assert c.read_head()[0] == 200
    dns.records[NAME] = ADDRS[:1]
    wait_for(lambda: by_url(rt).get(target, {}).get("state") == "retired", 15, "retired")
    dns.records[NAME] = ADDRS[:2]
    wait_for(lambda: by_url(rt).get(target, {}).get("state") == "active", 15, "revived")
    rt.wait_routable(2)
    w = by_url(rt)[target]
    assert w["in_flight"] == 1 and w["ranks"][0]["booked"]["requests"] == 1, w
    m = rt.metrics()
    assert m['admit_router_worker_changes_total{change="revived"}'] == 1, m
    assert m['admit_router_worker_changes_total{change="removed"}'] == 0, m
    c.close()
    wait_for(lambda: by_url(rt)[target]["in_flight"] == 0, 15, "the stream's end seen")
    assert by_url(rt)[target]["ranks"][0]["booked"]["requests"] == 0
    rt.stop()
    for mock, ad in fleet:
        ad.stop()
        mock.stop()
    dns.stop()


def write(path, text):
    """Replaces the file at once (a rename), as a config management tool would."""
    with open(path + ".new", "w") as f:
        f.write(text)
    os.replace(path + ".new", path)


def reloads(rt, result):
    return rt.metrics()['admit_router_workers_file_reloads_total{result="%s"}' % result]


def test_workers_file():
    mocks = [Mock("--speedup-ratio", "0"), Mock("--speedup-ratio", "0")]
    ads = [worker(m) for m in mocks]
    entries = ["%s=%s" % w for _, w in ads]
    path = os.path.join(tempfile.mkdtemp(), "workers")
    write(path, "# the fleet\n%s\n" % entries[0])
    rt = Router("--workers-file", path)
    rt.wait_routable(1)
    # Edited to two, SIGHUP: both routable, both get requests.
    write(path, "# the fleet\n%s\n\n%s   # the new one\n" % (entries[0], entries[1]))
    rt.proc.p.send_signal(signal.SIGHUP)
    rt.proc.wait_line(r"workers file %s read: 2 workers" % path, 10)
    rt.wait_routable(2)
    for _ in range(8):
        short_request(rt)
    assert all(m.metrics()["admit_mock_requests_total"] > 0 for m in mocks)
    assert reloads(rt, "ok") == 1
    # A bad line: logged with file:line, and the workers stay as they are.
    write(path, "%s\nhttp://127.0.0.1:1\n" % entries[0])
    rt.proc.p.send_signal(signal.SIGHUP)
    rt.proc.wait_line(r"workers file not applied.*%s:2: 'http://127.0.0.1:1' must be "
                      r"PROXY_URL=PUB_URL" % path, 10)
    assert reloads(rt, "failed") == 1
    assert len(rt.workers()) == 2 and all(w["state"] == "active" for w in rt.workers())
    rt.wait_routable(2)
    # The YAML form, with one worker: the other is retired and, idle, removed at once.
    write(path, "- \"%s\"\n" % entries[1])
    rt.proc.p.send_signal(signal.SIGHUP)
    wait_for(lambda: len(rt.workers()) == 1, 15, "one worker left")
    assert rt.workers()[0]["url"] == entries[1].split("=")[0][len("http://"):], rt.workers()
    rt.wait_routable(1)
    m = rt.metrics()
    assert m['admit_router_worker_changes_total{change="removed"}'] == 1, m
    assert m["admit_router_workers_file_workers"] == 1, m
    # A file that is gone: logged, nothing changes.
    os.unlink(path)
    rt.proc.p.send_signal(signal.SIGHUP)
    rt.proc.wait_line(r"workers file not applied.*cannot read", 10)
    assert len(rt.workers()) == 1
    rt.stop()
    for ad, _ in ads:
        ad.stop()
    for m in mocks:
        m.stop()


def test_roles():
    """A worker's role from its source (issue 27), as /load shows it: --prefill-worker and
    --decode-worker (keys of the config file here, swapped on SIGHUP), the workers file's
    role=ROLE and its YAML mappings (a role changed in the file: the worker retired and added
    again with it; an unknown role: file:line:column, and nothing changes), a
    --prefill-worker-dns name's addresses; a --worker's is the one it publishes (both until it
    says). No worker listens: a role needs no load message."""
    ports = [dead_port() for _ in range(14)]

    def w(i):
        return "http://127.0.0.1:%d=tcp://127.0.0.1:%d" % (ports[2 * i], ports[2 * i + 1])

    def url(i):
        return "127.0.0.1:%d" % ports[2 * i]

    d = tempfile.mkdtemp()
    cfg, path = os.path.join(d, "router.yaml"), os.path.join(d, "workers")
    write(cfg, "prefill_worker: \"%s\"\ndecode_worker: \"%s\"\n" % (w(0), w(1)))
    write(path, "%s role=prefill\n%s\trole=decode  # the decode one\n%s\n" % (w(2), w(3), w(4)))
    dns = DnsServer()
    dns.records["p.test"] = ["127.0.0.7"]
    rt = Router("--config", cfg, "--worker", w(5), "--workers-file", path,
                "--prefill-worker-dns", "p.test:%d:%d" % (ports[12], ports[13]),
                "--dns-nameserver", "127.0.0.1:%d" % dns.port, "--dns-interval-ms", "300")

    def roles():
        return {x["url"]: x["role"] for x in rt.workers()}

    want = {url(0): "prefill", url(1): "decode", url(2): "prefill", url(3): "decode",
            url(4): "both", url(5): "both", "127.0.0.7:%d" % ports[12]: "prefill"}
    # The DNS name's worker comes with its answer; then every role is there at once.
    wait_for(lambda: len(rt.workers()) == len(want), 10, "every worker listed")
    assert roles() == want, rt.workers()
    # SIGHUP: the config's two swapped, the file in its YAML form with two roles changed.
    write(cfg, "prefill_worker: \"%s\"\ndecode_worker: \"%s\"\n" % (w(1), w(0)))
    write(path, "- \"%s role=decode\"\n"
                "- {url: \"%s\", publish: \"%s\", role: prefill}\n"
                "- %s\n" % ((w(2),) + tuple(w(3).split("=")) + (w(4),)))
    rt.proc.p.send_signal(signal.SIGHUP)
    rt.proc.wait_line(r"workers file: worker http://%s added \(load from \S+, role prefill\)"
                      % url(3), 10)
    want.update({url(0): "decode", url(1): "prefill", url(2): "decode", url(3): "prefill"})
    assert roles() == want, rt.workers()
    assert all(x["state"] == "active" for x in rt.workers()), rt.workers()
    # An unknown role: logged at its line and column; the workers keep theirs.
    write(path, "%s role=decode\n%s role=mixed\n" % (w(2), w(3)))
    rt.proc.p.send_signal(signal.SIGHUP)
    rt.proc.wait_line(r"workers file not applied.*%s:2:%d: unknown role 'mixed'"
                      % (path, len(w(3)) + 7), 10)
    assert reloads(rt, "failed") == 1
    assert roles() == want, rt.workers()
    rt.stop()
    dns.stop()


def test_worker_host_names():
    """A worker named by host name: its engine's address is looked up on the router's loop
    without waiting. While the DNS server does not answer, that worker is not routable (its
    load messages wait for the address) and every request goes to the others, served as
    usual; once the server answers, the worker is routable and served."""
    http_port, pub_port = free_ports(ADDRS[:2])
    dns = DnsServer()
    dns.records["w1.test"] = [ADDRS[0]]
    fleet = [dns_worker(ADDRS[0], http_port, pub_port, "--speedup-ratio", "0"),
             dns_worker(ADDRS[1], http_port, pub_port, "--speedup-ratio", "0")]
    path = os.path.join(tempfile.mkdtemp(), "workers")
    w1 = "http://w1.test:%d=tcp://%s:%d" % (http_port, ADDRS[0], pub_port)
    w2 = "http://w2.test:%d=tcp://%s:%d" % (http_port, ADDRS[1], pub_port)
    write(path, w1 + "\n")
    # Lookups wait 4 s per attempt, twice: a blocking one would stop the router for 8 s.
    rt = Router("--workers-file", path, "--dns-nameserver", "127.0.0.1:%d" % dns.port,
                "--dns-interval-ms", "8000")
    rt.wait_routable(1)
    short_request(rt)
    assert served(fleet[0][0]) == 1
    dns.mode = "silent"
    write(path, w1 + "\n" + w2 + "\n")
    rt.proc.p.send_signal(signal.SIGHUP)
    rt.proc.wait_line(r"worker w2\.test:%d: its host name is not looked up yet" % http_port, 10)
    t0 = time.monotonic()
    for _ in range(6):
        short_request(rt)  # all to w1: w2 is not routable
    took = time.monotonic() - t0
    assert served(fleet[0][0]) == 7 and served(fleet[1][0]) == 0, [served(m) for m, _ in fleet]
    assert took < 4, took  # far below one lookup attempt: nothing waited for the DNS server
    w = by_url(rt)["w2.test:%d" % http_port]
    assert not w["routable"], w
    dns.mode = "answer"
    dns.records["w2.test"] = [ADDRS[1]]
    rt.wait_routable(2)
    status, _, body = request(rt.addr, "POST", "/v1/chat/completions", chat_body(max_tokens=1),
                              headers={"X-Admit-Worker": "w2.test:%d" % http_port})
    assert status == 200 and served(fleet[1][0]) == 1, (status, body)
    # A lookup still waiting when the router stops: it exits 0, nothing reported lost.
    dns.mode = "silent"
    write(path, "%s\n%s\nhttp://w3.test:%d=tcp://%s:%d\n" % (w1, w2, http_port, ADDRS[1],
                                                             pub_port))
    rt.proc.p.send_signal(signal.SIGHUP)
    rt.proc.wait_line(r"workers file %s read: 3 workers" % path, 10)
    rt.stop()
    for mock, ad in fleet:
        ad.stop()
        mock.stop()
    dns.stop()


def test_check_config():
    import subprocess
    router = os.environ.get("ADMIT_ROUTER", "build/admit-router")
    path = os.path.join(tempfile.mkdtemp(), "workers")
    write(path, "http://127.0.0.1:1=tcp://127.0.0.1:2\nnonsense\n")
    p = subprocess.run([router, "--workers-file", path, "--check-config"], capture_output=True,
                       timeout=30)
    assert p.returncode == 2 and (":2: 'nonsense' must be PROXY_URL=PUB_URL").encode() in \
        p.stderr, p.stderr
    p = subprocess.run([router, "--workers-file", path], capture_output=True, timeout=30)
    assert p.returncode == 2 and b":2: " in p.stderr, p.stderr
    p = subprocess.run([router, "--worker-dns", "w.svc:8080:5557", "--check-config"],
                       capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([router, "--check-config"], capture_output=True, timeout=30)
    assert p.returncode == 2 and b"--worker-dns" in p.stderr, p.stderr
    # Workers with a role (issue 27): each option alone is a worker; a bad value names its
    # option; a worker given two roles is refused, and so is a file's unknown role.
    w = "http://127.0.0.1:1=tcp://127.0.0.1:2"
    for args in (["--prefill-worker", w], ["--decode-worker", w],
                 ["--decode-worker-dns", "w.svc:1:2"]):
        p = subprocess.run([router] + args + ["--check-config"], capture_output=True, timeout=30)
        assert p.returncode == 0, (args, p.stderr)
    for args, want in ((["--prefill-worker", "nonsense"], b"--prefill-worker: 'nonsense'"),
                       (["--decode-worker-dns", "w.svc"], b"--decode-worker-dns: 'w.svc'"),
                       (["--worker", w, "--decode-worker", w], b"a worker has one role")):
        p = subprocess.run([router] + args, capture_output=True, timeout=30)
        assert p.returncode == 2 and want in p.stderr, (args, p.stderr)
    write(path, "%s role=prefill\n%s role=decoder\n" % (w, w))
    p = subprocess.run([router, "--workers-file", path], capture_output=True, timeout=30)
    assert p.returncode == 2 and (":2:%d: unknown role 'decoder'" % (len(w) + 7)).encode() in \
        p.stderr, p.stderr


if __name__ == "__main__":
    tap = Tap()
    tap.run("DNS: workers follow the answer; one leaves mid-stream", test_dns_discovery)
    tap.run("DNS: AAAA records, the preferred families", test_dns_families)
    tap.run("DNS: empty answers and failed lookups keep the workers; a good one is followed",
            test_dns_bad_lookups)
    tap.run("DNS: a retired worker named again is revived with its booking", test_dns_revive)
    tap.run("workers file: edited and SIGHUP, a bad line, the YAML form", test_workers_file)
    tap.run("roles: the options', the file's and DNS names', changed on SIGHUP", test_roles)
    tap.run("workers named by host name: looked up without stopping the loop",
            test_worker_host_names)
    tap.run("workers file and DNS names in --check-config", test_check_config)
    tap.done()
