"""The admission webhook's HTTPS server (`frexport webhook`, cli/webhook.py): POST /mutate answers an
AdmissionReview with frexport inject's patch (inject/admission.py), GET /healthz answers ok, with the
metrics server's limits (web/server.py)."""

from __future__ import annotations

import json
import ssl
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from frexport import logs
from frexport.inject.admission import review
from frexport.inject.pod import Settings
from frexport.web.server import limited_server

MAX_BODY = 8 * 1024 * 1024  # the API server caps requests at 3 MiB; more is not an AdmissionReview
HEAD_DEADLINE_S = 10.0
DEADLINE_S = 30.0
MAX_CONNECTIONS = 64


class _Handler(BaseHTTPRequestHandler):
    server_version = "frexport-webhook"
    sys_version = ""

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.server.head_arrived()  # type: ignore[attr-defined]
        return ok

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._send(200, b"ok\n", "text/plain") if self.path == "/healthz" else self._send(404, b"", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        if self.path.split("?")[0] != "/mutate":
            return self._send(404, b"", "text/plain")
        raw = self.headers.get("Content-Length") or "0"
        length = int(raw) if raw.isdecimal() and len(raw) <= 12 else -1
        if not 0 < length <= MAX_BODY:
            return self._refuse(f"an AdmissionReview body of 1 to {MAX_BODY} bytes expected "
                                f"(Content-Length {raw[:20]!r})")
        try:
            out = review(self.rfile.read(length), self.server.settings)  # type: ignore[attr-defined]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            return self._refuse(f"not an AdmissionReview v1 request: {str(exc)[:300]}")
        resp = out["response"]
        logs.get().info("admission %s: %s", resp["uid"], "patched" if "patch" in resp else "unchanged")
        self._send(200, json.dumps(out).encode(), "application/json")

    def _refuse(self, why: str) -> None:
        logs.get().warning("admission request from %s refused (HTTP 400): %s", self.client_address[0], why)
        self._send(400, f"{why}\n".encode(), "text/plain")

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args) -> None:
        pass  # one log line per review above, not one per request


def make_server(address: tuple[str, int], settings: Settings, ctx: ssl.SSLContext, **limits) -> ThreadingHTTPServer:
    """The webhook's HTTPS server with the metrics server's limits; the handshake runs in the connection's
    thread under the head deadline, never in the accept loop."""
    limits = {"head_deadline_s": HEAD_DEADLINE_S, "deadline_s": DEADLINE_S, "max_connections": MAX_CONNECTIONS,
              **limits}
    server = limited_server(address, _Handler, lambda sock: ctx.wrap_socket(sock, server_side=True), **limits)
    server.settings = settings  # type: ignore[attr-defined]
    return server
