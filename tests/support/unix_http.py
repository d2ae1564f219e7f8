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


def serve_unix(path: str, handler: type[BaseHTTPRequestHandler]) -> UnixHTTPServer:
    """Serve `handler` on a fresh socket at `path` (an old file there is removed), in a daemon thread."""
    if os.path.exists(path):
        os.unlink(path)
    server = UnixHTTPServer(path, handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
