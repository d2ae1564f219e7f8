"""`frexport webhook`: the optional mutating admission webhook (HTTPS; the chart's webhook.enabled).

    frexport webhook --tls-cert-file tls.crt --tls-key-file tls.key [--listen [::]:9443] [inject options]

POST /mutate takes an AdmissionReview v1 and answers with frexport inject's patch for Pods annotated
frexport.io/inject: "true" (frexport/inject/admission.py); GET /healthz answers ok. The certificate
comes from cert-manager or the chart's generated Secret and is read at start-up: a renewed
certificate takes a restart of the webhook's pod.

It has the metrics server's limits (web/server.py): the TLS handshake and request head within 10 s
in total, the whole exchange within 30 s (the API server gives up on a webhook after at most 30 s),
at most 64 connections open (more are closed at once: 300 idle connections cannot starve reviews),
and the accept loop pauses when out of descriptors. A request that is not an AdmissionReview gets
HTTP 400 with the reason and a log line, never a traceback; the API server then applies the
webhook's failurePolicy (the chart's: Ignore, so the pod starts without the sidecar).
"""

from __future__ import annotations

import argparse
import json
import signal
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from frexport import logs
from frexport.cli.inject import add_settings_args, settings_from
from frexport.inject.admission import review
from frexport.inject.pod import Settings, check_settings
from frexport.web.server import limited_server

MAX_BODY = 8 * 1024 * 1024  # the API server caps requests at 3 MiB; more is not an AdmissionReview


def add_parser(sub) -> None:
    p = sub.add_parser("webhook", help="serve the mutating admission webhook that injects annotated pods (HTTPS)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", default="[::]:9443", help="host:port (default [::]:9443, IPv4 and IPv6)")
    p.add_argument("--tls-cert-file", required=True)
    p.add_argument("--tls-key-file", required=True)
    add_settings_args(p)


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


def run_webhook(args: argparse.Namespace) -> int:
    logs.setup("text", "info")
    host, _, port = args.listen.rpartition(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(args.tls_cert_file, args.tls_key_file)
        settings = settings_from(args)
        check_settings(settings)  # refused at start, not pod by pod (each would be admitted uninjected)
        server = make_server((host.strip("[]") or "::", int(port)), settings, ctx)
    except (OSError, ssl.SSLError, ValueError) as exc:
        print(f"frexport webhook: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    logs.get().info("frexport webhook listening on %s", args.listen)
    server.serve_forever()
    server.server_close()
    return 0
