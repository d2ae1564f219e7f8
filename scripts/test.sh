#!/usr/bin/env bash
# Set up everything the tests need, then run them all.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
