#!/usr/bin/env bash
# Set up everything the tests need, then run them all.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff check --quiet . || { echo "test: ruff found problems (see above)" >&2; exit 1; }
.venv/bin/python -m mypy frexport || { echo "test: mypy found type errors in frexport/ (see above)" >&2; exit 1; }
HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-thorough} exec .venv/bin/python -m pytest -q "$@"
