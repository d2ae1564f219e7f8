#!/usr/bin/env bash
# Set up, diagnose the bundled real dumps of a hung job, then run the sidecar on them serving /metrics.
# FREXPORT_DEMO_DUMPS picks other dumps; FREXPORT_LISTEN another address.
set -euo pipefail
cd "$(dirname "$0")/.."
FREXPORT_SKIP_TORCH=1 ./scripts/setup.sh
DUMPS=${FREXPORT_DEMO_DUMPS:-tests/fixtures/real/stuck_before_collective}
LISTEN=${FREXPORT_LISTEN:-127.0.0.1:9464}
echo "== frexport analyze $DUMPS"
.venv/bin/frexport analyze "$DUMPS" || true
echo
echo "== frexport serve on $DUMPS: metrics at http://$LISTEN/metrics (Ctrl-C to stop)"
exec .venv/bin/frexport serve --dump-dir "$DUMPS" --listen "$LISTEN" --stall-after 5s
