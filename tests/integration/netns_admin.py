"""Run by test_operations.py inside network and PID namespaces of its own (`unshare`): gives the
namespace's loopback device a second, non-127 address and checks that admitd refuses admin
changes from a peer with that address. Nothing leaves the namespace: the address exists
only inside it. Exits 0 when every check passed."""

import json
import os
import subprocess
import sys

from harness import Admitd, Mock, request

PEER_IP = "198.51.100.7"  # TEST-NET-2, added to this namespace's lo only


def post(addr, body, headers):
    return request(addr, "POST", "/admission", json.dumps(body).encode(), headers=headers)


def main():
    # For the parent: which namespace to watch until every process in it has gone.
    sys.stderr.write("netns %s\n" % os.readlink("/proc/self/ns/net"))
    sys.stderr.flush()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "addr", "add", PEER_IP + "/32", "dev", "lo"], check=True)
    hdrs = {"Content-Type": "application/json"}
    mock = Mock("--speedup-ratio", "0")
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--metrics-listen", "0.0.0.0:0")
    remote = (PEER_IP, ad.maddr[1])  # the same listener, reached from a non-loopback address
    status, _, out = post(remote, {"engine_request_limit": 5}, hdrs)
    assert status == 403 and b"only from loopback" in out, (status, out)
    assert json.loads(request(remote, "GET", "/admission")[2])["engine_request_limit"] == 2
    assert request(remote, "GET", "/metrics")[0] == 200  # read-only endpoints stay open
    assert post(("127.0.0.1", ad.maddr[1]), {"engine_request_limit": 5}, hdrs)[0] == 200
    ad.stop()
    # With a token the peer's address no longer matters; the token does.
    token = "s3cret-token-0123456789"
    ad = Admitd(mock.url, "--engine-request-limit", "2", "--metrics-listen", "0.0.0.0:0",
                "--admin-token", token)
    remote = (PEER_IP, ad.maddr[1])
    assert post(remote, {"engine_request_limit": 5}, hdrs)[0] == 401
    status, _, out = post(remote, {"engine_request_limit": 5},
                          dict(hdrs, Authorization="Bearer " + token))
    assert status == 200 and json.loads(out)["engine_request_limit"] == 5, (status, out)
    ad.stop()
    mock.stop()


if __name__ == "__main__":
    main()
    print("netns admin checks passed")
