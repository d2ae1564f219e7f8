"""The values schema, the Kubernetes version guards, NOTES and the README.

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import shutil

import pytest
import yaml

from tests.support.helm_tools import (
    CHART,
    docs_of,
    flatten,
    one,
)


@pytest.mark.parametrize("setting, message", [
    ("sidecar.port=notanint", "sidecar.port"),
    ("sidecar.mode=classic", "mode"),
    ("sidecar.native=maybe", "sidecar.native"),
    ("traces.otlp.protocol=udp", "traces.otlp.protocol"),
    ("podMonitor.interval=5 minutes", "podMonitor.interval"),
    ("image.digest=latest", "image.digest"),
    ("example.nodes=0", "example.nodes"),
    ("sidecar.logFormat=xml", "sidecar.logFormat"),
    ("jobLabel=not a label", "jobLabel"),
    ("worldSize=0", "worldSize"),
])
def test_schema_rejects_bad_values(helm, setting, message):
    out = helm.run("lint", str(CHART), "--set", setting, check=False)
    assert out.returncode != 0, f"helm lint accepted {setting}"
    assert message in out.stdout + out.stderr


def test_native_sidecar_needs_kubernetes_1_29(helm):
    out = helm.run("template", "t", str(CHART), "--set", "example.enabled=true", "--kube-version", "1.28.9",
                   check=False)
    assert out.returncode != 0 and "sidecar.native needs Kubernetes >= 1.29" in out.stderr
    helm.template("--set", "example.enabled=true", "--set", "sidecar.native=false", "--kube-version", "1.28.9")
    helm.template("--set", "example.enabled=true", "--kube-version", "1.29.0")


def test_notes_name_the_release_label_trap(helm, tmp_path):
    chart = tmp_path / "frexport"
    shutil.copytree(CHART, chart, symlinks=False)
    # NOTES.txt renders only on install; its body is the named template frexport.notes.
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n"
        "  notes: {{ include \"frexport.notes\" . | toJson }}\n")

    def notes(*a):
        return one(docs_of(helm.template("--show-only", "templates/zz-notes.yaml", *a, chart=chart)),
                   "ConfigMap")["data"]["notes"]

    text = notes()
    assert "release: <kube-prometheus-stack release name>" in text
    assert "port-forward" in text and "curl -s http://127.0.0.1:9464/metrics" in text
    labelled = notes("--set", "podMonitor.additionalLabels.release=kps", "--set",
                     "prometheusRule.additionalLabels.release=kps")
    assert "WARNING" not in labelled
    assert (CHART / "templates" / "NOTES.txt").read_text().strip() == '{{ include "frexport.notes" . }}'


def test_readme_documents_every_value():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    missing = [k for k in flatten(values) if f"`{k}`" not in readme]
    assert not missing, f"values without a row in helm/frexport/README.md: {missing}"
    assert "release: kube-prometheus-stack" in readme and "Building and pushing the image" in readme


def test_servicemonitor_with_a_native_sidecar_is_refused_before_1_32(helm):
    """kubernetes#127958: before 1.32 an init container's named port is not in EndpointSlices, so a
    ServiceMonitor finds no endpoint for a native sidecar. Refused with the reason, not silently empty."""
    args = ("--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=false")
    for version in ("1.29.0", "1.31.9"):
        out = helm.run("template", "t", str(CHART), *args, "--kube-version", version, check=False)
        assert out.returncode != 0 and "kubernetes#127958" in out.stderr and "podMonitor.enabled=true" in out.stderr
    helm.template(*args, "--kube-version", "1.32.0")
    helm.template(*args, "--set", "sidecar.native=false", "--kube-version", "1.29.0")  # a classic sidecar's port is
