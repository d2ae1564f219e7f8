"""A fake worker-server peer for faults a real PyTorch worker server cannot produce (slow, endless,
malformed answers). Tests that use it say so."""

from __future__ import annotations

import socket
import threading
import time


class FakePeer:
    """A unix-socket server whose reply to every request is produced by `behave(conn)`."""

    def __init__(self, path, behave):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # path: str or bytes
        self.sock.bind(path)
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
