"""The sidecar image's Dockerfile.

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import re
import subprocess

from tests.support.helm_tools import (
    HADOLINT,
    ROOT,
    require,
)


def test_dockerfile_passes_hadolint_and_matches_the_chart():
    """The Dockerfile is linted (hadolint) and checked against what the chart expects (the image itself
    is built and run in tests/e2e/test_image.py)."""
    out = subprocess.run([str(require(HADOLINT, "hadolint")), str(ROOT / "Dockerfile")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11\.\d+-slim-bookworm$", text, re.M)  # an exact tag
    assert "USER 65532:65532" in text and "--uid 65532" in text
    assert 'ENTRYPOINT ["frexport"]' in text and 'CMD ["serve", "--help"]' in text
    assert "pip install --no-cache-dir" in text and "EXPOSE 9464" in text
    # the image never runs pip or setuptools: the venv's and the base's are removed
    assert "/opt/frexport/bin/python -m pip uninstall --yes pip setuptools" in text
    assert "python3 -m pip uninstall --yes --no-cache-dir pip setuptools wheel" in text
    assert "scripts/build-image.py" in text and (ROOT / "scripts" / "build-image.py").is_file()
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*"):][:4] == ["*", "!pyproject.toml", "!README.md", "!frexport/"]
