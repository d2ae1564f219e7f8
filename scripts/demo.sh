#!/usr/bin/env bash
# The main job on a fresh machine, with Python (>= 3.10, venv) only: install frexport and its runtime
# dependencies into a venv (pip install -e .: no torch, npm, apt or chart tools; ./scripts/test.sh
# installs those), diagnose the bundled real dumps of a hung 4-rank torch job, then run the sidecar
# on them serving /metrics.
# FREXPORT_DEMO_DUMPS picks other dumps; FREXPORT_LISTEN another address; FREXPORT_VENV another venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${FREXPORT_VENV:-.venv}
DUMPS=${FREXPORT_DEMO_DUMPS:-tests/fixtures/real/stuck_before_collective}
LISTEN=${FREXPORT_LISTEN:-127.0.0.1:9464}
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
quiet() { "$@" >"$LOG" 2>&1 || { cat "$LOG" >&2; echo "demo: failed: $*" >&2; exit 1; }; }

command -v "$PY" >/dev/null 2>&1 || { echo "demo: needs Python 3.10 or newer ('$PY' not found; set PYTHON)" >&2; exit 1; }
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "demo: needs Python 3.10 or newer ($PY is $("$PY" -V 2>&1))" >&2; exit 1; }
# Installed once; again only when pyproject.toml (the dependencies) changes. The code is editable.
STAMP="$VENV/.frexport-demo-$("$PY" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()[:16])' pyproject.toml)"
if [ ! -e "$STAMP" ] || ! "$VENV/bin/frexport" --version >/dev/null 2>&1; then
  echo "== installing frexport and its runtime dependencies into $VENV (pip install -e .)"
  [ -x "$VENV/bin/python" ] || quiet "$PY" -m venv "$VENV"
  quiet "$VENV/bin/python" -m pip install --disable-pip-version-check -e .
  rm -f "$VENV"/.frexport-demo-*
  : >"$STAMP"
fi
echo "== $("$VENV/bin/frexport" --version)"
echo "== frexport analyze $DUMPS"
"$VENV/bin/frexport" analyze "$DUMPS" || true
echo
echo "== frexport serve on $DUMPS: metrics at http://$LISTEN/metrics (Ctrl-C to stop)"
echo "   the stalled rank and the ranks it blocks; in another terminal:"
echo "   curl -s http://$LISTEN/metrics | grep -E '^frexport_(rank_status|rank_stall_seconds|findings)' | grep -v ' 0.0\$'"
exec "$VENV/bin/frexport" serve --dump-dir "$DUMPS" --listen "$LISTEN" --stall-after 5s
