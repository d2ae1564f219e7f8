"""Fixtures of the chart tests: the real helm binary and every ci/*-values.yaml rendered once."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.helm_tools import CI_VALUES, HELM_VERSION, VARIANTS, Helm, docs_of


@pytest.fixture(scope="session")
def helm(tmp_path_factory):
    h = Helm(tmp_path_factory.mktemp("helm-home"))
    version = h.run("version", "--short").stdout.strip()
    assert version.startswith(HELM_VERSION + "+"), f"{h.path} is {version}, not helm {HELM_VERSION}"
    return h


@pytest.fixture(scope="session")
def rendered(helm, tmp_path_factory):
    """variant -> (rendered file, documents) for every ci/*-values.yaml."""
    out_dir = tmp_path_factory.mktemp("rendered")
    result = {}
    for variant, values in zip(VARIANTS, CI_VALUES):
        text = helm.template("-f", str(values))
        path = out_dir / f"{variant}.yaml"
        path.write_text(text)
        result[variant] = (path, docs_of(text))
    # Plus the example with every other value at its default.
    text = helm.template("--set", "example.enabled=true")
    (out_dir / "default-example.yaml").write_text(text)
    result["default-example"] = (out_dir / "default-example.yaml", docs_of(text))
    assert {"minimal", "native-sidecar-off", "monitors-off", "pyspy-on", "otlp-on", "example"} <= set(result)
    return result


@pytest.fixture
def tls_dir(tmp_path) -> Path:
    d = tmp_path / "tls-secret"
    d.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "tls.key"),
                    "-out", str(d / "tls.crt"), "-days", "2", "-subj", "/CN=frexport-metrics",
                    "-addext", "subjectAltName=DNS:frexport-metrics"], check=True, capture_output=True)
    (d / "ca.crt").write_bytes((d / "tls.crt").read_bytes())
    return d
