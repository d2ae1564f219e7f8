"""A small HTTP/1.1 client for PyTorch's worker server, over a unix socket or TCP.

Standard library only, and its own response parser: `http.client` times out per
read, so a peer trickling a header line a byte at a time, answering `100 Continue`
forever or sending endless chunked trailers holds it without limit. Here the whole
exchange (connect, request, status line, headers, body) shares one deadline, and
the head (every status line, header and trailer, interim responses included) and
the body each have a byte cap.
"""

from __future__ import annotations

import errno
import re
import select
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Protocol, TypeVar

from frexport.config import WorkerServers, parse_worker_address


class _Ranked(Protocol):
    @property
    def rank(self) -> int: ...


T = TypeVar("T", bound=_Ranked)

MAX_HEAD_BYTES = 64 * 1024  # status lines, headers, 1xx responses and trailers together
MAX_LINE_BYTES = 8 * 1024  # one header or chunk-size line
MAX_INTERIM = 8  # 1xx responses before the real one


class PeerError(Exception):
    """The peer could not be asked. `down` means nothing is listening: the rank is gone."""

    def __init__(self, reason: str, detail: str, down: bool = False) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.down = down


@dataclass(frozen=True)
class Target:
    """A worker server: `unix_path` for a socket file, else host and port."""

    unix_path: str | None = None
    host: str = "127.0.0.1"
    port: int = 0

    @classmethod
    def parse(cls, spec: str) -> "Target":
        """'unix:///run/x.sock', '/run/x.sock', 'http://host:port'."""
        unix_path, host, port = parse_worker_address(spec)
        return cls(unix_path=unix_path) if unix_path else cls(host=host, port=port)

    def __str__(self) -> str:
        return f"unix://{self.unix_path}" if self.unix_path else f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes


class _Bad(Exception):
    """The peer broke the protocol or a cap (reason, detail)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class _Reader:
    """Buffered reads from a socket, every one bounded by the exchange's deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()
        self.eof = False
        self.head_bytes = 0

    def _arm(self) -> None:
        """The next read may take what is left of the exchange's deadline, and no more."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout()
        self.sock.settimeout(left)

    def _fill(self) -> None:
        self._arm()
        data = self.sock.recv(1 << 16)
        if not data:
            self.eof = True
        self.buf += data

    def head_line(self) -> bytes:
        """One line of the head (CRLF stripped), counted against the head cap."""
        start = 0
        while True:
            i = self.buf.find(b"\n", start)
            if i >= 0:
                line = bytes(self.buf[: i + 1])
                del self.buf[: i + 1]
                break
            if len(self.buf) > MAX_LINE_BYTES:
                raise _Bad("bad_response", f"a header line over {MAX_LINE_BYTES} bytes")
            if self.eof:
                raise _Bad("bad_response", "connection closed in the middle of the headers")
            start = len(self.buf)
            self._fill()
        if len(line) > MAX_LINE_BYTES:
            raise _Bad("bad_response", f"a header line over {MAX_LINE_BYTES} bytes")
        self.head_bytes += len(line)
        if self.head_bytes > MAX_HEAD_BYTES:
            raise _Bad("bad_response", f"headers over {MAX_HEAD_BYTES} bytes")
        return line.rstrip(b"\r\n")

    def exactly(self, n: int) -> bytes:
        if len(self.buf) >= n:
            out = bytes(self.buf[:n])
            del self.buf[:n]
            return out
        # read straight into the body's room: a 150 KB body of entries was copied three times
        # (appended to the buffer, sliced out, made bytes), each a pass over cold memory
        body, have = bytearray(n), len(self.buf)
        body[:have] = self.buf
        self.buf.clear()
        room = memoryview(body)
        while have < n:
            if self.eof:
                raise _Bad("bad_response", "connection closed in the middle of the body")
            self._arm()
            got = self.sock.recv_into(room[have:])
            self.eof = not got
            have += got
        return bytes(body)

    def some(self) -> bytes:
        """What is buffered, or the next read; b'' at the end of the stream."""
        if not self.buf and not self.eof:
            self._fill()
        out = bytes(self.buf)
        self.buf.clear()
        return out


def request(target: Target, method: str, path: str, timeout: float = 5.0,
            max_body: int = WorkerServers.max_body_bytes, tls: ssl.SSLContext | None = None,
            headers: dict[str, str] | None = None, server_name: str | None = None) -> Response:
    """One exchange; `timeout` is its total deadline. Raises PeerError. `tls` wraps the connection
    (peer sidecars behind their web config; the handshake shares the deadline); `headers` are sent
    as given (Authorization for basic auth)."""
    deadline = time.monotonic() + timeout
    sock = None
    try:
        try:
            sock = _connect(target, timeout)
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            if tls is not None:
                sock = tls.wrap_socket(sock, server_hostname=server_name or target.host or None)
            sock.sendall(_request_bytes(method, path, headers))
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            raise _peer_error(target, exc, timeout) from None
        try:
            return _exchange(_Reader(sock, deadline), max_body)
        except _Bad as exc:
            reason = exc.reason
            raise PeerError(reason, f"{target}: {exc}") from None
    except ssl.SSLError as exc:
        raise PeerError("tls", f"{target}: TLS: {exc}") from None
    except OSError as exc:  # (socket.timeout among them)
        raise _peer_error(target, exc, timeout) from None
    finally:
        if sock is not None:
            sock.close()


def _request_bytes(method: str, path: str, headers: dict[str, str] | None = None) -> bytes:
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{extra}"
            "Content-Length: 0\r\n\r\n").encode("latin-1")


def _connect(target: Target, timeout: float) -> socket.socket:
    if not target.unix_path:
        return socket.create_connection((target.host, target.port), timeout=timeout)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(target.unix_path)
    except BaseException:
        s.close()
        raise
    return s


def _exchange(r: _Reader, max_body: int) -> Response:
    for _ in range(MAX_INTERIM + 1):
        status, headers = _head(r)
        if not 100 <= status < 200:
            break
    else:
        raise _Bad("bad_response", f"more than {MAX_INTERIM} interim (1xx) responses")
    length = _content_length(headers)
    if length is not None and length > max_body:
        raise _Bad("too_large", f"body of {length} bytes is over the {max_body}-byte limit")
    if status in (204, 304):
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        body = _chunked(r, max_body)
    elif length is not None:
        body = r.exactly(length)
    else:  # no length: the body ends with the connection
        parts, total = [], 0
        while chunk := r.some():
            total += len(chunk)
            if total > max_body:
                raise _Bad("too_large", f"body over the {max_body}-byte limit")
            parts.append(chunk)
        body = b"".join(parts)
    return Response(status, headers.get("content-type", ""), body)


def _head(r: _Reader) -> tuple[int, dict[str, str]]:
    line = r.head_line()
    status = _status_code(line)
    if status is None:
        raise _Bad("bad_response", f"not an HTTP status line: {line[:60]!r}")
    headers: dict[str, str] = {}
    while line := r.head_line():
        header = _header(line)
        if header is None:
            raise _Bad("bad_response", f"not a header line: {line[:60]!r}")
        headers[header[0]] = header[1]
    return status, headers


def _status_code(line: bytes) -> int | None:
    """A status line's code (`HTTP/x NNN ...`), None where it is not one."""
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not (parts[1].isdigit() and len(parts[1]) == 3):
        return None
    return int(parts[1])


def _header(line: bytes) -> tuple[str, str] | None:
    """A header line as (lower-case name, value), None where it has no colon."""
    name, sep, value = line.partition(b":")
    return (name.strip().decode("latin-1").lower(), value.strip().decode("latin-1")) if sep else None


def _content_length(headers: dict[str, str]) -> int | None:
    """The Content-Length where it is a plain decimal, else None (the body then ends with the connection)."""
    text = headers.get("content-length")
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


def _chunked(r: _Reader, max_body: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_text = r.head_line().split(b";", 1)[0].strip()
        if not size_text or size_text.strip(b"0123456789abcdefABCDEF"):
            raise _Bad("bad_response", f"bad chunk size {size_text[:20]!r}")
        size = int(size_text, 16)
        if size == 0:
            while r.head_line():  # trailers, counted against the head cap
                pass
            return b"".join(parts)
        total += size
        if total > max_body:
            raise _Bad("too_large", f"body over the {max_body}-byte limit")
        parts.append(r.exactly(size))
        r.exactly(2)  # the CRLF after each chunk


class _NotYet(Exception):
    """The answer read so far ends before the answer does, and its connection is still open."""


class _Received:
    """An exchange's bytes received so far, read back as its socket gave them (for `_exchange`): past
    their end, the connection's end where it has ended, else `_NotYet`."""

    def __init__(self, data: bytes, ended: bool) -> None:
        self.view, self.at, self.ended = memoryview(data), 0, ended

    def settimeout(self, _timeout: float | None) -> None:
        pass

    def recv(self, n: int) -> bytes:
        out = self.view[self.at:self.at + n].tobytes()
        if not out and not self.ended:
            raise _NotYet()
        self.at += len(out)
        return out

    def recv_into(self, room: memoryview) -> int:
        n = min(len(room), len(self.view) - self.at)
        if not n and not self.ended:
            raise _NotYet()
        room[:n] = self.view[self.at:self.at + n]
        self.at += n
        return n


_LENGTH = re.compile(rb"^content-length:[ \t]*([0-9]+)[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)


def _short_of_its_length(got: bytearray) -> bool:
    """Whether `got` is a head with one Content-Length and less of the body than it says (reading it
    back would only find it `_NotYet`: a 150 KB body comes in a few reads)."""
    end = got.find(b"\r\n\r\n")
    lengths = _LENGTH.findall(got, 0, end) if end >= 0 and got[9:10] != b"1" else []
    return len(lengths) == 1 and len(got) < end + 4 + int(lengths[0])


@dataclass(slots=True)
class _Open:
    """An exchange of `request_all` under way."""

    index: int  # in `wanted`
    target: Target
    sock: socket.socket
    to_send: bytes  # what is left of the request
    got: bytearray  # what has come of the answer
    deadline: float  # monotonic


def request_all(wanted: Sequence[tuple[Target, str]], timeout: float, max_body: int, limit: int = 64,
                method: str = "POST") -> list[Response | PeerError]:
    """Each (target, path) asked from this thread, the exchanges multiplexed (at most `limit` open at
    once), each within its own `timeout` from its start: for the many small reads of one turn, a
    thread per exchange cost a third of each (the hand-off to it and back). Each answer is read by
    `_exchange` once received, with `request`'s caps, errors and reasons; a peer that never answers
    holds its own slot until its deadline, never the others' answers. In `wanted`'s order. (What has come
    is read back at each read that may end it: a status answer is one or two reads.)

    epoll is used as it is, not through `selectors`, and a unix socket's request goes out as it connects
    (such a connection is made at once): the selector's bookkeeping and the extra turn to learn that a
    fresh socket is writable were a quarter of each status read's own CPU."""
    out: list[Response | PeerError | None] = [None] * len(wanted)
    todo = deque(enumerate(wanted))
    poller = select.epoll()
    open_: dict[int, _Open] = {}  # by the socket's fd

    def finish(fd: int, result: Response | PeerError) -> None:
        held = open_.pop(fd)
        poller.unregister(fd)
        held.sock.close()
        out[held.index] = result

    try:
        while todo or open_:
            while todo and len(open_) < limit:
                i, (target, path) = todo.popleft()
                try:
                    sock = _connect_nonblocking(target, timeout)
                except OSError as exc:
                    out[i] = _peer_error(target, exc, timeout)
                    continue
                to_send = _request_bytes(method, path)
                if target.unix_path:  # connected: its request goes now (the rest, if any, when writable)
                    try:
                        to_send = to_send[sock.send(to_send):]
                    except BlockingIOError:
                        pass
                    except OSError as exc:
                        sock.close()
                        out[i] = _peer_error(target, exc, timeout)
                        continue
                open_[sock.fileno()] = _Open(i, target, sock, to_send, bytearray(), time.monotonic() + timeout)
                poller.register(sock.fileno(), select.EPOLLOUT if to_send else select.EPOLLIN)
            now = time.monotonic()
            for fd, held in list(open_.items()):
                if held.deadline <= now:
                    finish(fd, _peer_error(held.target, socket.timeout(), timeout))
            if not open_:
                continue
            for fd, _events in poller.poll(max(0.0, min(held.deadline for held in open_.values()) - now)):
                held = open_[fd]
                target, sock, got = held.target, held.sock, held.got
                try:
                    if held.to_send:  # connected (or failed to): the request, then its answer
                        failed = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                        if failed:
                            raise OSError(failed, errno.errorcode.get(failed, str(failed)))
                        held.to_send = held.to_send[sock.send(held.to_send):]
                        if not held.to_send:
                            poller.modify(fd, select.EPOLLIN)
                        continue
                    chunk = sock.recv(1 << 16)
                    got += chunk
                    if chunk and _short_of_its_length(got) and len(got) <= MAX_HEAD_BYTES + max_body:
                        continue
                    # what came, read back (no deadline: nothing waits on it)
                    data = bytes(got)
                    result: Response | PeerError = _whole(data, max_body) or \
                        _exchange(_Reader(_Received(data, ended=not chunk), float("inf")), max_body)  # type: ignore[arg-type]
                except _NotYet:
                    continue
                except _Bad as exc:
                    result = PeerError(exc.reason, f"{target}: {exc}")
                except BlockingIOError:
                    continue
                except OSError as exc:
                    result = _peer_error(target, exc, timeout)
                finish(fd, result)
    finally:
        for held in open_.values():
            held.sock.close()
        poller.close()
    return out  # type: ignore[return-value]


def _whole(data: bytes, max_body: int) -> Response | None:
    """The usual answer, all of it received: a final status, CRLF header lines, one Content-Length
    within the caps, the whole body. Read here in a few C calls; None for anything else (an interim
    response, a chunked or unsized body, a bare LF, a cap reached, a malformed line, a short body):
    `_exchange` reads that, and gives the same answer or error it always gave. Never an answer
    `_exchange` would not give (tests/unit/sources/test_request_all.py compares them)."""
    end = data.find(b"\r\n\r\n")
    if end < 0 or end + 4 > MAX_HEAD_BYTES:
        return None
    status_line, *lines = data[:end].split(b"\r\n")
    status = _status_code(status_line)
    if status is None or status < 200 or status in (204, 304):
        return None
    for line in (status_line, *lines):
        if len(line) + 2 > MAX_LINE_BYTES or b"\n" in line or line.endswith(b"\r"):
            return None
    headers: dict[str, str] = {}
    for line in lines:
        header = _header(line)
        if header is None:
            return None
        headers[header[0]] = header[1]
    length = _content_length(headers)
    if "transfer-encoding" in headers or length is None or length > max_body or len(data) < end + 4 + length:
        return None
    return Response(status, headers.get("content-type", ""), data[end + 4:end + 4 + length])


def _connect_nonblocking(target: Target, timeout: float) -> socket.socket:
    """A socket whose connection is under way (or made: a unix socket's is at once)."""
    family = socket.AF_UNIX if target.unix_path else \
        socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        failed = sock.connect_ex(target.unix_path or (target.host, target.port))
        if failed == errno.EAGAIN and target.unix_path:  # the listener's backlog is full: wait for room
            sock.settimeout(timeout)
            sock.connect(target.unix_path)
            sock.setblocking(False)
        elif failed and failed != errno.EINPROGRESS:
            raise OSError(failed, errno.errorcode.get(failed, str(failed)))
    except BaseException:
        sock.close()
        raise
    return sock


def _peer_error(target: Target, exc: OSError, timeout: float) -> PeerError:
    """The PeerError for a socket error (`OSError(errno, ...)` is made the subclass its errno names)."""
    if isinstance(exc, socket.timeout):
        return PeerError("timeout", f"{target}: no complete answer within {timeout:g} s")
    if isinstance(exc, (ConnectionRefusedError, FileNotFoundError)):  # (only ever where it connects)
        return PeerError("down", f"{target}: nothing listening ({exc.strerror or exc})", down=True)
    return PeerError("bad_response", f"{target}: {type(exc).__name__}: {exc}")


def fetch_within(wanted: list[tuple[T, str]], deadline_s: float, concurrency: int,
                 fetch: Callable[[T, str, float], bytes], name: str) -> dict[tuple[int, str], bytes | PeerError]:
    """Many (target with a `.rank`, handler) requests at once, all within ONE total deadline: a rank
    whose handler never answers costs the deadline, not the deadline per rank. `fetch(target, handler,
    timeout)` does one request. Keyed by (rank, handler); a failure is the PeerError."""
    if not wanted:
        return {}
    end = time.monotonic() + deadline_s

    def one(t: T, handler: str) -> bytes:
        left = end - time.monotonic()
        if left <= 0:
            raise PeerError("timeout", "evidence deadline passed before the request started")
        return fetch(t, handler, left)

    out: dict[tuple[int, str], bytes | PeerError] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix=name)
    try:
        futures = {pool.submit(one, t, h): (t.rank, h) for t, h in wanted}
        done, pending = wait(futures, timeout=max(0.0, end - time.monotonic()))
        for f in done:
            try:
                out[futures[f]] = f.result()
            except PeerError as exc:
                out[futures[f]] = exc
        for f in pending:
            out[futures[f]] = PeerError("timeout", f"no answer within the {deadline_s:g} s evidence deadline")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a request still running ends at its own deadline
    return out
