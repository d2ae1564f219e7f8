#!/usr/bin/env bash
# Set up .venv with frexport, its test tools and torch (CPU) for the real-job tests. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q -e '.[test]' 2>&1 | grep -v "^WARNING: Location" || true
# System tools the tests use for real: promtool and the Prometheus server (Debian's package).
if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    echo "setup: please install Debian's 'prometheus' package (promtool, prometheus)" >&2
  fi
fi
# Real PyTorch for the tests that run gloo jobs (CPU build; the sidecar itself never imports torch).
if [ "${FREXPORT_SKIP_TORCH:-0}" != 1 ]; then
  .venv/bin/python -c 'import torch' 2>/dev/null || \
    .venv/bin/python -m pip install -q torch==2.13.0 2>&1 | grep -v "^WARNING: Location" || true
fi
