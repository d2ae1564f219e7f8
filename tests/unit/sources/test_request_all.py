"""Many exchanges asked from one thread at once (sources/http_client.py `request_all`, the sidecar's status
reads): each answer is what `request` alone gets from the same peer, byte for byte or reason for reason,
and a peer that misbehaves costs its own exchange only. The misbehaving peers are fakes: a real PyTorch
worker server cannot be made to answer slowly, endlessly or with garbage (tests/support/peers.py)."""

import socket
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frexport.sources.http_client import (
    PeerError,
    Response,
    Target,
    _exchange,
    _Reader,
    _Received,
    _whole,
    request,
    request_all,
)
from tests.support.examples import examples
from tests.support.peers import FakePeer, stale_socket
from tests.unit.sources import test_hostile_peers as hostile
from tests.unit.sources.test_http_client import cut_short, in_pieces

MAX_BODY = 1 << 20


def good(conn):
    conn.sendall(hostile._reply())


def two_writes(conn):  # the head, then the body a moment later (as a server that writes them apart)
    whole = hostile._reply()
    conn.sendall(whole[:40])
    time.sleep(0.05)
    conn.sendall(whole[40:])


def chunked_kept_open(conn):  # a whole chunked answer, the connection then left open
    hostile.chunked_ok(conn)
    time.sleep(2)


def continue_kept_open(conn):  # an interim response, then a whole answer, the connection left open
    conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" + hostile._reply())
    time.sleep(2)


def outcome(answer):
    if isinstance(answer, PeerError):
        return ("error", answer.reason, answer.down)
    assert isinstance(answer, Response)
    return ("answer", answer.status, answer.content_type, answer.body)


def alone(path, timeout):
    try:
        return outcome(request(Target(unix_path=path), "POST", "/handler/x", timeout=timeout, max_body=MAX_BODY))
    except PeerError as exc:
        return outcome(exc)


@pytest.mark.parametrize("behave", [
    good, two_writes, in_pieces, cut_short, chunked_kept_open, continue_kept_open, hostile.chunked_ok, hostile.slow,
    hostile.trickle, hostile.huge, hostile.endless, hostile.garbage, hostile.reset, hostile.not_found,
    hostile.odd_length, hostile.trickle_headers, hostile.trickle_chunk_size, hostile.endless_continue,
    hostile.endless_trailers,
], ids=lambda f: f.__name__)
def test_each_answer_is_what_the_peer_gives_one_request(tmp_path, behave):
    peer = FakePeer(str(tmp_path / "rank-0.sock"), behave)
    other = FakePeer(str(tmp_path / "rank-1.sock"), good)
    try:
        expected = alone(str(tmp_path / "rank-0.sock"), 0.5)
        start = time.monotonic()
        got = request_all([(Target(unix_path=str(tmp_path / "rank-0.sock")), "/handler/x"),
                           (Target(unix_path=str(tmp_path / "rank-1.sock")), "/handler/x")], 0.5, MAX_BODY)
        assert time.monotonic() - start < 3.0  # bounded by the deadline, whatever the peer does
        assert outcome(got[0]) == expected
        assert outcome(got[1]) == alone(str(tmp_path / "rank-1.sock"), 0.5) and got[1].body  # type: ignore[union-attr]
    finally:
        peer.close()
        other.close()


def test_nobody_listening_is_down_as_for_one_request(tmp_path):
    got = request_all([(Target(unix_path=stale_socket(str(tmp_path / "rank-3.sock"))), "/handler/x"),
                       (Target(unix_path=str(tmp_path / "rank-4.sock")), "/handler/x"),
                       (Target(host="127.0.0.1", port=_closed_port()), "/handler/x")], 1.0, MAX_BODY)
    assert [outcome(a) for a in got] == [("error", "down", True)] * 3


def test_a_tcp_peer_answers_as_for_one_request():
    peer = FakePeer(("127.0.0.1", 0), two_writes)
    try:
        target = Target(host="127.0.0.1", port=peer.address[1])
        got = request_all([(target, "/handler/x")], 2.0, MAX_BODY)
        assert outcome(got[0]) == outcome(request(target, "POST", "/handler/x", timeout=2.0, max_body=MAX_BODY))
        assert got[0].body  # type: ignore[union-attr]
    finally:
        peer.close()


def test_more_peers_than_the_limit_are_each_answered_in_order(tmp_path):
    peers = [FakePeer(str(tmp_path / f"rank-{i}.sock"), lambda c, i=i: c.sendall(hostile._reply(body=b"%d" % i)))
             for i in range(12)]
    try:
        got = request_all([(Target(unix_path=str(tmp_path / f"rank-{i}.sock")), "/handler/x") for i in range(12)],
                          2.0, MAX_BODY, limit=3)
        assert [a.body for a in got] == [b"%d" % i for i in range(12)]  # type: ignore[union-attr]
    finally:
        for p in peers:
            p.close()


def test_a_peer_that_never_answers_holds_only_its_own_slot(tmp_path):
    """With one slot, the exchanges after a silent peer still each get their own deadline."""
    silent = FakePeer(str(tmp_path / "rank-0.sock"), hostile.slow)
    fine = [FakePeer(str(tmp_path / f"rank-{i}.sock"), good) for i in (1, 2)]
    try:
        got = request_all([(Target(unix_path=str(tmp_path / f"rank-{i}.sock")), "/handler/x") for i in range(3)],
                          0.5, MAX_BODY, limit=1)
        assert outcome(got[0]) == ("error", "timeout", False)
        assert all(isinstance(a, Response) and a.status == 200 for a in got[1:])
    finally:
        silent.close()
        for p in fine:
            p.close()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --- the whole-answer fast path (`_whole`) against the general reader -------------------------------

_ODD_LINES = st.sampled_from([
    b"content-length:5", b"Content-Length: +5", b"Content-Length: 99", b"Content-Type: application/json",
    b"Connection: close", b"Transfer-Encoding: chunked", b"X-A:  spaced  ", b": no name", b"no colon",
    b"X-Bare: a\nb", b"X-Cr: a\r", b"X-Mid: a\rb", b"\r", b"X-Long: " + b"x" * (8 * 1024 - 9),
    b"X-Long: " + b"x" * (8 * 1024 - 10), b"\xe9t\xe9: caf\xe9",
])
_STATUS = st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.0 404 Not Found", b"HTTP/1.1 100 Continue",
                           b"HTTP/1.1 204 No Content", b"HTTP/1.1 304 Not Modified", b"HTTP/1.1 099 Odd",
                           b"HTTP/1.1 2000 Long", b"HTPT/1.1 200 OK", b"HTTP/1.1", b"HTTP/1.1 500"])


@st.composite
def _answers(draw: st.DrawFn) -> bytes:
    """Mostly the usual answer (a status, its Content-Length, that many bytes of body or a few more or
    fewer), with odd lines and line ends mixed in."""
    length = draw(st.integers(0, 8))
    lines = draw(st.lists(_ODD_LINES, max_size=4))
    if draw(st.integers(0, 9)):
        lines.insert(draw(st.integers(0, len(lines))), b"Content-Length: %d" % length)
    end = draw(st.sampled_from([b"\r\n", b"\r\n", b"\n"]))
    body = draw(st.binary(min_size=max(0, length - 2), max_size=length + 3))
    return b"\r\n".join([draw(_STATUS), *lines]) + b"\r\n" + end + body


@settings(max_examples=examples(500), deadline=None)
@given(_answers(), st.booleans(), st.sampled_from([4, 5, 1 << 20]))
def test_a_whole_answer_read_fast_is_what_the_general_reader_gives(data, ended, max_body):
    """`request_all` reads an answer received whole in a few C calls where it is the usual kind; it
    must never give anything the general reader (`_exchange`) would not: the same answer, or none
    (then the general reader decides, errors included)."""
    fast = _whole(data, max_body)
    if fast is None:
        return
    general = _exchange(_Reader(_Received(data, ended=ended), float("inf")), max_body)  # type: ignore[arg-type]
    assert (fast.status, fast.content_type, fast.body) == (general.status, general.content_type, general.body)


def test_the_usual_answer_is_read_fast():
    """(The property above would pass with a `_whole` that always declines: the usual answer must not.)"""
    answer = _whole(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n"
                    b"Content-Type: application/json\r\n\r\n{}", 1 << 20)
    assert answer == Response(200, "application/json", b"{}")
