"""A fake worker-server peer for faults a real PyTorch worker server cannot produce (slow, endless,
malformed answers). Tests that use it say so."""

from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlsplit

from tests.support.synth import T0, dump, entry
from tests.support.unix_http import QuietHandler, serve_unix


def stale_socket(path: str) -> str:
    """A socket file nobody listens on: what a dead trainer leaves behind."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()  # the file stays
    return path


class FakePeer:
    """A unix-socket server (a (host, port) `path`: TCP) whose reply to every request is produced by
    `behave(conn)`."""

    def __init__(self, path, behave):
        self.path = path
        tcp = isinstance(path, tuple)
        self.sock = socket.socket(socket.AF_INET if tcp else socket.AF_UNIX, socket.SOCK_STREAM)  # str or bytes
        self.sock.bind(path)
        self.address = self.sock.getsockname()
        self.sock.listen(8)
        self.behave = behave
        self.stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        try:
            conn.recv(65536)
            self.behave(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop = True
        self.sock.close()


class HostileSidecar:
    """A peer sidecar's /api/v1/ranks on loopback HTTP answering whatever body a test sets: a hostile
    or broken pod (rank ids of another pod, 4096 fake ranks, out-of-range values), which a real
    sidecar never sends. Bodies are usually a real sidecar's (PeerApi.ranks_body) edited."""

    def __init__(self, body: bytes = b"") -> None:
        import http.server

        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                owner.requests += 1
                time.sleep(owner.delay_s)
                if owner.hold is not None:  # a slow peer that answers once the test lets it
                    owner.hold.wait(30)
                body = owner.handler_body if "/handler/" in self.path and owner.handler_body is not None \
                    else owner.body
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.body, self.requests, self.delay_s = body, 0, 0.0
        self.hold: threading.Event | None = None
        self.handler_body: bytes | None = None  # the answer to /api/v1/ranks/<r>/handler/<name>
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()


class FakeAgentRank:
    """A rank's worker server with frexport.agent's handlers, on a unix socket: the handler list, the
    recorder list, one recorder's status, its entries and torch 2.15's health check. A fake because a
    real agent never answers what a hostile rank does: `answers` replaces any handler's answer (the
    handler's name without its query -> bytes, or a callable given the request handler, which writes the
    answer itself). `sent` counts the body bytes each handler got out before the client hung up."""

    HANDLERS = ["frexport_fr_live", "frexport_fr_status", "frexport_recorders", "fr_trace_json",
                "c10d_health_check", "ping"]

    def __init__(self, path: str, rank: int, answers: dict | None = None, recorders: tuple = ("gloo",)) -> None:
        body = json.dumps(dump([entry(0, 1, created=T0 + rank)], world=2)).encode()
        status = json.dumps({"pg_status": {"0": {"last_enqueued_collective": 1, "last_started_collective": 1,
                                                 "last_completed_collective": 1}}}).encode()
        self.answers = {"frexport_recorders": json.dumps({"recorders": list(recorders), "torch": "2.15.0"}).encode(),
                        "frexport_fr_status": status, "fr_trace_json": body, "frexport_fr_live": body,
                        "c10d_health_check": b'{"healthy": true, "unhealthy_backends": []}', **(answers or {})}
        self.asked: list[str] = []
        self.sent: dict[str, int] = {}
        fake = self

        class Handler(QuietHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                self.send(json.dumps(fake.HANDLERS).encode())

            def do_POST(self):  # noqa: N802
                url = urlsplit(self.path)
                name = url.path.rsplit("/", 1)[-1]
                fake.asked.append(name + (f"?{url.query}" if url.query else ""))
                answer = fake.answers.get(name)
                if answer is None:
                    self.send(b"Handler not found", "text/plain", 404)
                elif callable(answer):
                    answer(self)
                else:
                    self.send(answer)
                    fake.sent[name] = fake.sent.get(name, 0) + len(answer)

        self.server = serve_unix(path, Handler)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def stream_json(fake: FakeAgentRank, name: str, total: int, length: bool):
    """An answer of `total` bytes of valid JSON (one long string), written 64 KiB at a time, with a
    Content-Length or ending with the connection; what got out is counted in fake.sent[name]."""
    def answer(handler) -> None:
        fake.sent.setdefault(name, 0)  # asked: the client may hang up before a byte of the body is out
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if length:
            handler.send_header("Content-Length", str(total))
        handler.end_headers()
        head, tail = b'{"pg_status": {}, "pad": "', b'"}'
        pad = total - len(head) - len(tail)
        try:
            for part in (head, *([b"x" * (1 << 16)] * (pad >> 16)), b"x" * (pad & 0xFFFF), tail):
                handler.wfile.write(part)
                fake.sent[name] = fake.sent.get(name, 0) + len(part)
        except OSError:  # the client stopped reading: what it refused was never sent
            pass
    return answer
