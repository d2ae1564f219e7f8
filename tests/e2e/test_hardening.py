"""Hostile inputs against a real `frexport serve` / `frexport snapshot` process (issue 18).

The peers here are fakes on purpose (tests/support/peers.py): a real worker server cannot trickle
its headers or answer `100 Continue` forever.
"""

import subprocess
import sys
import time

from tests.support.peers import FakeAgentRank, FakePeer, stream_json
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


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def test_a_rank_answering_a_60_mib_status_costs_the_sidecar_nothing(tmp_path):
    """Issue 38, point 1: a rank's status answer was read and parsed in the sidecar's own process up to
    64 MiB: 16 MiB took `serve` to 469 MB, 60 MiB to about 1.5 GB (the chart's limit is 256 Mi), nothing
    logged. Now the read stops at the 1 MiB bound, that rank's polls fail, said once and counted, and the
    honest rank is polled as before."""
    socks = tmp_path / "socks"
    socks.mkdir()
    hostile = FakeAgentRank(str(socks / "rank-0.sock"), 0)
    hostile.answers["frexport_fr_status"] = stream_json(hostile, "frexport_fr_status", 60 << 20, length=False)
    honest = FakeAgentRank(str(socks / "rank-1.sock"), 1)
    try:
        with Sidecar("--sockets-dir", str(socks), log=tmp_path / "serve.log") as sc:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                refused = sc.value("frexport_source_errors_total", source="socket:rank-0", reason="too_large")
                if refused and refused >= 3:
                    break
                time.sleep(0.5)
            assert refused and refused >= 3, sc.output()
            assert sc.value("frexport_source_up", source="socket:rank-1") == 1
            assert honest.asked.count("frexport_fr_status?backend=gloo") >= 3
            assert hostile.sent["frexport_fr_status"] < 3 * (3 << 20)  # three reads, each stopped at its bound
            assert _peak_rss_mb(sc.proc.pid) < 150
            sc.stop()
        said = [line for line in sc.output().splitlines() if "frexport_fr_status" in line]
        assert len(said) == 1 and "socket:rank-0" in said[0] and "over 1048576 bytes" in said[0], said
    finally:
        hostile.close()
        honest.close()
