"""The chart split by lifetime: the shared objects (monitors, rules, dashboards) come from the one
release installed per namespace; workload charts that vendor the chart render only their pods.

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from tests.e2e.helm.test_dependency import PARENT_JOB
from tests.support.helm_tools import CHART, Helm, docs_of, find, one


def workload_chart(tmp_path: Path, name: str, frexport_values: dict | None = None) -> Path:
    """A user's chart with helm/frexport copied alone into charts/ (symlinks kept as they are: there are none)."""
    parent = tmp_path / name
    (parent / "templates").mkdir(parents=True)
    (parent / "Chart.yaml").write_text(
        f"apiVersion: v2\nname: {name}\nversion: 1.0.0\n"
        "dependencies:\n  - name: frexport\n    version: 0.1.0\n    repository: file://../frexport\n")
    (parent / "values.yaml").write_text(yaml.safe_dump({"frexport": frexport_values or {}}))
    (parent / "templates" / "job.yaml").write_text(PARENT_JOB)
    shutil.copytree(CHART, parent / "charts" / "frexport", symlinks=True)
    return parent


def dashboard_uids(docs: list[dict]) -> list[str]:
    return [json.loads(text)["uid"] for cm in find(docs, "ConfigMap") for key, text in cm.get("data", {}).items()
            if key.endswith(".json")]


def test_readme_procedure_with_two_workloads_renders_one_set_of_shared_objects(helm: Helm, tmp_path):
    # README "Install": once per namespace ...
    shared = docs_of(helm.template("--set", "podMonitor.additionalLabels.release=kube-prometheus-stack",
                                   release="frexport"))
    # ... then every workload vendors the chart (no frexport values needed).
    a = docs_of(helm.template(chart=workload_chart(tmp_path, "trainer-a"), release="a"))
    b = docs_of(helm.template(chart=workload_chart(tmp_path, "trainer-b"), release="b"))
    assert [d["kind"] for d in a] == [d["kind"] for d in b] == ["Job"]
    everything = shared + a + b
    pm = one(everything, "PodMonitor")
    one(everything, "PrometheusRule")
    assert not find(everything, "ServiceMonitor")
    uids = dashboard_uids(everything)
    assert uids and len(uids) == len(set(uids))
    for job in (one(a, "Job"), one(b, "Job")):  # the one PodMonitor scrapes both workloads
        assert pm["spec"]["selector"]["matchLabels"].items() <= job["spec"]["template"]["metadata"]["labels"].items()


def test_scope_overrides_the_guess(helm: Helm, tmp_path):
    kinds = {d["kind"] for d in docs_of(helm.template(
        chart=workload_chart(tmp_path, "all-in-one", {"scope": "shared"})))}
    assert {"Job", "PodMonitor", "PrometheusRule", "ConfigMap"} <= kinds  # one chart that does both
    assert docs_of(helm.template("--set", "scope=workload")) == []
    example = docs_of(helm.template("--set", "scope=workload", "--set", "example.enabled=true"))
    assert {d["kind"] for d in example} == {"Job", "Service", "ConfigMap"}  # the example is a workload
    out = helm.run("lint", str(CHART), "--set", "scope=cluster", check=False)
    assert out.returncode != 0 and "scope" in out.stdout + out.stderr
