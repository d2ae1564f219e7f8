"""Kubeflow Trainer v2: runtimes patched, TrainJobs marked for the webhook, both strictly valid against
the real CRDs (tests/fixtures/k8s/crds), and the webhook's pod path on the pods a TrainJob creates."""

import base64
import copy
import io
import json
import sys

import pytest
import yaml

from frexport.cli.main import main
from frexport.inject.admission import review
from frexport.inject.pod import SIDECAR, Settings
from frexport.inject.workloads import inject_object, templates
from tests.support import paths
from tests.support.crd_schema import crd_for, errors, fixture

TRAINER = paths.FIXTURES / "k8s" / "trainer.yaml"


def _inject_cli(monkeypatch, capsys, text: str) -> tuple[list[dict], str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["inject", "-"]) == 0
    out = capsys.readouterr()
    return [d for d in yaml.safe_load_all(out.out) if d], out.err


def _by_kind(docs):
    return {d["kind"]: d for d in docs}


def test_injected_runtimes_and_trainjob_are_valid_against_the_real_crds(monkeypatch, capsys):
    docs, _ = _inject_cli(monkeypatch, capsys, TRAINER.read_text())
    assert [d["kind"] for d in docs] == ["ClusterTrainingRuntime", "TrainingRuntime", "TrainJob"]
    for d in docs:
        assert errors(d, crd_for(d["kind"])) == [], d["kind"]
    # Negative controls: the strict schema catches an unknown field deep in the pod template...
    bad = copy.deepcopy(_by_kind(docs)["TrainingRuntime"])
    rj = bad["spec"]["template"]["spec"]["replicatedJobs"][1]
    rj["template"]["spec"]["template"]["spec"]["initContainers"][0]["bogusField"] = 1
    assert any("bogusField" in e for e in errors(bad, crd_for("TrainingRuntime")))
    # ...and why a TrainJob cannot carry the sidecar itself: its runtime patches take no container image.
    job = copy.deepcopy(_by_kind(docs)["TrainJob"])
    pod_patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    pod_patch["template"]["spec"]["template"]["spec"] = {"initContainers": [{"name": SIDECAR, "image": "x"}]}
    assert any("'image' was unexpected" in e for e in errors(job, crd_for("TrainJob")))


def test_only_the_replicated_jobs_that_run_the_trainer_get_the_sidecar():
    runtime = _by_kind(fixture(TRAINER))["TrainingRuntime"]
    assert inject_object(runtime, Settings()) == 1
    init, node = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert "initContainers" not in init["template"]["spec"]["template"]["spec"]  # the dataset initializer
    pod = node["template"]["spec"]["template"]
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["frexport-init", SIDECAR]
    assert pod["spec"]["securityContext"]["fsGroup"] == 1000  # the runtime's own is kept
    # the TrainJob's JobSet has the TrainJob's name: its pods' jobset label names the job
    side = pod["spec"]["initContainers"][1]
    job_id = next(e for e in side["env"] if e["name"] == "FREXPORT_JOB_ID")
    assert job_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['jobset.sigs.k8s.io/jobset-name']"
    assert inject_object(runtime, Settings()) == 0  # twice changes nothing


def test_a_trainjob_read_back_loses_the_servers_fields_and_says_what_it_takes(monkeypatch, capsys):
    job = _by_kind(fixture(TRAINER))["TrainJob"]
    docs, err = _inject_cli(monkeypatch, capsys, yaml.safe_dump(job))
    out = docs[0]
    assert set(out["metadata"]) == {"name", "namespace"} and "status" not in out
    assert out["spec"]["trainer"] == job["spec"]["trainer"]
    assert "TrainJob llama-ft: marked for the admission webhook" in err
    assert "kubectl get clustertrainingruntime torch-distributed -o yaml | frexport inject -" in err
    assert "kubectl replace --force -f llama-ft.yaml" in err
    again, _ = _inject_cli(monkeypatch, capsys, yaml.safe_dump(out))
    assert again[0]["spec"]["runtimePatches"] == out["spec"]["runtimePatches"]  # one patch, not two


def _pod_of(trainjob: dict, runtime: dict) -> dict:
    """The trainer pod the controllers create: the runtime's 'node' template with the TrainJob's runtime
    patch merged by replicated-job name (the trainer's strategic merge), and the labels JobSet and Job set."""
    rjs = {rj["name"]: rj for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    pod = copy.deepcopy(rjs["node"]["template"]["spec"]["template"])
    for patch in trainjob["spec"]["runtimePatches"]:
        for rj in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            assert rj["name"] in rjs  # the patch targets a replicated job the runtime has
            meta = rj["template"]["spec"]["template"]["metadata"]
            pod.setdefault("metadata", {}).setdefault("annotations", {}).update(meta["annotations"])
    name = trainjob["metadata"]["name"]
    pod["metadata"]["labels"] = {**rjs["node"]["template"]["metadata"]["labels"],
                                 "jobset.sigs.k8s.io/jobset-name": name,
                                 "jobset.sigs.k8s.io/replicatedjob-name": "node",
                                 "batch.kubernetes.io/job-name": f"{name}-node-0"}
    pod["metadata"]["name"] = f"{name}-node-0-0-x7k2p"
    return {"apiVersion": "v1", "kind": "Pod", **pod}


def _apply(pod: dict, ops: list[dict]) -> dict:
    out = copy.deepcopy(pod)
    for op in ops:  # admission.json_patch only adds or replaces keys of metadata and spec
        part, *key = op["path"].strip("/").split("/")
        if key:
            out[part][key[0].replace("~1", "/").replace("~0", "~")] = op["value"]
        else:
            out[part] = op["value"]
    return out


@pytest.mark.parametrize("runtime_kind", ["ClusterTrainingRuntime", "TrainingRuntime"])
def test_the_webhook_injects_the_pods_of_a_marked_trainjob(monkeypatch, capsys, runtime_kind):
    docs = _by_kind(fixture(TRAINER))
    docs["TrainJob"]["spec"]["runtimeRef"].update(kind=runtime_kind, name=docs[runtime_kind]["metadata"]["name"])
    marked, _ = _inject_cli(monkeypatch, capsys, yaml.safe_dump(docs["TrainJob"]))
    pod = _pod_of(marked[0], docs[runtime_kind])
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": pod}}
    resp = review(json.dumps(body).encode(), Settings())["response"]
    assert resp["allowed"] and resp["patchType"] == "JSONPatch"
    patched = _apply(pod, json.loads(base64.b64decode(resp["patch"])))
    side = next(c for c in patched["spec"]["initContainers"] if c["name"] == SIDECAR)
    job_id = next(e for e in side["env"] if e["name"] == "FREXPORT_JOB_ID")["valueFrom"]["fieldRef"]["fieldPath"]
    assert job_id == "metadata.labels['jobset.sigs.k8s.io/jobset-name']"  # = the TrainJob's name
    assert patched["metadata"]["labels"]["frexport.io/sidecar"] == "true"
    # the patched pod's template, put back into the runtime, still satisfies the runtime's real CRD
    runtime = copy.deepcopy(docs[runtime_kind])
    (_, spec, _), = [t for t in templates(runtime)]
    spec.clear()
    spec.update(patched["spec"])
    assert errors(runtime, crd_for(runtime_kind)) == []
