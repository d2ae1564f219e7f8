"""The chart as a dependency of a user's chart (named templates).

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import shutil

import pytest
import yaml

from tests.support.helm_tools import (
    CHART,
    container,
    docs_of,
    env_map,
    kubernetes_validate,
    one,
    pod_spec,
    sidecar_of,
)

PARENT_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-train
spec:
  completionMode: Indexed
  completions: 2
  parallelism: 2
  template:
    metadata:
      labels: {{- include "frexport.pod.labels" $ | nindent 8 }}
    spec:
      restartPolicy: Never
      securityContext: {{- include "frexport.pod.securityContext" $ | nindent 8 }}
      {{- include "frexport.pod.shareProcessNamespace" $ | nindent 6 }}
      initContainers: {{- include "frexport.sidecar.initContainers" $ | nindent 8 }}
      containers:
        - name: trainer
          image: my-trainer:1
          command: {{- include "frexport.trainer.command" (dict "root" $ "command" (list "torchrun" "train.py")) | nindent 12 }}
          env: {{- include "frexport.trainer.env" $ | nindent 12 }}
          volumeMounts: {{- include "frexport.trainer.volumeMounts" $ | nindent 12 }}
        {{- include "frexport.sidecar.containers" $ | nindent 8 }}
      volumes: {{- include "frexport.sidecar.volumes" $ | nindent 8 }}
"""


@pytest.mark.parametrize("native", [True, False], ids=["native", "classic"])
def test_named_templates_from_a_parent_chart(helm, tmp_path, native):
    parent = tmp_path / "trainer"
    (parent / "templates").mkdir(parents=True)
    (parent / "Chart.yaml").write_text(
        "apiVersion: v2\nname: trainer\nversion: 1.2.3\nappVersion: \"9.9.9\"\n"
        "dependencies:\n  - name: frexport\n    version: 0.1.0\n")
    (parent / "values.yaml").write_text(yaml.safe_dump({"frexport": {
        "sharedDir": "/mnt/fr", "sidecar": {"port": 9500, "native": native},
        "podMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}, "dashboards": {"enabled": False}}}))
    (parent / "templates" / "job.yaml").write_text(PARENT_JOB)
    shutil.copytree(CHART, parent / "charts" / "frexport", symlinks=True)
    text = helm.template(chart=parent)
    docs = docs_of(text)
    assert [d["kind"] for d in docs] == ["Job"]
    spec = pod_spec(docs)
    sidecar, is_native = sidecar_of(spec)
    assert is_native == native
    assert sidecar["image"] == "ghcr.io/frexport/frexport:0.1.0"  # the frexport chart's appVersion, not 9.9.9
    assert sidecar["args"][:9] == ["serve", "--sockets-dir", "/mnt/fr", "--dump-dir", "/mnt/fr/dumps",
                                   "--evidence-dir", "/mnt/fr/evidence", "--listen", "[::]:9500"]
    assert env_map(container(spec["containers"], "trainer"))["FREXPORT_AGENT_DIR"] == "/mnt/fr"
    assert one(docs, "Job")["spec"]["template"]["metadata"]["labels"] == {"frexport.io/sidecar": "true"}
    path = tmp_path / "parent.yaml"
    path.write_text(text)
    out = kubernetes_validate([path], "1.29.0")
    assert out.returncode == 0, out.stdout + out.stderr
