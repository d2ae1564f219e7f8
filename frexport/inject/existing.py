"""A workload read back from the cluster (`kubectl get ... -o yaml`): what to drop, how to re-apply.

The API server adds fields that a re-created object must not carry: its identity (uid,
resourceVersion, generation, creationTimestamp), bookkeeping (managedFields, selfLink, status, the
kubectl last-applied annotation, a Deployment's revision) and, for a batch Job without a manual
selector, the selector and pod labels it generated from the old Job's uid: sent again, the server
refuses them ("selector not auto-generated"). They are dropped so the output can be applied again.

What it takes for the sidecar to reach the pods depends on the kind: a Job's, JobSet's or a Kubeflow
job's pod template cannot change while it runs (or a change reaches no running pod), so it must be
re-created; a Deployment, StatefulSet or DaemonSet rolls its pods by itself. dcgm-exporter and the
OpenTelemetry Operator document the same: their injection reaches only pods created afterwards.
"""

from __future__ import annotations

import shlex

SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
                   "deletionTimestamp", "deletionGracePeriodSeconds")
SERVER_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration", "deployment.kubernetes.io/revision")
# The Job controller's generated selector: labels that carry the old Job's uid (and its name twice)
JOB_GENERATED_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name",
                        "batch.kubernetes.io/job-name")
RECREATE = {"Pod", "Job", "JobSet", "TrainJob", "PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob",
            "JAXJob"}
ROLLS = {"Deployment", "StatefulSet", "DaemonSet"}


def from_server(obj: dict) -> bool:
    """Whether `obj` was read back from a cluster (it has what only the API server sets)."""
    meta = obj.get("metadata") or {}
    return any(k in meta for k in ("uid", "resourceVersion", "managedFields")) or "status" in obj


def strip_server_fields(obj: dict) -> None:
    """Drop, in place, what the API server set (a List's items too)."""
    if (obj.get("kind") or "").endswith("List") and isinstance(obj.get("items"), list):
        for item in obj["items"]:
            if isinstance(item, dict):
                strip_server_fields(item)
        obj.pop("metadata", None)
        return
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for key in SERVER_METADATA:
            meta.pop(key, None)
        _drop_keys(meta, "annotations", SERVER_ANNOTATIONS)
    obj.pop("status", None)
    spec = obj["spec"] if isinstance(obj.get("spec"), dict) else {}
    template = spec.get("template") if isinstance(spec.get("template"), dict) else None
    if template is not None and isinstance(template.get("metadata"), dict):
        template["metadata"].pop("creationTimestamp", None)  # `null` in every template read back
    if obj.get("kind") == "Job" and not spec.get("manualSelector") and template is not None:
        spec.pop("selector", None)
        if isinstance(template.get("metadata"), dict):
            _drop_keys(template["metadata"], "labels", JOB_GENERATED_LABELS)


def _drop_keys(meta: dict, field: str, keys: tuple[str, ...]) -> None:
    values = meta.get(field)
    if isinstance(values, dict):
        for key in keys:
            values.pop(key, None)
        if not values:
            meta.pop(field)


def how_to_apply(obj: dict) -> str:
    """One line: what it takes for the patched workload `obj` (read from the cluster) to reach its pods.
    The file name in the commands it suggests is quoted: the name is the manifest's, whatever it holds."""
    kind = obj.get("kind") or "?"
    meta = obj.get("metadata") or {}
    name = meta.get("name", "?")
    file = shlex.quote(f"{name}.yaml")
    save = f"save this output (> {file}) and"
    if kind in RECREATE:
        return (f"{kind} {name}: its pod template cannot change while it runs: {save} re-create it with "
                f"kubectl replace --force -f {file} (deletes it and its pods; the "
                "training restarts from its last checkpoint)")
    strategy = ((obj.get("spec") or {}).get("updateStrategy") or {}).get("type")
    if kind in ROLLS and strategy == "OnDelete":
        return f"{kind} {name}: {save} kubectl apply -f {file}, then delete its pods (updateStrategy OnDelete)"
    if kind in ROLLS:
        return f"{kind} {name}: {save} kubectl apply -f {file}: it rolls its pods onto the new template by itself"
    if kind == "CronJob":
        return f"CronJob {name}: {save} kubectl apply -f {file}: the next Job it starts has frexport, a running one not"
    if kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        return (f"{kind} {name}: {save} kubectl apply -f {file}: TrainJobs created afterwards get frexport; "
                "running ones must be re-created (kubectl replace --force -f on each TrainJob's YAML)")
    return f"{kind} {name}: {save} kubectl apply -f {file}: pods created afterwards get frexport, existing ones not"
