"""`frexport webhook`: the optional mutating admission webhook (HTTPS; the chart's webhook.enabled).

    frexport webhook --tls-cert-file tls.crt --tls-key-file tls.key [--listen [::]:9443] [inject options]

POST /mutate takes an AdmissionReview v1 and answers with frexport inject's patch for Pods annotated
frexport.io/inject: "true" (frexport/inject/admission.py); GET /healthz answers ok. The certificate
comes from cert-manager or the chart's generated Secret and is read at start-up: a renewed
certificate takes a restart of the webhook's pod.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from frexport import logs
from frexport.cli.inject import add_settings_args, settings_from
from frexport.inject.admission import review
from frexport.inject.pod import Settings, check_settings

MAX_BODY = 8 * 1024 * 1024  # the API server caps requests at 3 MiB; more is not an AdmissionReview


def add_parser(sub) -> None:
    p = sub.add_parser("webhook", help="serve the mutating admission webhook that injects annotated pods (HTTPS)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", default="[::]:9443", help="host:port (default [::]:9443, IPv4 and IPv6)")
    p.add_argument("--tls-cert-file", required=True)
    p.add_argument("--tls-key-file", required=True)
    add_settings_args(p)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], settings: Settings, ctx: ssl.SSLContext) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.settings = settings
        self.ctx = ctx
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # dual-stack
        super().server_bind()

    def get_request(self):
        sock, addr = super().get_request()
        # the handshake happens on the first read, in the request's thread: a slow client never
        # holds up accept()
        return self.ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._send(200, b"ok\n", "text/plain") if self.path == "/healthz" else self._send(404, b"", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        if self.path.split("?")[0] != "/mutate":
            return self._send(404, b"", "text/plain")
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            return self._send(400, b"AdmissionReview body expected\n", "text/plain")
        try:
            out = review(self.rfile.read(length), self.server.settings)
        except (ValueError, KeyError, TypeError) as exc:
            return self._send(400, f"{exc}\n".encode(), "text/plain")
        resp = out["response"]
        logs.get().info("admission %s: %s", resp["uid"], "patched" if "patch" in resp else "unchanged")
        self._send(200, json.dumps(out).encode(), "application/json")

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args) -> None:
        pass  # one log line per review above, not one per request


def run_webhook(args: argparse.Namespace) -> int:
    logs.setup("text", "info")
    host, _, port = args.listen.rpartition(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(args.tls_cert_file, args.tls_key_file)
        settings = settings_from(args)
        check_settings(settings)  # refused at start, not pod by pod (each would be admitted uninjected)
        server = _Server((host.strip("[]") or "::", int(port)), settings, ctx)
    except (OSError, ssl.SSLError, ValueError) as exc:
        print(f"frexport webhook: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    logs.get().info("frexport webhook listening on %s", args.listen)
    server.serve_forever()
    server.server_close()
    return 0
