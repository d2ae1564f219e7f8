"""An HTTP server on a unix socket, for fake worker servers in tests and benchmarks."""

from __future__ import annotations

import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class UnixHTTPServer(ThreadingHTTPServer):
    address_family = socket.AF_UNIX
    daemon_threads = True

    def server_bind(self) -> None:
        self.socket.bind(self.server_address)

    def get_request(self):
        conn, _ = self.socket.accept()
        return conn, ("local", 0)


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that answers with `send` and logs nothing (tests read their own records)."""

    def send(self, body: bytes, ctype: str = "application/json", status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a) -> None:
        pass


def serve_unix(path: str, handler: type[BaseHTTPRequestHandler]) -> UnixHTTPServer:
    """Serve `handler` on a fresh socket at `path` (an old file there is removed), in a daemon thread."""
    if os.path.exists(path):
        os.unlink(path)
    server = UnixHTTPServer(path, handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
