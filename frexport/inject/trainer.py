"""Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1): TrainJob and its training runtimes.

A TrainJob holds no pod template: its controller builds a JobSet named after the TrainJob from the
runtime it names (spec.runtimeRef), a TrainingRuntime or ClusterTrainingRuntime, whose
spec.template is a JobSet template. So:
- a runtime is patched like a JobSet, in the replicated jobs that run the trainer (the template
  label trainer.kubeflow.org/trainjob-ancestor-step: trainer; all of them where none has it):
  dataset and model initializers run no ranks;
- a TrainJob can only patch its runtime through spec.runtimePatches, whose containers take env,
  volumeMounts and securityContext only (the CRD's ContainerPatch): no sidecar fits. What fits is
  the pod annotation frexport.io/inject: "true", on which the chart's admission webhook patches
  the pods themselves (admission.py). The pods carry jobset.sigs.k8s.io/jobset-name, the TrainJob's
  name, as their job label.
"""

from __future__ import annotations

import shlex

from frexport.inject.pod import InjectError

TRAINJOB = "TrainJob"
RUNTIMES = ("TrainingRuntime", "ClusterTrainingRuntime")
KINDS = (TRAINJOB, *RUNTIMES)
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
PATCH_MANAGER = "frexport.io/inject"
INJECT_ANNOTATION = "frexport.io/inject"  # what the webhook selects on (admission.py)
TRAINER_JOB = "node"  # the trainer's replicated job in Kubeflow's runtimes (constants.Node)


def runtime_job_specs(obj: dict) -> list[dict]:
    """The Job specs (replicatedJobs[].template.spec) of a runtime's replicated jobs that run the trainer."""
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    jobs = [((rj or {}).get("template") or {}) for rj in spec.get("replicatedJobs") or []]
    if not jobs:
        raise InjectError("no replicatedJobs in spec.template.spec")
    trainers = [j for j in jobs if ((j.get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL) == "trainer"]
    return [j.get("spec") or {} for j in (trainers or jobs)]


def mark_trainjob(obj: dict, replicated_job: str = TRAINER_JOB) -> int:
    """Add the runtime patch that annotates the trainer's pods for the webhook; 0 where frexport's patch
    already does. A patch under frexport's manager name that does not (planted, or edited by hand) is
    refused: the TrainJob would be reported marked while nothing annotates its pods."""
    runtime_ref(obj)  # a TrainJob the trainer refuses is not marked
    patches = obj.setdefault("spec", {}).setdefault("runtimePatches", [])
    if not isinstance(patches, list):
        raise InjectError("spec.runtimePatches is not a list")
    if not any(isinstance(p, dict) and p.get("manager") == PATCH_MANAGER for p in patches):
        pod_meta = {"metadata": {"annotations": {INJECT_ANNOTATION: "true"}}}
        patches.append({"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": replicated_job, "template": {"spec": {"template": pod_meta}}}]}}}})
        return 1
    if not marked(obj, replicated_job):
        raise InjectError(f"spec.runtimePatches has a patch of manager {PATCH_MANAGER} that does not annotate the "
                          f"pods of replicated job '{replicated_job}' with {INJECT_ANNOTATION}: \"true\"; remove "
                          "it and run frexport inject again")
    return 0


def marked(obj: dict, replicated_job: str = TRAINER_JOB) -> bool:
    """Whether frexport's runtime patch (one per manager: the CRD's list-map key) annotates the trainer's
    pods, what the webhook selects on. Read from the object, whatever shape a patch has."""
    patches = _at(obj, "spec", "runtimePatches")
    ours = [p for p in patches if isinstance(p, dict) and p.get("manager") == PATCH_MANAGER] \
        if isinstance(patches, list) else []
    return bool(ours) and all(
        isinstance(jobs := _at(p, "trainingRuntimeSpec", "template", "spec", "replicatedJobs"), list)
        and any(isinstance(rj, dict) and rj.get("name") == replicated_job
                and _at(rj, "template", "spec", "template", "metadata", "annotations", INJECT_ANNOTATION) == "true"
                for rj in jobs)
        for p in ours)


def runtime_ref(obj: dict) -> tuple[str, str]:
    """(kind, name) of the runtime a TrainJob names: spec.runtimeRef, whose name the CRD requires and
    whose kind, ClusterTrainingRuntime by default, the trainer resolves to one of RUNTIMES only."""
    ref = _at(obj, "spec", "runtimeRef")
    if not isinstance(ref, dict):
        raise InjectError("spec.runtimeRef is not a mapping (the CRD's name, kind)")
    name, kind = ref.get("name"), ref.get("kind", "ClusterTrainingRuntime")
    if not isinstance(name, str) or not name:
        raise InjectError("spec.runtimeRef.name is missing")
    if kind not in RUNTIMES:
        raise InjectError(f"spec.runtimeRef.kind {kind!r} is not TrainingRuntime or ClusterTrainingRuntime")
    return kind, name


def webhook_note(obj: dict) -> str:
    """What a marked TrainJob needs to get frexport (stderr); the command it suggests is quoted."""
    name = _at(obj, "metadata", "name") or "?"
    kind, runtime = runtime_ref(obj)
    return (f"TrainJob {name}: marked for the admission webhook (pods of replicated job '{TRAINER_JOB}' annotated "
            f"{INJECT_ANNOTATION}: \"true\"; install the chart with webhook.enabled=true); without the webhook, "
            f"inject its runtime instead: kubectl get {kind.lower()} {shlex.quote(runtime)} -o yaml "
            "| frexport inject -")


def _at(value: object, *keys: str) -> object:
    """value[k0][k1]...: None where a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value
