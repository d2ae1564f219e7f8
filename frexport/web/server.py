"""The sidecar's HTTP endpoints: /metrics, /healthz, /readyz and a landing page. Nothing else is served."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

_CLIENT_TIMEOUT_S = 10.0

_LANDING = b"""<html><head><title>frexport</title></head><body><h1>frexport</h1>
<p>PyTorch Flight Recorder exporter.</p><ul><li><a href="/metrics">/metrics</a></li>
<li><a href="/healthz">/healthz</a></li><li><a href="/readyz">/readyz</a></li></ul></body></html>"""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    wrap_connection: Callable | None = None

    def finish_request(self, request, client_address) -> None:
        # In the connection's own thread: a client that never completes its TLS handshake (or never
        # sends a request) holds only this thread, for at most the timeout, never the accept loop.
        request.settimeout(_CLIENT_TIMEOUT_S)
        if self.wrap_connection is not None:
            try:
                request = self.wrap_connection(request)
            except (OSError, ValueError):
                return
        super().finish_request(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        # `[::]` means every address, IPv4 included (a dual-stack pod's scraper may come over
        # either): clear IPV6_V6ONLY rather than trust the node's net.ipv6.bindv6only default.
        if self.server_address[0] == "::":
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class WebServer:
    def __init__(self, listen: str, registry: CollectorRegistry, ready: Callable[[], bool],
                 wrap_socket: Callable | None = None, authorize: Callable[[str | None], bool] | None = None) -> None:
        host, _, port = listen.rpartition(":")
        host = host.strip("[]") or "0.0.0.0"
        server = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "frexport"
            sys_version = ""

            def do_GET(self) -> None:  # noqa: N802
                if server.authorize is not None and not server.authorize(self.headers.get("Authorization")):
                    self._send(401, b"unauthorized\n", "text/plain", {"WWW-Authenticate": 'Basic realm="frexport"'})
                    return
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    encoder, content_type = choose_encoder(self.headers.get("Accept"))
                    self._send(200, encoder(server.registry), content_type)
                elif path == "/healthz":
                    self._send(200, b"ok\n", "text/plain")
                elif path == "/readyz":
                    ok = server.ready()
                    self._send(200 if ok else 503, b"ready\n" if ok else b"not ready\n", "text/plain")
                elif path == "/":
                    self._send(200, _LANDING, "text/html")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def do_HEAD(self) -> None:  # noqa: N802
                self.do_GET()

            def _send(self, code: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, val in (headers or {}).items():
                    self.send_header(k, val)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def log_message(self, format: str, *args) -> None:  # noqa: A002
                pass  # scrapes every few seconds would drown the log

        self.registry = registry
        self.ready = ready
        self.authorize = authorize
        self.httpd = (_Server6 if ":" in host else _Server)((host, int(port)), Handler)
        self.httpd.wrap_connection = wrap_socket
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="frexport-web", daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
