"""The worker-server client's body reads (sources/http_client.py): a body that arrives in pieces is
whole, byte for byte; one the peer cuts short is an error, never a shorter body."""

import os
import time

import pytest

from frexport.sources.http_client import PeerError, Target, request
from tests.support.peers import FakePeer

BODY = os.urandom(300_000)  # larger than one read


def _head(length: int) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {length}\r\n\r\n".encode()


def in_pieces(conn):
    conn.sendall(_head(len(BODY)) + BODY[:1000])
    for at in range(1000, len(BODY), 70_000):
        time.sleep(0.01)
        conn.sendall(BODY[at:at + 70_000])


def cut_short(conn):
    conn.sendall(_head(len(BODY)) + BODY[:200_000])


def test_a_body_in_pieces_arrives_whole(tmp_path):
    peer = FakePeer(str(tmp_path / "rank-0.sock"), in_pieces)
    try:
        resp = request(Target(unix_path=str(tmp_path / "rank-0.sock")), "POST", "/handler/x", timeout=5.0)
        assert resp.status == 200 and resp.body == BODY
    finally:
        peer.close()


def test_a_body_cut_short_is_an_error(tmp_path):
    peer = FakePeer(str(tmp_path / "rank-0.sock"), cut_short)
    try:
        with pytest.raises(PeerError) as err:
            request(Target(unix_path=str(tmp_path / "rank-0.sock")), "POST", "/handler/x", timeout=5.0)
        assert err.value.reason == "bad_response" and "middle of the body" in err.value.detail
    finally:
        peer.close()
