"""The image is built with the compiled scanner: its build stage has a C compiler and Python's headers,
the build context carries setup.py and the scanner's sources, the wheel built there is what the venv
installs, and the build fails where the scanner did not compile (an image on the pure path decoded at
about 2.5x the CPU). The image itself is built and run in tests/e2e/test_image.py (buildah; no Docker
daemon is needed); this reads the Dockerfile's text."""

import fnmatch
import re

from tests.support.paths import ROOT

TEXT = (ROOT / "Dockerfile").read_text()


def _stages() -> list[str]:
    return re.split(r"^FROM ", TEXT, flags=re.M)[1:]


def test_the_build_stage_compiles_the_scanner():
    build, final = _stages()
    assert build.startswith("${PYTHON_IMAGE} AS build")
    assert re.search(r"apt-get install -y --no-install-recommends gcc libc6-dev", build)
    assert "python3-dev" in build and "Python.h" in build  # a Debian python3 base has no headers
    assert re.search(r"^COPY pyproject\.toml setup\.py MANIFEST\.in README\.md \./$", build, re.M)
    assert re.search(r"^COPY frexport \./frexport$", build, re.M)
    assert "pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ." in build
    assert 'pip install --no-cache-dir "${WHEEL}[otlp,auth]"' in build
    assert '/opt/frexport/bin/frexport --version | grep -F "(compiled scanner: yes)"' in build  # else it fails
    # the compiler stays behind: the final stage copies the venv only
    assert "gcc" not in final and "apt-get" not in final
    assert "COPY --from=build /opt/frexport /opt/frexport" in final


def _ignored(path: str) -> bool:
    """.dockerignore's verdict (its last matching pattern wins; `!` re-includes)."""
    verdict = False
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate, pattern = line.startswith("!"), line.lstrip("!").rstrip("/")
        pattern = pattern.replace("**/", "*/") if "**/" in pattern else pattern
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/") or \
                fnmatch.fnmatch(path, pattern.replace("*/", "")):
            verdict = not negate
    return verdict


def test_the_build_context_carries_the_scanner_sources_and_no_built_module():
    for path in ("setup.py", "MANIFEST.in", "pyproject.toml", "README.md", "frexport/decode/_scan.c",
                 "frexport/decode/_scan_fields.h", "frexport/decode/scanned.py"):
        assert not _ignored(path), path
    assert _ignored("frexport/decode/_scan.cpython-311-x86_64-linux-gnu.so")  # built in the image, not copied
    assert _ignored("tests/unit/test_version.py") and _ignored(".venv")
