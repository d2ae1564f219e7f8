"""Worker-server peers that misbehave: the poller gives a clear error per rank and never hangs or crashes.

These peers are fakes on purpose: a real PyTorch worker server cannot be made to answer slowly,
endlessly, with garbage or a reset mid-body. Each fake listens on a unix socket in a temp dir,
where frexport's poller finds it like a real rank's socket.
"""

import json
import os
import socket
import time

import pytest

from frexport.config import WorkerServers
from frexport.live.state import LiveState
from frexport.sources.health import HealthRegistry
from frexport.sources.http_client import PeerError, Target, request
from frexport.sources.worker_server import WorkerServerSource
from tests.support.live import pump
from tests.support.peers import FakePeer, stale_socket

GOOD_BODY = json.dumps({"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": []}).encode()


def _reply(status=200, body=GOOD_BODY, ctype="application/json", length=None):
    head = (f"HTTP/1.1 {status} OK\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n").encode()
    return head + body


def slow(conn):
    time.sleep(5)
    conn.sendall(_reply())


def trickle(conn):  # valid headers, then one byte every 0.3 s forever
    conn.sendall(_reply(body=b"", length=10**6))
    for _ in range(100):
        conn.sendall(b" ")
        time.sleep(0.3)


def huge(conn):
    conn.sendall(_reply(body=b"", length=10**10))


def endless(conn):  # no length, chunk after chunk
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
    for _ in range(10000):
        conn.sendall(b"x" * 65536)


def garbage(conn):
    conn.sendall(os.urandom(4096))


def reset(conn):
    conn.sendall(_reply(body=GOOD_BODY[:10], length=len(GOOD_BODY)))
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


def pickle_instead(conn):
    conn.sendall(_reply(body=b"\x80\x02Nr\xff\xff\xff\x3f.", ctype="application/octet-stream"))


def wrong_json(conn):
    conn.sendall(_reply(body=b'{"hello": "world"}'))


def odd_length(conn):  # '¹' is valid latin-1 in a header, and isdigit() but not int()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \xb9\r\n\r\n" + GOOD_BODY)


def not_found(conn):
    conn.sendall(_reply(status=404, body=b"Handler not found", ctype="text/plain"))


@pytest.mark.parametrize("behave,reason", [
    (slow, "timeout"), (trickle, "timeout"), (huge, "too_large"), (endless, "too_large"),
    (garbage, "bad_response"), (reset, "bad_response"), (pickle_instead, "decode_unexpected_format"),
    (wrong_json, "decode_not_a_dump"), (not_found, "http_status"), (odd_length, None),
])
def test_misbehaving_peer_is_one_clear_error(tmp_path, behave, reason):
    peer = FakePeer(str(tmp_path / "rank-0.sock"), behave)
    good = FakePeer(str(tmp_path / "rank-1.sock"), lambda c: c.sendall(_reply()))
    health = HealthRegistry()
    state = LiveState()
    src = WorkerServerSource(health, WorkerServers(str(tmp_path), timeout=0.5, max_body_bytes=1 << 20))
    try:
        start = time.monotonic()
        pump(src, state)
        assert time.monotonic() - start < 3.5  # bounded by the timeout, whatever the peer does
        by_name = {h.name: h for h in health.view()}
        bad = by_name["socket:rank-0"]
        if reason is None:  # tolerated: read to the end of the connection, no crash
            assert bad.up, (bad.errors, bad.last_error)
        else:
            assert not bad.up and reason in bad.errors, (bad.errors, bad.last_error)
        assert by_name["socket:rank-1"].up and 1 in state.view().ranks  # the other rank is unaffected
    finally:
        src.stop()
        peer.close()
        good.close()


def test_stale_socket_means_rank_down(tmp_path):
    path = stale_socket(str(tmp_path / "rank-3.sock"))
    with pytest.raises(PeerError) as info:
        request(Target(unix_path=path), "POST", "/handler/fr_trace_json", timeout=1)
    assert info.value.down and info.value.reason == "down"
    health = HealthRegistry()
    src = WorkerServerSource(health, WorkerServers(str(tmp_path), timeout=1.0, poll_interval=0.01))
    src.collect()
    time.sleep(0.02)  # a poll is due again
    src.collect()  # but the rank is backed off: not retried at once
    h = next(h for h in health.view() if h.name == "socket:rank-3")
    assert h.errors["down"] == 1 and not h.up
    src.stop()


def test_ranks_are_polled_at_the_poll_interval_however_often_the_loop_asks(tmp_path):
    peer = FakePeer(str(tmp_path / "rank-0.sock"), lambda c: c.sendall(_reply()))
    src = WorkerServerSource(HealthRegistry(), WorkerServers(str(tmp_path), timeout=1.0, poll_interval=0.5))
    try:
        got = []
        end = time.monotonic() + 1.2
        while time.monotonic() < end:  # the sidecar loop's tick is 0.2 s; ask faster still
            got.append(len(src.collect()))
            time.sleep(0.05)
        assert sum(got) == 3  # at 0, 0.5 and 1.0 s
    finally:
        src.stop()
        peer.close()


# --- peers that hold a per-read timeout forever: every one must end at the exchange's deadline ---

def trickle_headers(conn):  # a header line one byte every 0.2 s: no read ever times out
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    for _ in range(200):
        conn.sendall(b"X")
        time.sleep(0.2)


def trickle_chunk_size(conn):  # a chunked body whose chunk-size line never ends
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(200):
        conn.sendall(b"0")
        time.sleep(0.2)


def endless_continue(conn):  # interim responses forever, as fast as the socket takes them
    for _ in range(1_000_000):
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 64)


def endless_trailers(conn):  # an empty chunked body, then trailer lines forever
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n")
    for _ in range(1_000_000):
        conn.sendall(b"X-Trailer: y\r\n" * 256)


def chunked_ok(conn):
    half = len(GOOD_BODY) // 2
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + f"{half:x}\r\n".encode() + GOOD_BODY[:half] + b"\r\n"
                 + f"{len(GOOD_BODY) - half:x};ext=1\r\n".encode() + GOOD_BODY[half:] + b"\r\n0\r\nX-T: 1\r\n\r\n")


@pytest.mark.parametrize("behave,reasons", [
    (trickle_headers, {"timeout"}), (trickle_chunk_size, {"timeout"}),
    (endless_continue, {"bad_response", "timeout"}), (endless_trailers, {"bad_response", "timeout"}),
])
def test_no_peer_holds_an_exchange_past_its_deadline(tmp_path, behave, reasons):
    peer = FakePeer(str(tmp_path / "rank-0.sock"), behave)
    try:
        start = time.monotonic()
        with pytest.raises(PeerError) as info:
            request(Target(unix_path=str(tmp_path / "rank-0.sock")), "POST", "/handler/fr_trace_json", timeout=0.5)
        assert time.monotonic() - start < 3.0  # the peer would hold it for good: any bound shows the deadline
        assert info.value.reason in reasons, info.value.detail
    finally:
        peer.close()


def test_chunked_body_is_read_whole(tmp_path):
    peer = FakePeer(str(tmp_path / "rank-0.sock"), chunked_ok)
    try:
        resp = request(Target(unix_path=str(tmp_path / "rank-0.sock")), "POST", "/handler/fr_trace_json", timeout=2)
        assert resp.status == 200 and resp.body == GOOD_BODY and resp.content_type == "application/json"
    finally:
        peer.close()


def test_a_deeply_nested_body_is_one_decode_error_logged_once(tmp_path, caplog):
    """A peer whose entries nest 100 000 lists deep: before, the JSON tail parser's RecursionError
    escaped and every poll logged a traceback. Now each poll is one decode error of that rank, said once."""
    from tests.support.synth import entry

    first = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": [entry(0, 1)]}
    deep = json.dumps(entry(1, 2))[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    later = json.dumps(first)[:-2] + ", " + deep + "]}"
    answers = iter([json.dumps(first).encode()] + [later.encode()] * 20)
    peer = FakePeer(str(tmp_path / "rank-0.sock"), lambda c: c.sendall(_reply(body=next(answers))))
    health = HealthRegistry()
    src = WorkerServerSource(health, WorkerServers(str(tmp_path), timeout=2.0))
    try:
        from frexport.sources.worker_server import _Backoff

        target = src.targets()[0]
        src._backoff[target.name] = _Backoff(handler="fr_trace_json")  # polled directly: no backoff, no listing
        assert src._poll_one(target) is not None  # the first, good body: the tail parser resumes from it
        for _ in range(4):
            assert src._poll_one(target) is None
        h = health.view()[0]
        assert not h.up and sum(n for r, n in h.errors.items() if r.startswith("decode_")) == 4, h.errors
        assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text
    finally:
        src.stop()
        peer.close()


def test_an_unexpected_error_on_one_source_is_logged_with_its_traceback_once(tmp_path, caplog, monkeypatch):
    from frexport.sources import worker_server
    from frexport.sources.worker_server import _Backoff

    def deep(*_a, **_k):
        raise RecursionError("maximum recursion depth exceeded")  # what no decode rule foresaw

    monkeypatch.setattr(worker_server, "decode_bytes", deep)
    peer = FakePeer(str(tmp_path / "rank-0.sock"), lambda c: c.sendall(_reply()))
    health = HealthRegistry()
    src = WorkerServerSource(health, WorkerServers(str(tmp_path), timeout=2.0))
    try:
        target = src.targets()[0]
        for _ in range(5):
            src._backoff[target.name] = _Backoff(handler="fr_trace_json")
            assert src._poll_one(target) is None
        assert caplog.text.count("Traceback") == 1 and caplog.text.count("polling socket:rank-0 failed") == 1
        assert health.view()[0].errors["internal"] == 5  # still counted every time
    finally:
        src.stop()
        peer.close()


def endless_chunks(conn):  # a chunked body that never ends, 1 MiB a chunk
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"100000\r\n" + b"x" * (1 << 20) + b"\r\n"
    for _ in range(1024):
        conn.sendall(chunk)


def test_an_endless_chunked_body_is_refused_at_the_peers_bound_holding_no_more(tmp_path):
    """An endless chunked peer body took the job view to 792 MB (peers.max_body_bytes was 256 MiB); it is
    refused at the default bound, 32 MiB, with no more than that held while reading it."""
    import tracemalloc

    from frexport.config import Peers

    peer = FakePeer(str(tmp_path / "rank-0.sock"), endless_chunks)
    tracemalloc.start()
    try:
        with pytest.raises(PeerError) as info:
            request(Target(unix_path=str(tmp_path / "rank-0.sock")), "GET", "/api/v1/ranks", timeout=30,
                    max_body=Peers().max_body_bytes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        peer.close()
    assert info.value.reason == "too_large", info.value.detail
    assert peak < 2 * Peers().max_body_bytes + (8 << 20), peak
