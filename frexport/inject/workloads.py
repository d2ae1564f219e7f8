"""Find the pod templates of a Kubernetes object and the label that names its training job.

Every kind's pods are told apart by a label their controller sets: the Job controller sets
batch.kubernetes.io/job-name, JobSet jobset.sigs.k8s.io/jobset-name (its pods also carry their
child Job's name, so it comes first), the Kubeflow training operator training.kubeflow.org/job-name.
Kubeflow Trainer v2 runs a TrainJob as a JobSet of the TrainJob's name, from the pod templates of its
TrainingRuntime or ClusterTrainingRuntime: those are patched like a JobSet's (trainer.py).
Kinds without one (Deployment, StatefulSet, a bare Pod) get frexport.io/job set to the workload's
name. An annotation frexport.io/job on the object or its pod template overrides all of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from frexport.inject import trainer
from frexport.inject.pod import JOB_LABEL, InjectError, Settings, inject_pod

OWNER_LABELS = ("jobset.sigs.k8s.io/jobset-name", "training.kubeflow.org/job-name", "batch.kubernetes.io/job-name")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_TEMPLATE_KINDS = {"Job", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"}
_KUBEFLOW_REPLICAS = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "MPIJob": "mpiReplicaSpecs",
                      "XGBoostJob": "xgbReplicaSpecs", "PaddleJob": "paddleReplicaSpecs"}


def is_workload(obj: dict) -> bool:
    kind = obj.get("kind") or ""
    return kind in _TEMPLATE_KINDS or kind in _KUBEFLOW_REPLICAS or kind in ("Pod", "CronJob", "JobSet") or (
        kind in trainer.KINDS) or (
        kind.endswith("List") and isinstance(obj.get("items"), list))


def templates(obj: dict) -> Iterator[tuple[dict, dict, str]]:
    """(pod metadata, pod spec, owner label key or '') of every pod template in `obj`."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Pod":
        labels = (obj.get("metadata") or {}).get("labels") or {}
        owner = next((k for k in OWNER_LABELS if k in labels), "")
        yield obj.setdefault("metadata", {}), obj.setdefault("spec", {}), owner
    elif kind in _TEMPLATE_KINDS:
        yield *_template(spec.get("template")), "batch.kubernetes.io/job-name" if kind == "Job" else ""
    elif kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        yield *_template(job.get("template")), "batch.kubernetes.io/job-name"
    elif kind == "JobSet":
        for rj in spec.get("replicatedJobs") or []:
            job = ((rj.get("template") or {}).get("spec")) or {}
            yield *_template(job.get("template")), "jobset.sigs.k8s.io/jobset-name"
    elif kind in trainer.RUNTIMES:
        for job_spec in trainer.runtime_job_specs(obj):
            yield *_template(job_spec.get("template")), "jobset.sigs.k8s.io/jobset-name"
    elif kind in _KUBEFLOW_REPLICAS:
        for replica in (spec.get(_KUBEFLOW_REPLICAS[kind]) or {}).values():
            yield *_template((replica or {}).get("template")), "training.kubeflow.org/job-name"
    else:
        raise InjectError(f"{kind or 'an object without kind'}: not a workload frexport can be added to")


def _template(t: dict | None) -> tuple[dict, dict]:
    if not isinstance(t, dict):
        raise InjectError("a pod template is missing")
    return t.setdefault("metadata", {}), t.setdefault("spec", {})


def identity(obj: dict, pod_meta: dict, owner: str) -> tuple[str, str | None]:
    """(label key FREXPORT_JOB_ID and the monitors read, value to set on the pods or None)."""
    for notes in ((pod_meta.get("annotations") or {}), ((obj.get("metadata") or {}).get("annotations") or {})):
        if JOB_LABEL in notes:
            return JOB_LABEL, _label_value(str(notes[JOB_LABEL]))
    if owner:
        return owner, None
    meta = obj.get("metadata") or {}
    name = meta.get("name") or (meta.get("generateName") or "").rstrip("-")
    if not name:
        raise InjectError(f"{obj.get('kind')} has no name: set the annotation {JOB_LABEL}")
    return JOB_LABEL, _label_value(name)


def _label_value(v: str) -> str:
    if len(v) > 63 or not _LABEL_VALUE.match(v):
        raise InjectError(f"{JOB_LABEL}={v!r} is not a valid label value (63 characters: letters, digits, -_.)")
    return v


def inject_object(obj: dict, s: Settings) -> int:
    """Patch every pod template of `obj` (a List's items too); returns how many were patched."""
    if (obj.get("kind") or "").endswith("List") and isinstance(obj.get("items"), list):
        return sum(inject_object(item, s) for item in obj.get("items") or [])
    if not is_workload(obj):
        return 0  # a Service, a ConfigMap...: passed through as it is
    if obj.get("kind") == trainer.TRAINJOB:
        return trainer.mark_trainjob(obj)
    n = 0
    for meta, spec, owner in list(templates(obj)):
        n += inject_pod(meta, spec, s, identity(obj, meta, owner))
    return n
