"""A load publisher the test drives: a TCP listener on 127.0.0.1 that speaks as much of nng's
SP PUB0 protocol as admit-router's subscriber needs (README "Load publishing": an 8-byte
header each way, then an 8-byte big-endian length and the body of each message), and sends
the messages the test writes, when it writes them, to every subscriber connected then.

It plays a worker that misbehaves in ways a real admitd does not: a heartbeat of 2^53-1 ms,
ranks that fall silent, another worker's id, an id with a newline, ever new model names.
"""

import json
import socket
import struct
import threading
import time

PUB0_HELLO = b"\x00SP\x00\x00\x20\x00\x00"


def load_message(worker_id, dp_rank=0, seq=1, heartbeat_ms=100, kv_used=0, kv_total=100,
                 models=None, state="serving"):
    """The bytes of one load message (topic included) with every field admitd sends."""
    m = {"v": 1, "worker_id": worker_id, "dp_rank": dp_rank, "seq": seq,
         "ts_ms": int(time.time() * 1000), "state": state, "heartbeat_ms": heartbeat_ms,
         "kv_used_blocks": kv_used, "kv_total_blocks": kv_total, "kv_block_size": 16,
         "active_decode_blocks": 0, "active_prefill_tokens": 0,
         "max_num_batched_tokens": 8192, "engine_requests": 0, "engine_request_limit": None,
         "queued_requests": 0, "request_queue_limit": None, "models": models}
    return b"kv_metrics " + json.dumps(m, separators=(",", ":")).encode()


class LoadPub:
    """A publisher at self.url. Each connection gets hello, then (once the subscriber's own
    header is in) script, raw bytes, and is kept; accepts counts them. send() writes one
    message to every subscriber connected now (returns how many); beat(fn, ms) sends fn(seq)
    every ms until stop_beat(); close_all() closes the connections it has (the listener
    stays, so subscribers come back). port: a given one (a publisher that comes up late)."""

    def __init__(self, script=b"", hello=PUB0_HELLO, port=0):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.url = "tcp://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.script, self.hello = script, hello
        self.conns = []
        self.accepts = 0
        self.seq = 0
        self._lock = threading.Lock()
        self._beat = None
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepts += 1
            threading.Thread(target=self._greet, args=(c,), daemon=True).start()

    def _greet(self, c):
        try:
            c.settimeout(10)
            c.sendall(self.hello)
            got = b""
            while len(got) < 8:
                d = c.recv(8 - len(got))
                if not d:
                    c.close()
                    return
                got += d
            c.sendall(self.script)
        except OSError:
            c.close()
            return
        with self._lock:
            self.conns.append(c)

    def subscribers(self):
        with self._lock:
            return len(self.conns)

    def send(self, body):
        frame = struct.pack(">Q", len(body)) + body
        sent = 0
        with self._lock:
            for c in list(self.conns):
                try:
                    c.sendall(frame)
                    sent += 1
                except OSError:
                    self.conns.remove(c)
                    c.close()
        return sent

    def next_seq(self):
        self.seq += 1
        return self.seq

    def beat(self, fn, ms):
        """Sends fn(seq) (one message, or a list of them) every ms, in a thread."""
        self.stop_beat()
        stop = threading.Event()

        def run():
            while not stop.is_set():
                out = fn(self.next_seq())
                for body in out if isinstance(out, list) else [out]:
                    self.send(body)
                stop.wait(ms / 1000.0)

        t = threading.Thread(target=run, daemon=True)
        self._beat = (stop, t)
        t.start()

    def stop_beat(self):
        if self._beat is not None:
            self._beat[0].set()
            self._beat[1].join(5)
            self._beat = None

    def close_all(self, reset=False):
        """Closes every connection: a FIN, or with reset a RST (SO_LINGER 0)."""
        with self._lock:
            for c in self.conns:
                if reset:
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                c.close()
            self.conns = []

    def close(self):
        self.stop_beat()
        self.close_all()
        self.sock.close()


def dead_port():
    """A loopback port nothing listens on (bound, then closed): connects are refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
