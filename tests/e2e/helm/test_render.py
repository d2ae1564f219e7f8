"""helm lint, template and package; every variant against Kubernetes' own
schemas (kubernetes-validate --strict) and the prometheus-operator CRD schemas.

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import tarfile

import pytest

from tests.support.helm_tools import (
    CHART,
    CI_VALUES,
    DASHBOARDS,
    RULES,
    VARIANTS,
    kubernetes_validate,
    kubernetes_validate_versions,
    validate_crds,
)


@pytest.mark.parametrize("values", CI_VALUES, ids=VARIANTS)
def test_helm_lint_strict(helm, values):
    out = helm.run("lint", "--strict", str(CHART), "-f", str(values))
    assert "0 chart(s) failed" in out.stdout


def test_every_variant_renders_what_it_should(rendered):
    kinds = {v: sorted(d["kind"] for d in docs) for v, (_, docs) in rendered.items()}
    n = len(DASHBOARDS)
    assert kinds["minimal"] == sorted(["PodMonitor", "PrometheusRule"] + ["ConfigMap"] * n)
    assert kinds["monitors-off"] == []
    for v in ("native-sidecar-off", "pyspy-on", "example", "default-example"):
        expected = ["PodMonitor", "PrometheusRule", "Job", "Service", "ConfigMap"] + ["ConfigMap"] * n
        assert kinds[v] == sorted(expected), v
    assert kinds["otlp-on"] == sorted(["ServiceMonitor", "Service", "PrometheusRule", "Job", "Service", "ConfigMap"]
                                      + ["ConfigMap"] * n)


def test_package_carries_the_rules_and_dashboards(helm, tmp_path):
    """files/frexport-rules.yaml and dashboards/ are copies of the one source (scripts/sync-chart-files.py)."""
    helm.run("package", str(CHART), "-d", str(tmp_path))
    with tarfile.open(tmp_path / "frexport-0.1.0.tgz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        rules = members["frexport/files/frexport-rules.yaml"]
        assert rules.isfile()
        assert tar.extractfile(rules).read() == RULES.read_bytes()
        for d in DASHBOARDS:
            assert tar.extractfile(members[f"frexport/dashboards/{d.name}"]).read() == d.read_bytes()
        assert not [n for n in members if n.endswith(".py") and "/dashboards/" in n], "generator left out"
        for name in ("Chart.yaml", "values.yaml", "values.schema.json", "README.md", "templates/NOTES.txt"):
            assert f"frexport/{name}" in members


# --- schemas: Kubernetes core kinds, prometheus-operator CRDs -------------------------------------------

def test_kubernetes_validate_strict_1_29_and_newest(rendered):
    versions = kubernetes_validate_versions()
    newest = versions[-1]
    assert "1.29.0" in versions
    files = [p for p, docs in rendered.values() if any(not d["apiVersion"].startswith("monitoring.coreos.com/")
                                                       for d in docs)]
    core = sum(1 for _, docs in rendered.values() for d in docs if not d["apiVersion"].startswith("monitoring."))
    for version in ("1.29.0", newest):
        out = kubernetes_validate(files, version)
        assert out.returncode == 0, f"kubernetes-validate --strict -k {version}:\n{out.stdout}\n{out.stderr}"
        assert out.stdout.count("INFO") >= core, out.stdout  # one line per validated core object
        assert "ERROR" not in out.stdout


def test_kubernetes_validate_catches_an_unknown_field(rendered, tmp_path):
    """Negative control: strict validation rejects a field Kubernetes does not know."""
    path, _ = rendered["example"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("restartPolicy: Always",
                                            "restartPolicy: Always\n          bogusField: 1", 1))
    out = kubernetes_validate([bad], "1.29.0")
    assert out.returncode != 0 and "bogusField" in out.stdout


def test_monitoring_objects_match_the_crd_schemas(rendered, tmp_path):
    files = [p for p, docs in rendered.values()]
    out = validate_crds(files)
    assert out.returncode == 0, out.stdout + out.stderr
    expected = sum(1 for _, docs in rendered.values() for d in docs if d["apiVersion"].startswith("monitoring."))
    assert f"checked {expected}" in out.stdout and expected >= 8
    # Negative control: a malformed duration is caught.
    bad = tmp_path / "bad.yaml"
    bad.write_text(rendered["minimal"][0].read_text().replace("interval: 15s", "interval: five minutes"))
    out = validate_crds([bad])
    assert out.returncode == 1 and "INVALID" in out.stdout and "interval" in out.stdout
