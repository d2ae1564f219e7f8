"""Hostile inputs against a real `frexport serve` / `frexport snapshot` process (issue 18).

The peers here are fakes on purpose (tests/support/peers.py): a real worker server cannot trickle
its headers or answer `100 Continue` forever.
"""

import subprocess
import sys
import time

from tests.support.peers import FakePeer
from tests.support.sidecar import Sidecar


def _trickle_headers(conn):
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    for _ in range(600):
        conn.sendall(b"X")
        time.sleep(0.1)


def test_trickling_peer_neither_holds_the_loop_nor_sigterm(tmp_path):
    socks = tmp_path / "socks"
    socks.mkdir()
    peer = FakePeer(str(socks / "rank-0.sock"), _trickle_headers)
    try:
        with Sidecar("--sockets-dir", str(socks), "--poll-interval", "0.5s",
                     env={"FREXPORT_SOURCES__WORKER_SERVERS__TIMEOUT": "1s"}, log=tmp_path / "serve.log") as sc:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                errors = sc.value("frexport_source_errors_total", source="socket:rank-0", reason="timeout")
                if errors and errors >= 2:  # the loop came back from the peer more than once
                    break
                time.sleep(0.3)
            assert errors and errors >= 2, sc.output()
            time.sleep(0.6)  # a poll in flight when the signal comes
            assert sc.stop(timeout=10) < 4.0
    finally:
        peer.close()


def test_snapshot_ends_at_its_deadline_with_a_trickling_peer(tmp_path):
    socks = tmp_path / "socks"
    socks.mkdir()
    peer = FakePeer(str(socks / "rank-0.sock"), _trickle_headers)
    try:
        start = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "frexport", "snapshot", str(tmp_path / "out"),
                              "--sockets-dir", str(socks), "--timeout", "1"], capture_output=True, text=True,
                             timeout=60)
        assert time.monotonic() - start < 15
        assert out.returncode == 1 and "rank 0" in out.stderr, out.stderr
    finally:
        peer.close()
