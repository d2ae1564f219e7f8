"""`frexport inject` output checked with the real tools and run for real.

Every patched workload validates strictly against Kubernetes' schemas (1.29, the first with native
sidecars, and the newest); JobSet and PyTorchJob are CRDs kubernetes-validate has no schema for, so
their patched pod templates are validated as core PodTemplates (Kubeflow Trainer's runtimes too, besides
their own CRD schemas: tests/unit/inject/test_trainer.py). Then the injected Pod runs on this
machine as the kubelet would: the init step, the sidecar's exact args, and the trainer's own,
untouched torchrun command with the injected environment; the sidecar must see both ranks.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
import yaml

from frexport.inject.workloads import templates
from tests.support import paths
from tests.support.crd_schema import crd_for
from tests.support.crd_schema import errors as crd_errors
from tests.support.helm_tools import kubernetes_validate, kubernetes_validate_versions, resolve_env, scrape_metrics
from tests.support.ports import free_port
from tests.support.proctree import kill_tree
from tests.support.torchjob import require_torch

WORKLOADS = paths.FIXTURES / "k8s" / "workloads.yaml"
EXISTING = paths.FIXTURES / "k8s" / "existing.yaml"
TRAINER = paths.FIXTURES / "k8s" / "trainer.yaml"
FREXPORT = [sys.executable, "-m", "frexport"]


def _inject(text: str, *args: str) -> list[dict]:
    out = subprocess.run([*FREXPORT, "inject", "-", *args], input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_every_patched_kind_validates_strictly(tmp_path):
    docs = _inject(WORKLOADS.read_text()) + _inject(EXISTING.read_text()) + _inject(TRAINER.read_text())
    crds = ("JobSet", "PyTorchJob", "TrainingRuntime", "ClusterTrainingRuntime", "TrainJob")
    core = [d for d in docs if d["kind"] not in crds]
    for crd in (d for d in docs if d["kind"] in crds[:-1]):
        for i, (meta, spec, _) in enumerate(templates(crd)):
            core.append({"apiVersion": "v1", "kind": "PodTemplate",
                         "metadata": {"name": f"{crd['metadata']['name']}-{i}"},
                         "template": {"metadata": meta, "spec": spec}})
    path = tmp_path / "injected.yaml"
    path.write_text(yaml.safe_dump_all(core, sort_keys=False))
    for version in ("1.29.0", kubernetes_validate_versions()[-1]):
        out = kubernetes_validate([path], version)
        assert out.returncode == 0, f"-k {version}:\n{out.stdout}\n{out.stderr}"
        assert out.stdout.count("INFO") == len(core) == 13 and "ERROR" not in out.stdout
    # Negative control: a field Kubernetes does not know is caught in a patched container.
    bad = tmp_path / "bad.yaml"
    core[0]["spec"]["initContainers"][-1]["bogusField"] = 1
    bad.write_text(yaml.safe_dump_all(core, sort_keys=False))
    out = kubernetes_validate([bad], "1.29.0")
    assert out.returncode != 0 and "bogusField" in out.stdout


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start:end if end > 0 else None]


def test_the_readmes_commands_for_a_running_job_give_a_job_the_server_accepts(tmp_path):
    """The README's commands, run as written, with `kubectl get` replaced by what it returned for a
    running Job (the fixture) and the API server's schema check by kubernetes-validate --strict."""
    section = _section((paths.ROOT / "README.md").read_text(), "### Add frexport to a job that is already running")
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    get, replace = block.splitlines()[:2]
    assert get == "kubectl get job train -o yaml | frexport inject - > train.yaml"
    assert replace.startswith("kubectl replace --force -f train.yaml")
    running = next(d for d in yaml.safe_load_all(EXISTING.read_text()) if d and d["kind"] == "Job")
    (tmp_path / "kubectl-get.yaml").write_text(yaml.safe_dump(running))
    env = {**os.environ, "PATH": f"{paths.ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(paths.ROOT)}
    out = subprocess.run(["bash", "-c", get.replace("kubectl get job train -o yaml", "cat kubectl-get.yaml")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "re-create it with kubectl replace --force -f train.yaml" in out.stderr
    job = yaml.safe_load((tmp_path / "train.yaml").read_text())
    assert "selector" not in job["spec"] and "status" not in job and "uid" not in job["metadata"]
    for version in ("1.29.0", kubernetes_validate_versions()[-1]):
        checked = kubernetes_validate([tmp_path / "train.yaml"], version)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_readmes_commands_for_a_running_trainjob_give_objects_the_crds_accept(tmp_path):
    """The README's TrainJob commands as written, `kubectl get` replaced by what it returns (the fixture:
    Kubeflow's own torch runtime and a running TrainJob), checked against the real CRDs."""
    section = _section((paths.ROOT / "README.md").read_text(), "### Add frexport to a job that is already running")
    block = re.findall(r"```bash\n(.*?)```", section, re.S)[1].splitlines()
    docs = {d["kind"]: d for d in yaml.safe_load_all(TRAINER.read_text()) if d}
    env = {**os.environ, "PYTHONPATH": str(paths.ROOT)}
    results = {}
    for line, kind in ((block[0], "ClusterTrainingRuntime"), (block[2], "TrainJob")):
        get = re.match(r"kubectl get (\S+) (\S+) -o yaml \| (frexport inject - > (\S+))$", line)
        assert get and get[1] == kind.lower() and get[2] == docs[kind]["metadata"]["name"], line
        (tmp_path / "got.yaml").write_text(yaml.safe_dump(docs[kind]))
        out = subprocess.run(["bash", "-c", "cat got.yaml | " + get[3].replace("frexport", " ".join(FREXPORT), 1)],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        results[kind] = yaml.safe_load((tmp_path / get[4]).read_text())
        assert crd_errors(results[kind], crd_for(kind)) == []
    assert block[1].startswith("kubectl apply -f runtime.yaml")
    assert block[3] == "kubectl replace --force -f llama-ft.yaml"
    pod = results["ClusterTrainingRuntime"]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert [c["name"] for c in pod["template"]["spec"]["initContainers"]] == ["frexport-init", "frexport"]
    assert "uid" not in results["TrainJob"]["metadata"] and "status" not in results["TrainJob"]


def test_frexport_serve_accepts_the_injected_sidecar(tmp_path):
    pod = _inject(WORKLOADS.read_text())[0]
    side = next(c for c in pod["spec"]["initContainers"] if c["name"] == "frexport")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FREXPORT_", "OTEL_"))}
    env.update(resolve_env(side, {"metadata.name": "trainer-0", "metadata.namespace": "ml", "spec.nodeName": "n1",
                                  "metadata.labels['frexport.io/job']": "trainer-0"}))
    out = subprocess.run([*FREXPORT, *side["args"], "--check-config"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.torchjob
@pytest.mark.slow
def test_injected_pod_runs_a_real_torchrun_job(tmp_path):
    require_torch()
    shared, agent, port = tmp_path / "shared", tmp_path / "agent", free_port()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0"},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "trainer", "image": "my-trainer:1",
               "command": ["torchrun", "--standalone", "--nproc-per-node", "2", str(paths.JOBS / "train.py")],
               "env": [{"name": "STEPS", "value": "40"}, {"name": "HOLD_S", "value": "30"},
                       {"name": "MARK_DIR", "value": str(tmp_path)}]}]}}
    command_before = list(pod["spec"]["containers"][0]["command"])
    spec = _inject(yaml.safe_dump(pod), "--shared-dir", str(shared), "--agent-dir", str(agent),
                   "--port", str(port))[0]["spec"]
    trainer = spec["containers"][0]
    assert trainer["command"] == command_before
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FREXPORT_", "OTEL_", "TORCH_", "PYTHON"))}
    base["PATH"] = str(paths.ROOT / ".venv" / "bin") + os.pathsep + base.get("PATH", "")
    # The frexport image here is this checkout: the init and sidecar commands run with it on the path.
    image_env = {**base, "PYTHONPATH": str(paths.ROOT)}

    init, side = spec["initContainers"]
    assert init["command"][:3] == ["python", "-m", "frexport.inject.prepare"]
    subprocess.run([sys.executable, *init["command"][1:3], str(agent), *init["command"][4:]], env=image_env,
                   check=True, timeout=60)
    assert sorted(p.name for p in (agent / "frexport").iterdir()) == ["__init__.py", "agent"]  # the agent only

    fields = {"metadata.name": "train-0", "metadata.namespace": "ml", "spec.nodeName": "n1",
              "metadata.labels['frexport.io/job']": "train-0"}
    assert side["args"][-1] == f"[::]:{port}"  # as injected: dual-stack, scraped below over IPv4
    sidecar = subprocess.Popen([*FREXPORT, *side["args"]], env={**image_env, **resolve_env(side, fields)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    job = None
    try:
        job = subprocess.Popen(trainer["command"], env={**base, **resolve_env(trainer, {}), "OMP_NUM_THREADS": "1"},
                               stdout=open(tmp_path / "trainer.log", "wb"), stderr=subprocess.STDOUT,
                               start_new_session=True)
        progress = re.compile(r'frexport_pg_last_completed_collective\{[^}]*rank="(\d)"[^}]*\} (\d+)')
        deadline, seen = time.monotonic() + 120, {}
        while time.monotonic() < deadline and job.poll() is None:
            seen = {int(r): float(v) for r, v in progress.findall(scrape_metrics(port))}
            if len(seen) == 2 and min(seen.values()) >= 40:
                break
            time.sleep(0.5)
        assert sorted(seen) == [0, 1] and min(seen.values()) >= 40, (seen, (tmp_path / "trainer.log").read_text())
        meta = yaml.safe_load((shared / "rank-0.json").read_text())
        assert meta["mode"] == "worker_server"
    finally:
        for p in (job, sidecar):
            if p is not None and p.poll() is None:
                kill_tree(p.pid)
                p.wait(30)
