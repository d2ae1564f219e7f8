"""frexport inject on workloads read back from the cluster: the server's fields go, and stderr says,
per kind, what it takes for the sidecar to reach the pods."""

import io
import sys

import pytest
import yaml

from frexport.cli.main import main
from frexport.inject.existing import how_to_apply, strip_server_fields
from tests.support import paths

EXISTING = paths.FIXTURES / "k8s" / "existing.yaml"


def _run(monkeypatch, capsys, text: str) -> tuple[list[dict], str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["inject", "-"]) == 0
    out = capsys.readouterr()
    return [d for d in yaml.safe_load_all(out.out) if d], out.err


def test_a_running_job_loses_what_the_server_set_and_keeps_what_the_user_wrote(monkeypatch, capsys):
    job, deploy = _run(monkeypatch, capsys, EXISTING.read_text())[0]
    meta = job["metadata"]
    assert set(meta) == {"name", "namespace", "labels", "annotations"} and "status" not in job
    assert meta["annotations"] == {"batch.kubernetes.io/job-tracking": ""}
    assert "selector" not in job["spec"]  # generated from the old uid: the server would refuse it
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels == {"team": "vision", "frexport.io/sidecar": "true"}
    assert "creationTimestamp" not in job["spec"]["template"]["metadata"]
    assert job["spec"]["completions"] == 2 and job["spec"]["completionMode"] == "Indexed"
    assert "uid" not in yaml.safe_dump(job).replace("controller-uid", "")  # no trace of the old Job's identity
    assert deploy["spec"]["selector"] == {"matchLabels": {"app": "serve-eval"}}  # a Deployment's is the user's
    assert "annotations" not in deploy["metadata"]  # its revision was the server's


def test_stderr_says_per_kind_what_it_takes(monkeypatch, capsys):
    _, err = _run(monkeypatch, capsys, EXISTING.read_text())
    assert "Job train: its pod template cannot change while it runs" in err
    assert "kubectl replace --force -f train.yaml" in err
    assert "Deployment serve-eval: save this output (> serve-eval.yaml) and kubectl apply -f serve-eval.yaml: " \
           "it rolls its pods" in err


def test_a_new_manifest_gets_no_advice_and_a_manual_selector_is_kept(monkeypatch, capsys):
    docs = [d for d in yaml.safe_load_all(EXISTING.read_text()) if d]
    job = docs[0]
    strip_server_fields(job)
    _, err = _run(monkeypatch, capsys, yaml.safe_dump(job))
    assert "replace" not in err and err.strip() == "frexport inject: 1 pod template(s) patched"
    manual = {"kind": "Job", "metadata": {"name": "j", "uid": "u"},
              "spec": {"manualSelector": True, "selector": {"matchLabels": {"job-name": "j"}},
                       "template": {"metadata": {"labels": {"job-name": "j"}}, "spec": {}}}}
    strip_server_fields(manual)
    assert manual["spec"]["selector"] and manual["spec"]["template"]["metadata"]["labels"] == {"job-name": "j"}


def test_a_list_from_kubectl_get_is_stripped_item_by_item(monkeypatch, capsys):
    items = [d for d in yaml.safe_load_all(EXISTING.read_text()) if d]
    listed = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}
    (out,), err = _run(monkeypatch, capsys, yaml.safe_dump(listed))
    assert [set(i["metadata"]) >= {"name"} and "uid" not in i["metadata"] for i in out["items"]] == [True, True]
    assert err.count("kubectl ") == 2


@pytest.mark.parametrize("kind, spec, expected", [
    ("PyTorchJob", {}, "replace --force"), ("JobSet", {}, "replace --force"), ("Pod", {}, "replace --force"),
    ("StatefulSet", {}, "rolls its pods"), ("StatefulSet", {"updateStrategy": {"type": "OnDelete"}},
                                            "then delete its pods"),
    ("CronJob", {}, "the next Job it starts"), ("ClusterTrainingRuntime", {}, "TrainJobs created afterwards"),
])
def test_advice_per_kind(kind, spec, expected):
    assert expected in how_to_apply({"kind": kind, "metadata": {"name": "w"}, "spec": spec})
