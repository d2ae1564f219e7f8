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
    """Add the runtime patch that annotates the trainer's pods for the webhook; 0 if already there."""
    patches = obj.setdefault("spec", {}).setdefault("runtimePatches", [])
    if not isinstance(patches, list):
        raise InjectError("spec.runtimePatches is not a list")
    if any(isinstance(p, dict) and p.get("manager") == PATCH_MANAGER for p in patches):
        return 0
    pod_meta = {"metadata": {"annotations": {INJECT_ANNOTATION: "true"}}}
    patches.append({"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": replicated_job, "template": {"spec": {"template": pod_meta}}}]}}}})
    return 1


def webhook_note(obj: dict) -> str:
    """What a patched TrainJob needs to get frexport (stderr)."""
    name = (obj.get("metadata") or {}).get("name", "?")
    ref = (obj.get("spec") or {}).get("runtimeRef") or {}
    return (f"TrainJob {name}: marked for the admission webhook (pods of replicated job '{TRAINER_JOB}' annotated "
            f"{INJECT_ANNOTATION}: \"true\"; install the chart with webhook.enabled=true); without the webhook, "
            f"inject its runtime instead: kubectl get {ref.get('kind', 'ClusterTrainingRuntime').lower()} "
            f"{ref.get('name', '?')} -o yaml | frexport inject -")
