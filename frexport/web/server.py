"""The sidecar's HTTP endpoints: /metrics, /healthz, /readyz, a landing page and, only when the sidecar
is given one (`peers.serve`), the peers endpoint under /api/v1/ behind the same TLS and basic auth.
Nothing else is served.

No client can hold the server: a connection's request (TLS handshake and head) must arrive within
`head_deadline_s` in total, not per read (a client trickling a byte every few seconds is cut off),
the whole exchange ends within `deadline_s`, and at most `max_connections` are open at once, long
before the descriptor limit would make the accept loop spin. When all are taken, a new connection
takes the place of the oldest one that has not sent its request yet (idle connections cannot starve
real requests: 300 held open do not stop a scrape or an admission review); only when every one is
busy with a request is the new one closed at once. What was dropped is counted in
frexport_http_connections_dropped_total{reason}.
"""

from __future__ import annotations

import errno
import socket
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from frexport import logs

_CLIENT_TIMEOUT_S = 10.0
HEAD_DEADLINE_S = 10.0  # TLS handshake and request head, in total
DEADLINE_S = 60.0  # the whole exchange, response included
MAX_CONNECTIONS = 64

_LANDING = b"""<html><head><title>frexport</title></head><body><h1>frexport</h1>
<p>PyTorch Flight Recorder exporter.</p><ul><li><a href="/metrics">/metrics</a></li>
<li><a href="/healthz">/healthz</a></li><li><a href="/readyz">/readyz</a></li></ul></body></html>"""


def shutdown_fd(fd: int) -> None:
    """Shut a connection down by its descriptor: once TLS-wrapped, the socket object accept() gave is
    detached (the SSLSocket owns the descriptor), and shutting that object down did nothing."""
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        return
    try:
        s.shutdown(socket.SHUT_RDWR)  # the blocked recv/send returns; the thread ends
    except OSError:
        pass
    finally:
        s.detach()  # the descriptor stays its owner's to close


class _Cutoff:
    """Shuts a connection down at a deadline, whatever its thread is blocked in."""

    def __init__(self, sock: socket.socket, seconds: float, dropped: Counter, reason: str) -> None:
        self.sock, self.fd, self.dropped, self.reason = sock, sock.fileno(), dropped, reason
        self._lock = threading.Lock()
        self._done = False
        self.timer = threading.Timer(seconds, self._cut)
        self.timer.daemon = True
        self.timer.start()

    def _cut(self) -> None:
        with self._lock:  # never after cancel(): the descriptor may be another connection's by then
            if self._done:
                return
            self._done = True
            self.dropped[self.reason] += 1
            shutdown_fd(self.fd)

    def cancel(self) -> None:
        with self._lock:
            self._done = True
        self.timer.cancel()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 made clients wait for SYN retries while idle ones were evicted
    wrap_connection: Callable | None = None
    head_deadline_s = HEAD_DEADLINE_S
    deadline_s = DEADLINE_S
    max_connections = MAX_CONNECTIONS

    def server_activate(self) -> None:
        super().server_activate()
        self.dropped: Counter[str] = Counter()
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._local = threading.local()  # the head cutoff of the connection this thread serves
        self._idle: OrderedDict[int, int] = OrderedDict()  # connections whose head has not arrived: their fds
        self._idle_lock = threading.Lock()

    def head_arrived(self) -> None:
        head = getattr(self._local, "head", None)
        if head is not None:
            head.cancel()  # the head arrived in time; the whole deadline still applies
            self._not_idle(head.sock)

    def _not_idle(self, sock: socket.socket) -> None:
        with self._idle_lock:
            self._idle.pop(id(sock), None)

    def _evict_idle(self) -> bool:
        """Shut the oldest connection still waiting for its request; True when one was."""
        with self._idle_lock:  # held while shutting: the connection cannot be closed (its fd reused) meanwhile
            if not self._idle:
                return False
            _, fd = self._idle.popitem(last=False)
            self.dropped["evicted_idle"] += 1
            shutdown_fd(fd)  # its thread returns and frees the slot
        return True

    def get_request(self):
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):  # out of descriptors: do not spin on accept
                self.dropped["descriptors"] += 1
                time.sleep(0.1)
            raise

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False) and not (self._evict_idle() and self._slots.acquire(timeout=1.0)):
            self.dropped["max_connections"] += 1
            self.shutdown_request(request)
            return
        with self._idle_lock:
            self._idle[id(request)] = request.fileno()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def handle_error(self, request, client_address) -> None:
        # socketserver prints a handler's exception with its traceback to stderr, around our log format.
        # A client that goes away mid-answer (a broken pipe, a reset, cut off by its own timeout) is
        # routine for a server on a network; anything else is ours, and logged as such.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            logs.get().debug("metrics server: client %s went away: %s", client_address, sys.exc_info()[1])
            return
        logs.get().exception("metrics server: answering %s failed", client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request, client_address) -> None:
        # In the connection's own thread: a client that never completes its TLS handshake (or never
        # sends a request) holds only this thread, until the head deadline, never the accept loop.
        request.settimeout(_CLIENT_TIMEOUT_S)
        whole = _Cutoff(request, self.deadline_s, self.dropped, "deadline")
        head = self._local.head = _Cutoff(request, self.head_deadline_s, self.dropped, "head_deadline")
        try:
            if self.wrap_connection is not None:
                try:
                    request = self.wrap_connection(request)
                except (OSError, ValueError):  # a failed handshake, a refused client certificate
                    self.dropped["tls"] += 1
                    return
            super().finish_request(request, client_address)
        finally:
            whole.cancel()
            head.cancel()
            self._local.head = None
            self._not_idle(head.sock)


class _Server6(_Server):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        # `[::]` means every address, IPv4 included (a dual-stack pod's scraper may come over
        # either): clear IPV6_V6ONLY rather than trust the node's net.ipv6.bindv6only default.
        if self.server_address[0] == "::":
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def limited_server(address: tuple[str, int], handler: type, wrap: Callable | None = None,
                   head_deadline_s: float = HEAD_DEADLINE_S, deadline_s: float = DEADLINE_S,
                   max_connections: int = MAX_CONNECTIONS) -> _Server:
    """An HTTP server with this module's limits (head and whole deadlines, connection cap, the accept
    loop's pause when out of descriptors, `dropped` counts), for other listeners than the sidecar's: the
    admission webhook. `handler.parse_request` must call `self.server.head_arrived()` after the head."""
    cls = _Server6 if ":" in address[0] else _Server
    limits = {"head_deadline_s": head_deadline_s, "deadline_s": deadline_s, "max_connections": max_connections}
    httpd = type(cls.__name__, (cls,), limits)(address, handler)
    httpd.wrap_connection = wrap
    return httpd


class WebServer:
    def __init__(self, listen: str, registry: CollectorRegistry, ready: Callable[[], bool],
                 wrap_socket: Callable | None = None, authorize: Callable[[str | None], bool] | None = None,
                 head_deadline_s: float = HEAD_DEADLINE_S, deadline_s: float = DEADLINE_S,
                 max_connections: int = MAX_CONNECTIONS,
                 api: Callable[[str, str], tuple[int, bytes, str]] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        host, _, port = listen.rpartition(":")
        host = host.strip("[]") or "0.0.0.0"
        server = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "frexport"
            sys_version = ""

            def parse_request(self) -> bool:
                ok = super().parse_request()  # the request line and every header
                self.server.head_arrived()  # type: ignore[attr-defined]
                return ok

            def do_GET(self) -> None:  # noqa: N802
                if server.authorize is not None and not server.authorize(self.headers.get("Authorization")):
                    self._send(401, b"unauthorized\n", "text/plain", {"WWW-Authenticate": 'Basic realm="frexport"'})
                    return
                path, _, query = self.path.partition("?")
                if server.api is not None and path.startswith("/api/v1/"):
                    code, body, ctype = server.api(path, query)
                    self._send(code, body, ctype)
                elif path == "/metrics":
                    encoder, content_type = choose_encoder(self.headers.get("Accept") or "")
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
                for k, val in {**server.headers, **(headers or {})}.items():  # the web config's, then this answer's
                    self.send_header(k, val)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def log_message(self, format: str, *args) -> None:  # noqa: A002
                pass  # scrapes every few seconds would drown the log

        self.registry = registry
        self.ready = ready
        self.authorize = authorize
        self.api = api
        self.headers = dict(headers or {})  # web config http_server_config.headers, on every answer
        self.httpd = limited_server((host, int(port)), Handler, wrap_socket, head_deadline_s, deadline_s,
                                    max_connections)
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="frexport-web", daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def start(self) -> None:
        self._thread.start()

    def collect(self) -> Iterator[Metric]:
        """Its own self-metrics: connections it dropped, by why."""
        c = CounterMetricFamily("frexport_http_connections_dropped", "Connections to the metrics server dropped "
                                "(head_deadline, deadline, max_connections, evicted_idle, descriptors, tls)",
                                labels=["reason"])
        for reason in ("head_deadline", "deadline", "max_connections", "evicted_idle", "descriptors", "tls"):
            c.add_metric([reason], self.httpd.dropped[reason])
        yield c

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
