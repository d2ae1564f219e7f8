"""PodMonitor, ServiceMonitor, dashboards and labels.

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.support.helm_tools import (
    CHART,
    DASHBOARDS,
    docs_of,
    find,
    one,
)

# `job` = the first non-empty of the labels that name a training job, whatever its kind.
JOB_RELABEL = {"sourceLabels": ["__meta_kubernetes_pod_label_frexport_io_job",
                                "__meta_kubernetes_pod_label_training_kubeflow_org_job_name",
                                "__meta_kubernetes_pod_label_jobset_sigs_k8s_io_jobset_name",
                                "__meta_kubernetes_pod_label_batch_kubernetes_io_job_name"],
               "separator": ";", "regex": "^;*([^;]+).*$", "targetLabel": "job", "replacement": "$1",
               "action": "replace"}


def test_podmonitor_selects_the_sidecar_pods_and_names_the_job(rendered):
    docs = rendered["example"][1]
    pm = one(docs, "PodMonitor")
    assert "jobLabel" not in pm["spec"]  # one label cannot name the job of every kind: JOB_RELABEL does
    pod_labels = one(docs, "Job")["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ep = pm["spec"]["podMetricsEndpoints"][0]
    assert ep["port"] == "frexport-metrics" and ep["path"] == "/metrics"
    assert ep["interval"] == "15s" and ep["scrapeTimeout"] == "10s"
    assert ep["relabelings"] == [JOB_RELABEL, {"sourceLabels": ["__meta_kubernetes_pod_node_name"],
                                               "targetLabel": "node"}]
    assert ep["metricRelabelings"][0]["action"] == "drop"
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["ml"]}
    assert pm["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_servicemonitor_and_its_service(rendered):
    docs = rendered["otlp-on"][1]
    sm = one(docs, "ServiceMonitor")
    svc = one(docs, "Service", "t-frexport-metrics")
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    pod_labels = one(docs, "Job")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items() and svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["ports"][0]["targetPort"] == "frexport-metrics"
    assert sm["spec"]["endpoints"][0]["relabelings"][0] == JOB_RELABEL
    assert not find(docs, "PodMonitor")


def test_additional_labels(rendered):
    docs = rendered["example"][1]
    for d in [one(docs, "PodMonitor"), one(docs, "PrometheusRule")] + [
            d for d in find(docs, "ConfigMap") if "grafana_dashboard" in d["metadata"]["labels"]]:
        assert d["metadata"]["labels"]["release"] == "kube-prometheus-stack", d["metadata"]["name"]
    for d in rendered["minimal"][1]:
        assert "release" not in d["metadata"]["labels"]


def test_one_dashboard_configmap_per_json(rendered):
    assert len(DASHBOARDS) >= 1, "dashboards/*.json"
    cms = [d for d in find(rendered["minimal"][1], "ConfigMap")]
    assert len(cms) == len(DASHBOARDS)
    by_key = {k: (cm, v) for cm in cms for k, v in cm["data"].items()}
    for path in DASHBOARDS:
        cm, text = by_key[path.name]
        assert text == path.read_text() and json.loads(text)
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert "annotations" not in cm["metadata"]
    for cm in find(rendered["example"][1], "ConfigMap"):
        if "grafana_dashboard" in cm["metadata"]["labels"]:
            assert cm["metadata"]["annotations"] == {"grafana_folder": "Training"}


def test_dashboards_found_in_the_folder(helm, tmp_path):
    """A new dashboards/*.json becomes a ConfigMap without touching the chart."""
    chart = tmp_path / "frexport"
    shutil.copytree(CHART, chart, symlinks=False)
    (chart / "dashboards" / "extra_board.json").write_text('{"title": "extra", "panels": []}')
    docs = docs_of(helm.template("--show-only", "templates/dashboards.yaml", "--set", "dashboards.label=dash",
                                 "--set", "dashboards.labelValue=yes", chart=chart))
    cm = one(docs, "ConfigMap", "t-frexport-extra-board")
    assert cm["data"] == {"extra_board.json": '{"title": "extra", "panels": []}'}
    assert cm["metadata"]["labels"]["dash"] == "yes"
    assert len(docs) == len(DASHBOARDS) + 1


@pytest.mark.parametrize("pod_labels, job", [
    ({"training.kubeflow.org/job-name": "resnet", "frexport.io/sidecar": "true"}, "resnet"),
    ({"jobset.sigs.k8s.io/jobset-name": "gpt", "batch.kubernetes.io/job-name": "gpt-workers-0"}, "gpt"),
    ({"batch.kubernetes.io/job-name": "llm"}, "llm"),
    ({"frexport.io/job": "run-7", "batch.kubernetes.io/job-name": "llm"}, "run-7"),
    ({"app": "x"}, None),
])
def test_job_relabeling_names_each_kinds_job(pod_labels, job):
    """Prometheus' relabel semantics (join with the separator, full-anchored regex, $1) applied to
    the meta labels of a pod of each kind: JobSet pods also carry their child Job's name."""
    metas = [pod_labels.get(k, "") for k in ("frexport.io/job", "training.kubeflow.org/job-name",
                                                 "jobset.sigs.k8s.io/jobset-name", "batch.kubernetes.io/job-name")]
    m = re.fullmatch(JOB_RELABEL["regex"], JOB_RELABEL["separator"].join(metas))
    assert (m.group(1) if m else None) == job
