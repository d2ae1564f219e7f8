"""Add frexport to a workload's pods: one code path for `frexport inject` (and a webhook later).

`pod.py` patches one pod template (metadata + spec): the native sidecar, the preparation init
container that copies the agent, the shared volume, and the agent's activation in the trainer
through its environment (PYTHONPATH + FREXPORT_AGENT_DIR), as the OpenTelemetry Operator does for
Python: the trainer's image, entrypoint and command stay as they are. `workloads.py` finds the pod
templates of each kind (Pod, Job, CronJob, JobSet, PyTorchJob, Deployment, StatefulSet, ...) and
the label that names the job. `prepare.py` is what the init container runs.
"""
