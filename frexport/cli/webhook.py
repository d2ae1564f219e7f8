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
import signal
import sys
import threading

from frexport import logs
from frexport.cli.inject import add_settings_args, settings_from
from frexport.inject.pod import check_settings

# the HTTPS server (webhook_server.py) is imported when the command runs: `frexport` builds every
# command's parser, and analyze should not start by loading http.server, ssl and prometheus_client


def add_parser(sub) -> None:
    p = sub.add_parser("webhook", help="serve the mutating admission webhook that injects annotated pods (HTTPS)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", default="[::]:9443", help="host:port (default [::]:9443, IPv4 and IPv6)")
    p.add_argument("--tls-cert-file", required=True)
    p.add_argument("--tls-key-file", required=True)
    add_settings_args(p)


def run_webhook(args: argparse.Namespace) -> int:
    import ssl

    from frexport.cli.webhook_server import make_server

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
