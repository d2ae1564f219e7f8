"""A small HTTP/1.1 client for PyTorch's worker server, over a unix socket or TCP.

Standard library only. Bounded in every way a misbehaving peer could abuse:
connect and read timeouts, one overall deadline (a peer trickling bytes cannot
hold us), and a cap on the body size.
"""

from __future__ import annotations

import http.client
import socket
import time
from dataclasses import dataclass

from frexport.config import WorkerServers, parse_worker_address


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


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._unix_path)
        except BaseException:
            s.close()
            raise
        self.sock = s


def request(target: Target, method: str, path: str, timeout: float = 5.0,
            max_body: int = WorkerServers.max_body_bytes) -> Response:
    deadline = time.monotonic() + timeout
    conn = (_UnixConnection(target.unix_path, timeout) if target.unix_path
            else http.client.HTTPConnection(target.host, target.port, timeout=timeout))
    try:
        try:
            conn.request(method, path, headers={"Connection": "close", "Content-Length": "0"})
            resp = conn.getresponse()
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            raise PeerError("down", f"{target}: nothing listening ({exc.strerror or exc})", down=True) from None
        except socket.timeout:
            raise PeerError("timeout", f"{target}: no answer within {timeout:g} s") from None
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            raise PeerError("bad_response", f"{target}: {type(exc).__name__}: {exc}") from None
        length = resp.getheader("Content-Length")
        if length is not None and length.isdecimal() and int(length) > max_body:
            raise PeerError("too_large", f"{target}: body of {length} bytes is over the {max_body}-byte limit")
        chunks, total = [], 0
        while True:
            if time.monotonic() > deadline:
                raise PeerError("timeout", f"{target}: body not complete within {timeout:g} s")
            try:
                chunk = resp.read1(1 << 16)
            except socket.timeout:
                raise PeerError("timeout", f"{target}: body stalled for {timeout:g} s") from None
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                raise PeerError("bad_response", f"{target}: connection broke mid-body: {exc}") from None
            if not chunk:
                break
            total += len(chunk)
            if total > max_body:
                raise PeerError("too_large", f"{target}: body over the {max_body}-byte limit")
            chunks.append(chunk)
        if length is not None and length.isdecimal() and total != int(length):
            raise PeerError("bad_response", f"{target}: body ended after {total} of {length} bytes")
        return Response(resp.status, resp.getheader("Content-Type", "") or "", b"".join(chunks))
    finally:
        conn.close()
